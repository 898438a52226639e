package raft

import (
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/records"
)

func testApp(to, term, prevTerm, prev, commit uint64, data ...string) *pb.Message {
	m := &pb.Message{Type: pb.MsgApp.Enum(), To: new(to), Term: new(term), LogTerm: new(prevTerm), Index: new(prev), Commit: new(commit)}
	for i, d := range data {
		m.Entries = append(m.Entries, &pb.Entry{Term: new(term), Index: new(prev + 1 + uint64(i)), Data: []byte(d)})
	}
	return m
}

func describe(msgs []*pb.Message) string {
	s := ""
	for _, m := range msgs {
		s += fmt.Sprintf("[%v to %d prev %d/%d commit %d:", m.GetType(), m.GetTo(), m.GetLogTerm(), m.GetIndex(), m.GetCommit())
		for _, e := range m.Entries {
			s += fmt.Sprintf(" %d/%d", e.GetTerm(), e.GetIndex())
		}
		s += "]"
	}
	return s
}

func TestMergeAppends(t *testing.T) {
	hb := &pb.Message{Type: pb.MsgHeartbeat.Enum(), To: new(uint64(2)), Term: new(uint64(3))}
	for _, c := range []struct {
		name string
		in   []*pb.Message
		max  uint64
		want string
	}{
		{"two proposals to two followers", []*pb.Message{
			testApp(2, 3, 3, 5, 4, "a"), testApp(3, 3, 3, 5, 4, "a"), testApp(2, 3, 3, 6, 5, "b"), testApp(3, 3, 3, 6, 5, "b")},
			1 << 20, "[MsgApp to 2 prev 3/5 commit 5: 3/6 3/7][MsgApp to 3 prev 3/5 commit 5: 3/6 3/7]"},
		{"a commit-only append first", []*pb.Message{testApp(2, 3, 3, 5, 4), testApp(2, 3, 3, 5, 5, "a")},
			1 << 20, "[MsgApp to 2 prev 3/5 commit 5: 3/6]"},
		{"a heartbeat between", []*pb.Message{testApp(2, 3, 3, 5, 4, "a"), hb, testApp(2, 3, 3, 6, 5, "b")},
			1 << 20, "[MsgApp to 2 prev 3/5 commit 4: 3/6][MsgHeartbeat to 2 prev 0/0 commit 0:][MsgApp to 2 prev 3/6 commit 5: 3/7]"},
		{"not continuing", []*pb.Message{testApp(2, 3, 3, 5, 4, "a"), testApp(2, 3, 3, 9, 5, "b")},
			1 << 20, "[MsgApp to 2 prev 3/5 commit 4: 3/6][MsgApp to 2 prev 3/9 commit 5: 3/10]"},
		{"another term", []*pb.Message{testApp(2, 3, 3, 5, 4, "a"), testApp(2, 4, 3, 6, 5, "b")},
			1 << 20, "[MsgApp to 2 prev 3/5 commit 4: 3/6][MsgApp to 2 prev 3/6 commit 5: 4/7]"},
		{"over the size", []*pb.Message{testApp(2, 3, 3, 5, 4, "aa"), testApp(2, 3, 3, 6, 5, "bb"), testApp(2, 3, 3, 7, 6, "c")},
			3, "[MsgApp to 2 prev 3/5 commit 4: 3/6][MsgApp to 2 prev 3/6 commit 6: 3/7 3/8]"},
	} {
		if got := describe(mergeAppends(c.in, c.max)); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
	// The first message's entries may be Raft's own log: not written to.
	log := make([]*pb.Entry, 1, 4)
	first := testApp(2, 3, 3, 5, 4, "a")
	log[0] = first.Entries[0]
	first.Entries = log[:1]
	mergeAppends([]*pb.Message{first, testApp(2, 3, 3, 6, 5, "b")}, 1<<20)
	if log[:2][1] != nil {
		t.Fatal("merging wrote into the first message's entries array")
	}
}

// A leader's Ready with several proposals sends each follower one append
// carrying them all, and the followers acknowledge them.
func TestLeaderSendsOneAppendPerFollowerPerReady(t *testing.T) {
	s := newSim(t, t, 11, simConfig{nodes: 3}, []uint64{1, 2})
	t.Cleanup(func() {
		for _, id := range s.c.ids {
			s.kill(id)
		}
	})
	for _, id := range s.c.ids {
		s.start(id)
	}
	for g := uint64(1); g <= 2; g++ {
		for i := 0; s.leaderOf(g) == 0 || len(s.acks[g]) == 0; i++ {
			if i == 300 {
				t.Fatalf("group %d: no leader with an acknowledged proposal in 300 ticks", g)
			}
			s.step(false)
		}
	}
	for g := uint64(1); g <= 2; g++ { // 1 commits eagerly, 2 lazily (sim.addGroup)
		for i := 0; ; i++ { // quiet: nothing in flight, nothing to do
			if i == 300 {
				t.Fatal("the cluster did not go quiet in 300 ticks")
			}
			if len(s.net.flight) == 0 && !hasWork(s.live(s.leaderOf(g))) {
				break
			}
			s.step(false)
		}
		l := s.leaderOf(g)
		h := s.live(l)
		var ps []Proposal
		for i := range 3 {
			b, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
				[]records.Record{{Value: fmt.Appendf(nil, "m%d", i)}})
			if err != nil {
				t.Fatal(err)
			}
			p, err := h.Propose(context.Background(), g, b)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		h.runReady()
		apps := map[uint64]int{}
		for _, e := range s.net.flight {
			if e.from == l && e.group == g && e.typ == pb.MessageType_MsgApp {
				apps[e.to]++
			}
		}
		if len(apps) != 2 || apps[s.follower(g)] != 1 {
			t.Fatalf("group %d: leader %d sent appends %v for 3 proposals in one Ready, want one to each follower", g, l, apps)
		}
		for i := 0; ; i++ {
			if i == 300 {
				t.Fatalf("group %d: the merged append was not acknowledged in 300 ticks", g)
			}
			if st, _ := h.Status(g); st.CommitIndex >= ps[2].Index {
				break
			}
			s.step(false)
		}
	}
}
