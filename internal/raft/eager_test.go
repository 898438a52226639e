package raft

import (
	"fmt"
	"testing"
	"time"
)

// TestRestartedPreferredReplicaCampaignsAtOnce: after a restart of every
// node, a group's first replica (the preferred leader) campaigns as soon as
// it opens the group instead of waiting an election timeout. Nodes 2 and 3
// start first and wait their timeout (3-6 s at this tick); node 1, started
// after them, leads every group - a plain follower would not have timed out
// before them.
func TestRestartedPreferredReplicaCampaignsAtOnce(t *testing.T) {
	c := newClusterTick(t, 3, 4, 300*time.Millisecond)
	for _, g := range c.groups {
		c.waitLeader(g)
		c.propose(g, "before")
	}
	for _, id := range c.ids {
		c.stop(id)
	}
	c.start(2)
	c.start(3)
	c.start(1)
	for _, g := range c.groups {
		id, _ := c.waitLeader(g)
		if id != 1 {
			t.Errorf("group %d: node %d leads after the restart, want the preferred node 1", g, id)
		}
	}
}

// TestRestartedPreferredReplicaDoesNotChurn: the preferred replica's
// campaign at a restart disturbs no group that still has a leader: the
// others hear from it (CheckQuorum's lease) and ignore the pre-vote, so
// leadership and term stay where they were.
func TestRestartedPreferredReplicaDoesNotChurn(t *testing.T) {
	c := newCluster(t, 3, 4)
	terms := map[uint64]uint64{}
	for _, g := range c.groups {
		c.waitLeader(g)
		// Leadership to node 2, away from the preferred node 1.
		for {
			id, _ := c.leader(g)
			if id == 2 {
				break
			}
			if id != 0 {
				c.nodes[id].host.TransferLeader(g, 2)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.propose(g, "led by 2", 2)
		_, terms[g] = c.leader(g)
	}
	for round := range 3 {
		c.stop(1)
		c.start(1)
		for _, g := range c.groups {
			c.propose(g, fmt.Sprint("after restart ", round), 2)
			c.waitConverged(g)
		}
		// Several election timeouts for a disturbance to show.
		time.Sleep(30 * c.tick)
		for _, g := range c.groups {
			if id, term := c.leader(g); id != 2 || term != terms[g] {
				t.Fatalf("round %d, group %d: node %d leads in term %d, want node 2 still in term %d", round, g, id, term, terms[g])
			}
		}
	}
}
