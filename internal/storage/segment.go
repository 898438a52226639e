package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"holdfast/internal/records"
)

// On-disk names: <20-digit base offset>.log / .index / .timeindex.
const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
	// Entries carry a CRC-32C of their other bytes: a torn or garbage
	// entry whose offset and position happen to look right must not
	// smuggle in a wrong ordinal or timestamp.
	offEntrySize  = 16 // relative offset u32, position u32, batch ordinal in the segment u32, crc u32
	timeEntrySize = 16 // timestamp i64, relative offset u32, crc u32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func segmentName(base int64, suffix string) string {
	return fmt.Sprintf("%020d%s", base, suffix)
}

// parseSegmentName returns the base offset and suffix of a segment file name.
func parseSegmentName(name string) (int64, string, bool) {
	for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if strings.HasSuffix(name, suf) {
			digits := strings.TrimSuffix(name, suf)
			if len(digits) != 20 {
				return 0, "", false
			}
			v, err := strconv.ParseInt(digits, 10, 64)
			if err != nil || v < 0 {
				return 0, "", false
			}
			return v, suf, true
		}
	}
	return 0, "", false
}

type offEntry struct {
	rel uint32 // batch base offset - segment base
	pos uint32 // byte position of the batch
	ord uint32 // number of batches before it in the segment (Raft index mapping)
}

type timeEntry struct {
	ts  int64  // running max timestamp of the segment at this batch
	rel uint32 // relative offset of the batch holding ts
	pos uint32 // position of that batch (memory only: decides persistence)
}

// segment is one <base>.log file with its sparse indexes.
//
// Index files are written only for batches already fsynced (after a sync
// cycle, when a rolled segment is sealed, at Close), and never fsynced except
// when a segment is sealed (sealAsync) and at Close. So
// an entry found on disk always points into durable data, and recovery can
// trust the last valid entry of the active segment and scan on from it.
type segment struct {
	dir  string
	base int64
	f    File

	// Guarded by Log.mu: written with it held exclusively.
	size     int64         // bytes of whole batches in f
	next     int64         // offset after the last batch (exact for the active segment)
	firstOrd int64         // log-wide ordinal of the segment's first batch
	firstTS  int64         // wall-clock ms of the first append, for segment.ms (-1: none)
	jitter   time.Duration // segment.jitter.ms: this segment rolls this much early

	// The data journal (datajournal.go), guarded by Log.mu: jpos, the
	// bytes of the file that are durable (fsynced in it, or in the
	// journal); named (below), its name is durable (a syncfs or a
	// directory fsync ran since it was made).
	jpos int64

	ver verifiedRanges // byte ranges whose CRCs were checked (verify.go)

	idxMu sync.Mutex   // guards everything below but refs and named
	refs  atomic.Int32 // 1 for the log + 1 per outstanding Slice/sync
	named bool         // guarded by Log.mu (see jpos)
	// refs, named and loaded share the mutex's word, and the flags below
	// sit together: each alone took a word of padding (a segment per
	// partition, issue 27).
	loaded        bool
	offIdx        []offEntry
	timeIdx       []timeEntry
	offPersisted  int // entries of offIdx written to the .index file
	timePersisted int
	idxFile       File
	timeFile      File
	sinceIndex    int   // bytes appended since the last index entry
	nbatches      int64 // batches indexed so far (exact for the active segment)
	maxTS         int64 // largest batch MaxTimestamp (-1 if none)
	maxTSOff      int64 // base offset of the batch holding maxTS
	maxTSKnown    bool  // maxTS valid without loading the indexes
	lruTracked    bool  // loaded lazily, listed in Log.lru (may be evicted)
	idxExists     bool  // see below
	idxQueued     bool  // see below
	idxDirty      bool  // see below
	maxTSPos      int64 // position of the batch holding maxTS
	lruCount      int   // index entries counted in Log.lruEntries
	// idxExists: both index files are known to exist (this process
	// created or opened them, or recovery found them). While false, the
	// sync cycle does not create them: it queues the segment for the
	// Syncer's index creator (idxQueued) and the entries wait in memory,
	// as they do anyway until indexPersistEntries are due (indexcreate.go).
	// idxDirty: the index files may hold bytes no fsync covered (written,
	// cut or created since their last fsync, or loaded by a log not opened
	// after a clean shutdown): a persist with sync fsyncs them only then,
	// so a clean stop of a log whose index did not change since the last
	// one writes nothing.
}

