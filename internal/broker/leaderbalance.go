package broker

import (
	"time"

	"holdfast/internal/raft"
	"holdfast/internal/replica"
)

// Leadership placement in cluster mode: automatic preferred-leader
// balancing (auto.leader.rebalance.enable) and controlled shutdown
// (controlled.shutdown.enable). Both move leadership with Raft transfers,
// which hand over without an election timeout.
//
// Balancing follows Kafka's rule per preferred broker B: B's imbalance is
// the share of the partitions preferring B that B does not lead; when it
// exceeds leader.imbalance.per.broker.percentage, B's partitions go back to
// it. Kafka's controller sees every partition; here each node counts the
// partitions it replicates (all of them when RF = nodes) and transfers only
// those it leads itself, so no node acts on leadership it does not hold.

// The closer runs first on Close (the highest rank registers last): the
// coordinators and the metadata loops still run while leadership moves.
func init() { onStart(rankCoordinator+10, "leadership", (*Broker).startLeadership) }

func (b *Broker) startLeadership() error {
	stop := func() {}
	if b.cfg.AutoLeaderRebalance && b.cfg.LeaderImbalanceCheckInterval > 0 {
		stop = goLoop(b.balanceLoop)
	}
	b.closers = append(b.closers, func() error {
		stop()
		if b.cfg.ControlledShutdown && b.cfg.ControlledShutdownMaxWait > 0 {
			b.controlledShutdown()
		}
		return nil
	})
	return nil
}

func (b *Broker) balanceLoop(stop <-chan struct{}) {
	tick := time.NewTicker(b.cfg.LeaderImbalanceCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		b.balanceLeaders()
	}
}

// balanceLeaders is one check: it asks for a transfer of every partition
// this node leads whose preferred broker is over the imbalance limit and
// can take over now. The next check sees the result.
func (b *Broker) balanceLeaders() {
	h := b.cluster.host
	me := uint64(b.cfg.NodeID)
	type lead struct {
		group, preferred uint64
		topic            string
		partition        int32
	}
	preferred := map[uint64]int{} // partitions replicated here, by preferred broker
	notLed := map[uint64]int{}    // of those, the ones another broker (or none) leads
	var mine []lead
	for _, t := range b.meta.Topics() {
		for i := int32(0); i < t.Partitions && int(i) < len(t.Replicas); i++ {
			if len(t.Replicas[i]) == 0 {
				continue
			}
			if p := b.replicas.Get(t.Name, i); p == nil {
				continue
			}
			g := replica.Group(t.ID, i)
			l, err := h.Leadership(g)
			if err != nil {
				continue
			}
			pref := uint64(t.Replicas[i][0])
			preferred[pref]++
			if l.Leader == pref {
				continue
			}
			notLed[pref]++
			if l.Leader == me && l.Proposing {
				mine = append(mine, lead{g, pref, t.Name, i})
			}
		}
	}
	pct := b.cfg.LeaderImbalancePerBrokerPct
	moved := 0
	for _, m := range mine {
		if notLed[m.preferred]*100 <= pct*preferred[m.preferred] {
			continue
		}
		st, err := h.Status(m.group)
		if err != nil || st.State != "StateLeader" || transferable(st, m.preferred) != nil {
			continue
		}
		b.log.Debug("moving leadership to the preferred replica", "topic", m.topic, "partition", m.partition, "to", m.preferred)
		h.TransferLeader(m.group, m.preferred)
		moved++
	}
	if moved > 0 {
		b.log.Info("leader balancing: transfers to preferred replicas", "partitions", moved)
	}
}

// controlledShutdown moves the leadership of every group this node leads
// (partitions and the metadata group) to a caught-up voter - a partition's
// preferred replica when it is one - and waits until none is led here or
// ControlledShutdownMaxWait passes. Without it, every such group is
// leaderless for an election timeout once this node stops.
func (b *Broker) controlledShutdown() {
	h := b.cluster.host
	me := uint64(b.cfg.NodeID)
	prefs := map[uint64]uint64{}
	for _, t := range b.meta.Topics() {
		for i := int32(0); i < t.Partitions && int(i) < len(t.Replicas); i++ {
			if len(t.Replicas[i]) > 0 {
				prefs[replica.Group(t.ID, i)] = uint64(t.Replicas[i][0])
			}
		}
	}
	asked := map[uint64]time.Time{} // groups still led here: when a transfer was last asked for
	for _, g := range h.Groups() {
		// A group with no other voter (a single node's) has nowhere to go.
		if st, err := h.Status(g); err == nil && st.Leader == me && len(st.Voters)+len(st.Learners) > 1 {
			asked[g] = time.Time{}
		}
	}
	if len(asked) == 0 {
		return
	}
	start := time.Now()
	total := len(asked)
	b.log.Info("controlled shutdown: moving leadership", "groups", total, "max_wait", b.cfg.ControlledShutdownMaxWait)
	deadline := start.Add(b.cfg.ControlledShutdownMaxWait)
	for {
		// A group with a transfer under way, or one that can start now;
		// without any (the last node of a quorum) waiting is pointless.
		hope := false
		for g, at := range asked {
			st, err := h.Status(g)
			if err != nil || st.State != "StateLeader" {
				delete(asked, g)
				continue
			}
			if time.Since(at) < transferRetry {
				hope = true
				continue
			}
			if to := transferTarget(st, prefs[g]); to != 0 {
				h.TransferLeader(g, to)
				asked[g] = time.Now()
				hope = true
			}
		}
		if len(asked) == 0 || !hope || time.Now().After(deadline) {
			break
		}
		time.Sleep(electPoll)
	}
	if len(asked) > 0 {
		b.log.Warn("controlled shutdown: leadership not moved in time; those groups elect after a timeout", "moved", total-len(asked), "remaining", len(asked), "elapsed", time.Since(start).Round(time.Millisecond))
		return
	}
	b.log.Info("controlled shutdown: leadership moved", "groups", total, "elapsed", time.Since(start).Round(time.Millisecond))
}

// transferTarget picks who takes over a group from this leader: the
// preferred replica if it can, else the caught-up voter furthest along; 0
// if none can now.
func transferTarget(st raft.Status, preferred uint64) uint64 {
	if preferred != 0 && preferred != st.Node && transferable(st, preferred) == nil {
		return preferred
	}
	var best uint64
	var bestOff int64 = -1
	for _, r := range st.Replicas {
		if r.ID != st.Node && transferable(st, r.ID) == nil && r.MatchOffset > bestOff {
			best, bestOff = r.ID, r.MatchOffset
		}
	}
	return best
}
