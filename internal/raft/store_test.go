package raft

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// TestStoreRecentEntries: the entries a store keeps in memory (recent) are
// exactly what reading them back from the log gives, through appends of
// data and side entries, truncations, compaction and size limits; they
// leave memory once a later hard state commits past them.
func TestStoreRecentEntries(t *testing.T) {
	dir := t.TempDir()
	cfg := storage.DefaultConfig()
	cfg.MaxMessageBytes = 2 * recentMaxBytes
	l, err := storage.Open(dir, cfg, storage.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, _, err := openStore(l, anchor{}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	term := uint64(1)
	appendOne := func() {
		last, _ := s.LastIndex()
		e := &pb.Entry{Index: new(last + 1), Term: new(term), Type: pb.EntryType_EntryNormal.Enum()}
		if rng.IntN(6) > 0 {
			b := batch(t, strings.Repeat(fmt.Sprint(last%10), 1+rng.IntN(3000)))
			records.SetBaseOffset(b, s.endOffset())
			records.SetLeaderEpoch(b, int32(term))
			e.Data = b
		}
		if _, err := s.appendEntry(e, nil); err != nil {
			t.Fatal(err)
		}
	}
	// cold reads what a store rebuilt over the same log gives (nothing in
	// memory but the side entries).
	cold := func() *store {
		t.Helper()
		var side []sideEntry
		for i := s.anc.Index + 1; i <= s.lastLocked(); i++ {
			if e, ok := sideAt(s.side, i); ok {
				side = append(side, e)
			}
		}
		c, _, err := openStore(l, s.anc, nil, nil, side, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	check := func(what string) {
		t.Helper()
		c := cold()
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		for range 20 {
			lo := first + uint64(rng.IntN(int(last-first+1)))
			hi := lo + 1 + uint64(rng.IntN(int(last-lo+1)))
			maxSize := uint64(1 + rng.IntN(20000))
			if rng.IntN(4) == 0 {
				maxSize = 1 << 62
			}
			got, err1 := s.Entries(lo, hi, maxSize)
			want, err2 := c.Entries(lo, hi, maxSize)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: Entries(%d, %d): %v, cold %v", what, lo, hi, err1, err2)
			}
			if len(got) != len(want) {
				t.Fatalf("%s: Entries(%d, %d, %d): %d entries, from the log %d", what, lo, hi, maxSize, len(got), len(want))
			}
			for k := range got {
				g, w := got[k], want[k]
				if g.GetIndex() != w.GetIndex() || g.GetTerm() != w.GetTerm() || g.GetType() != w.GetType() || !bytes.Equal(g.Data, w.Data) {
					t.Fatalf("%s: entry %d: %d/%d %d bytes, from the log %d/%d %d bytes", what, k, g.GetIndex(), g.GetTerm(), len(g.Data), w.GetIndex(), w.GetTerm(), len(w.Data))
				}
			}
		}
	}

	for range 40 {
		appendOne()
	}
	hits := s.recentHits.Load()
	check("appended")
	if s.recentHits.Load() == hits {
		t.Fatal("no Entries call was served from memory")
	}
	// A conflicting suffix replaced by a later term's entries.
	if err := s.truncate(31); err != nil {
		t.Fatal(err)
	}
	term = 2
	for range 15 {
		appendOne()
	}
	check("after a truncation")
	// Commits: what an earlier hard state committed leaves memory.
	s.setHardState(&pb.HardState{Term: new(term), Commit: new(uint64(20))})
	check("committed to 20")
	s.setHardState(&pb.HardState{Term: new(term), Commit: new(uint64(45))})
	if len(s.recent) == 0 || s.recentLo != 21 {
		t.Fatalf("after commits 20, 45: recent from %d, %d entries; want from 21", s.recentLo, len(s.recent))
	}
	check("committed to 45")
	if err := s.compactTo(anchor{Index: 25, Term: 1, Offset: mustOffset(t, s, 26)}); err != nil {
		t.Fatal(err)
	}
	check("compacted to 25")
	s.setHardState(&pb.HardState{Term: new(term), Commit: new(uint64(45))})
	if len(s.recent) != 0 || s.recentBytes.Load() != 0 {
		t.Fatalf("committed through the end: %d entries, %d bytes still in memory", len(s.recent), s.recentBytes.Load())
	}
	check("nothing in memory")
	// Entries larger than a group's limit are not kept; the rest is.
	big := &pb.Entry{Index: new(s.lastLocked() + 1), Term: new(term), Type: pb.EntryType_EntryNormal.Enum()}
	b := batch(t, strings.Repeat("b", recentMaxBytes))
	records.SetBaseOffset(b, s.endOffset())
	records.SetLeaderEpoch(b, int32(term))
	big.Data = b
	if _, err := s.appendEntry(big, nil); err != nil {
		t.Fatal(err)
	}
	if len(s.recent) != 0 {
		t.Fatalf("an entry of %d bytes was kept in memory", len(b))
	}
	for range 10 {
		appendOne()
	}
	check("after a large entry")
	if err := s.reset(anchor{Index: 100, Term: 2, Offset: 1000}); err != nil {
		t.Fatal(err)
	}
	if len(s.recent) != 0 || s.recentBytes.Load() != 0 {
		t.Fatalf("after a reset: %d entries, %d bytes in memory", len(s.recent), s.recentBytes.Load())
	}
}

func mustOffset(t *testing.T, s *store, i uint64) int64 {
	t.Helper()
	off, ok := s.offsetOf(i)
	if !ok {
		t.Fatalf("no offset for entry %d", i)
	}
	return off
}

// TestCommittedFromMemory: on a single voter, the Ready loop's committed
// entries come from the store's memory, not from reading the log back, and
// what it applies is what the log holds (the partition reads the data of
// committed entries).
func TestCommittedFromMemory(t *testing.T) {
	dir := t.TempDir()
	l, err := storage.Open(filepath.Join(dir, "log"), storage.DefaultConfig(), storage.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h, err := NewHost(Config{ID: 1, Dir: dir, TickInterval: time.Hour, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	got := map[int64][]byte{}
	done := make(chan struct{}, 100)
	onCommit := func(_ uint64, ents []Committed) {
		for _, e := range ents {
			if e.Data != nil {
				got[e.BaseOffset] = bytes.Clone(e.Data)
				done <- struct{}{}
			}
		}
	}
	if err := h.AddGroup(GroupConfig{ID: 1, Log: l, Voters: []uint64{1}, Rejoin: true, OnCommit: onCommit}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the single voter to lead", func() bool {
		ls, _ := h.Leadership(1)
		return ls.Settled
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 20 {
		p, err := h.Propose(ctx, 1, batch(t, fmt.Sprint("v", i)))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.WaitCommitted(ctx, p); err != nil {
			t.Fatal(err)
		}
		<-done
	}
	h.mu.Lock()
	st := h.groups[1].st
	h.mu.Unlock()
	if st.recentHits.Load() == 0 {
		t.Fatal("no committed entry was served from memory")
	}
	var n int
	if err := l.Scan(0, func(hd records.Header, b []byte) error {
		if w, ok := got[hd.BaseOffset]; !ok || !bytes.Equal(w, b) {
			return fmt.Errorf("batch at %d: applied %d bytes, the log has %d", hd.BaseOffset, len(w), len(b))
		}
		n++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 20 {
		t.Fatalf("%d batches applied and in the log, want 20", n)
	}
}