func (s *segment) path(suffix string) string {
	return filepath.Join(s.dir, segmentName(s.base, suffix))
}

func (s *segment) ref() { s.refs.Add(1) }

// unref drops a reference; the last one closes the files.
func (s *segment) unref() {
	n := s.refs.Add(-1)
	if n < 0 {
		panic("storage: segment reference count below zero")
	}
	if n == 0 {
		s.closeFiles()
	}
}

func (s *segment) closeFiles() error {
	var errs []error
	if s.f != nil {
		errs = append(errs, s.f.Close())
	}
	s.idxMu.Lock()
	if s.idxFile != nil {
		errs = append(errs, s.idxFile.Close())
		s.idxFile = nil
	}
	if s.timeFile != nil {
		errs = append(errs, s.timeFile.Close())
		s.timeFile = nil
	}
	s.idxMu.Unlock()
	return errors.Join(errs...)
}

func readHeader(f File, pos int64) (records.Header, error) {
	var buf [records.HeaderSize]byte
	n, err := f.ReadAt(buf[:], pos)
	if n < len(buf) {
		if err == nil || err == io.EOF {
			err = records.ErrTruncated
		}
		return records.Header{}, fmt.Errorf("read header at %d: %w", pos, err)
	}
	return records.ParseHeader(buf[:])
}

// maxLoadedIndexEntries bounds, per log, the index entries of sealed
// segments kept in memory (~36 B each): beyond it the least recently used
// segment's indexes are dropped and reloaded on next use. At least one
// sealed segment stays loaded whatever its size.
var maxLoadedIndexEntries = 1 << 20

// lockIndex returns with s.idxMu held and the indexes loaded, loading a
// sealed segment's on first use (rebuilding them from the log if missing or
// damaged). Holding idxMu keeps an eviction from emptying them under the
// caller. The caller holds l.mu (shared or exclusive).
func (s *segment) lockIndex(l *Log) error {
	s.idxMu.Lock()
	if s.loaded {
		if s.lruTracked {
			l.lruTouch(s)
		}
		return nil
	}
	if err := s.loadIndexesLocked(l, false); err != nil {
		l.dirLogger().Warn("storage: rebuilding damaged index", "file", s.path(indexSuffix), "err", err)
		if err := s.rebuildLocked(l); err != nil {
			s.idxMu.Unlock()
			return err
		}
	}
	s.loaded = true
	s.lruTracked = true
	l.lruAdd(s, len(s.offIdx)+len(s.timeIdx))
	return nil
}

// ensureLoaded is lockIndex for callers that only need the side effects.
func (s *segment) ensureLoaded(l *Log) error {
	if err := s.lockIndex(l); err != nil {
		return err
	}
	s.idxMu.Unlock()
	return nil
}

func (l *Log) lruTouch(s *segment) {
	l.lruMu.Lock()
	defer l.lruMu.Unlock()
	for i := len(l.lru) - 1; i >= 0; i-- { // recent ones are at the end
		if l.lru[i] == s {
			copy(l.lru[i:], l.lru[i+1:])
			l.lru[len(l.lru)-1] = s
			return
		}
	}
}

// lruAdd records a freshly loaded sealed segment (its idxMu held) and
// evicts the least recently used others while over budget. Victims are
// only TryLocked, so two loaders can never wait on each other.
func (l *Log) lruAdd(s *segment, entries int) {
	l.lruMu.Lock()
	defer l.lruMu.Unlock()
	s.lruCount = entries
	l.lru = append(l.lru, s)
	l.lruEntries += entries
	for i := 0; l.lruEntries > maxLoadedIndexEntries && i < len(l.lru)-1; {
		v := l.lru[i]
		if !v.idxMu.TryLock() {
			i++
			continue
		}
		v.offIdx, v.timeIdx = nil, nil
		v.loaded, v.lruTracked = false, false
		v.idxMu.Unlock()
		l.lruEntries -= v.lruCount
		l.lru = append(l.lru[:i], l.lru[i+1:]...)
	}
}

