package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"holdfast/internal/records"
)

// Log compaction (cleanup.policy=compact), Kafka's log cleaner semantics:
//
//   - One pass cleans the log from its start up to the end of the dirty
//     section it covers. The dirty section starts at the cleaner checkpoint
//     (where the previous pass ended) and ends at the first uncleanable
//     offset: the active segment's base, the committed offset (high
//     watermark / Raft commit), the first offset of the earliest open
//     transaction, and the first segment holding a record younger than
//     min.compaction.lag.ms, whichever is lowest; or earlier, where the
//     offset map fills up.
//   - The offset map holds, for every key in the dirty section, its latest
//     offset (records of aborted transactions and control records do not
//     count). A record survives if no later record of its key is in the
//     map; records without a key do not survive.
//   - A tombstone (null value) that survives gets a delete horizon (KIP-534:
//     firstTimestamp = now + delete.retention.ms, attribute bit 6) and is
//     removed by the first pass after it. Every older record of its key was
//     removed by the pass that saw it in the dirty section, since a pass
//     cleans from the log start and the checkpoint moves only after a whole
//     pass; so removing it resurrects nothing.
//   - Records of aborted transactions are removed. A transaction marker is
//     kept while any record of its transaction survives; then it gets a
//     delete horizon and goes like a tombstone.
//   - Offsets never change: a batch keeps baseOffset and lastOffsetDelta
//     (so a rewritten batch may have gaps), partitionLeaderEpoch and its
//     producer fields. A batch of which nothing survives becomes an empty
//     batch (header only), never dropped: every log is a Raft log, where
//     batch i is entry i (and the producer fields of a producer's last
//     batch keep its sequence and epoch).
//   - Only committed offsets are cleaned, and never the active segment.
//   - Tombstones and markers at or above CleanOptions.RemoveBelow are never
//     removed (a Raft follower removes none; a leader none that a replica
//     has not yet stored, so no replica can keep an old value whose
//     tombstone it never received).
//
// Crash safety: each group of adjacent segments is rewritten into
// <base>.log.cleaned (+ .index.cleaned, .timeindex.cleaned), fsynced, then
// renamed to .swap and the directory fsynced: the swap is committed. The
// old segments' files are then removed (directory fsync) and the .swap
// files renamed into place (directory fsync). Recovery removes .cleaned
// files and finishes a committed swap: it removes every segment the
// <base>.log.swap covers (its first to its last offset), and renames it.
// Index files of a swap are dropped rather than trusted and rebuilt on
// first use.

const (
	cleanerCheckpoint = "cleaner-offset-checkpoint"
	cleanedSuffix     = ".cleaned"
	swapSuffix        = ".swap"
	// defaultCleanerIOBuffer is the read and write buffer of a pass
	// (log.cleaner.io.buffer.size); it grows to hold the largest batch.
	defaultCleanerIOBuffer = 1 << 20
)

// Errors of Clean.
var (
	// ErrCleanAborted: the log changed under the pass (truncated, reset,
	// closed, segments deleted) or Stop closed; nothing was lost, the pass
	// can be retried.
	ErrCleanAborted = errors.New("storage: cleaning aborted")
	// ErrCleaning: another pass is running on the log.
	ErrCleaning = errors.New("storage: log is being cleaned")
	// ErrUncleanable: a batch has more keys than the offset map holds.
	ErrUncleanable = errors.New("storage: log cannot be cleaned")
)

// CleanOptions are one pass's limits and environment.
type CleanOptions struct {
	// Committed: only offsets below it are cleaned (the high watermark,
	// or the Raft commit offset).
	Committed int64
	// RemoveBelow: tombstones and transaction markers at offsets >= it are
	// not removed (only given their delete horizon): the offset every
	// replica has stored (0: none removed).
	RemoveBelow int64
	// Map is the offset map (required); Throttle bounds the I/O (nil: none).
	Map      *OffsetMap
	Throttle *Throttle
	// IOBuffer is the read and write buffer size (0: 1 MiB).
	IOBuffer int
	// Stop aborts the pass between batches (shutdown).
	Stop <-chan struct{}
}

// CleanResult describes a pass.
type CleanResult struct {
	FirstDirty, End int64 // the dirty section cleaned: [FirstDirty, End)
	Segments        int   // segments rewritten
	SegmentsAfter   int   // segments they became
	BytesRead       int64
	BytesWritten    int64
	BytesBefore     int64 // size of the rewritten segments before
	BytesAfter      int64 // and after
	Batches         int64 // batches read in the rewritten segments
	BatchesEmptied  int64
	Records         int64 // records read in the rewritten segments
	RecordsRemoved  int64 // superseded, keyless or aborted
	Tombstones      int64 // tombstones removed
	Markers         int64 // transaction markers removed
	MapKeys         int   // keys in the offset map
	// CleanedEnd: every aborted transaction whose marker is below it has no
	// record left (set as each segment group is swapped in, so also on a
	// pass that failed half way). The partition prunes its aborted index
	// with it: a read_committed consumer told of an aborted transaction
	// skips that producer's records until it meets the marker, which the
	// cleaner may remove.
	CleanedEnd     int64
	MapUtilization float64
	Took           time.Duration
}

