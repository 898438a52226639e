package raft

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/bufref"
	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// anchor is the entry just before the first one in the log: its Raft index
// and term, and the offset of the first batch. A fresh log has (0, 0, 0).
type anchor struct {
	Index, Term uint64
	Offset      int64
}

// sideBit marks a side entry in store.terms (terms stay below 2^31).
const sideBit = 1 << 31

// store is raft.Storage over a storage.Log and the node journal's side
// entries. Raft entry i is either a data entry — a record batch in the log —
// or a side entry (a new leader's empty entry, a membership change, a
// command) that takes no Kafka offset and lives in the journal. Per entry
// it keeps in memory the offset it starts at and its term (12 B; side
// entries also their data), rebuilt at open from the batch headers and the
// journal. A side entry sits at the end offset of the data before it, so
// several entries can share an offset: a side entry at offset O comes
// before the batch based at O.
//
// Crash safety rests on one order, kept by the Ready loop: a side entry is
// fsynced in the journal before any data entry after it is written to the
// log, and a truncated log suffix is fsynced away before the journal learns
// the entries that replace it. So the log never holds a batch whose index
// the journal cannot account for; the journal may hold side entries beyond
// the log's end, which open drops.
//
// Raft only reads indexes it considers stable while the Ready loop appends
// or truncates above them, so mu is all it needs.
type store struct {
	log *storage.Log

	mu    sync.RWMutex
	anc   anchor
	bases []int64  // bases[k]: start offset of entry anc.Index+1+k
	terms []uint32 // its term, | sideBit for a side entry
	// side: the side entries above the anchor, by index (a slice, not a
	// map: most groups hold one, a leader's empty entry, and a map's
	// first group of slots is ~0.5 KiB per partition, issue 27).
	side  []sideEntry
	end   int64 // offset after the last data entry
	hs    *pb.HardState
	hsOwn bool // hs was allocated by setHardState and is updated in place
	cs    *pb.ConfState

	// recent holds the entries appendEntry stored last, indexes recentLo,
	// recentLo+1, ...: the same *pb.Entry Raft handed over, so that Raft's
	// read of newly committed entries (nextCommittedEnts, the next cycle
	// after they became stable) is served without reading the log back and
	// copying every batch (17% of a broker's CPU under a 1 KiB load, issue
	// 17). Entries leave it once a later hard state has committed past
	// them (setHardState: the Ready that carried that commit handed them to
	// be applied), and it is bounded: recentMaxBytes per group and
	// recentMaxTotal over the host's groups (total); beyond that Entries reads the log as
	// before. Raft never changes an entry it handed over, and Entries
	// returns a fresh slice of the pointers.
	recent      []*pb.Entry
	recentLo    uint64
	recentBytes *atomic.Int64 // its share of total, given back when the store is collected
	total       *atomic.Int64 // the bytes in every recent of the host (Host.recentTotal)
	recentHits  atomic.Int64  // Entries calls served from recent (tests)

	// rebound counts the batches written under their proposer's checks
	// (appendEntry's local), not checked again.
	rebound atomic.Int64

	// corrupt: a read found corrupt data (storage.ErrCorrupt). Entries
	// answers ErrCompacted from then on where it cannot return a prefix,
	// and Snapshot is unavailable, so a leader sends the bad entry to no
	// one and does not panic; onCorrupt (the host's corruptLog) hands the
	// leadership over and then stops the group.
	corrupt   atomic.Bool
	onCorrupt func(error)
}

