package metadata

import (
	"errors"
	"path/filepath"
	"testing"

	"holdfast/internal/storage"
)

// Producer id blocks: each starts at or above the next free id, a racing
// proposal that overlaps an applied one is refused, and the next id
// survives a reopen.
func TestProducerIDBlocks(t *testing.T) {
	fs := storage.OSFS()
	dir := filepath.Join(t.TempDir(), "meta")
	s := open(t, fs, dir)
	end := int64(0)
	apply := func(c Command) error {
		end++
		_, err := s.Apply(end, c)
		return err
	}
	start := s.ProducerIDBlockStart()
	if start != 0 || s.ProducerIDIssued(0) {
		t.Fatalf("first block starts at %d (issued %v), want 0, none issued", start, s.ProducerIDIssued(0))
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
	closeStore(t, s)
	s = open(t, fs, dir)
	if got := s.ProducerIDBlockStart(); got != 1000 {
		t.Fatalf("after reopen the next block starts at %d, want 1000", got)
	}
	if !s.ProducerIDIssued(0) || !s.ProducerIDIssued(999) || s.ProducerIDIssued(1000) {
		t.Fatal("ProducerIDIssued disagrees with the applied block")
	}
}

// TestProducerIDFloor: a floor command raises the floor and the next free
// id, never lowers either, and blocks after it start above it.
func TestProducerIDFloor(t *testing.T) {
	s := open(t, storage.OSFS(), filepath.Join(t.TempDir(), "meta"))
	end := int64(0)
	apply := func(c Command) error {
		end++
		_, err := s.Apply(end, c)
		return err
	}
	if err := apply(Command{Op: OpAllocateProducerIDs, BrokerID: 1, ProducerIDStart: 0, ProducerIDLen: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := apply(Command{Op: OpAllocateProducerIDs, ProducerIDStart: 5000}); err != nil {
		t.Fatal(err)
	}
	if s.ProducerIDFloor() != 5000 || s.ProducerIDBlockStart() != 5000 {
		t.Fatalf("floor %d, next block at %d; want 5000 and 5000", s.ProducerIDFloor(), s.ProducerIDBlockStart())
	}
	if err := apply(Command{Op: OpAllocateProducerIDs, ProducerIDStart: 10}); err != nil {
		t.Fatal(err)
	}
	if s.ProducerIDFloor() != 5000 || s.ProducerIDBlockStart() != 5000 {
		t.Fatalf("a lower floor moved them: %d %d", s.ProducerIDFloor(), s.ProducerIDBlockStart())
	}
	if err := apply(Command{Op: OpAllocateProducerIDs, BrokerID: 2, ProducerIDStart: 1000, ProducerIDLen: 1000}); !errors.Is(err, ErrStaleProducerIDBlock) {
		t.Fatalf("a block below the floor: %v", err)
	}
}
