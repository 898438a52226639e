package broker

import "holdfast/internal/clock"

// clk is the clock of the broker's own periodic loops (replication
// stats, the connection gate's address refresh, the bootstrap SCRAM
// users, the leader/ISR cache, ElectLeaders' wait): Config.Clock, the
// node's one control-plane clock, or the wall clock.
func (b *Broker) clk() clock.Clock { return clock.OrReal(b.cfg.Clock) }
