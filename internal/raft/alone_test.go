package raft

import (
	"context"
	"slices"
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

// A sole voter that gains a member is ticked again: a learner added by a
// reassignment needs the leader's heartbeats (and, once a voter, the
// leader's quorum checks). The new member ends up with the whole log.
func TestTickResumesWhenSoleLeaderGainsMember(t *testing.T) {
	c := newCluster(t, 1, 1)
	gid := c.groups[0]
	c.waitLeader(gid)
	c.propose(gid, "a")
	alone := func() bool {
		h := c.nodes[1].host
		g := h.group(gid)
		g.mu.Lock()
		defer g.mu.Unlock()
		return h.aloneLocked(g)
	}
	if !alone() {
		t.Fatal("a one-node group's leader is not alone")
	}
	c.addNode(2)
	ctx := context.Background()
	c.changeConf(gid, func(h *Host) error { return h.AddLearner(ctx, gid, 2) })
	if alone() {
		t.Fatal("still alone with a learner: its heartbeats would not be sent")
	}
	c.propose(gid, "b")
	c.waitConverged(gid)
	c.changeConf(gid, func(h *Host) error { return h.AddVoter(ctx, gid, 2) })
	if alone() {
		t.Fatal("still alone with two voters")
	}
	c.propose(gid, "c")
	c.waitConverged(gid)
	for _, id := range c.ids {
		if got := values(t, c.nodes[id].logs[gid]); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("node %d has %v", id, got)
		}
	}
}