// lruForget stops tracking s (deleted, or the active segment again after a
// Truncate). The caller holds l.mu exclusively.
func (l *Log) lruForget(s *segment) {
	l.lruMu.Lock()
	defer l.lruMu.Unlock()
	for i, v := range l.lru {
		if v == s {
			l.lruEntries -= v.lruCount
			l.lru = append(l.lru[:i], l.lru[i+1:]...)
			break
		}
	}
	s.lruTracked = false
}

// loadIndexesLocked reads both index files. strict: any inconsistency is an
// error; otherwise (the active segment in recovery) the valid prefix is kept.
func (s *segment) loadIndexesLocked(l *Log, lenient bool) error {
	_, err := s.loadIndexesSizesLocked(l, lenient)
	return err
}

// indexFileSizes are the bytes of a segment's two index files as loaded
// (-1: missing).
type indexFileSizes struct{ off, time int64 }

// loadIndexesSizesLocked is loadIndexesLocked, also returning the files'
// sizes.
func (s *segment) loadIndexesSizesLocked(l *Log, lenient bool) (sizes indexFileSizes, err error) {
	sizes = indexFileSizes{-1, -1}
	s.offIdx, s.timeIdx = nil, nil
	s.maxTS, s.maxTSOff = -1, -1
	ib, err := ReadFile(l.fs, s.path(indexSuffix), int64(maxIndexEntries)*offEntrySize)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return sizes, fmt.Errorf("read %s: %w", s.path(indexSuffix), err)
	}
	missing := errors.Is(err, os.ErrNotExist)
	if !missing {
		sizes.off = int64(len(ib))
	}
	if len(ib)%offEntrySize != 0 && !lenient {
		return sizes, fmt.Errorf("%s: size %d is not a multiple of %d", s.path(indexSuffix), len(ib), offEntrySize)
	}
	for i := 0; i+offEntrySize <= len(ib); i += offEntrySize {
		e := offEntry{rel: binary.BigEndian.Uint32(ib[i:]), pos: binary.BigEndian.Uint32(ib[i+4:]), ord: binary.BigEndian.Uint32(ib[i+8:])}
		n := len(s.offIdx)
		bad := crc32.Checksum(ib[i:i+12], castagnoli) != binary.BigEndian.Uint32(ib[i+12:]) ||
			int64(e.pos) >= s.size || (n == 0 && (e.ord != 0 || e.pos != 0)) ||
			(n > 0 && (e.rel <= s.offIdx[n-1].rel || e.pos <= s.offIdx[n-1].pos || e.ord <= s.offIdx[n-1].ord))
		if bad {
			if lenient {
				break
			}
			return sizes, fmt.Errorf("%s: entry %d (%d,%d) out of order or past the log", s.path(indexSuffix), i/offEntrySize, e.rel, e.pos)
		}
		s.offIdx = append(s.offIdx, e)
	}
	if missing && s.size > 0 && !lenient {
		return sizes, fmt.Errorf("%s missing", s.path(indexSuffix))
	}
	tb, err := ReadFile(l.fs, s.path(timeIndexSuffix), int64(maxIndexEntries+1)*timeEntrySize)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return sizes, fmt.Errorf("read %s: %w", s.path(timeIndexSuffix), err)
	}
	if !errors.Is(err, os.ErrNotExist) {
		sizes.time = int64(len(tb))
	}
	if errors.Is(err, os.ErrNotExist) && s.size > 0 && !lenient {
		return sizes, fmt.Errorf("%s missing", s.path(timeIndexSuffix))
	}
	if len(tb)%timeEntrySize != 0 && !lenient {
		return sizes, fmt.Errorf("%s: size %d is not a multiple of %d", s.path(timeIndexSuffix), len(tb), timeEntrySize)
	}
	for i := 0; i+timeEntrySize <= len(tb); i += timeEntrySize {
		e := timeEntry{ts: int64(binary.BigEndian.Uint64(tb[i:])), rel: binary.BigEndian.Uint32(tb[i+8:])}
		badCRC := crc32.Checksum(tb[i:i+12], castagnoli) != binary.BigEndian.Uint32(tb[i+12:])
		if n := len(s.timeIdx); badCRC || (n > 0 && (e.ts <= s.timeIdx[n-1].ts || e.rel <= s.timeIdx[n-1].rel)) {
			if lenient {
				break
			}
			return sizes, fmt.Errorf("%s: entry %d out of order", s.path(timeIndexSuffix), i/timeEntrySize)
		}
		// The position is only needed for unpersisted entries; persisted
		// ones are durable by construction.
		s.timeIdx = append(s.timeIdx, e)
	}
	if !lenient && s.size > 0 && len(s.timeIdx) == 0 {
		return sizes, fmt.Errorf("%s: empty for a non-empty segment", s.path(timeIndexSuffix))
	}
	s.offPersisted, s.timePersisted = len(s.offIdx), len(s.timeIdx)
	s.idxDirty = !l.clean
	if n := len(s.timeIdx); n > 0 {
		s.maxTS, s.maxTSOff = s.timeIdx[n-1].ts, s.base+int64(s.timeIdx[n-1].rel)
		s.maxTSKnown = true
	}
	return sizes, nil
}