// Cleanable is what the scheduler needs to pick a log: its dirty ratio.
type Cleanable struct {
	FirstDirty             int64   // where the dirty section starts
	Limit                  int64   // first uncleanable offset (without open transactions, which a pass finds)
	CleanBytes, DirtyBytes int64   // segment bytes below and in the dirty section
	Ratio                  float64 // DirtyBytes / (CleanBytes + DirtyBytes)
	// MaxLagExceeded: the oldest dirty record is older than
	// max.compaction.lag.ms, so the log is due whatever its ratio;
	// CompactionDelay is by how much.
	MaxLagExceeded  bool
	CompactionDelay time.Duration
	// HorizonDue: a delete horizon set by an earlier pass has passed, or
	// a tombstone or marker kept past its horizon only because a replica
	// lacked it (removeBelow) may now go.
	HorizonDue bool
	// Due: worth a pass now.
	Due bool
}

// FirstDirtyOffset is the cleaner checkpoint: where the dirty section starts.
func (l *Log) FirstDirtyOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return min(max(l.firstDirty, l.start), l.end)
}

// CleanableState computes the log's dirty ratio for a pass bounded by
// committed and removeBelow (CleanOptions). A log that is not compacted is
// never due.
func (l *Log) CleanableState(committed, removeBelow int64) (Cleanable, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var c Cleanable
	if l.closed {
		return c, ErrClosed
	}
	c.FirstDirty = min(max(l.firstDirty, l.start), l.end)
	if !l.cfg.Compact {
		return c, nil
	}
	now := l.now().UnixMilli()
	c.Limit = min(l.active().base, committed, l.end)
	sealed := l.segs[:len(l.segs)-1]
	if lag := l.cfg.MinCompactionLag.Milliseconds(); lag > 0 {
		for _, s := range sealed {
			if s.next <= c.FirstDirty || s.base >= c.Limit {
				continue
			}
			ts, _, err := s.maxTimestamp(l)
			if err != nil {
				return c, err
			}
			if ts > now-lag {
				c.Limit = min(c.Limit, s.base)
				break
			}
		}
	}
	for _, s := range sealed {
		switch {
		case s.next <= c.FirstDirty:
			c.CleanBytes += s.size
		case s.base < c.Limit:
			c.DirtyBytes += s.size
		}
	}
	if total := c.CleanBytes + c.DirtyBytes; total > 0 {
		c.Ratio = float64(c.DirtyBytes) / float64(total)
	}
	if lag := l.cfg.MaxCompactionLag.Milliseconds(); lag > 0 && c.Limit > c.FirstDirty {
		for _, s := range sealed {
			if s.next <= c.FirstDirty {
				continue
			}
			if s.size > 0 {
				h, err := readHeader(s.f, 0)
				if err != nil {
					return c, fmt.Errorf("storage: %s: %w", s.f.Name(), err)
				}
				c.MaxLagExceeded = h.MaxTimestamp >= 0 && h.MaxTimestamp < now-lag
				if c.MaxLagExceeded {
					c.CompactionDelay = time.Duration(now-lag-h.MaxTimestamp) * time.Millisecond
				}
			}
			break
		}
	}
	c.HorizonDue = l.nextHorizon > 0 && now >= l.nextHorizon || l.blockedRemoval >= 0 && l.blockedRemoval < removeBelow
	dirty := c.Limit > c.FirstDirty && c.DirtyBytes > 0
	c.Due = dirty && (c.Ratio >= l.cfg.MinCleanableRatio || c.MaxLagExceeded) || c.HorizonDue
	return c, nil
}

// txnInfo is what a pass needs to know of transactions and producers,
// gathered by scanning every batch header of the log.
type txnInfo struct {
	dirtyRecords int64        // records of data batches from the first dirty offset on: at most that many keys
	aborted      []abortedTxn // by first offset
	firstOpen    int64        // first offset of the earliest transaction open at the committed offset
}

type abortedTxn struct {
	pid         int64
	first, last int64 // first non-empty data batch, abort marker
}

// cleanSeg is a segment of the pass's snapshot of the log.
type cleanSeg struct {
	s                          *segment
	base, next, size, firstOrd int64 // as of the snapshot
}

// pass is one cleaning pass's state.
type pass struct {
	l        *Log
	opts     CleanOptions
	cfg      Config
	now      int64
	horizon  int64 // delete horizon given in this pass
	nextHzn  int64 // earliest future delete horizon seen
	blocked  int64 // least offset of a tombstone or marker past its horizon kept for RemoveBelow (-1: none)
	mapEnd   int64
	m        *OffsetMap
	info     txnInfo
	res      CleanResult
	liveTxn  map[int64]bool // producer id -> a record of its current transaction survives
	ioBuf    int
	readBuf  []byte
	writeBuf []byte
	kept     []records.Record // reused by cleanBatch
}

