package raft

import (
	"fmt"
	"testing"
)

// publishedLeadership is node id's last OnLeadership event for group g.
func (c *cluster) publishedLeadership(id, g uint64) (Leadership, bool) {
	v, ok := c.nodes[id].published.Load(g)
	if !ok {
		return Leadership{}, false
	}
	return v.(Leadership), true
}

// The leadership a partition reads on every produce comes as events from
// the host: on every node the last event is what Leadership answers, as a
// leader is elected, settles, hands over to another node and fails.
func TestLeadershipEvents(t *testing.T) {
	c := newCluster(t, 3, 1)
	agree := func(what string) {
		t.Helper()
		waitFor(t, what, func() bool {
			for _, nd := range c.running() {
				got, ok := c.publishedLeadership(nd.id, 1)
				want, err := nd.host.Leadership(1)
				if !ok || err != nil || got != want {
					return false
				}
			}
			return true
		})
	}
	leader, _ := c.waitLeader(1)
	c.propose(1, "a")
	agree("every node's last event matching its Leadership")
	if l, _ := c.publishedLeadership(leader, 1); !l.Settled || !l.Proposing {
		t.Fatalf("leader %d published %+v", leader, l)
	}
	target := c.ids[0]
	if target == leader {
		target = c.ids[1]
	}
	if err := c.nodes[leader].host.TransferLeader(1, target); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("node %d publishing a settled leadership", target), func() bool {
		l, _ := c.publishedLeadership(target, 1)
		return l.Settled
	})
	waitFor(t, fmt.Sprintf("node %d publishing that it no longer leads", leader), func() bool {
		l, _ := c.publishedLeadership(leader, 1)
		return !l.Leading && l.Leader == target
	})
	agree("every node's last event matching its Leadership after the transfer")
	// A failed group says so: a produce sees the failure without asking.
	g := c.nodes[target].host.group(1)
	c.nodes[target].host.failGroup(g, fmt.Errorf("injected"))
	if l, _ := c.publishedLeadership(target, 1); !l.Failed || l.Leading || l.Settled {
		t.Fatalf("failed group published %+v", l)
	}
}
