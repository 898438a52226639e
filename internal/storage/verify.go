package storage

import (
	"errors"
	"fmt"
	"sync"

	"holdfast/internal/records"
)

// Every byte a log hands out (to a follower through Raft, to a consumer,
// to the cleaner) is CRC-checked once before it leaves, and never again
// while this process runs: each segment remembers which byte ranges are
// known good (verified). Bytes appended in this process went through a
// validated path (Append and AppendReplicated check the CRC,
// AppendValidated takes a records.Validated), so they are verified as they
// are written; recovery verifies the tail it scans. What stays unverified
// is what an earlier process wrote and recovery trusted without reading
// (sealed segments, the active segment before its last index entry): the
// first read of it checks it (Slice.Verify, Slice.Bytes), and the
// scrubber (Log.ScrubStep) walks the rest at a bounded rate.
//
// A batch that fails its check is corruption, never a torn tail (the crash
// model keeps fsynced bytes as written): the log records it (Corrupt),
// which its owner answers by discarding the replica and copying it again
// from a healthy one; the bad bytes are never served. Appends go on (an
// only replica keeps taking writes; only the bad range is unreadable).

// ErrCorrupt is data that fails its CRC (or framing) where the crash model
// says it is intact: fsynced bytes, or a bad batch followed by good ones.
var ErrCorrupt = errors.New("storage: corrupt data")

// maxVerifiedRanges bounds a segment's list of verified ranges: reads
// scattered over a cold segment keep the largest.
const maxVerifiedRanges = 16

// verifiedRanges is a segment's known-good byte ranges: sorted, disjoint,
// not adjacent.
type verifiedRanges struct {
	mu sync.Mutex
	r  [][2]int64
}

// covers reports whether [a, b) is inside one verified range.
func (v *verifiedRanges) covers(a, b int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, r := range v.r {
		if r[0] <= a && b <= r[1] {
			return true
		}
		if r[0] > a {
			return false
		}
	}
	return false
}

// add marks [a, b) verified.
func (v *verifiedRanges) add(a, b int64) {
	if a >= b {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	// The common case: an append right after the last range.
	if n := len(v.r); n > 0 && v.r[n-1][0] <= a && a <= v.r[n-1][1] {
		v.r[n-1][1] = max(v.r[n-1][1], b)
		return
	}
	out := make([][2]int64, 0, len(v.r)+1)
	placed := false
	for _, r := range v.r {
		switch {
		case r[1] < a:
			out = append(out, r)
		case b < r[0]:
			if !placed {
				out = append(out, [2]int64{a, b})
				placed = true
			}
			out = append(out, r)
		default: // overlapping or adjacent: merge into [a, b)
			a, b = min(a, r[0]), max(b, r[1])
		}
	}
	if !placed {
		out = append(out, [2]int64{a, b})
	}
	for len(out) > maxVerifiedRanges {
		k := 0
		for i, r := range out {
			if r[1]-r[0] < out[k][1]-out[k][0] {
				k = i
			}
		}
		out = append(out[:k], out[k+1:]...)
	}
	v.r = out
}

// cut forgets everything at and above size (a truncation).
func (v *verifiedRanges) cut(size int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := v.r[:0]
	for _, r := range v.r {
		if r[0] >= size {
			break
		}
		out = append(out, [2]int64{r[0], min(r[1], size)})
	}
	v.r = out
}

// firstGap returns the first unverified range within [from, end).
func (v *verifiedRanges) firstGap(from, end int64) (int64, int64, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	a := from
	for _, r := range v.r {
		if r[1] <= a {
			continue
		}
		if r[0] > a {
			return a, min(r[0], end), a < end
		}
		a = r[1]
	}
	return a, end, a < end
}

// verifyBytes checks every batch of b (the bytes at pos of s, read after
// the log's truncation generation was gen) and, if all pass, marks them
// verified. A failure is reported as corruption, unless the bytes may
// have changed under the read (a truncation, the segment replaced or
// removed): then it is only an error.
func (l *Log) verifyBytes(s *segment, pos int64, b []byte, gen uint64) error {
	end := pos + int64(len(b))
	if s.ver.covers(pos, end) {
		return nil
	}
	at := pos
	for rest := b; len(rest) > 0; {
		batch, next, err := records.Next(rest)
		if err == nil {
			_, err = records.Validate(batch, 0)
		}
		if err != nil {
			if l.changedSince(s, at, gen) {
				return fmt.Errorf("storage: %s changed while read at byte %d: %w", s.path(logSuffix), at, err)
			}
			return l.corrupt(s, at, err)
		}
		at += int64(len(batch))
		rest = next
	}
	s.ver.add(pos, end)
	return nil
}

// changedSince reports whether the bytes at pos of s may have changed
// since the log's truncation generation was gen.
func (l *Log) changedSince(s *segment, pos int64, gen uint64) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.closed || l.truncGen != gen || pos >= s.size || !containsSeg(l.segs, s)
}