// Clean runs one cleaning pass (see the top of this file). It returns
// ErrCleanAborted if the log changed under it; the log is then as before
// the pass, or with some segment groups cleaned, never damaged.
func (l *Log) Clean(opts CleanOptions) (CleanResult, error) {
	if opts.Map == nil {
		return CleanResult{}, errors.New("storage: clean: no offset map")
	}
	if !l.cleaning.CompareAndSwap(false, true) {
		return CleanResult{}, ErrCleaning
	}
	defer l.cleaning.Store(false)
	started := time.Now()
	// A rolled segment is not cleaned while a sync cycle may be sealing it
	// (sealedEndLocked): seal it now, off the lock, so this pass can.
	if err := l.sealNow(); err != nil {
		return CleanResult{}, err
	}

	l.mu.RLock()
	if err := l.checkWritableLocked(); err != nil {
		l.mu.RUnlock()
		return CleanResult{}, err
	}
	if !l.cfg.Compact {
		l.mu.RUnlock()
		return CleanResult{}, nil
	}
	segs := make([]cleanSeg, len(l.segs))
	for i, s := range l.segs {
		s.ref()
		segs[i] = cleanSeg{s: s, base: s.base, next: s.next, size: s.size, firstOrd: s.firstOrd}
	}
	defer func() {
		for _, cs := range segs {
			cs.s.unref()
		}
	}()
	p := &pass{l: l, opts: opts, cfg: *l.cfg, now: l.now().UnixMilli(), m: opts.Map, liveTxn: map[int64]bool{}, blocked: -1}
	gen := l.truncGen
	firstDirty := min(max(l.firstDirty, l.start), l.end)
	limit := min(l.sealedEndLocked(), opts.Committed, l.end)
	if lag := p.cfg.MinCompactionLag.Milliseconds(); lag > 0 {
		// Segments holding a record younger than min.compaction.lag.ms
		// are not cleanable yet.
		for _, cs := range segs[:len(segs)-1] {
			if cs.next <= firstDirty || cs.base >= limit {
				continue
			}
			ts, _, err := cs.s.maxTimestamp(l)
			if err != nil {
				l.mu.RUnlock()
				return CleanResult{}, err
			}
			if ts > p.now-lag {
				limit = min(limit, cs.base)
				break
			}
		}
	}
	l.mu.RUnlock()
	p.horizon = p.now + p.cfg.DeleteRetention.Milliseconds()
	p.ioBuf = opts.IOBuffer
	if p.ioBuf <= 0 {
		p.ioBuf = defaultCleanerIOBuffer
	}
	p.res.FirstDirty = firstDirty

	var err error
	if p.info, err = p.scanTxns(segs, opts.Committed, firstDirty); err != nil {
		return p.res, err
	}
	limit = min(limit, p.info.firstOpen)
	if err := p.buildMap(segs, firstDirty, limit); err != nil {
		return p.res, err
	}
	p.res.End = p.mapEnd
	p.res.MapKeys = p.m.Len()
	if c := p.m.Cap(); c > 0 {
		p.res.MapUtilization = float64(p.m.Len()) / float64(c)
	}

	// Segments to rewrite: every sealed one below the map's end (all of the
	// log's clean section too: a pass cleans from the start).
	var todo []cleanSeg
	for _, cs := range segs[:len(segs)-1] {
		if cs.base < p.mapEnd {
			todo = append(todo, cs)
		}
	}
	at := newAbortTracker(p.info.aborted)
	for _, g := range p.group(todo) {
		if err := p.cleanGroup(g, gen, at); err != nil {
			p.res.Took = time.Since(started)
			l.mu.RLock()
			gone := l.closed || l.truncGen != gen
			l.mu.RUnlock()
			if gone && !errors.Is(err, ErrCleanAborted) {
				// Closed, deleted or reset under the pass: its errors
				// (files renamed away) are that, not a cleaner failure.
				err = fmt.Errorf("%w: %w", ErrCleanAborted, err)
			}
			return p.res, err
		}
	}
	l.mu.Lock()
	if l.truncGen == gen && !l.closed {
		l.firstDirty = max(l.firstDirty, p.mapEnd)
		l.nextHorizon, l.blockedRemoval = p.nextHzn, p.blocked
		err = l.writeCleanerCheckpointLocked()
	}
	l.mu.Unlock()
	p.res.Took = time.Since(started)
	if err != nil {
		// Only the checkpoint: the next pass cleans the same section again.
		return p.res, fmt.Errorf("storage: clean %s: %w", l.dir, err)
	}
	return p.res, nil
}

// batchReader reads a segment's batches sequentially through a buffer.
type batchReader struct {
	p        *pass
	f        File
	pos, end int64
	buf      []byte // buf[0] is at file position bufPos
	bufPos   int64
	headers  bool // headers only: large batches are skipped, not read
	large    bool // the last batch was large
}

func (p *pass) reader(cs cleanSeg, headersOnly bool) *batchReader {
	if cap(p.readBuf) < p.ioBuf {
		p.readBuf = make([]byte, 0, p.ioBuf)
	}
	return &batchReader{p: p, f: cs.s.f, end: cs.size, buf: p.readBuf[:0], headers: headersOnly}
}

