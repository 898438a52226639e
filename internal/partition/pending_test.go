package partition

import (
	"testing"

	"holdfast/internal/raft"
)

// TestPendingProposals: proposals are taken by their end offset whether
// they sit in the first slot or the map, a newer proposal of the same end
// offset replaces the older, pruning drops only committed ones, and one
// proposal at a time never makes the map (issue 27: a map per partition
// was ~600 bytes on 100,000 idle partitions).
func TestPendingProposals(t *testing.T) {
	var rep replica
	prop := func(idx uint64, end int64) raft.Proposal {
		return raft.Proposal{Index: idx, BaseOffset: end - 1, EndOffset: end}
	}
	for i := range 3 {
		rep.putPendingLocked(prop(uint64(i), 10))
		if p, ok := rep.takePendingLocked(10); !ok || p.Index != uint64(i) {
			t.Fatalf("take %d: %+v %v", i, p, ok)
		}
	}
	if rep.pending != nil {
		t.Fatal("one proposal at a time made the map")
	}
	if n := rep.putPendingLocked(prop(1, 11)); n != 1 {
		t.Fatalf("%d pending, want 1", n)
	}
	rep.putPendingLocked(prop(2, 12))
	rep.putPendingLocked(prop(3, 13))
	// A truncation, then a new proposal ending at 12 again.
	if n := rep.putPendingLocked(prop(9, 12)); n != 3 {
		t.Fatalf("%d pending, want 3", n)
	}
	if p, ok := rep.takePendingLocked(12); !ok || p.Index != 9 {
		t.Fatalf("take 12: %+v %v, want the newer (index 9)", p, ok)
	}
	if _, ok := rep.takePendingLocked(12); ok {
		t.Fatal("end 12 taken twice")
	}
	// The slot's end offset proposed again replaces it too.
	rep.putPendingLocked(prop(10, 11))
	if p, ok := rep.takePendingLocked(11); !ok || p.Index != 10 {
		t.Fatalf("take 11: %+v %v, want index 10", p, ok)
	}
	rep.putPendingLocked(prop(11, 14))
	rep.prunePendingLocked(13)
	if _, ok := rep.takePendingLocked(13); ok {
		t.Fatal("a committed proposal survived pruning")
	}
	if p, ok := rep.takePendingLocked(14); !ok || p.Index != 11 {
		t.Fatalf("take 14 after pruning below it: %+v %v", p, ok)
	}
}