// corrupt records corruption found at pos of s (Corrupt, so its owner
// rebuilds the replica) and returns the error.
func (l *Log) corrupt(s *segment, pos int64, cause error) error {
	err := fmt.Errorf("%w: %s at byte %d: %w", ErrCorrupt, s.path(logSuffix), pos, cause)
	l.mu.Lock()
	first := l.corruptErr == nil
	if first {
		l.corruptErr = err
	}
	l.mu.Unlock()
	if first {
		l.countCorrupt()
		l.dirLogger().Error("storage: corrupt data: this replica stops serving the log and must be rebuilt from a healthy one",
			"file", s.path(logSuffix), "position", pos, "err", cause)
	}
	return err
}

// Corrupt returns the first corruption a read or the scrubber found in
// the log (wrapping ErrCorrupt), nil if none: the replica must be rebuilt
// from a healthy one.
func (l *Log) Corrupt() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.corruptErr
}

// Verify checks the slice's batches (their CRCs) unless they were checked
// before, reading them from the file. A Slice that is to be sent as it is
// (sendfile) must be verified first; Bytes verifies by itself.
func (s Slice) Verify() error {
	if s.Size == 0 || s.ref == nil || s.ref.log == nil {
		return nil
	}
	seg := s.ref.seg
	if seg.ver.covers(s.Pos, s.Pos+int64(s.Size)) {
		return nil
	}
	b := make([]byte, s.Size)
	if n, err := s.File.ReadAt(b, s.Pos); n < len(b) {
		return fmt.Errorf("storage: read %s at %d: %w", s.File.Name(), s.Pos, err)
	}
	return s.ref.log.verifyBytes(seg, s.Pos, b, s.ref.gen)
}

// ScrubStep checks up to budget bytes of the log's not yet verified data,
// oldest segment first, and returns how many bytes it read and whether
// anything is left to check. A corrupt batch is recorded (Corrupt)
// and is returned (as is an earlier one: a corrupt log is not scrubbed
// further). The active segment's unverified part (written by an
// earlier process) is checked too, up to its size when the step starts.
func (l *Log) ScrubStep(budget int) (int, bool, error) {
	read := 0
	for read < budget {
		l.mu.RLock()
		if l.closed {
			l.mu.RUnlock()
			return read, false, ErrClosed
		}
		if l.corruptErr != nil {
			err := l.corruptErr
			l.mu.RUnlock()
			return read, false, err
		}
		var seg *segment
		var a, b int64
		for _, s := range l.segs {
			if x, y, ok := s.ver.firstGap(0, s.size); ok {
				seg, a, b = s, x, y
				break
			}
		}
		if seg == nil {
			l.mu.RUnlock()
			return read, false, nil
		}
		seg.ref()
		gen := l.truncGen
		l.mu.RUnlock()
		n, err := l.scrubRange(seg, a, min(b, a+int64(budget-read)), gen)
		seg.unref()
		read += n
		if err != nil {
			return read, false, err
		}
		if n == 0 {
			return read, true, nil
		}
	}
	return read, true, nil
}