// next returns the next batch's header and, unless headers-only skipped
// it, its bytes (valid until the next call); io.EOF-like (ok=false) at the end.
func (r *batchReader) next() (h records.Header, b []byte, pos int64, ok bool, err error) {
	if r.pos >= r.end {
		return h, nil, r.pos, false, nil
	}
	select {
	case <-r.p.opts.Stop:
		return h, nil, r.pos, false, ErrCleanAborted
	default:
	}
	if err := r.fill(records.HeaderSize); err != nil {
		return h, nil, r.pos, false, err
	}
	off := int(r.pos - r.bufPos)
	h, err = records.ParseHeader(r.buf[off:])
	if err == nil && (h.Length < records.HeaderSize-12 || r.pos+int64(h.Size()) > r.end || h.Size() > recoverMaxBatch) {
		err = fmt.Errorf("batch at %d of %d bytes: %w", r.pos, h.Size(), records.ErrCorrupt)
	}
	if err != nil {
		return h, nil, r.pos, false, fmt.Errorf("storage: clean %s: %w", r.f.Name(), err)
	}
	pos = r.pos
	r.large = h.Size() > 16<<10
	if r.headers && h.Size() > len(r.buf)-off && !(h.IsControl() && h.IsTransactional()) {
		r.pos += int64(h.Size())
		return h, nil, pos, true, nil
	}
	if err := r.fill(h.Size()); err != nil {
		return h, nil, pos, false, err
	}
	off = int(r.pos - r.bufPos)
	b = r.buf[off : off+h.Size()]
	r.pos += int64(h.Size())
	return h, b, pos, true, nil
}

// fill makes buf hold at least n bytes from pos (the file has them).
func (r *batchReader) fill(n int) error {
	if r.pos >= r.bufPos && r.pos+int64(n) <= r.bufPos+int64(len(r.buf)) {
		return nil
	}
	want := max(n, r.p.ioBuf)
	if r.headers && r.large {
		// Reading headers among large batches: a small window each.
		want = max(n, 64<<10)
	}
	want = int(min(int64(want), r.end-r.pos))
	if want < n {
		return fmt.Errorf("storage: clean %s: %d bytes at %d run past %d: %w", r.f.Name(), n, r.pos, r.end, records.ErrTruncated)
	}
	if cap(r.buf) < want {
		r.buf = make([]byte, want)
		r.p.readBuf = r.buf
	}
	r.buf = r.buf[:want]
	r.p.opts.Throttle.Wait(want, r.p.opts.Stop)
	if k, err := r.f.ReadAt(r.buf, r.pos); k < want {
		return fmt.Errorf("storage: clean %s: read %d at %d: %w", r.f.Name(), want, r.pos, err)
	}
	r.p.res.BytesRead += int64(want)
	r.bufPos = r.pos
	return nil
}

// markerKind reads a transaction marker's type: 1 commit, 0 abort, -1 not
// a marker (or empty).
func markerKind(b []byte) int {
	kind := -1
	records.Each(b, func(r records.Record) {
		if kind == -1 && len(r.Key) >= 4 {
			switch binary.BigEndian.Uint16(r.Key[2:]) {
			case 0:
				kind = 0
			case 1:
				kind = 1
			}
		}
	})
	return kind
}

// scanTxns reads every batch header of the log (and the transaction
// markers) to find the aborted transactions and the earliest transaction
// still open at committed.
func (p *pass) scanTxns(segs []cleanSeg, committed, firstDirty int64) (txnInfo, error) {
	info := txnInfo{firstOpen: math.MaxInt64}
	open := map[int64]int64{}
	for _, cs := range segs {
		r := p.reader(cs, true)
		for {
			h, b, _, ok, err := r.next()
			if err != nil {
				return info, err
			}
			if !ok {
				break
			}
			if !h.IsControl() && h.LastOffset() >= firstDirty {
				info.dirtyRecords += int64(h.NumRecords)
			}
			if !h.IsTransactional() || h.ProducerID < 0 || h.BaseOffset >= committed {
				continue
			}
			if !h.IsControl() {
				// An empty transactional batch was left by an earlier pass of a
				// decided transaction: it opens nothing (as in replay).
				if _, ok := open[h.ProducerID]; !ok && h.NumRecords > 0 {
					open[h.ProducerID] = h.BaseOffset
				}
				continue
			}
			first, wasOpen := open[h.ProducerID]
			delete(open, h.ProducerID)
			if wasOpen && h.NumRecords > 0 && markerKind(b) == 0 {
				info.aborted = append(info.aborted, abortedTxn{pid: h.ProducerID, first: first, last: h.BaseOffset})
			}
		}
	}
	for _, first := range open {
		info.firstOpen = min(info.firstOpen, first)
	}
	sort.Slice(info.aborted, func(i, j int) bool { return info.aborted[i].first < info.aborted[j].first })
	return info, nil
}

// abortTracker walks the aborted transactions in offset order (Kafka's
// CleanedTransactionMetadata).
type abortTracker struct {
	list    []abortedTxn
	i       int
	ongoing map[int64]int64 // producer id -> abort marker offset
}

func newAbortTracker(list []abortedTxn) *abortTracker {
	return &abortTracker{list: list, ongoing: map[int64]int64{}}
}

// aborted reports whether data batch h is in an aborted transaction.
func (t *abortTracker) aborted(h records.Header) bool {
	for t.i < len(t.list) && t.list[t.i].first <= h.LastOffset() {
		t.ongoing[t.list[t.i].pid] = t.list[t.i].last
		t.i++
	}
	if !h.IsTransactional() || h.IsControl() {
		return false
	}
	last, ok := t.ongoing[h.ProducerID]
	return ok && h.BaseOffset < last
}