// openStore rebuilds the index from the log and the journal's side entries
// (sorted by index, all above the anchor), starting at the anchor. dropped
// is the first index of side entries that did not fit the log (lost data
// after them, or beyond its end): the caller journals their removal.
// total is the host's count of the bytes its stores keep in memory
// (recentMaxTotal bounds it); nil: the store's own.
func openStore(l *storage.Log, anc anchor, hs *pb.HardState, cs *pb.ConfState, side []sideEntry, total *atomic.Int64) (s *store, dropped uint64, err error) {
	if total == nil {
		total = new(atomic.Int64)
	}
	s = &store{log: l, anc: anc, end: anc.Offset, hs: hs, cs: cs, recentBytes: new(atomic.Int64), total: total}
	// A group removed or a host closed leaves its store to the collector
	// with whatever recent held: that share of the host's budget comes
	// back then.
	type share struct{ n, total *atomic.Int64 }
	runtime.AddCleanup(s, func(sh share) { sh.total.Add(-sh.n.Load()) }, share{s.recentBytes, total})
	mid := midBatchStart(l, anc)
	if start := l.StartOffset(); start > anc.Offset && l.EndOffset() > start && !mid {
		// Someone deleted the front of the log without going through
		// Host.Compact: the Raft indexes of what is left are unknown.
		return nil, 0, fmt.Errorf("raft: log %s starts at %d, after the Raft anchor %d (front deleted behind Raft's back)", l.Dir(), start, anc.Offset)
	}
	if l.EndOffset() < anc.Offset || l.StartOffset() > anc.Offset && !mid {
		if err := l.TruncateFullyAndStartAt(anc.Offset); err != nil {
			return nil, 0, err
		}
	}
	next := anc.Index + 1
	// takeSide accepts the side entries that sit at the current end, in
	// index order; it stops at the first that does not follow.
	takeSide := func() {
		for len(side) > 0 && side[0].Offset == s.end && side[0].Index == next {
			e := side[0]
			side = side[1:]
			s.bases = append(s.bases, s.end)
			s.terms = append(s.terms, uint32(e.Term)|sideBit)
			s.side = append(s.side, e)
			next++
		}
	}
	err = scanHeaders(l, anc.Offset, func(h records.Header) error {
		if h.BaseOffset < anc.Offset {
			return nil // the batch holding a mid-batch log start: before the anchor
		}
		if h.BaseOffset != s.end {
			return fmt.Errorf("raft: log %s: batch at %d, expected %d", l.Dir(), h.BaseOffset, s.end)
		}
		takeSide()
		if len(side) > 0 && side[0].Offset <= s.end {
			// A side entry at or before this batch that does not follow:
			// the order above makes this impossible. Guessing could
			// re-index committed data, so the group does not open.
			return fmt.Errorf("raft: log %s: side entry %d at offset %d does not fit before the batch at %d (entry %d expected)", l.Dir(), side[0].Index, side[0].Offset, h.BaseOffset, next)
		}
		if h.PartitionLeaderEpoch < 1 {
			// Raft terms start at 1. A batch of epoch 0 was written outside
			// Raft (a single-node log): as a term-0 entry it could be
			// truncated by the first leader that lacks it.
			return fmt.Errorf("raft: log %s: batch at %d has leader epoch %d: not written by Raft (converting a single-node log is not supported)", l.Dir(), h.BaseOffset, h.PartitionLeaderEpoch)
		}
		s.bases = append(s.bases, h.BaseOffset)
		s.terms = append(s.terms, uint32(h.PartitionLeaderEpoch))
		s.end = h.LastOffset() + 1
		next++
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	takeSide()
	if len(side) > 0 {
		dropped = side[0].Index
	}
	for k := 1; k < len(s.terms); k++ {
		if s.terms[k]&^sideBit < s.terms[k-1]&^sideBit {
			return nil, 0, fmt.Errorf("raft: log %s: term of entry %d goes down (%d after %d)", l.Dir(), anc.Index+1+uint64(k), s.terms[k]&^sideBit, s.terms[k-1]&^sideBit)
		}
	}
	if s.hs == nil && anc.Index > 0 {
		s.hs = &pb.HardState{Term: new(uint64(0)), Vote: new(uint64(0)), Commit: new(uint64(0))}
	}
	if s.hs != nil {
		// The journal and the logs are fsynced in the same cycle but not
		// atomically, and commit-only changes are not fsynced at all: a
		// commit index is only knowledge (the leader repeats it), so it is
		// clamped into [anchor, last index]; the anchor is always committed.
		// Term and vote are never touched.
		c := min(max(s.hs.GetCommit(), anc.Index), s.lastLocked())
		s.hs.Commit = new(c)
	}
	return s, dropped, nil
}

// midBatchStart reports whether the log starts inside the batch at the
// anchor: Compact to an offset inside a batch (DeleteRecords may name any
// offset) keeps that batch as the first entry and moves the log start past
// the anchor's offset.
func midBatchStart(l *storage.Log, anc anchor) bool {
	start, end := l.StartOffset(), l.EndOffset()
	if start <= anc.Offset || end <= start {
		return false
	}
	sl, err := l.Read(start, end, 1)
	if err != nil {
		return false
	}
	defer sl.Release()
	return sl.Size > 0 && sl.BaseOffset == anc.Offset
}

// scanHeaders calls fn with the header of every batch from the one holding
// from to the end. Unlike Log.Scan it reads windows of the segment file:
// 64 KiB while batches are small, 4 KiB (about one header) once they are
// large, so rebuilding the index of a log of large batches reads little
// more than its headers, and no batch is copied.
func scanHeaders(l *storage.Log, from int64, fn func(records.Header) error) error {
	const window = 64 << 10
	end := l.EndOffset()
	from = max(from, l.StartOffset())
	// Made as big as the batches need, at most window: an empty or small
	// log (every new partition's group opens over one) took 64 KiB each,
	// 5% of the CPU of creating 20,000 partitions (benchmarks, round 15).
	var buf []byte
	for from < end {
		sl, err := l.Read(from, end, 64<<20)
		if err != nil {
			return err
		}
		if sl.Size == 0 {
			return nil
		}
		pos, limit := sl.Pos, sl.Pos+int64(sl.Size)
		var win []byte
		var winPos int64
		want := window
		for pos < limit {
			if pos < winPos || pos+records.HeaderSize > winPos+int64(len(win)) {
				n := min(int64(want), limit-pos)
				if n < records.HeaderSize {
					sl.Release()
					return fmt.Errorf("raft: scan %s: %d bytes left at %d: %w", l.Dir(), n, pos, records.ErrTruncated)
				}
				if int64(len(buf)) < n {
					buf = make([]byte, n)
				}
				if m, err := sl.File.ReadAt(buf[:n], pos); int64(m) < n {
					sl.Release()
					return fmt.Errorf("raft: scan %s at %d: %w", l.Dir(), pos, err)
				}
				win, winPos = buf[:n], pos
			}
			h, err := records.ParseHeader(win[pos-winPos:])
			if err == nil && (h.Size() < records.HeaderSize || pos+int64(h.Size()) > limit) {
				err = fmt.Errorf("batch of %d bytes: %w", h.Size(), records.ErrCorrupt)
			}
			if err != nil {
				sl.Release()
				return fmt.Errorf("raft: scan %s at %d: %w", l.Dir(), pos, err)
			}
			if err := fn(h); err != nil {
				sl.Release()
				return err
			}
			pos += int64(h.Size())
			from = h.LastOffset() + 1
			if want = window; h.Size() > window/4 {
				want = 4 << 10
			}
		}
		sl.Release()
	}
	return nil
}

func (s *store) lastLocked() uint64 { return s.anc.Index + uint64(len(s.bases)) }

// InitialState implements raft.Storage.
func (s *store) InitialState() (*pb.HardState, *pb.ConfState, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	hs := &pb.HardState{}
	if s.hs != nil {
		hs = cloneHS(s.hs)
	}
	cs := &pb.ConfState{}
	if s.cs != nil {
		cs = cloneCS(s.cs)
	}
	return hs, cs, nil
}

// Limits of the entries kept in memory (store.recent): per group, and for
// all groups of a host together (a node with thousands of partitions
// keeps at most this much; what does not fit is read from the log).
const (
	recentMaxBytes = 8 << 20
	recentMaxTotal = 64 << 20
)

// recentCost is what an entry counts against the limits: its data and
// about the size of the Entry and its fields.
func recentCost(e *pb.Entry) int64 { return int64(len(e.Data)) + 64 }

// rememberLocked adds e, the entry just appended at the end, to recent.
func (s *store) rememberLocked(e *pb.Entry) {
	if len(s.recent) > 0 && s.recentLo+uint64(len(s.recent)) != e.GetIndex() {
		s.forgetFromLocked(0)
	}
	n := recentCost(e)
	if n > recentMaxBytes {
		s.forgetFromLocked(0)
		return
	}
	for len(s.recent) > 0 && s.recentBytes.Load()+n > recentMaxBytes {
		s.dropFirstLocked()
	}
	if s.total.Add(n) > recentMaxTotal {
		s.total.Add(-n)
		s.forgetFromLocked(0) // the window stays contiguous
		return
	}
	if len(s.recent) == 0 {
		s.recentLo = e.GetIndex()
	}
	s.recent = append(s.recent, e)
	s.recentBytes.Add(n)
}

func (s *store) dropFirstLocked() {
	n := recentCost(s.recent[0])
	s.recentBytes.Add(-n)
	s.total.Add(-n)
	s.recent[0] = nil
	s.recent = s.recent[1:]
	s.recentLo++
}

// forgetRecent empties recent and lets go of its array.
func (s *store) forgetRecent() {
	s.mu.Lock()
	s.forgetFromLocked(0)
	s.recent = nil
	s.mu.Unlock()
}

// forgetThroughLocked drops the recent entries with index <= i.
func (s *store) forgetThroughLocked(i uint64) {
	for len(s.recent) > 0 && s.recentLo <= i {
		s.dropFirstLocked()
	}
}

// forgetFromLocked drops the recent entries with index >= i.
func (s *store) forgetFromLocked(i uint64) {
	for len(s.recent) > 0 && s.recentLo+uint64(len(s.recent))-1 >= i {
		k := len(s.recent) - 1
		n := recentCost(s.recent[k])
		s.recentBytes.Add(-n)
		s.total.Add(-n)
		s.recent[k] = nil
		s.recent = s.recent[:k]
	}
}

// recentHolds reports whether recent holds an entry of lo..hi with its
// data in ref's buffer.
func (s *store) recentHolds(lo, hi uint64, ref *bufref.Ref) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := uint64(len(s.recent))
	if n == 0 {
		return false
	}
	lo, hi = max(lo, s.recentLo), min(hi, s.recentLo+n-1)
	for i := lo; i <= hi; i++ {
		if ref.Holds(s.recent[i-s.recentLo].Data) {
			return true
		}
	}
	return false
}

// recentLocked returns entries [lo, hi) within maxSize (at least one) if
// recent holds all of them.
func (s *store) recentLocked(lo, hi, maxSize uint64) ([]*pb.Entry, bool) {
	n := uint64(len(s.recent))
	if n == 0 || lo < s.recentLo || hi > s.recentLo+n {
		return nil, false
	}
	src := s.recent[lo-s.recentLo : hi-s.recentLo]
	var size uint64
	k := 0
	for ; k < len(src); k++ {
		sz := uint64(len(src[k].Data) + 24)
		if k > 0 && size+sz > maxSize {
			break
		}
		size += sz
	}
	out := make([]*pb.Entry, k)
	copy(out, src)
	return out, true
}

// Entries implements raft.Storage: the entries appended last come from
// memory (recent); others are read as whole batches from the log, side
// entries from memory.
func (s *store) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	s.mu.RLock()
	if lo <= s.anc.Index {
		s.mu.RUnlock()
		return nil, raft.ErrCompacted
	}
	if hi > s.lastLocked()+1 {
		s.mu.RUnlock()
		return nil, raft.ErrUnavailable
	}
	if lo >= hi {
		s.mu.RUnlock()
		return nil, nil
	}
	if out, ok := s.recentLocked(lo, hi, maxSize); ok {
		s.mu.RUnlock()
		s.recentHits.Add(1)
		return out, nil
	}
	from := s.bases[lo-s.anc.Index-1]
	to := s.end
	if hi <= s.lastLocked() {
		to = s.bases[hi-s.anc.Index-1]
	}
	kinds := make([]uint32, hi-lo)
	copy(kinds, s.terms[lo-s.anc.Index-1:hi-s.anc.Index-1])
	var side map[uint64]sideEntry
	for k, t := range kinds {
		if t&sideBit != 0 {
			if side == nil {
				side = map[uint64]sideEntry{}
			}
			side[lo+uint64(k)], _ = sideAt(s.side, lo+uint64(k))
		}
	}
	s.mu.RUnlock()

	var out []*pb.Entry
	var size uint64
	var buf []byte
	readFrom := max(from, s.log.StartOffset())
	for idx := lo; idx < hi; idx++ {
		var e *pb.Entry
		if kinds[idx-lo]&sideBit != 0 {
			e = side[idx].entry()
		} else {
			if len(buf) == 0 {
				if readFrom >= to {
					break // truncated meanwhile
				}
				sl, err := s.log.Read(readFrom, to, int(min(maxSize, 8<<20)))
				if errors.Is(err, storage.ErrOffsetOutOfRange) {
					return nil, raft.ErrCompacted
				}
				if err != nil {
					return nil, err
				}
				if sl.Size == 0 {
					sl.Release()
					break
				}
				buf, err = sl.Bytes()
				sl.Release()
				if errors.Is(err, storage.ErrCorrupt) {
					return s.corruptRead(out, err)
				}
				if err != nil {
					return nil, err
				}
			}
			b, rest, err := records.Next(buf)
			if err != nil {
				return nil, err
			}
			h, err := records.ParseHeader(b)
			if err != nil {
				return nil, err
			}
			if t := uint64(kinds[idx-lo]); uint64(max(h.PartitionLeaderEpoch, 0)) != t {
				return nil, fmt.Errorf("raft: log %s: batch at %d has epoch %d, entry %d has term %d", s.log.Dir(), h.BaseOffset, h.PartitionLeaderEpoch, idx, t)
			}
			e = &pb.Entry{Index: new(idx), Term: new(uint64(kinds[idx-lo])), Type: pb.EntryType_EntryNormal.Enum(), Data: b}
			readFrom = h.LastOffset() + 1
			buf = rest
		}
		sz := uint64(len(e.Data) + 24)
		if len(out) > 0 && size+sz > maxSize {
			return out, nil
		}
		out = append(out, e)
		size += sz
	}
	if len(out) == 0 {
		return nil, raft.ErrUnavailable
	}
	return out, nil
}

