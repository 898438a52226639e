package raft

import (
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// BenchmarkStoreCycle: what one Ready cycle of a busy group asks of its
// store on a single node: hand Raft the entries the cycle before committed
// (Entries, as raftLog.nextCommittedEnts does), append this cycle's batches
// (entries of batch bytes each) to the log, and record the hard state. The
// log lives on the real filesystem; old segments are dropped as the log
// grows (compactTo), as a partition's retention would.
//
//	go test ./internal/raft -run '^$' -bench StoreCycle -count 6
func BenchmarkStoreCycle(b *testing.B) {
	for _, c := range []struct{ perCycle, batch int }{{16, 16 << 10}, {4, 256 << 10}} {
		b.Run(fmt.Sprintf("entries=%d/batch=%dKiB", c.perCycle, c.batch>>10), func(b *testing.B) {
			benchStoreCycle(b, c.perCycle, c.batch)
		})
	}
}

func benchStoreCycle(b *testing.B, perCycle, size int) {
	cfg := storage.DefaultConfig()
	cfg.SegmentBytes = 16 << 20
	l, err := storage.Open(b.TempDir(), cfg, storage.Options{Logger: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	s, _, err := openStore(l, anchor{}, nil, nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	proto := batch(b, strings.Repeat("x", size-100))
	var applied, committed uint64
	b.SetBytes(int64(perCycle * len(proto)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		// A Ready: the entries the last one stored are committed now (a
		// single voter commits what is on its disk) and handed to be
		// applied; then this cycle's entries are stored with the hard
		// state.
		for applied < committed {
			ents, err := s.Entries(applied+1, committed+1, 64<<20)
			if err != nil {
				b.Fatal(err)
			}
			applied += uint64(len(ents))
		}
		for range perCycle {
			last, _ := s.LastIndex()
			d := append([]byte(nil), proto...) // Raft's copy of the proposal
			records.SetBaseOffset(d, s.endOffset())
			records.SetLeaderEpoch(d, 1)
			e := &pb.Entry{Index: new(last + 1), Term: new(uint64(1)), Type: pb.EntryType_EntryNormal.Enum(), Data: d}
			if _, err := s.appendEntry(e, nil); err != nil {
				b.Fatal(err)
			}
		}
		s.setHardState(&pb.HardState{Term: new(uint64(1)), Commit: new(committed)})
		committed, _ = s.LastIndex()
		if off := s.endOffset(); off > 64<<10 && applied > uint64(2*perCycle) {
			// Keep the log short: drop what was applied a while ago.
			if a := applied - uint64(perCycle); s.anc.Index < a && int(a-s.anc.Index) > 4*perCycle {
				o, _ := s.offsetOf(a + 1)
				if err := s.compactTo(anchor{Index: a, Term: 1, Offset: o}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}
