package raft

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// anchor is the entry just before the first one in the log: its Raft index
// and term, and the offset of the first batch. A fresh log has (0, 0, 0).
type anchor struct {
	Index, Term uint64
	Offset      int64
}

// store is raft.Storage over a storage.Log: Raft entry i is the i-th batch
// after the anchor. Raft indexes are dense and offsets count records, so it
// keeps base offset and term per batch in memory (12 B per batch), rebuilt
// from the log at open. Raft only reads indexes it considers stable while
// the Ready loop appends or truncates above them, so mu is all it needs.
type store struct {
	log *storage.Log

	mu    sync.RWMutex
	anc   anchor
	bases []int64 // bases[k]: base offset of entry anc.Index+1+k
	terms []uint32
	end   int64 // offset after the last entry
	hs    *pb.HardState
	cs    *pb.ConfState
}

// openStore rebuilds the index from the log, starting at the anchor.
func openStore(l *storage.Log, anc anchor, hs *pb.HardState, cs *pb.ConfState) (*store, error) {
	s := &store{log: l, anc: anc, end: anc.Offset, hs: hs, cs: cs}
	mid := midBatchStart(l, anc)
	if start := l.StartOffset(); start > anc.Offset && l.EndOffset() > start && !mid {
		// Someone deleted the front of the log without going through
		// Host.Compact: the Raft indexes of what is left are unknown.
		return nil, fmt.Errorf("raft: log %s starts at %d, after the Raft anchor %d (front deleted behind Raft's back)", l.Dir(), start, anc.Offset)
	}
	if l.EndOffset() < anc.Offset || l.StartOffset() > anc.Offset && !mid {
		if err := l.TruncateFullyAndStartAt(anc.Offset); err != nil {
			return nil, err
		}
	}
	err := scanHeaders(l, anc.Offset, func(h records.Header) error {
		if h.BaseOffset < anc.Offset {
			return nil // the batch holding a mid-batch log start: before the anchor
		}
		if h.BaseOffset != s.end {
			return fmt.Errorf("raft: log %s: batch at %d, expected %d", l.Dir(), h.BaseOffset, s.end)
		}
		if h.PartitionLeaderEpoch < 1 {
			// Raft terms start at 1. A batch of epoch 0 was written outside
			// Raft (a single-node log): as a term-0 entry it could be
			// truncated by the first leader that lacks it.
			return fmt.Errorf("raft: log %s: batch at %d has leader epoch %d: not written by Raft (converting a single-node log is not supported)", l.Dir(), h.BaseOffset, h.PartitionLeaderEpoch)
		}
		s.bases = append(s.bases, h.BaseOffset)
		s.terms = append(s.terms, uint32(max(h.PartitionLeaderEpoch, 0)))
		s.end = h.LastOffset() + 1
		return nil
	})
	if err != nil {
		return nil, err
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
	return s, nil
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
	buf := make([]byte, window)
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

// Entries implements raft.Storage, reading whole batches from the log.
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
	from := s.bases[lo-s.anc.Index-1]
	to := s.end
	if hi <= s.lastLocked() {
		to = s.bases[hi-s.anc.Index-1]
	}
	s.mu.RUnlock()
	if lo >= hi {
		return nil, nil
	}
	var out []*pb.Entry
	var size uint64
	idx := lo
	readFrom := max(from, s.log.StartOffset())
	for idx < hi {
		sl, err := s.log.Read(readFrom, to, int(min(maxSize, 8<<20)))
		if errors.Is(err, storage.ErrOffsetOutOfRange) {
			return nil, raft.ErrCompacted
		}
		if err != nil {
			return nil, err
		}
		if sl.Size == 0 {
			break
		}
		buf, err := sl.Bytes()
		sl.Release()
		if err != nil {
			return nil, err
		}
		for len(buf) > 0 && idx < hi {
			b, rest, err := records.Next(buf)
			if err != nil {
				return nil, err
			}
			h, err := records.ParseHeader(b)
			if err != nil {
				return nil, err
			}
			e, err := batchEntry(h, b, idx)
			if err != nil {
				return nil, err
			}
			sz := uint64(len(e.Data) + 24)
			if len(out) > 0 && size+sz > maxSize {
				return out, nil
			}
			out = append(out, e)
			size += sz
			idx++
			readFrom = h.LastOffset() + 1
			buf = rest
		}
		if size >= maxSize {
			break
		}
	}
	if len(out) == 0 {
		return nil, raft.ErrUnavailable
	}
	return out, nil
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
	return uint64(s.terms[i-s.anc.Index-1]), nil
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

// Snapshot implements raft.Storage: "the log starts at the anchor".
func (s *store) Snapshot() (*pb.Snapshot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
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
	return s.anc.Index + 1 + uint64(k), uint64(s.terms[k]), s.bases[k], end, true
}

// truncate drops entries >= i from the log and the index.
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
	s.end = off
	s.mu.Unlock()
	return nil
}

// appendEntry stores entry e (whose index must be last+1) as a batch.
func (s *store) appendEntry(e *pb.Entry) error {
	s.mu.RLock()
	end, last := s.end, s.lastLocked()
	s.mu.RUnlock()
	if e.GetIndex() != last+1 {
		return fmt.Errorf("raft: append entry %d after %d", e.GetIndex(), last)
	}
	b, err := entryBatch(e, end)
	if err != nil {
		return err
	}
	h, err := records.ParseHeader(b)
	if err != nil {
		return err
	}
	if h.BaseOffset != end || uint64(max(h.PartitionLeaderEpoch, 0)) != e.GetTerm() {
		return fmt.Errorf("raft: entry %d: batch at offset %d epoch %d, want offset %d term %d", e.GetIndex(), h.BaseOffset, h.PartitionLeaderEpoch, end, e.GetTerm())
	}
	info, err := s.log.AppendReplicated(b)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.bases = append(s.bases, info.BaseOffset)
	s.terms = append(s.terms, uint32(e.GetTerm()))
	s.end = info.LastOffset + 1
	s.mu.Unlock()
	return nil
}

// reset makes the log empty, starting after anchor a (snapshot install).
func (s *store) reset(a anchor) error {
	if err := s.log.TruncateFullyAndStartAt(a.Offset); err != nil {
		return err
	}
	s.mu.Lock()
	s.anc, s.bases, s.terms, s.end = a, nil, nil, a.Offset
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
	s.mu.Unlock()
	return s.log.DeleteBefore(a.Offset)
}

func (s *store) setHardState(hs *pb.HardState) {
	s.mu.Lock()
	s.hs = cloneHS(hs)
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