// corruptRead answers an Entries call that met corrupt data: the entries
// before it, or ErrCompacted (the leader then tries a snapshot, which
// Snapshot refuses for now: nothing is sent, nothing panics).
func (s *store) corruptRead(out []*pb.Entry, err error) ([]*pb.Entry, error) {
	if s.corrupt.CompareAndSwap(false, true) && s.onCorrupt != nil {
		s.onCorrupt(err)
	}
	if len(out) > 0 {
		return out, nil
	}
	return nil, raft.ErrCompacted
}

// Term implements raft.Storage.
func (s *store) Term(i uint64) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case i == s.anc.Index:
		return s.anc.Term, nil
	case i < s.anc.Index:
		return 0, raft.ErrCompacted
	case i > s.lastLocked():
		return 0, raft.ErrUnavailable
	}
	return uint64(s.terms[i-s.anc.Index-1] &^ sideBit), nil
}

// LastIndex implements raft.Storage.
func (s *store) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastLocked(), nil
}

// FirstIndex implements raft.Storage.
func (s *store) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.anc.Index + 1, nil
}

// Snapshot implements raft.Storage: "the log starts at the anchor". With
// nothing compacted there is no snapshot to send: a leader asks only when
// it could not read its own log for a follower, and etcd raft panics on an
// empty snapshot, so it is told to try again later instead.
func (s *store) Snapshot() (*pb.Snapshot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.anc.Index == 0 || s.corrupt.Load() {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	cs := &pb.ConfState{}
	if s.cs != nil {
		cs = cloneCS(s.cs)
	}
	return &pb.Snapshot{
		Data: snapshotData(s.anc.Offset),
		Metadata: &pb.SnapshotMetadata{
			Index: new(s.anc.Index), Term: new(s.anc.Term), ConfState: cs,
		},
	}, nil
}

// offsetOf is the base offset of entry i (the end offset for last+1).
func (s *store) offsetOf(i uint64) (int64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.offsetOfLocked(i)
}

func (s *store) offsetOfLocked(i uint64) (int64, bool) {
	switch {
	case i == s.lastLocked()+1:
		return s.end, true
	case i > s.lastLocked()+1:
		return s.end, false
	case i <= s.anc.Index:
		if i == s.anc.Index {
			return s.anc.Offset, true // the end of the anchor entry
		}
		return 0, false
	}
	return s.bases[i-s.anc.Index-1], true
}

// endOf is the offset after entry i.
func (s *store) endOf(i uint64) (int64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.offsetOfLocked(i + 1)
}

// entryAt finds the entry holding offset: index, term, base and end.
func (s *store) entryAt(offset int64) (idx, term uint64, base, end int64, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if offset < s.anc.Offset || offset >= s.end {
		return 0, 0, 0, 0, false
	}
	k := sort.Search(len(s.bases), func(k int) bool { return s.bases[k] > offset }) - 1
	if k < 0 {
		return 0, 0, 0, 0, false
	}
	end = s.end
	if k+1 < len(s.bases) {
		end = s.bases[k+1]
	}
	return s.anc.Index + 1 + uint64(k), uint64(s.terms[k] &^ sideBit), s.bases[k], end, true
}

// truncate drops entries >= i from the log (durably: Log.Truncate syncs)
// and the index. The caller journals the side entries' removal after it.
func (s *store) truncate(i uint64) error {
	off, ok := s.offsetOf(i)
	if !ok {
		return fmt.Errorf("raft: truncate at compacted index %d", i)
	}
	if err := s.log.Truncate(off); err != nil {
		return err
	}
	s.mu.Lock()
	n := int(i - s.anc.Index - 1)
	s.bases, s.terms = s.bases[:n], s.terms[:n]
	s.side = truncateSide(s.side, i)
	s.forgetFromLocked(i)
	s.end = off
	s.mu.Unlock()
	return nil
}

// appendEntry stores entry e, whose index must be last+1: a data entry as
// its batch in the log, a side entry in memory (the caller journaled it
// first). local, if not nil, is the entry's batch as this node's proposer
// checked it (localBatch): it is written without being checked again, or
// only recorded if the proposer wrote it already. Batches the proposer
// wrote that no Ready stored (it stopped leading first) are cut from the
// log before anything else is stored after what Raft holds: cut is the
// offset they were cut from, -1 if nothing was.
func (s *store) appendEntry(e *pb.Entry, local *localBatch) (cut int64, err error) {
	cut = -1
	s.mu.RLock()
	end, last := s.end, s.lastLocked()
	s.mu.RUnlock()
	if e.GetIndex() != last+1 {
		return cut, fmt.Errorf("raft: append entry %d after %d", e.GetIndex(), last)
	}
	if e.GetTerm() == 0 || e.GetTerm() >= sideBit {
		return cut, fmt.Errorf("raft: entry %d has term %d", e.GetIndex(), e.GetTerm())
	}
	var v *records.Validated
	if local != nil && isDataEntry(e) {
		if w, ok := local.v.Rebind(e.Data); ok {
			v = &w
		}
	}
	written := v != nil && local.written
	if !written && s.log.EndOffset() > end {
		// Only written ahead (preWriteLocked) and never stored: the entry
		// here is another leader's, or Raft's copy of a dropped proposal.
		if err := s.log.Truncate(end); err != nil {
			return cut, err
		}
		cut = end
	}
	if !isDataEntry(e) {
		s.mu.Lock()
		s.bases = append(s.bases, end)
		s.terms = append(s.terms, uint32(e.GetTerm())|sideBit)
		s.side = append(truncateSide(s.side, e.GetIndex()), sideEntry{Index: e.GetIndex(), Term: e.GetTerm(), Offset: end, Type: e.GetType(), Data: e.Data})
		s.rememberLocked(e)
		s.mu.Unlock()
		return cut, nil
	}
	var h records.Header
	if v != nil {
		h = v.Header()
	} else if h, err = records.ParseHeader(e.Data); err != nil {
		return cut, err
	}
	if h.BaseOffset != end || uint64(max(h.PartitionLeaderEpoch, 0)) != e.GetTerm() {
		return cut, fmt.Errorf("raft: entry %d: batch at offset %d epoch %d, want offset %d term %d", e.GetIndex(), h.BaseOffset, h.PartitionLeaderEpoch, end, e.GetTerm())
	}
	info := storage.AppendInfo{BaseOffset: h.BaseOffset, LastOffset: h.LastOffset()}
	switch {
	case written:
		// The proposer wrote it at the log end, under the group's lock, in
		// index order: it is there.
		if le := s.log.EndOffset(); le <= info.LastOffset {
			return cut, fmt.Errorf("raft: entry %d: written ahead to [%d, %d], log ends at %d", e.GetIndex(), info.BaseOffset, info.LastOffset, le)
		}
		s.rebound.Add(1)
	case v != nil:
		s.rebound.Add(1)
		info, err = s.log.AppendValidated(*v)
	default:
		info, err = s.log.AppendReplicated(e.Data)
	}
	if err != nil {
		return cut, err
	}
	s.mu.Lock()
	s.bases = append(s.bases, info.BaseOffset)
	s.terms = append(s.terms, uint32(e.GetTerm()))
	s.end = info.LastOffset + 1
	s.rememberLocked(e)
	s.mu.Unlock()
	return cut, nil
}

// sideEntry returns side entry i (ok=false if i is not one, or not held).
func (s *store) sideEntry(i uint64) (sideEntry, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return sideAt(s.side, i)
}

// sideAt finds side entry i in side (sorted by index).
func sideAt(side []sideEntry, i uint64) (sideEntry, bool) {
	k, ok := slices.BinarySearchFunc(side, i, func(e sideEntry, i uint64) int { return cmp.Compare(e.Index, i) })
	if !ok {
		return sideEntry{}, false
	}
	return side[k], true
}

// commands returns the command entries with index in (after, upTo].
func (s *store) commands(after, upTo uint64) []Committed {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Committed
	for _, e := range s.side { // in index order
		if e.Index <= after || e.Index > upTo {
			continue
		}
		if cmd, ok := commandOf(e.entry()); ok {
			out = append(out, Committed{Index: e.Index, Term: e.Term, BaseOffset: e.Offset, EndOffset: e.Offset, Command: cmd})
		}
	}
	return out
}

// reset makes the log empty, starting after anchor a (snapshot install).
func (s *store) reset(a anchor) error {
	if err := s.log.TruncateFullyAndStartAt(a.Offset); err != nil {
		return err
	}
	s.mu.Lock()
	s.anc, s.bases, s.terms, s.end = a, nil, nil, a.Offset
	s.side = nil
	s.forgetFromLocked(0)
	s.mu.Unlock()
	return nil
}

// compactTo moves the anchor to a (already journaled) and drops the log
// below it.
func (s *store) compactTo(a anchor) error {
	s.mu.Lock()
	if a.Index <= s.anc.Index {
		s.mu.Unlock()
		return nil
	}
	n := int(a.Index - s.anc.Index)
	s.anc = a
	s.bases = append([]int64(nil), s.bases[n:]...)
	s.terms = append([]uint32(nil), s.terms[n:]...)
	s.side = compactSide(s.side, a.Index)
	s.forgetThroughLocked(a.Index)
	s.mu.Unlock()
	return s.log.DeleteBefore(a.Offset)
}

// setHardState records the hard state a Ready persisted. The entries up to
// the previous hard state's commit have been handed to be applied (the
// Ready that carried that commit held them, or a later read of the log
// will): they leave recent. One hard state of delay keeps them for the
// apply of a Ready that commits what it also appends.
func (s *store) setHardState(hs *pb.HardState) {
	s.mu.Lock()
	if s.hs != nil {
		s.forgetThroughLocked(s.hs.GetCommit())
	}
	if s.hsOwn {
		*s.hs.Term, *s.hs.Vote, *s.hs.Commit = hs.GetTerm(), hs.GetVote(), hs.GetCommit()
	} else {
		s.hs, s.hsOwn = cloneHS(hs), true
	}
	s.mu.Unlock()
}

func (s *store) setConfState(cs *pb.ConfState) {
	s.mu.Lock()
	s.cs = cloneCS(cs)
	s.mu.Unlock()
}

func cloneHS(hs *pb.HardState) *pb.HardState {
	return &pb.HardState{Term: new(hs.GetTerm()), Vote: new(hs.GetVote()), Commit: new(hs.GetCommit())}
}

func cloneCS(cs *pb.ConfState) *pb.ConfState {
	return &pb.ConfState{
		Voters:         append([]uint64(nil), cs.Voters...),
		Learners:       append([]uint64(nil), cs.Learners...),
		VotersOutgoing: append([]uint64(nil), cs.VotersOutgoing...),
		LearnersNext:   append([]uint64(nil), cs.LearnersNext...),
		AutoLeave:      cs.AutoLeave,
	}
}

// holds reports whether the entry at p.Index is p: same term, and for a
// batch the same offsets. An entry compacted away cannot be checked and
// does not count (the proposer retries; idempotence deduplicates).
func (s *store) holds(p Proposal) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case p.Index == s.anc.Index:
		return p.Term == s.anc.Term && p.EndOffset == s.anc.Offset
	case p.Index < s.anc.Index || p.Index > s.lastLocked():
		return false
	}
	k := p.Index - s.anc.Index - 1
	if uint64(s.terms[k]&^sideBit) != p.Term || s.bases[k] != p.BaseOffset {
		return false
	}
	end := s.end
	if k+1 < uint64(len(s.bases)) {
		end = s.bases[k+1]
	}
	if s.terms[k]&sideBit != 0 {
		return p.EndOffset == p.BaseOffset
	}
	return end == p.EndOffset
}

// endOffset is the offset after the last data entry.
func (s *store) endOffset() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.end
}

// adopt takes over the state of o (a store rebuilt over the same log), so
// that everything holding s sees the rebuilt state.
func (s *store) adopt(o *store) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.anc, s.bases, s.terms, s.side, s.end, s.hs, s.cs = o.anc, o.bases, o.terms, o.side, o.end, o.hs, o.cs
	s.hsOwn = false
	s.forgetFromLocked(0)
}
