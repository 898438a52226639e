package raft

import (
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// TestRejoiningReplicaVotesForCompleteLog: two replicas of three lose
// their storage in turn, and the intact one gets a leader again. The
// broker simulation found this (internal/brokertest TestSimulation seed
// 9): replica B is rebuilt (it votes only once caught up with a commit
// index a leader sent it); leader X sends B its first append, B's
// rejection is lost, and X's storage fails before its next heartbeat,
// so X is rebuilt too. B waited for a commit index that only X knew, X
// knew nothing, and Y - which holds every committed entry - could never
// get a vote: the group stayed without a leader for good. A rebuilt
// replica now votes for a candidate whose log holds what the newest
// leader it heard from showed it (group.rejoinMayVote), so Y leads, B
// and X catch up from it and nothing acknowledged is lost.
//
// The window has nothing to do with etcd raft's LazyCommit patch: group 1
// commits eagerly (upstream), group 2 lazily (the partitions' setting,
// sim.addGroup), and both failed before the fix. The simulated network
// is stepped and seeded, so the run repeats exactly.
func TestRejoiningReplicaVotesForCompleteLog(t *testing.T) {
	for _, g := range []uint64{1, 2} {
		t.Run(fmt.Sprint("lazy=", g%2 == 0), func(t *testing.T) {
			s := newSim(t, t, 7, simConfig{nodes: 3}, []uint64{g})
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("the last things that happened:\n%s", strings.Join(s.recent, "\n"))
				}
				for _, id := range s.c.ids {
					s.kill(id)
				}
			})
			for _, id := range s.c.ids {
				s.start(id)
			}
			for i := 0; len(s.acks[g]) < 5; i++ {
				if i == 300 {
					t.Fatalf("group %d: %d proposals acknowledged in 300 ticks", g, len(s.acks[g]))
				}
				s.step(false)
			}
			b := s.follower(g)
			s.wipe(b)
			// The first time a leader has shown the rebuilt replica a
			// commit index, before it can catch up: that leader's
			// storage fails, and it is rebuilt too.
			var x uint64
			s.afterDelivery = func() {
				bg := s.live(b).group(g)
				bg.mu.Lock()
				hit := bg.rejoin && bg.rejoinTarget > 0
				bg.mu.Unlock()
				if !hit {
					return
				}
				s.afterDelivery = nil
				x = s.leaderOf(g)
				s.note("node %d heard a commit index from leader %d; %d's storage fails", b, x, x)
				s.wipe(x)
			}
			for i := 0; x == 0; i++ {
				if i == 300 {
					t.Fatalf("no leader sent the rebuilt node %d an append in 300 ticks", b)
				}
				s.step(false)
			}
			for i := 0; s.leaderOf(g) == 0; i++ {
				if i == 300 {
					bg := s.live(b).group(g)
					bg.mu.Lock()
					defer bg.mu.Unlock()
					t.Fatalf("group %d has no leader 300 ticks after node %d (rebuilt, waiting for commit %d) and node %d (rebuilt) lost their storage",
						g, b, bg.rejoinTarget, x)
				}
				s.step(false)
			}
			s.heal()
			s.settle()
			s.checkGroup(g)
			t.Logf("ran:\n%s", strings.Join(s.recent, "\n"))
			for _, id := range []uint64{b, x} {
				if st, _ := s.live(id).Status(g); st.Rejoining {
					t.Fatalf("node %d is still rejoining after the cluster settled", id)
				}
			}
		})
	}
}

// follower returns a running node that does not lead group g.
func (s *sim) follower(g uint64) uint64 {
	l := s.leaderOf(g)
	for _, id := range s.c.ids {
		if id != l && s.live(id) != nil {
			return id
		}
	}
	s.t.Fatalf("group %d: no follower", g)
	return 0
}

// leaderOf returns the running node that leads group g in the highest
// term, or 0.
func (s *sim) leaderOf(g uint64) uint64 {
	var best, term uint64
	for _, id := range s.c.ids {
		h := s.live(id)
		if h == nil {
			continue
		}
		if l, err := h.Leadership(g); err == nil && l.Leading && l.Term > term {
			best, term = id, l.Term
		}
	}
	return best
}

// wipe kills node id, removes its data directory (a replaced disk) and
// starts it again with its replicas rebuilt (GroupConfig.Rejoin, as the
// broker opens a replica whose storage failed).
func (s *sim) wipe(id uint64) {
	s.t.Helper()
	nd := s.c.nodes[id]
	s.kill(id)
	if err := nd.fs.RemoveAll(nd.dir); err != nil {
		s.t.Fatal(err)
	}
	s.rejoin[id] = true
	s.note("node %d lost its storage", id)
	s.start(id)
}

// A rebuilt replica that heard from a leader of term 2 showing it a log to
// index 5 with commit 4 votes only for a candidate whose log is known to
// hold that, and only in a later term.
func TestRejoinMayVote(t *testing.T) {
	g := &group{rejoin: true}
	vote := func(term, lastTerm, last uint64) bool {
		return g.rejoinMayVote(&pb.Message{Type: pb.MsgVote.Enum(), Term: new(term), LogTerm: new(lastTerm), Index: new(last)})
	}
	if vote(3, 2, 9) {
		t.Fatal("voted having heard from no leader")
	}
	g.rejoinTarget = 4
	g.noteRejoinLeader(2, 3)
	g.noteRejoinLeader(2, 5)
	g.noteRejoinLeader(1, 9) // an older leader's: not the newest
	for _, c := range []struct {
		term, lastTerm, last uint64
		want                 bool
	}{
		{3, 2, 5, true},   // that leader's log up to what it showed
		{3, 2, 9, true},   // and beyond
		{3, 3, 1, true},   // a later leader's entries: it had every committed one
		{3, 2, 4, false},  // short of what the leader showed
		{3, 1, 99, false}, // an older term's log: may lack the leader's entries
		{2, 2, 9, false},  // the leader's own term: the lost vote may have been cast in it
	} {
		if got := vote(c.term, c.lastTerm, c.last); got != c.want {
			t.Errorf("candidate at term %d with last entry %d at index %d: vote %v, want %v", c.term, c.lastTerm, c.last, got, c.want)
		}
	}
	g.rejoinTarget = 7 // a commit index beyond what was shown
	if vote(3, 2, 6) || !vote(3, 2, 7) {
		t.Error("the commit index sent bounds the candidate's last index too")
	}
}
