package raft

import (
	"errors"
	"testing"
	"time"
)

// TestCaughtUpIsKafkasRule: a follower is caught up when an answer of its
// covers the leader's log end now, or the log end as it was at an earlier
// mark (one mark in flight, renewed when covered); a follower that keeps
// pace a round trip behind under steady writes stays caught up, one that
// falls behind is caught up last at the last mark it covered.
func TestCaughtUpIsKafkasRule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	c := caughtUp{id: 2}

	c.match = 10
	c.observe(10, at(0)) // holds the whole log
	if !c.at.Equal(at(0)) || c.marked {
		t.Fatalf("caught up at %v (marked %v), want %v", c.at, c.marked, at(0))
	}
	// Steady writes: the log grows by 10 every 10 ms, the follower answers
	// every 10 ms with what the leader had 20 ms before (pipelined).
	for ms := 10; ms <= 200; ms += 10 {
		c.match = uint64(10 + ms - 20)
		c.observe(uint64(10+ms), at(ms))
	}
	if lag := at(200).Sub(c.at); lag > 50*time.Millisecond {
		t.Fatalf("a follower a round trip behind: last caught up %v before the end", lag)
	}
	// It stops answering anything new: the time stays at the last mark it covered.
	last := c.at
	for ms := 210; ms <= 400; ms += 10 {
		c.observe(uint64(10+ms), at(ms)) // heartbeats' answers, match unchanged
	}
	if !c.at.Equal(last) {
		t.Fatalf("a follower that acknowledged nothing new caught up at %v, was %v", c.at, last)
	}
	// It catches up to a log end of the past: caught up at that mark,
	// not now.
	c.match = 400
	c.observe(500, at(500))
	if !c.at.After(last) || !c.at.Before(at(500)) {
		t.Fatalf("covering an old mark: caught up at %v, want between %v and %v", c.at, last, at(500))
	}
	c.match = 500
	c.observe(500, at(510))
	if !c.at.Equal(at(510)) {
		t.Fatalf("holding the whole log: caught up at %v, want %v", c.at, at(510))
	}
}

// withReplicaLag gives every host ReplicaLagMax d.
func withReplicaLag(d time.Duration) func(*cluster) { return func(c *cluster) { c.replicaLag = d } }

// TestStoppedFollowerLeavesISRAfterLag: a stopped follower stays in the
// ISR after the leader's quorum check forgot it (Raft's RecentActive, the
// ISR before) while ReplicaLagMax has not passed (an hour here); with a
// lag of 200 ms it leaves, and after a restart it is back once it caught
// up.
func TestStoppedFollowerLeavesISRAfterLag(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lag   time.Duration
		stays bool
	}{{"an hour", time.Hour, true}, {"200ms", 200 * time.Millisecond, false}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3, 1, withReplicaLag(tc.lag))
			const g = 1
			c.propose(g, "first")
			lead, _ := c.waitLeader(g)
			h := c.nodes[lead].host
			waitFor(t, "every replica in sync", func() bool { return h.InSync(g) == 3 })
			stopped := lead%3 + 1
			c.stop(stopped)
			c.propose(g, "after the stop")
			if tc.stays {
				waitFor(t, "the leader's quorum check to forget the stopped follower", func() bool {
					st, err := h.Status(g)
					if err != nil || st.State != StateLeader {
						// A new leader keeps no record of the stopped
						// follower: nothing left to check.
						t.Skipf("node %d no longer leads (an election on a loaded machine): %v %v", lead, st.State, err)
					}
					for _, r := range st.Replicas {
						if r.ID == stopped {
							return !r.Active
						}
					}
					return false
				})
				if n := h.InSync(g); n != 3 {
					t.Fatalf("%d in sync: the stopped follower left the ISR within ReplicaLagMax (%v)", n, tc.lag)
				}
				return
			}
			waitFor(t, "the stopped follower out of the ISR", func() bool { return h.InSync(g) == 2 })
			c.start(stopped)
			c.propose(g, "after the restart")
			waitFor(t, "the restarted follower back in the ISR", func() bool { return h.InSync(g) == 3 })
		})
	}
}

// TestFailedFollowerLeavesISR: a follower whose replica failed on a live
// node (its storage: FailGroup) answers nothing, while its node's
// heartbeats go on; it tells the leader (the wake message), which takes
// it out of the ISR at once - not after ReplicaLagMax (an hour here), and
// not never, as the node's heartbeats would have it for a quiesced group.
func TestFailedFollowerLeavesISR(t *testing.T) {
	for _, quiet := range []bool{false, true} {
		t.Run(map[bool]string{false: "busy", true: "quiesced"}[quiet], func(t *testing.T) {
			c := newCluster(t, 3, 1, withReplicaLag(time.Hour))
			const g = 1
			c.propose(g, "first")
			lead, _ := c.waitLeader(g)
			h := c.nodes[lead].host
			waitFor(t, "every replica in sync", func() bool { return h.InSync(g) == 3 })
			if quiet {
				waitFor(t, "the group quiesced", func() bool {
					st, err := h.Status(g)
					return err == nil && st.Quiesced
				})
			}
			failed := lead%3 + 1
			if err := c.nodes[failed].host.FailGroup(g, errors.New("test: storage failed")); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the failed follower out of the ISR", func() bool { return h.InSync(g) == 2 })
		})
	}
}

// TestStoppedFollowerOfIdleGroupLeavesISR: a quiesced group's followers
// answer nothing; one whose node stops is out of the ISR once the node is
// silent for an election timeout, though the leader, waking for it,
// quiesces again with it (it holds the whole log) - each wake counted it
// caught up until then, and it stayed in for ever. It leaves ReplicaLagMax
// (2 s here) after its last answer.
func TestStoppedFollowerOfIdleGroupLeavesISR(t *testing.T) {
	c := newCluster(t, 3, 1, withReplicaLag(2*time.Second))
	const g = 1
	c.propose(g, "first")
	lead, _ := c.waitLeader(g)
	h := c.nodes[lead].host
	waitFor(t, "the group quiesced with every replica in sync", func() bool {
		st, err := h.Status(g)
		return err == nil && st.Quiesced && h.InSync(g) == 3
	})
	c.stop(lead%3 + 1)
	waitFor(t, "the stopped follower out of the ISR", func() bool { return h.InSync(g) == 2 })
}