// scrubRange checks the whole batches from a (a batch boundary) whose
// start lies below b, reading at most 1 MiB past b.
func (l *Log) scrubRange(s *segment, a, b int64, gen uint64) (int, error) {
	const chunk = 1 << 20
	pos, read := a, 0
	hdr := make([]byte, records.HeaderSize)
	var buf []byte
	for pos < b {
		if n, err := s.f.ReadAt(hdr, pos); n < len(hdr) {
			// A file shorter than the size it had (truncated meanwhile)
			// is not corruption; a read error is not either.
			return read, fmt.Errorf("storage: scrub %s at %d: %w", s.f.Name(), pos, err)
		}
		h, err := records.ParseHeader(hdr)
		size := int64(h.Size())
		if err == nil && (h.Length < records.HeaderSize-12 || size > recoverMaxBatch) {
			err = fmt.Errorf("batch length %d: %w", h.Length, records.ErrCorrupt)
		}
		if err != nil {
			return read, l.scrubFailed(s, pos, gen, err)
		}
		if cap(buf) < int(size) {
			buf = make([]byte, max(size, chunk))
		}
		b1 := buf[:size]
		if n, err := s.f.ReadAt(b1, pos); n < len(b1) {
			return read, l.scrubFailed(s, pos, gen, fmt.Errorf("batch of %d bytes runs past the file: %v: %w", size, err, records.ErrTruncated))
		}
		if err := l.verifyBytes(s, pos, b1, gen); err != nil {
			return read, err
		}
		read += int(size)
		pos += size
	}
	return read, nil
}

// scrubFailed reports a bad batch at pos unless the segment was cut,
// replaced or removed meanwhile (then it is no longer there to be bad).
func (l *Log) scrubFailed(s *segment, pos int64, gen uint64, err error) error {
	if l.changedSince(s, pos, gen) {
		return nil
	}
	return l.corrupt(s, pos, err)
}

func containsSeg(segs []*segment, s *segment) bool {
	for _, x := range segs {
		if x == s {
			return true
		}
	}
	return false
}

// corruptAtOpen reports corruption found by recovery: the open fails
// with ErrCorrupt (the replica is rebuilt, not cut).
func (l *Log) corruptAtOpen(s *segment, pos int64, cause error) error {
	l.countCorrupt()
	l.dirLogger().Error("storage: corrupt data found at open: refusing the log, it must be rebuilt from a healthy replica",
		"file", s.path(logSuffix), "position", pos, "err", cause)
	return fmt.Errorf("storage: open %s: %w: %s at byte %d: %w", l.dir, ErrCorrupt, s.path(logSuffix), pos, cause)
}

// goodBatchAfter looks for a whole batch that passes its CRC, with a base
// offset at or above next, starting anywhere after pos in s: recovery
// found a bad batch at pos, which is a torn tail only if nothing good
// follows it. It reads the rest of the file once, in chunks.
func (l *Log) goodBatchAfter(s *segment, pos, next int64) (int64, bool) {
	const chunk = 1 << 20
	const magicAt = 16 // baseOffset i64, length i32, partitionLeaderEpoch i32, magic
	buf := make([]byte, chunk+records.HeaderSize)
	for start := pos + 1; start+records.HeaderSize <= s.size; start += chunk {
		n, _ := s.f.ReadAt(buf[:min(int64(len(buf)), s.size-start)], start)
		b := buf[:n]
		for q := 0; q+records.HeaderSize <= len(b) && q < chunk; q++ {
			if b[q+magicAt] != 2 {
				continue
			}
			h, err := records.ParseHeader(b[q:])
			at := start + int64(q)
			if err != nil || h.BaseOffset < next || h.Length < records.HeaderSize-12 ||
				int64(h.Size()) > s.size-at || h.Size() > recoverMaxBatch {
				continue
			}
			if _, err := l.checkBatchAt(s, at, h.BaseOffset); err == nil {
				return at, true
			}
		}
	}
	return 0, false
}

// damagedAtOpen reports a file recovery found damaged where no torn write
// can be (a checkpoint is replaced atomically, a sealed segment was
// fsynced): corruption, refused with ErrCorrupt.
func (l *Log) damagedAtOpen(file string, cause error) error {
	l.countCorrupt()
	l.dirLogger().Error("storage: damaged file found at open: refusing the log, it must be rebuilt from a healthy replica", "file", file, "err", cause)
	return fmt.Errorf("storage: open %s: %w: damaged %s: %w", l.dir, ErrCorrupt, file, cause)
}

// countCorrupt tells the log's owner (Options.OnCorrupt; replica.Manager
// counts them per broker for holdfast_storage_corruptions_total).
func (l *Log) countCorrupt() {
	if l.onCorrupt != nil {
		l.onCorrupt()
	}
}

// Unverify forgets which bytes were checked: every byte is checked again
// on its next read or by the scrubber (its next pass).
func (l *Log) Unverify() {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, s := range l.segs {
		s.ver.mu.Lock()
		s.ver.r = nil
		s.ver.mu.Unlock()
	}
}