// marker notes a control batch of pid: its transaction is over.
func (t *abortTracker) marker(h records.Header) {
	t.aborted(h)
	if h.IsTransactional() {
		delete(t.ongoing, h.ProducerID)
	}
}

// buildMap fills the offset map from the dirty section [from, limit) and
// sets mapEnd where it stopped.
func (p *pass) buildMap(segs []cleanSeg, from, limit int64) error {
	p.m.Reset(int(min(p.info.dirtyRecords, math.MaxInt32)))
	p.mapEnd = from
	if limit <= from {
		return nil
	}
	at := newAbortTracker(p.info.aborted)
	for _, cs := range segs {
		if cs.next <= from && cs.base < cs.next {
			continue // wholly clean (a sealed segment's next is the following base)
		}
		if cs.base >= limit {
			break
		}
		r := p.reader(cs, false)
		for {
			h, b, _, ok, err := r.next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if h.BaseOffset >= limit {
				p.mapEnd = max(p.mapEnd, limit)
				return nil
			}
			if h.LastOffset() < from {
				continue
			}
			if h.IsControl() {
				at.marker(h)
				p.mapEnd = h.LastOffset() + 1
				continue
			}
			if at.aborted(h) || h.NumRecords == 0 {
				p.mapEnd = h.LastOffset() + 1
				continue
			}
			if p.m.Len()+int(h.NumRecords) > p.m.Cap() {
				if p.mapEnd == from {
					return fmt.Errorf("%w: batch at %d has %d records, the offset map holds %d (raise log.cleaner.dedupe.buffer.size)", ErrUncleanable, h.BaseOffset, h.NumRecords, p.m.Cap())
				}
				return nil // full: the rest waits for the next pass
			}
			err = records.Each(b, func(rec records.Record) {
				if rec.Key != nil {
					p.m.Put(rec.Key, rec.Offset)
				}
			})
			if err != nil {
				return fmt.Errorf("storage: clean %s: batch at %d: %w", cs.s.f.Name(), h.BaseOffset, err)
			}
			p.mapEnd = h.LastOffset() + 1
		}
	}
	// Every batch below limit is in the map.
	p.mapEnd = max(p.mapEnd, limit)
	return nil
}

// group splits the segments to rewrite into runs that fit one segment:
// together at most segment.bytes (their size now bounds the cleaned size),
// offsets within 2³² of the first, and a cleaned offset index (one entry
// per index.interval.bytes, at most one per batch) within its bound.
func (p *pass) group(segs []cleanSeg) [][]cleanSeg {
	var out [][]cleanSeg
	var cur []cleanSeg
	var size int64
	per := int64(max(p.cfg.IndexIntervalBytes, records.HeaderSize))
	for _, cs := range segs {
		if len(cur) > 0 && (size+cs.size > p.cfg.SegmentBytes || cs.next-1-cur[0].base > math.MaxUint32 ||
			(size+cs.size)/per+1 > int64(p.cfg.IndexMaxEntries)) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, cs)
		size += cs.size
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// segWriter builds the cleaned segment of a group.
type segWriter struct {
	p       *pass
	s       *segment
	f       File
	pending []byte
	written int64
}

func (w *segWriter) add(b []byte) error {
	h, err := records.ParseHeader(b)
	if err != nil {
		return err
	}
	w.s.indexBatchLocked(w.p.cfg.IndexIntervalBytes, h, w.s.size)
	w.s.size += int64(len(b))
	w.s.next = h.LastOffset() + 1
	w.pending = append(w.pending, b...)
	if len(w.pending) >= w.p.ioBuf {
		return w.flush()
	}
	return nil
}

func (w *segWriter) flush() error {
	if len(w.pending) == 0 {
		return nil
	}
	w.p.opts.Throttle.Wait(len(w.pending), w.p.opts.Stop)
	n, err := w.f.Write(w.pending)
	w.written += int64(n)
	w.p.res.BytesWritten += int64(n)
	if err == nil && n < len(w.pending) {
		err = fmt.Errorf("short write of %d/%d bytes", n, len(w.pending))
	}
	w.pending = w.pending[:0]
	if err != nil {
		return fmt.Errorf("storage: clean: write %s: %w", w.f.Name(), err)
	}
	return nil
}

// empty writes h as an empty batch (header only, offsets and producer
// fields kept): batch i of a Raft log is entry i, so none is dropped.
func (w *segWriter) empty(h records.Header, b []byte) error {
	w.p.res.BatchesEmptied++
	if h.NumRecords == 0 && h.Codec() == records.CodecNone {
		return w.add(b)
	}
	return w.add(records.Empty(h))
}

// cleanGroup rewrites one group of segments and swaps it in.
func (p *pass) cleanGroup(g []cleanSeg, gen uint64, at *abortTracker) error {
	l := p.l
	ns := &segment{dir: l.dir, base: g[0].base, next: g[0].base, firstOrd: g[0].firstOrd, firstTS: -1, maxTS: -1, maxTSOff: -1}
	ns.refs.Store(1)
	cleaned := ns.path(logSuffix) + cleanedSuffix
	f, err := l.fs.OpenFile(cleaned, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("storage: clean %s: %w", l.dir, err)
	}
	ns.f = f
	ok := false
	defer func() {
		if !ok {
			f.Close()
			for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
				l.fs.Remove(ns.path(suf) + cleanedSuffix)
			}
		}
	}()
	if cap(p.writeBuf) < p.ioBuf {
		p.writeBuf = make([]byte, 0, p.ioBuf)
	}
	w := &segWriter{p: p, s: ns, f: f, pending: p.writeBuf[:0]}
	for _, cs := range g {
		r := p.reader(cs, false)
		for {
			h, b, _, more, err := r.next()
			if err != nil {
				return err
			}
			if !more {
				break
			}
			if _, err := records.Validate(b, 0); err != nil {
				return fmt.Errorf("storage: clean %s: %s at %d: %w", l.dir, cs.s.f.Name(), h.BaseOffset, err)
			}
			p.res.Batches++
			p.res.Records += int64(h.NumRecords)
			if err := p.cleanBatch(w, at, h, b); err != nil {
				return err
			}
		}
		p.res.BytesBefore += cs.size
	}
	if err := w.flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("storage: clean %s: sync %s: %w", l.dir, cleaned, err)
	}
	ns.finishTimeIndexLocked()
	ob, tb := encodeIndexes(ns.offIdx, ns.timeIdx)
	for _, x := range []struct {
		suf  string
		data []byte
	}{{indexSuffix, ob}, {timeIndexSuffix, tb}} {
		if err := writeSynced(l.fs, ns.path(x.suf)+cleanedSuffix, x.data); err != nil {
			return fmt.Errorf("storage: clean %s: %w", l.dir, err)
		}
	}
	if err := l.swapIn(g, ns, gen); err != nil {
		return err
	}
	ok = true
	p.res.CleanedEnd = max(p.res.CleanedEnd, min(ns.next, p.mapEnd))
	p.res.Segments += len(g)
	p.res.SegmentsAfter++
	p.res.BytesAfter += ns.size
	return nil
}

