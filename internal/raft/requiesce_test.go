package raft

import (
	"testing"

	"go.etcd.io/raft/v3"
)

// TestQuiescedGroupsUntouchedAndSilenceRequiesces runs an idle 3-node
// cluster of six groups in the deterministic simulation (stepped hosts,
// the memNet, ticks counted by the harness: nothing here is timed) and
// checks, once every replica of every group has quiesced:
//
//   - a quiesced group is not looked at by the tick loop: over 50 ticks
//     no group's tickGroup count moves (the host's tick walks only the
//     groups that tick; the node heartbeats stand in for the groups');
//   - a node that goes silent for a little over an election timeout (a
//     paused process: at 20,000 partitions RF=3 a node starved for a
//     second) wakes the groups that depend on it on the other nodes, as
//     it must - and once it is heard from again every group quiesces
//     again within a few ticks, unchanged, with no election and no
//     term moved (requiesceLocked). Before, the woken followers ticked
//     to their election timeout, pre-voted, woke their leaders, and the
//     leaders heartbeat for QuiesceTicks before quiescing again.
func TestQuiescedGroupsUntouchedAndSilenceRequiesces(t *testing.T) {
	s := newSim(t, t, 1, simConfig{nodes: 3, groups: 6}, []uint64{1, 2, 3, 4, 5, 6})
	s.noProposals = true
	t.Cleanup(func() {
		for _, id := range s.c.ids {
			s.kill(id)
		}
	})
	for _, id := range s.c.ids {
		s.start(id)
	}
	// quiesced: every replica of every group quiesced, and the terms
	// their leaders lead in.
	quiesced := func() (bool, map[uint64]uint64) {
		terms := map[uint64]uint64{}
		for _, id := range s.c.ids {
			h := s.c.nodes[id].host
			for _, gid := range s.c.groups {
				g := h.group(gid)
				g.mu.Lock()
				q, bs := g.quiesced, g.rn.BasicStatus()
				g.mu.Unlock()
				if !q {
					return false, nil
				}
				if bs.RaftState == raft.StateLeader {
					terms[gid] = bs.GetTerm()
				}
			}
		}
		return len(terms) == len(s.c.groups), terms
	}
	ticked := func() map[[2]uint64]uint64 {
		out := map[[2]uint64]uint64{}
		for _, id := range s.c.ids {
			for _, gid := range s.c.groups {
				g := s.c.nodes[id].host.group(gid)
				g.mu.Lock()
				out[[2]uint64{id, gid}] = g.ticked
				g.mu.Unlock()
			}
		}
		return out
	}
	var terms map[uint64]uint64
	for i := 0; ; i++ {
		if i == 500 {
			t.Fatal("the idle cluster's groups did not all quiesce within 500 ticks")
		}
		s.step(false)
		var ok bool
		if ok, terms = quiesced(); ok {
			break
		}
	}

	before := ticked()
	for range 50 {
		s.step(false)
	}
	if ok, _ := quiesced(); !ok {
		t.Fatal("a quiesced group of the idle cluster woke")
	}
	for k, n := range ticked() {
		if n != before[k] {
			t.Fatalf("node %d group %d: quiesced, looked at by %d ticks of 50", k[0], k[1], n-before[k])
		}
	}

	// Node 3 pauses for 13 ticks: the others find it silent after 10
	// (the election timeout) and wake what depends on it; their woken
	// followers' election timeouts (10-20 ticks from a quiesced follower's
	// few) have not run out when it resumes.
	s.net.paused[3] = true
	for range 13 {
		s.step(false)
	}
	woken := 0
	for _, id := range []uint64{1, 2} {
		a := s.c.nodes[id].host.Activity()
		woken += a.Leaders + a.Followers + a.Electing
	}
	if woken == 0 {
		t.Fatal("node 3's silence woke no group on nodes 1 and 2: the test does not test what it means to")
	}
	delete(s.net.paused, 3)
	for i := 0; ; i++ {
		s.step(false)
		ok, now := quiesced()
		if ok {
			for g, term := range terms {
				if now[g] != term {
					t.Fatalf("group %d: led in term %d after the silence, %d before: an election", g, now[g], term)
				}
			}
			break
		}
		if i == 4 {
			var acts []Activity
			for _, id := range s.c.ids {
				acts = append(acts, s.c.nodes[id].host.Activity())
			}
			t.Fatalf("5 ticks after node 3 was heard again, groups still tick: %+v", acts)
		}
	}
	var requiesced uint64
	for _, id := range s.c.ids {
		requiesced += s.c.nodes[id].host.Activity().Requiesced
	}
	if requiesced == 0 {
		t.Fatal("every group quiesced again, but none by requiescing")
	}
}
