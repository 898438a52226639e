package raft

import (
	"testing"
	"time"
)

// A sole voter that leads ticks without building etcd raft messages
// (aloneLocked): its heartbeats went to nobody, yet each tick of a busy
// group (one that never quiesces while records arrive) allocated them. On
// the code before aloneLocked every tick here allocated (a MsgBeat, every
// heartbeat tick). The tick loop runs once an hour, so nothing but the
// calls below ticks the group; quiescing is off, so the group never
// leaves the tick list.
func TestTickSoleLeaderAllocatesNothing(t *testing.T) {
	c := newClusterOpts(t, 1, 1, time.Hour, false, func(c *cluster) { c.quiesceTicks = -1 })
	gid := c.groups[0]
	c.waitLeader(gid)
	c.propose(gid, "x")
	h := c.nodes[1].host
	g := h.group(gid)
	timeout := h.cfg.TickInterval * time.Duration(h.cfg.ElectionTicks)
	// Past an election timeout too: the quorum check's tick.
	allocs := testing.AllocsPerRun(3*h.cfg.ElectionTicks, func() {
		if !h.tickGroup(g, timeout) {
			t.Fatal("group failed or removed")
		}
	})
	if allocs >= 0.5 {
		t.Fatalf("a sole leader's tick allocated %.2f objects: its RawNode was ticked", allocs)
	}
	g.mu.Lock()
	quiesced, alone := g.quiesced, h.aloneLocked(g)
	g.mu.Unlock()
	if quiesced || !alone {
		t.Fatalf("quiesced %v, alone %v: the group should be an unquiesced sole leader", quiesced, alone)
	}
	// And the group still works after the skipped ticks.
	c.propose(gid, "y")
}