// cleanBatch decides what becomes of one batch and writes it.
func (p *pass) cleanBatch(w *segWriter, at *abortTracker, h records.Header, b []byte) error {
	if h.BaseOffset >= p.mapEnd {
		// Beyond the dirty section this pass covers: as it is.
		if h.IsTransactional() && !h.IsControl() && h.NumRecords > 0 {
			p.liveTxn[h.ProducerID] = true
		}
		if h.IsControl() {
			at.marker(h)
		}
		return w.add(b)
	}
	hzn, hasHzn := h.DeleteHorizon()
	if h.IsControl() {
		at.marker(h)
		if !h.IsTransactional() || h.ProducerID < 0 {
			return w.add(b) // not a transaction marker: kept as it is
		}
		live := p.liveTxn[h.ProducerID]
		delete(p.liveTxn, h.ProducerID)
		if h.NumRecords == 0 {
			return w.empty(h, b)
		}
		if live || markerKind(b) < 0 {
			return w.add(b)
		}
		// No record of its transaction is left: the marker may go, after
		// its delete horizon.
		switch {
		case !hasHzn:
			recs, err := records.Records(b)
			if err != nil {
				return err
			}
			nb, err := records.Rebuild(h, recs, p.horizon)
			if err != nil {
				return err
			}
			p.noteHorizon(p.horizon)
			return w.add(nb)
		case p.now >= hzn && h.BaseOffset < p.opts.RemoveBelow:
			p.res.Markers++
			return w.empty(h, b)
		case p.now >= hzn:
			p.noteBlocked(h.BaseOffset)
		}
		p.noteHorizon(hzn)
		return w.add(b)
	}
	if at.aborted(h) {
		p.res.RecordsRemoved += int64(h.NumRecords)
		return w.empty(h, b)
	}
	if h.NumRecords == 0 {
		return w.empty(h, b)
	}
	kept := p.kept[:0]
	defer func() { p.kept = kept[:0] }()
	needHzn := false
	err := records.Each(b, func(r records.Record) {
		switch {
		case r.Key == nil:
			p.res.RecordsRemoved++
			return
		case p.m.Get(r.Key) > r.Offset:
			p.res.RecordsRemoved++ // a later record of the key exists
			return
		case r.Value == nil:
			if hasHzn && p.now >= hzn && r.Offset < p.opts.RemoveBelow {
				p.res.Tombstones++
				return
			}
			if hasHzn && p.now >= hzn {
				p.noteBlocked(r.Offset)
			}
			if !hasHzn {
				needHzn = true
			}
		}
		kept = append(kept, r)
	})
	if err != nil {
		return fmt.Errorf("storage: clean %s: batch at %d: %w", p.l.dir, h.BaseOffset, err)
	}
	if len(kept) > 0 && h.IsTransactional() {
		p.liveTxn[h.ProducerID] = true
	}
	switch {
	case len(kept) == 0:
		return w.empty(h, b)
	case len(kept) == int(h.NumRecords) && !needHzn:
		if hasHzn && hasTombstone(kept) {
			p.noteHorizon(hzn)
		}
		return w.add(b)
	}
	horizon := int64(-1)
	switch {
	case hasHzn:
		horizon = hzn
	case needHzn:
		horizon = p.horizon
	}
	if horizon >= 0 && hasTombstone(kept) {
		p.noteHorizon(horizon)
	}
	nb, err := records.Rebuild(h, kept, horizon)
	if err != nil {
		return err
	}
	return w.add(nb)
}