// rebuildLocked recreates both indexes of a sealed segment by walking its
// batch headers, and rewrites the index files.
func (s *segment) rebuildLocked(l *Log) error {
	s.offIdx, s.timeIdx = nil, nil
	s.maxTS, s.maxTSOff, s.sinceIndex, s.nbatches = -1, -1, 0, 0
	var pos int64
	for pos < s.size {
		h, err := readHeader(s.f, pos)
		if err == nil && (h.Length < records.HeaderSize-12 || pos+int64(h.Size()) > s.size || h.BaseOffset < s.base || h.LastOffset()-s.base > 1<<32-1) {
			err = fmt.Errorf("batch at %d: bad header: %w", pos, records.ErrCorrupt)
		}
		if err != nil {
			return fmt.Errorf("storage: rebuild index of %s: %w", s.f.Name(), err)
		}
		s.indexBatchLocked(l.cfgIndexInterval(), h, pos)
		pos += int64(h.Size())
	}
	s.finishTimeIndexLocked()
	s.offPersisted, s.timePersisted = 0, 0
	for _, suf := range []string{indexSuffix, timeIndexSuffix} {
		if err := l.fs.Remove(s.path(suf)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("storage: rebuild index of %s: %w", s.f.Name(), err)
		}
	}
	if s.idxFile != nil {
		s.idxFile.Close()
		s.idxFile = nil
	}
	if s.timeFile != nil {
		s.timeFile.Close()
		s.timeFile = nil
	}
	s.idxExists = false
	// Best effort: a failure only means the rebuild happens again next time.
	if err := s.persistLocked(l, s.size, true); err != nil {
		l.dirLogger().Warn("storage: could not write rebuilt index", "file", s.path(indexSuffix), "err", err)
	}
	return nil
}

// indexBatchLocked records the batch h at pos in the in-memory indexes.
func (s *segment) indexBatchLocked(interval int, h records.Header, pos int64) {
	rel := uint32(h.BaseOffset - s.base)
	ord := uint32(s.nbatches)
	s.nbatches++
	if len(s.offIdx) == 0 || s.sinceIndex >= interval {
		s.offIdx = append(s.offIdx, offEntry{rel: rel, pos: uint32(pos), ord: ord})
		s.sinceIndex = 0
		// The time index gets an entry where the offset index does, if the
		// running maximum grew since the last one.
		if s.maxTS >= 0 {
			s.maybeTimeEntryLocked()
		}
	}
	s.sinceIndex += h.Size()
	if h.MaxTimestamp > s.maxTS {
		s.maxTS, s.maxTSOff = h.MaxTimestamp, h.BaseOffset
		s.maxTSPos = pos
	}
	s.maxTSKnown = true
}

