package raft

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// TestSoleAppendedCommitted (Holdfast patch 3): a sole leader whose
// entries the application appended to Storage itself keeps an exact view
// of its log: no Ready for them, the commit and applied index move with
// SoleCommitted, and a proposal through Raft afterwards lands after them.
func TestSoleAppendedCommitted(t *testing.T) {
	s := newTestMemoryStorage(withPeers(1))
	cfg := newTestConfig(1, 10, 1, s)
	cfg.AsyncStorageWrites = true
	rn, err := NewRawNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rn.SoleLeader(rn.BasicStatus().GetTerm()) {
		t.Fatal("a follower is a sole leader")
	}
	if err := rn.Campaign(); err != nil {
		t.Fatal(err)
	}
	// Drive the async Ready loop by hand until the election's empty entry
	// is committed and applied.
	settle := func() {
		for rn.HasReady() {
			rd := rn.Ready()
			for _, m := range rd.Messages {
				switch m.GetTo() {
				case LocalAppendThread:
					if len(m.Entries) > 0 {
						if err := s.Append(m.Entries); err != nil {
							t.Fatal(err)
						}
					}
					if m.Term != nil {
						s.SetHardState(&pb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit})
					}
					for _, r := range m.Responses {
						_ = rn.Step(r)
					}
				case LocalApplyThread:
					for _, r := range m.Responses {
						_ = rn.Step(r)
					}
				}
			}
		}
	}
	settle()
	if !rn.SoleLeader(rn.BasicStatus().GetTerm()) {
		t.Fatalf("not a sole leader after the election: %+v", rn.BasicStatus())
	}
	bs := rn.BasicStatus()
	last, _ := s.LastIndex()
	if bs.GetCommit() != last || bs.Applied != last {
		t.Fatalf("commit %d applied %d, last %d", bs.GetCommit(), bs.Applied, last)
	}
	term := bs.GetTerm()
	// Two entries appended outside Raft.
	for i := uint64(1); i <= 2; i++ {
		if err := s.Append([]*pb.Entry{{Index: new(last + i), Term: new(term), Data: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
		if !rn.SoleAppended(last + i) {
			t.Fatalf("SoleAppended(%d) refused", last+i)
		}
	}
	if rn.HasReady() {
		t.Fatal("a Ready for entries appended outside Raft")
	}
	if rn.SoleAppended(last + 5) {
		t.Fatal("SoleAppended beyond the storage's last index")
	}
	if rn.SoleCommitted(last + 3) {
		t.Fatal("SoleCommitted beyond the log")
	}
	if !rn.SoleCommitted(last + 2) {
		t.Fatal("SoleCommitted refused")
	}
	if rn.HasReady() {
		t.Fatal("a Ready after SoleCommitted")
	}
	bs = rn.BasicStatus()
	if bs.GetCommit() != last+2 || bs.Applied != last+2 {
		t.Fatalf("commit %d applied %d, want %d", bs.GetCommit(), bs.Applied, last+2)
	}
	rn.WithProgress(func(id uint64, _ ProgressType, pr tracker.Progress) {
		if pr.Match != last+2 {
			t.Fatalf("own match %d, want %d", pr.Match, last+2)
		}
	})
	// Raft takes over at once: a proposal lands after the solo entries.
	if err := rn.Propose([]byte("y")); err != nil {
		t.Fatal(err)
	}
	rd := rn.Ready()
	var got []*pb.Entry
	for _, m := range rd.Messages {
		if m.GetTo() == LocalAppendThread {
			got = append(got, m.Entries...)
		}
	}
	if len(got) != 1 || got[0].GetIndex() != last+3 || got[0].GetTerm() != term {
		t.Fatalf("proposal stored as %v, want index %d term %d", got, last+3, term)
	}
}
