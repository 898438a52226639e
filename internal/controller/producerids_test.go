package controller

import (
	"errors"
	"path/filepath"
	"testing"

	"holdfast/internal/storage"
)

// Producer id blocks: each starts at or above the next free id, a racing
// proposal that overlaps an applied one is refused, the next id survives a
// reopen, and a cluster formed before blocks existed starts them at
// LegacyProducerIDBase.
func TestProducerIDBlocks(t *testing.T) {
	fs := storage.OSFS()
	for _, tc := range []struct {
		name   string
		blocks bool // OpInit said so: a cluster formed with blocks
		base   int64
	}{
		{"new cluster", true, 0},
		{"cluster from before blocks", false, LegacyProducerIDBase},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "meta")
			s := open(t, fs, dir)
			end := int64(0)
			apply := func(c Command) error {
				end++
				_, err := s.Apply(end, c)
				return err
			}
			if err := apply(Command{Op: OpInit, ClusterID: "c", ProducerIDBlocks: tc.blocks}); err != nil {
				t.Fatal(err)
			}
			start := s.ProducerIDBlockStart()
			if start != tc.base {
				t.Fatalf("first block starts at %d, want %d", start, tc.base)
			}
			if s.ProducerIDIssued(start) {
				t.Fatalf("id %d issued before any block", start)
			}
			if !tc.blocks {
				err := apply(Command{Op: OpAllocateProducerIDs, BrokerID: 1, ProducerIDStart: 0, ProducerIDLen: 10})
				if !errors.Is(err, ErrStaleProducerIDBlock) {
					t.Fatalf("a block below the legacy base: %v", err)
				}
			}
			if err := apply(Command{Op: OpAllocateProducerIDs, BrokerID: 1, ProducerIDStart: start, ProducerIDLen: 1000}); err != nil {
				t.Fatal(err)
			}
			// A second proposal computed from the same state races and loses.
			err := apply(Command{Op: OpAllocateProducerIDs, BrokerID: 2, ProducerIDStart: start, ProducerIDLen: 1000})
			if !errors.Is(err, ErrStaleProducerIDBlock) {
				t.Fatalf("overlapping block: %v, want ErrStaleProducerIDBlock", err)
			}
			if err := apply(Command{Op: OpAllocateProducerIDs, BrokerID: 2, ProducerIDStart: start + 1000, ProducerIDLen: 0}); err == nil {
				t.Fatal("an empty block applied")
			}
			s = open(t, fs, dir)
			if got := s.ProducerIDBlockStart(); got != start+1000 {
				t.Fatalf("after reopen the next block starts at %d, want %d", got, start+1000)
			}
			if !s.ProducerIDIssued(start) || !s.ProducerIDIssued(start+999) || s.ProducerIDIssued(start+1000) {
				t.Fatal("ProducerIDIssued disagrees with the applied block")
			}
		})
	}
}