func hasTombstone(recs []records.Record) bool {
	for _, r := range recs {
		if r.Value == nil {
			return true
		}
	}
	return false
}

// noteBlocked remembers a tombstone or marker past its horizon that stays
// only for RemoveBelow (a replica that has not stored it yet, or this
// replica is a follower): the log is due again once RemoveBelow passes it.
func (p *pass) noteBlocked(off int64) {
	if p.blocked < 0 || off < p.blocked {
		p.blocked = off
	}
}

// noteHorizon remembers the earliest delete horizon still in the future,
// when the next pass can remove something without new dirt.
func (p *pass) noteHorizon(h int64) {
	if h > p.now && (p.nextHzn == 0 || h < p.nextHzn) {
		p.nextHzn = h
	}
}

// encodeIndexes encodes whole index files.
func encodeIndexes(off []offEntry, ts []timeEntry) (ob, tb []byte) {
	for _, e := range off {
		ob = appendOffEntry(ob, e)
	}
	for _, e := range ts {
		tb = appendTimeEntry(tb, e)
	}
	return ob, tb
}

// writeSynced creates name with data and fsyncs it.
func writeSynced(fsys FS, name string, data []byte) error {
	f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if len(data) > 0 {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// swapIn replaces the group's segments by ns (see the top of this file).
// Before the commit it changes nothing; a failure after it fails the log,
// and recovery finishes the swap.
func (l *Log) swapIn(g []cleanSeg, ns *segment, gen uint64) error {
	// The group's names come back with other bytes: the log's journaled
	// bytes go to its segments, then a replay is told to skip its records
	// (a sealed segment's own were fsynced at its seal). Only the cut
	// needs the round lock: cycles journal the active segment only.
	unlock := l.journalLock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.failed != nil || l.truncGen != gen {
		unlock()
		return ErrCleanAborted
	}
	err := l.journalCutLocked(true)
	unlock()
	if err != nil {
		return fmt.Errorf("storage: clean %s: %w", l.dir, err)
	}
	i := -1
	for k, s := range l.segs {
		if s == g[0].s {
			i = k
			break
		}
	}
	if i < 0 || i+len(g) >= len(l.segs) {
		return ErrCleanAborted // deleted by retention meanwhile, or no longer sealed
	}
	for k, cs := range g {
		if l.segs[i+k] != cs.s || cs.s.size != cs.size || cs.s.next != cs.next {
			return ErrCleanAborted
		}
	}
	final := func(suf string) string { return ns.path(suf) }
	// Commit: the .swap names, durable.
	for _, suf := range []string{indexSuffix, timeIndexSuffix, logSuffix} {
		if err := l.fs.Rename(final(suf)+cleanedSuffix, final(suf)+swapSuffix); err != nil {
			return fmt.Errorf("storage: clean %s: %w", l.dir, err)
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		// Maybe committed, maybe not: recovery decides. Stop using the log.
		l.failLocked(fmt.Errorf("clean: sync dir after swap: %w", err))
		return fmt.Errorf("storage: clean %s: %w", l.dir, err)
	}
	fail := func(err error) error {
		l.failLocked(fmt.Errorf("clean: finishing a committed swap (recovery completes it): %w", err))
		return fmt.Errorf("storage: clean %s: %w", l.dir, err)
	}
	var errs []error
	for k, cs := range g {
		for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
			if k == 0 && suf == logSuffix {
				continue // replaced by the rename below
			}
			if err := l.fs.Remove(cs.s.path(suf)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fail(err)
	}
	for _, suf := range []string{indexSuffix, timeIndexSuffix, logSuffix} {
		if err := l.fs.Rename(final(suf)+swapSuffix, final(suf)); err != nil {
			return fail(err)
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fail(err)
	}
	// In memory: the new segment replaces the group.
	ns.next = g[len(g)-1].next
	ns.offPersisted, ns.timePersisted = len(ns.offIdx), len(ns.timeIdx)
	ns.loaded, ns.lruTracked = true, true
	ns.maxTSKnown = true
	segs := make([]*segment, 0, len(l.segs)-len(g)+1)
	segs = append(segs, l.segs[:i]...)
	segs = append(segs, ns)
	segs = append(segs, l.segs[i+len(g):]...)
	l.segs = segs
	for _, cs := range g {
		l.lruForget(cs.s)
		cs.s.unref()
	}
	ns.idxMu.Lock()
	l.lruAdd(ns, len(ns.offIdx)+len(ns.timeIdx))
	ns.idxMu.Unlock()
	if err := l.writeOrdinalsLocked(-1, 0); err != nil {
		// Recovery tolerates stale entries of removed segments.
		l.dirLogger().Warn("storage: clean: rewriting the ordinal checkpoint", "err", err)
	}
	return nil
}

// recoverSwaps runs at open, before the segments are read: it removes
// leftovers of passes that did not commit and finishes the swaps that did.
func (l *Log) recoverSwaps(names []string) (changed bool, err error) {
	var swaps []int64
	for _, name := range names {
		switch {
		case filepath.Ext(name) == cleanedSuffix:
			if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil {
				return changed, fmt.Errorf("storage: open %s: remove %s: %w", l.dir, name, err)
			}
			changed = true
		case filepath.Ext(name) == swapSuffix:
			base, suf, ok := parseSegmentName(name[:len(name)-len(swapSuffix)])
			if !ok {
				return changed, fmt.Errorf("storage: open %s: unexpected file %q", l.dir, name)
			}
			if suf == logSuffix {
				swaps = append(swaps, base)
			}
		}
	}
	for _, name := range names {
		// Index swaps are rebuilt from their segment rather than trusted.
		if filepath.Ext(name) == swapSuffix && filepath.Ext(name[:len(name)-len(swapSuffix)]) != logSuffix {
			if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil {
				return changed, fmt.Errorf("storage: open %s: remove %s: %w", l.dir, name, err)
			}
			changed = true
		}
	}
	for _, base := range swaps {
		swap := filepath.Join(l.dir, segmentName(base, logSuffix)+swapSuffix)
		last, err := lastOffsetOf(l.fs, swap)
		if err != nil {
			return changed, fmt.Errorf("storage: open %s: finishing the cleaner's swap %s: %w", l.dir, swap, err)
		}
		l.dirLogger().Warn("storage: finishing an interrupted cleaner swap", "file", swap, "base", base, "last", last)
		for _, name := range names {
			b, _, ok := parseSegmentName(name)
			if ok && b >= base && b <= last {
				if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
					return changed, fmt.Errorf("storage: open %s: %w", l.dir, err)
				}
			}
		}
		if err := l.fs.SyncDir(l.dir); err != nil {
			return changed, fmt.Errorf("storage: open %s: %w", l.dir, err)
		}
		if err := l.fs.Rename(swap, filepath.Join(l.dir, segmentName(base, logSuffix))); err != nil {
			return changed, fmt.Errorf("storage: open %s: %w", l.dir, err)
		}
		changed = true
	}
	if changed {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return changed, fmt.Errorf("storage: open %s: %w", l.dir, err)
		}
	}
	return changed, nil
}

// lastOffsetOf walks a segment file's batch headers and returns the last
// offset it holds.
func lastOffsetOf(fsys FS, name string) (int64, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return 0, err
	}
	last := int64(-1)
	for pos := int64(0); pos < size; {
		h, err := readHeader(f, pos)
		if err == nil && (h.Length < records.HeaderSize-12 || pos+int64(h.Size()) > size) {
			err = fmt.Errorf("batch at %d runs past the file: %w", pos, records.ErrCorrupt)
		}
		if err != nil {
			return 0, err
		}
		last = h.LastOffset()
		pos += int64(h.Size())
	}
	if last < 0 {
		return 0, fmt.Errorf("empty: %w", records.ErrCorrupt)
	}
	return last, nil
}

// The cleaner checkpoint: version 1, then the first dirty offset, the
// next delete horizon (unix ms, 0 none) and the least blocked removal
// offset (-1 none), so that a restart neither recleans the clean section
// nor forgets tombstones waiting to go. Version 0 held the offset only.
func (l *Log) writeCleanerCheckpointLocked() error {
	b := fmt.Appendf(nil, "1\n%d\n%d\n%d\n", l.firstDirty, l.nextHorizon, l.blockedRemoval)
	if err := writeFileAtomic(l.fs, filepath.Join(l.dir, cleanerCheckpoint), b); err != nil {
		return fmt.Errorf("write %s: %w", cleanerCheckpoint, err)
	}
	return nil
}

func (l *Log) parseCleanerCheckpoint(b []byte) error {
	var dirty, hzn, blocked int64
	if _, err := fmt.Sscanf(string(b), "1\n%d\n%d\n%d\n", &dirty, &hzn, &blocked); err == nil && dirty >= 0 && blocked >= -1 {
		l.firstDirty, l.nextHorizon, l.blockedRemoval = dirty, hzn, blocked
		return nil
	}
	dirty, err := parseStartCheckpoint(b)
	if err != nil {
		return err
	}
	l.firstDirty = dirty
	return nil
}

// resetCleanedLocked moves the cleaner checkpoint back to offset (a
// truncation or reset below it), durably: what is appended from there on
// was never cleaned, and a pass must not take it for the clean section
// (whose tombstones it removes, trusting older values to be gone).
func (l *Log) resetCleanedLocked(offset int64) error {
	l.firstDirty = offset
	l.blockedRemoval = min(l.blockedRemoval, offset)
	return l.writeCleanerCheckpointLocked()
}

// sealedEndLocked is the base of the first segment that is not sealed: the
// active one, or a rolled one whose seal is pending (its files are still
// being fsynced by a sync cycle: the cleaner does not replace them).
func (l *Log) sealedEndLocked() int64 {
	if l.pendingSeal != nil {
		return l.pendingSeal.base
	}
	return l.active().base
}

// sealNow runs a sync cycle if a rolled segment waits for its seal.
func (l *Log) sealNow() error {
	l.mu.RLock()
	pending := l.pendingSeal != nil
	l.mu.RUnlock()
	if !pending {
		return nil
	}
	return l.syncOnce()
}
