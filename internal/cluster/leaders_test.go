package cluster

import (
	"testing"

	"holdfast/internal/raft"
)

// TestTransferTargetSkipsFenced: controlled shutdown never hands a group to
// a fenced broker (one that is shutting down too): when every node of a
// cluster stops together, each would otherwise pass its leaderships to
// another stopping node, which moves them again.
func TestTransferTargetSkipsFenced(t *testing.T) {
	st := raft.Status{
		Node: 1, Leader: 1, State: raft.StateLeader, CommitOffset: 100,
		Voters: []uint64{1, 2, 3},
		Replicas: []raft.ReplicaStatus{
			{ID: 1, MatchOffset: 100, State: raft.ProgressReplicate, Active: true},
			{ID: 2, MatchOffset: 100, State: raft.ProgressReplicate, Active: true},
			{ID: 3, MatchOffset: 120, State: raft.ProgressReplicate, Active: true},
		},
	}
	none := func(uint64) bool { return false }
	only := func(ids ...uint64) func(uint64) bool {
		return func(id uint64) bool {
			for _, x := range ids {
				if x == id {
					return true
				}
			}
			return false
		}
	}
	for _, c := range []struct {
		name      string
		preferred uint64
		fenced    func(uint64) bool
		want      uint64
	}{
		{"preferred caught up", 2, none, 2},
		{"no preferred: furthest along", 0, none, 3},
		{"preferred fenced: the other", 2, only(2), 3},
		{"furthest fenced: the other", 0, only(3), 2},
		{"every other fenced: nobody", 2, only(2, 3), 0},
		{"self is never a target", 1, only(2, 3), 0},
	} {
		if got := transferTarget(st, c.preferred, c.fenced); got != c.want {
			t.Errorf("%s: transferTarget = %d, want %d", c.name, got, c.want)
		}
	}
	// A replica behind or down is not a target, fenced or not.
	st.Replicas[1].MatchOffset, st.Replicas[2].Active = 90, false
	if got := transferTarget(st, 2, none); got != 0 {
		t.Errorf("behind and down: transferTarget = %d, want 0", got)
	}
}
