package raft

import (
	"fmt"
	"testing"
	"time"
)

// Hosts on a MemNetwork replicate as over TCP; a partition (Isolate)
// makes the majority elect a leader of its own and commit without the
// cut-off node, which catches up once healed; lossy, slow links still
// converge, and the losses are reported (Stats).
func TestMemNetworkPartitionAndLoss(t *testing.T) {
	net := NewMemNetwork(1)
	c := newCluster(t, 3, 1, withMemNetwork(net))
	old, _ := c.waitLeader(1)
	c.propose(1, "before")

	net.Isolate(old)
	var rest []uint64
	for _, id := range c.ids {
		if id != old {
			rest = append(rest, id)
		}
	}
	leader, term := c.waitLeader(1, rest...)
	for i := range 5 {
		c.propose(1, fmt.Sprint("cut-", i), rest...)
	}
	if st, err := c.nodes[old].host.Status(1); err != nil || st.CommitOffset >= c.status(leader).CommitOffset {
		t.Fatalf("node %d, cut off, committed %d (%v): as far as the leader %d", old, st.CommitOffset, err, leader)
	}
	net.HealAll()
	c.waitConverged(1)
	if _, now := c.waitLeader(1); now < term {
		t.Fatalf("term went back from %d to %d", term, now)
	}

	for _, a := range c.ids {
		for _, b := range c.ids {
			if a != b {
				net.UpdateLink(a, b, func(f *LinkFaults) { f.Loss, f.Delay = 0.1, 3*time.Millisecond })
			}
		}
	}
	for i := range 10 {
		c.propose(1, fmt.Sprint("lossy-", i))
	}
	net.HealAll()
	c.waitConverged(1)
	if st := net.Stats(); st.Dropped == 0 || st.Delivered == 0 {
		t.Fatalf("stats %+v: want deliveries and drops", st)
	}
}

func (c *cluster) status(id uint64) Status {
	c.tb.Helper()
	st, err := c.nodes[id].host.Status(1)
	if err != nil {
		c.tb.Fatal(err)
	}
	return st
}