func (s *segment) maybeTimeEntryLocked() {
	if n := len(s.timeIdx); n == 0 || s.maxTS > s.timeIdx[n-1].ts {
		rel := uint32(s.maxTSOff - s.base)
		if n > 0 && rel <= s.timeIdx[n-1].rel {
			return
		}
		s.timeIdx = append(s.timeIdx, timeEntry{ts: s.maxTS, rel: rel, pos: uint32(s.maxTSPos)})
	}
}

// finishTimeIndexLocked makes the last time entry the segment's maximum (at seal).
func (s *segment) finishTimeIndexLocked() {
	if s.maxTS >= 0 {
		s.maybeTimeEntryLocked()
	}
}

// persistLocked appends the index entries for batches below synced bytes to
// the index files; sync also fsyncs them (at roll and Close).
//
// The index files are closed again afterwards: with entries written in
// bulk (indexDueLocked) opening them is rare, and a node with 10,000
// partitions kept 3 descriptors per log open (30,000; the process limit
// here is 20,000, and a restart failed with EMFILE, issue 17). A log holds
// one descriptor per segment.
func (s *segment) persistLocked(l *Log, synced int64, sync bool) error {
	err := s.persistOpenLocked(l, synced, sync)
	s.closeIndexFilesLocked()
	return err
}

// closeIndexFilesLocked closes the index files (what was written stays:
// the next persist reopens them for appending; sync=true persists, at roll
// and Close, fsync what every earlier one wrote).
func (s *segment) closeIndexFilesLocked() {
	if s.idxFile != nil {
		s.idxFile.Close()
		s.idxFile = nil
	}
	if s.timeFile != nil {
		s.timeFile.Close()
		s.timeFile = nil
	}
}

func (s *segment) persistOpenLocked(l *Log, synced int64, sync bool) error {
	var ob, tb []byte
	n := s.offPersisted
	for n < len(s.offIdx) && int64(s.offIdx[n].pos) < synced {
		ob = appendOffEntry(ob, s.offIdx[n])
		n++
	}
	m := s.timePersisted
	for m < len(s.timeIdx) && int64(s.timeIdx[m].pos) < synced {
		tb = appendTimeEntry(tb, s.timeIdx[m])
		m++
	}
	if len(ob) == 0 && len(tb) == 0 && (!sync || !s.idxDirty) {
		return nil
	}
	if err := s.openIndexFilesLocked(l); err != nil {
		return err
	}
	if err := writeEntries(s.idxFile, ob, int64(s.offPersisted)*offEntrySize); err != nil {
		return err
	}
	s.offPersisted = n
	if err := writeEntries(s.timeFile, tb, int64(s.timePersisted)*timeEntrySize); err != nil {
		return err
	}
	s.timePersisted = m
	if sync {
		if err := s.idxFile.Sync(); err != nil {
			return err
		}
		if err := s.timeFile.Sync(); err != nil {
			return err
		}
		s.idxDirty = false
	}
	return nil
}

// Index entries of the active segment are written after a sync cycle only
// once this many are waiting, or the synced bytes past the last written
// entry reach indexPersistBytes (and always at roll and Close): recovery
// after a crash rescans at most about that much more of the segment.
const (
	indexPersistEntries = 32
	indexPersistBytes   = 1 << 20
)

// indexDueLocked reports whether the entries below synced should be
// written now.
func (s *segment) indexDueLocked(synced int64) bool {
	n := 0
	for i := s.offPersisted; i < len(s.offIdx) && int64(s.offIdx[i].pos) < synced; i++ {
		n++
		if n >= indexPersistEntries {
			return true
		}
	}
	if n == 0 {
		return false
	}
	var last int64
	if s.offPersisted > 0 {
		last = int64(s.offIdx[s.offPersisted-1].pos)
	}
	return synced-last >= indexPersistBytes
}

// appendOffEntry encodes an offset index entry with its CRC.
func appendOffEntry(b []byte, e offEntry) []byte {
	b = binary.BigEndian.AppendUint32(b, e.rel)
	b = binary.BigEndian.AppendUint32(b, e.pos)
	b = binary.BigEndian.AppendUint32(b, e.ord)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[len(b)-12:], castagnoli))
}

// appendTimeEntry encodes a time index entry with its CRC.
func appendTimeEntry(b []byte, e timeEntry) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(e.ts))
	b = binary.BigEndian.AppendUint32(b, e.rel)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[len(b)-12:], castagnoli))
}

// writeEntries appends b; on a short write it cuts the file back to prev so
// no torn entry stays behind.
func writeEntries(f File, b []byte, prev int64) error {
	if len(b) == 0 {
		return nil
	}
	if _, err := f.Write(b); err != nil {
		if terr := f.Truncate(prev); terr != nil {
			return errors.Join(err, terr)
		}
		return err
	}
	return nil
}

// lookupLocked returns the position of the last index entry at or below offset.
func (s *segment) lookupLocked(offset int64) int64 {
	pos, _ := s.lookupOrdLocked(offset)
	return pos
}

// lookupOrdLocked is lookupLocked that also returns the entry's ordinal in
// the segment.
func (s *segment) lookupOrdLocked(offset int64) (int64, int64) {
	rel := offset - s.base
	i := sort.Search(len(s.offIdx), func(i int) bool { return int64(s.offIdx[i].rel) > rel })
	if i == 0 {
		return 0, 0
	}
	return int64(s.offIdx[i-1].pos), int64(s.offIdx[i-1].ord)
}

// lookupByOrdLocked returns position and ordinal of the last index entry
// at or below the segment-relative ordinal ord.
func (s *segment) lookupByOrdLocked(ord int64) (int64, int64) {
	i := sort.Search(len(s.offIdx), func(i int) bool { return int64(s.offIdx[i].ord) > ord })
	if i == 0 {
		return 0, 0
	}
	return int64(s.offIdx[i-1].pos), int64(s.offIdx[i-1].ord)
}

// farthestLocked returns the position of the last index entry whose position
// is at most limitPos and whose offset is below maxOffset: every batch
// before it is whole and qualifies. Returns -1 if none beyond from.
func (s *segment) farthestLocked(from, limitPos, maxOffset int64) int64 {
	i := sort.Search(len(s.offIdx), func(i int) bool {
		e := s.offIdx[i]
		return int64(e.pos) > limitPos || s.base+int64(e.rel) >= maxOffset
	})
	if i == 0 || int64(s.offIdx[i-1].pos) <= from {
		return -1
	}
	return int64(s.offIdx[i-1].pos)
}

// timeLookupLocked returns the offset of the last time entry below ts, or
// the segment base.
func (s *segment) timeLookupLocked(ts int64) int64 {
	i := sort.Search(len(s.timeIdx), func(i int) bool { return s.timeIdx[i].ts >= ts })
	if i == 0 {
		return s.base
	}
	return s.base + int64(s.timeIdx[i-1].rel)
}

// maxTimestamp returns the segment's largest timestamp and its offset,
// reading only the time index when the segment is sealed.
func (s *segment) maxTimestamp(l *Log) (int64, int64, error) {
	s.idxMu.Lock()
	known := s.maxTSKnown
	ts, off := s.maxTS, s.maxTSOff
	s.idxMu.Unlock()
	if known {
		return ts, off, nil
	}
	if err := s.ensureLoaded(l); err != nil {
		return -1, -1, err
	}
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	return s.maxTS, s.maxTSOff, nil
}

// openIndexFilesLocked opens (creating) both index files for appending.
func (s *segment) openIndexFilesLocked(l *Log) error {
	return s.openIndexFilesFlagLocked(l, false)
}

// openIndexFilesFlagLocked is openIndexFilesLocked; fresh (the index
// creator) also empties a file of which this process has written nothing
// (its persisted count is 0): one that exists then holds nothing of this
// segment's (a leftover of a removed segment of the same name), and
// appending after it would misplace every entry.
func (s *segment) openIndexFilesFlagLocked(l *Log, fresh bool) error {
	var err error
	flag := func(persisted int) int {
		f := os.O_RDWR | os.O_CREATE | os.O_APPEND
		if fresh && persisted == 0 {
			f |= os.O_TRUNC
		}
		return f
	}
	if s.idxFile == nil {
		if s.idxFile, err = l.fs.OpenFile(s.path(indexSuffix), flag(s.offPersisted), 0o644); err != nil {
			return err
		}
	}
	if s.timeFile == nil {
		if s.timeFile, err = l.fs.OpenFile(s.path(timeIndexSuffix), flag(s.timePersisted), 0o644); err != nil {
			return err
		}
	}
	s.idxExists = true
	s.idxDirty = true
	return nil
}

// truncateIndexLocked drops entries for offsets >= offset, in memory and in
// the files (which may also hold a torn or invalid tail after a crash).
// ord is the segment-relative ordinal of the batch at offset.
func (s *segment) truncateIndexLocked(l *Log, offset, ord int64) error {
	s.truncateIndexMemLocked(offset, ord)
	return s.cutIndexFilesLocked(l, nil)
}

// truncateIndexMemLocked is truncateIndexLocked's part in memory.
func (s *segment) truncateIndexMemLocked(offset, ord int64) {
	s.nbatches = ord
	rel := offset - s.base
	i := sort.Search(len(s.offIdx), func(i int) bool { return int64(s.offIdx[i].rel) >= rel })
	s.offIdx = s.offIdx[:i]
	j := sort.Search(len(s.timeIdx), func(i int) bool { return int64(s.timeIdx[i].rel) >= rel })
	s.timeIdx = s.timeIdx[:j]
	s.offPersisted = min(s.offPersisted, i)
	s.timePersisted = min(s.timePersisted, j)
	s.maxTS, s.maxTSOff, s.maxTSPos = -1, -1, 0
	if j > 0 {
		e := s.timeIdx[j-1]
		s.maxTS, s.maxTSOff, s.maxTSPos = e.ts, s.base+int64(e.rel), int64(e.pos)
	}
	s.sinceIndex = 0
}

// cutIndexFilesLocked cuts the index files to the persisted entries.
// sizes, if known (recovery loaded the files), spares opening a file that
// is missing or already that long.
func (s *segment) cutIndexFilesLocked(l *Log, sizes *indexFileSizes) error {
	// Only files that exist are opened (and left open for the caller to
	// sync) and cut: a missing one holds nothing to drop, and creating it
	// here cost two file creations per log at every restart (and at every
	// truncation) even for a log whose index was never due. The index
	// creator makes them when entries are due (indexcreate.go).
	var errs []error
	present := 0
	for k, c := range []struct {
		f      *File
		suffix string
		want   int64
	}{{&s.idxFile, indexSuffix, int64(s.offPersisted) * offEntrySize}, {&s.timeFile, timeIndexSuffix, int64(s.timePersisted) * timeEntrySize}} {
		if sizes != nil && *c.f == nil {
			if n := [2]int64{sizes.off, sizes.time}[k]; n < 0 {
				continue // missing
			} else if n == c.want {
				present++ // as long as it should be: left alone
				continue
			}
		}
		if *c.f == nil {
			f, err := l.fs.OpenFile(s.path(c.suffix), os.O_RDWR|os.O_APPEND, 0o644)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			*c.f = f
		}
		present++
		if n, err := (*c.f).Size(); err != nil {
			errs = append(errs, err)
		} else if n > c.want {
			s.idxDirty = true
			errs = append(errs, (*c.f).Truncate(c.want))
		}
	}
	s.idxExists = present == 2
	return errors.Join(errs...)
}
