package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// The data journal (log.journal.enable, issue 27 design (a); off by
// default): one sequential write and one fdatasync per sync cycle make the
// new bytes of every log that qualifies durable, instead of a write(2) per
// log and a syncfs over every dirty file. The segment files are written
// behind: their append buffers (appendbuf.go) write out when full, when
// something needs the file's bytes, at a checkpoint, a Truncate or Close.
//
// On disk: a ring of preallocated files <root>/.journal/NNNNNN, reused
// (overwriting cached pages costs a third of appending new blocks, round
// 13). Every file begins with a file-header record; records follow back
// to back:
//
//	u32 CRC-32C of the rest | u32 payload length | u64 sequence number |
//	u32 generation | u8 kind | 3 bytes zero | payload
//
// kinds: jkFile (u64 live start: the first sequence a replay needs),
// jkStart (the same, written by a checkpoint), jkData (u16 n, the log's
// directory relative to root in n bytes, i64 segment base, i64 file
// position, the bytes), jkCut (u16 n, directory: the log's earlier records
// must not be replayed). Sequence numbers rise by one per record across
// the files of a generation; a record with a bad CRC, another generation
// or an unexpected sequence ends the replay (a torn tail, or an older lap
// of the ring).
//
// The rules that make a replay write only acknowledged bytes, never stale
// ones (docs/storage.md, "The data journal"):
//   - A log is journaled in a cycle only if all its new bytes are still in
//     its append buffer and the cycle changes no file-system metadata: its
//     active segment's name is durable (a syncfs or a directory fsync ran
//     since it was made), no roll waits to be sealed, no epoch checkpoint
//     is dirty. Every other log takes the old path (write-out, syncfs or
//     fdatasync) in the same cycle. So a record's file exists durably, and
//     every byte before a record's position was made durable by an older
//     record or in the segment itself.
//   - Whatever changes bytes at positions a live record covers, or removes
//     a log's files for a name that may come back (Truncate, a reset, the
//     cleaner's swap, the removal of a partition directory), first makes
//     the log's journaled bytes durable in its segments where they must
//     survive, then writes a durable cut record for the log, under the
//     journal's round lock (taken before the log's locks): a replay skips
//     the log's records older than its last cut.
//   - A checkpoint (in the background) writes out and fsyncs every log
//     journaled since the last one, then writes a start record: the ring's
//     files wholly before it are free for reuse. A cycle that finds no
//     free file takes the old path for every log: never a stall.
//   - Recovery (OpenDataJournal, before any log opens) replays the records
//     from the live start in order, each written at its position if its
//     file exists, fsyncs the files written, and starts a new generation
//     (durable before it returns). Logs then recover their tails as always.
const (
	jkFile  = 1
	jkStart = 2
	jkData  = 3
	jkCut   = 4

	jrecHeader = 24
	// jMaxPayload bounds a record read back (a garbage length must not
	// make the replay allocate).
	jMaxPayload = 64 << 20
	// jMaxFileBytes bounds a ring file read back whole at recovery.
	jMaxFileBytes = 4 << 30
	// jReserve: room a cycle leaves at the end of a file for a
	// checkpoint's start record.
	jReserve = 4 << 10

	journalDirName = ".journal"
	// DefaultJournalFiles and DefaultJournalFileBytes size the ring.
	DefaultJournalFiles     = 4
	DefaultJournalFileBytes = 32 << 20
)

// JournalOptions configure OpenDataJournal.
type JournalOptions struct {
	FS     FS // the OS filesystem or a CrashFS: files written with WriteAt
	Logger *slog.Logger
	// Files and FileBytes size the ring (defaults above). Disabled:
	// replay whatever an earlier run left, remove the ring, journal nothing.
	Files     int
	FileBytes int64
	Disabled  bool
	// ManualCheckpoints (tests): checkpoints run only when Checkpoint is
	// called, so that a run's file operations repeat.
	ManualCheckpoints bool
}

// errJournalBroken: a journal write failed; the journal takes no more.
var errJournalBroken = errors.New("storage: data journal unusable after a failed write")

type writerAt interface {
	WriteAt(p []byte, off int64) (int, error)
}

type jfile struct {
	f           File
	first, last uint64 // sequence numbers it holds (0, 0: none)
}

// DataJournal is the node's data journal; a Syncer with one (SetJournal)
// journals the logs it syncs that live under the journal's root.
type DataJournal struct {
	fs       FS
	root     string
	dir      string
	logger   *slog.Logger
	fileSize int64

	// roundMu is held by a journaled sync cycle across the capture of the
	// logs' bytes, the write and the fdatasync, and by every cut (taken
	// before any log's lock): no record captured before a cut is written
	// after it.
	roundMu   sync.Mutex
	files     []jfile
	cur       int
	pos       int64
	gen       uint32
	nextSeq   uint64
	liveStart uint64
	broken    error
	buf       []byte
	dirLast   map[string]uint64 // a directory's newest record or cut

	dirtyMu sync.Mutex
	dirty   map[*Log]struct{} // journaled since the last checkpoint

	cpRunning atomic.Bool
	cpWG      sync.WaitGroup
	closed    bool
	// reserve: room a cycle leaves at a file's end (jReserve, less for
	// tiny test rings); minRoom: a cycle moves to the next file when less
	// is left. manualCheckpoints (tests): no checkpoint starts by itself.
	reserve, minRoom  int64
	manualCheckpoints bool

	// Counters (Syncer.Stats).
	rounds, journaled, oldPath, checkpoints, cuts atomic.Int64
}

func jcrc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// appendJRec appends one record whose payload is the concatenation of ps.
func appendJRec(b []byte, seq uint64, gen uint32, kind byte, ps ...[]byte) []byte {
	start := len(b)
	n := 0
	for _, p := range ps {
		n += len(p)
	}
	b = append(b, make([]byte, jrecHeader)...)
	h := b[start:]
	binary.LittleEndian.PutUint32(h[4:], uint32(n))
	binary.LittleEndian.PutUint64(h[8:], seq)
	binary.LittleEndian.PutUint32(h[16:], gen)
	h[20] = kind
	for _, p := range ps {
		b = append(b, p...)
	}
	binary.LittleEndian.PutUint32(b[start:], jcrc(b[start+4:]))
	return b
}

func u64b(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func dirPayload(rel string) []byte {
	return append(binary.LittleEndian.AppendUint16(nil, uint16(len(rel))), rel...)
}

// jrec is one record read back.
type jrec struct {
	seq     uint64
	gen     uint32
	kind    byte
	payload []byte
}

// parseJRecs reads the records at the start of b, in order, until one does
// not check (CRC, length) or breaks the sequence of the first.
func parseJRecs(b []byte) []jrec {
	var out []jrec
	for len(b) >= jrecHeader {
		n := int64(binary.LittleEndian.Uint32(b[4:]))
		if n > jMaxPayload || n > int64(len(b)-jrecHeader) {
			break
		}
		if jcrc(b[4:jrecHeader+n]) != binary.LittleEndian.Uint32(b) {
			break
		}
		r := jrec{seq: binary.LittleEndian.Uint64(b[8:]), gen: binary.LittleEndian.Uint32(b[16:]), kind: b[20], payload: b[jrecHeader : jrecHeader+n]}
		if len(out) > 0 && (r.seq != out[len(out)-1].seq+1 || r.gen != out[0].gen) {
			break
		}
		if len(out) == 0 && r.kind != jkFile {
			break
		}
		out = append(out, r)
		b = b[jrecHeader+n:]
	}
	return out
}

// dataRec is a jkData payload decoded.
type dataRec struct {
	dir       string
	base, pos int64
	data      []byte
}

func parseDirPayload(p []byte) (string, []byte, bool) {
	if len(p) < 2 {
		return "", nil, false
	}
	n := int(binary.LittleEndian.Uint16(p))
	if len(p) < 2+n {
		return "", nil, false
	}
	return string(p[2 : 2+n]), p[2+n:], true
}

func parseDataRec(p []byte) (dataRec, bool) {
	dir, rest, ok := parseDirPayload(p)
	if !ok || len(rest) < 16 {
		return dataRec{}, false
	}
	r := dataRec{dir: dir, base: int64(binary.LittleEndian.Uint64(rest)), pos: int64(binary.LittleEndian.Uint64(rest[8:])), data: rest[16:]}
	if r.base < 0 || r.pos < 0 || !filepath.IsLocal(dir) {
		return dataRec{}, false
	}
	return r, true
}

// readJournal reads the ring's files: the records of the newest generation
// from the live start on, in order, and the files' numbers and contents.
func readJournal(fsys FS, dir string) (live []jrec, gen uint32, maxSeq uint64, err error) {
	names, err := fsys.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, 0, nil
	}
	if err != nil {
		return nil, 0, 0, err
	}
	var runs [][]jrec
	for _, n := range names {
		if strings.HasSuffix(n, ".tmp") {
			continue
		}
		b, err := ReadFile(fsys, filepath.Join(dir, n), jMaxFileBytes)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("storage: data journal: read %s: %w", n, err)
		}
		if rs := parseJRecs(b); len(rs) > 0 {
			runs = append(runs, rs)
			gen = max(gen, rs[0].gen)
		}
	}
	var cur [][]jrec
	start := uint64(0)
	for _, rs := range runs {
		if rs[0].gen != gen {
			continue
		}
		cur = append(cur, rs)
		for _, r := range rs {
			maxSeq = max(maxSeq, r.seq)
			if (r.kind == jkFile || r.kind == jkStart) && len(r.payload) >= 8 {
				start = max(start, binary.LittleEndian.Uint64(r.payload))
			}
		}
	}
	sort.Slice(cur, func(a, b int) bool { return cur[a][0].seq < cur[b][0].seq })
	// The stream from the live start: contiguous sequence numbers across
	// the files in order; a gap ends it (an older lap, or nothing there).
	next := start
	for _, rs := range cur {
		if rs[len(rs)-1].seq < next {
			continue
		}
		if rs[0].seq > next {
			break
		}
		for _, r := range rs {
			if r.seq == next {
				live = append(live, r)
				next++
			}
		}
	}
	return live, gen, maxSeq, nil
}

// replayJournal writes the live records' bytes into the segment files
// under root (the rules at the top of this file) and fsyncs what it wrote.
// It returns the number of records written and skipped.
func replayJournal(fsys FS, root string, live []jrec, logger *slog.Logger) (written, skipped int, err error) {
	lastCut := map[string]uint64{}
	for _, r := range live {
		if r.kind == jkCut {
			if dir, _, ok := parseDirPayload(r.payload); ok {
				lastCut[dir] = r.seq
			}
		}
	}
	open := map[string]File{}
	defer func() {
		for _, f := range open {
			f.Close()
		}
	}()
	var order []string
	for _, r := range live {
		if r.kind != jkData {
			continue
		}
		d, ok := parseDataRec(r.payload)
		if !ok || r.seq < lastCut[d.dir] {
			skipped++
			continue
		}
		name := filepath.Join(root, d.dir, segmentName(d.base, logSuffix))
		f := open[name]
		if f == nil {
			f, err = fsys.OpenFile(name, os.O_RDWR, 0)
			if errors.Is(err, os.ErrNotExist) {
				// Removed (retention, a truncation, a deleted
				// partition): a record is written only for a segment
				// whose name was durable, so nothing of it is lost.
				skipped++
				err = nil
				continue
			}
			if err != nil {
				return written, skipped, fmt.Errorf("storage: data journal replay: open %s: %w", name, err)
			}
			open[name] = f
			order = append(order, name)
		}
		size, err := f.Size()
		if err != nil {
			return written, skipped, fmt.Errorf("storage: data journal replay: %s: %w", name, err)
		}
		if d.pos > size {
			// Bytes before the record are missing (never so by the
			// rules): leave the file for its log's recovery to cut.
			logger.Warn("storage: data journal replay: record past the file's end, skipped", "file", name, "pos", d.pos, "size", size)
			skipped++
			continue
		}
		wa, ok := f.(writerAt)
		if !ok {
			return written, skipped, fmt.Errorf("storage: data journal replay: %s: the filesystem cannot write at a position", name)
		}
		if _, err := wa.WriteAt(d.data, d.pos); err != nil {
			return written, skipped, fmt.Errorf("storage: data journal replay: write %s: %w", name, err)
		}
		written++
	}
	for _, name := range order {
		if err := open[name].Sync(); err != nil {
			return written, skipped, fmt.Errorf("storage: data journal replay: sync %s: %w", name, err)
		}
	}
	return written, skipped, nil
}

// OpenDataJournal recovers the data journal under root (the data
// directory) and, unless opts.Disabled, opens it for writing with a new
// generation. Call it before any log under root opens.
func OpenDataJournal(root string, opts JournalOptions) (*DataJournal, error) {
	if opts.FS == nil {
		opts.FS = OSFS()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Files < 2 {
		opts.Files = DefaultJournalFiles
	}
	if opts.FileBytes <= 0 {
		opts.FileBytes = DefaultJournalFileBytes
	}
	root = filepath.Clean(root)
	dir := filepath.Join(root, journalDirName)
	live, gen, maxSeq, err := readJournal(opts.FS, dir)
	if err != nil {
		return nil, err
	}
	if len(live) > 0 {
		w, sk, err := replayJournal(opts.FS, root, live, opts.Logger)
		if err != nil {
			return nil, err
		}
		opts.Logger.Info("storage: data journal replayed", "records", len(live), "written", w, "skipped", sk)
	}
	if opts.Disabled {
		return nil, removeJournal(opts.FS, dir)
	}
	j := &DataJournal{fs: opts.FS, root: root, dir: dir, logger: opts.Logger, fileSize: opts.FileBytes,
		gen: gen + 1, nextSeq: maxSeq + 1, dirLast: map[string]uint64{}, dirty: map[*Log]struct{}{}}
	j.liveStart = j.nextSeq
	j.reserve, j.minRoom = min(jReserve, j.fileSize/16), min(64<<10, j.fileSize/4)
	j.manualCheckpoints = opts.ManualCheckpoints
	if err := j.prepareFiles(opts.Files); err != nil {
		j.closeFiles()
		return nil, err
	}
	// The new generation's first header, durable before any log opens:
	// from here on the old generation is dead (a log may now change
	// bytes an old record covers).
	j.cur, j.pos = len(j.files)-1, j.fileSize // the first cycle starts file 0
	if err := j.switchFileLocked(); err != nil {
		j.closeFiles()
		return nil, err
	}
	if err := j.writeLocked(); err != nil {
		j.closeFiles()
		return nil, err
	}
	return j, nil
}

func removeJournal(fsys FS, dir string) error {
	names, err := fsys.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := fsys.Remove(filepath.Join(dir, n)); err != nil {
			return err
		}
	}
	if err := fsys.SyncDir(dir); err != nil {
		return err
	}
	if err := fsys.Remove(dir); err != nil {
		return err
	}
	return fsys.SyncDir(filepath.Dir(dir))
}

// prepareFiles opens the ring's files, making each fileSize bytes long
// (zeros) if it is not, durably.
func (j *DataJournal) prepareFiles(n int) error {
	if err := MkdirAllDurable(j.fs, j.dir); err != nil {
		return err
	}
	created := false
	zero := make([]byte, min(j.fileSize, 1<<20))
	for i := range n {
		name := filepath.Join(j.dir, fmt.Sprintf("%06d", i))
		f, err := j.fs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		j.files = append(j.files, jfile{f: f})
		wa, ok := f.(writerAt)
		if !ok {
			return fmt.Errorf("storage: data journal: %s: the filesystem cannot write at a position", name)
		}
		size, err := f.Size()
		if err != nil {
			return err
		}
		if size >= j.fileSize {
			continue
		}
		created = true
		for off := size; off < j.fileSize; off += int64(len(zero)) {
			if _, err := wa.WriteAt(zero[:min(int64(len(zero)), j.fileSize-off)], off); err != nil {
				return err
			}
		}
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if created {
		return j.fs.SyncDir(j.dir)
	}
	return nil
}

func (j *DataJournal) closeFiles() {
	for _, f := range j.files {
		f.f.Close()
	}
}

// switchFileLocked moves to the next file of the ring if it is free (none
// of its records is live) and starts it with a header: false if not.
func (j *DataJournal) switchFileLocked() error {
	next := (j.cur + 1) % len(j.files)
	if nf := j.files[next]; nf.last != 0 && nf.last >= j.liveStart {
		return errRingFull
	}
	if len(j.buf) > 0 {
		return errors.New("storage: data journal: switch with a pending write")
	}
	j.cur, j.pos = next, 0
	j.files[next].first, j.files[next].last = j.nextSeq, j.nextSeq
	j.buf = appendJRec(j.buf, j.nextSeq, j.gen, jkFile, u64b(j.liveStart))
	j.nextSeq++
	return nil
}

var errRingFull = errors.New("storage: data journal: ring full")

// roomLocked: whether n more bytes fit in the current file this cycle.
func (j *DataJournal) roomLocked(n int) bool {
	return j.pos+int64(len(j.buf))+int64(n) <= j.fileSize-j.reserve
}

// beginLocked starts a cycle's batch (roundMu held): false if the journal
// cannot take records now (broken, or its ring full: the caller takes the
// old path for every log).
func (j *DataJournal) beginLocked() bool {
	if j.broken != nil || j.closed {
		return false
	}
	j.buf = j.buf[:0]
	if j.roomLocked(int(j.minRoom)) {
		return true
	}
	if err := j.switchFileLocked(); err != nil {
		j.kickCheckpoint()
		return false
	}
	return true
}

// addLocked appends a record of kind to the cycle's batch, if it fits.
func (j *DataJournal) addLocked(kind byte, ps ...[]byte) (uint64, bool) {
	n := jrecHeader
	for _, p := range ps {
		n += len(p)
	}
	if !j.roomLocked(n) {
		return 0, false
	}
	seq := j.nextSeq
	j.nextSeq++
	j.buf = appendJRec(j.buf, seq, j.gen, kind, ps...)
	return seq, true
}

// writeLocked writes the batch with one pwrite and fdatasyncs the file. A
// failure breaks the journal for good (the stream on disk may be torn
// where later records would go): every later cycle takes the old path.
func (j *DataJournal) writeLocked() error {
	if len(j.buf) == 0 {
		return nil
	}
	f := j.files[j.cur]
	_, err := f.f.(writerAt).WriteAt(j.buf, j.pos)
	if err == nil {
		err = f.f.Sync()
	}
	if err != nil {
		j.broken = fmt.Errorf("%w: %w", errJournalBroken, err)
		j.logger.Error("storage: data journal write failed; every log takes the old path from now on", "err", err)
		j.buf = j.buf[:0]
		return err
	}
	j.pos += int64(len(j.buf))
	j.files[j.cur].last = j.nextSeq - 1
	j.buf = j.buf[:0]
	if j.liveFilesLocked() > len(j.files)/2 {
		j.kickCheckpoint()
	}
	return nil
}

func (j *DataJournal) liveFilesLocked() int {
	n := 0
	for _, f := range j.files {
		if f.last != 0 && f.last >= j.liveStart {
			n++
		}
	}
	return n
}

// rel is dir relative to the journal's root, "" if it is not below it.
func (j *DataJournal) rel(dir string) string {
	r, err := filepath.Rel(j.root, dir)
	if err != nil || !filepath.IsLocal(r) || r == "." || len(r) > 1<<15 || strings.HasPrefix(r, journalDirName) {
		return ""
	}
	return r
}

// hasLiveLocked: a record of rel may still be replayed.
func (j *DataJournal) hasLiveLocked(rel string) bool {
	s, ok := j.dirLast[rel]
	return ok && s >= j.liveStart
}

// cutLocked writes a durable cut record for rel if a record of it is live
// (roundMu held).
func (j *DataJournal) cutLocked(rel string) error {
	if rel == "" || !j.hasLiveLocked(rel) {
		return nil
	}
	if j.broken != nil {
		return j.broken
	}
	j.buf = j.buf[:0]
	if !j.roomLocked(jrecHeader + 2 + len(rel)) {
		if err := j.switchFileLocked(); err != nil {
			return fmt.Errorf("storage: data journal: no room for a cut record: %w", err)
		}
	}
	seq, ok := j.addLocked(jkCut, dirPayload(rel))
	if !ok {
		return errors.New("storage: data journal: cut record does not fit")
	}
	if err := j.writeLocked(); err != nil {
		return err
	}
	j.dirLast[rel] = seq
	j.cuts.Add(1)
	return nil
}

// Forget makes sure no replay writes into dir again: a cut record, durable,
// if the journal holds live records of it. The partition manager calls it
// before it renames a partition's directory aside (the name may come back
// with other bytes: a topic created again, a replica moved back). The log
// in dir is closed (its Close wrote its bytes out and fsynced them).
func (j *DataJournal) Forget(dir string) error {
	if j == nil {
		return nil
	}
	j.roundMu.Lock()
	defer j.roundMu.Unlock()
	return j.cutLocked(j.rel(filepath.Clean(dir)))
}

func (j *DataJournal) markDirty(l *Log) {
	j.dirtyMu.Lock()
	j.dirty[l] = struct{}{}
	j.dirtyMu.Unlock()
}

// logClosed: l's Close wrote out and fsynced every byte it journaled.
func (j *DataJournal) logClosed(l *Log) {
	j.dirtyMu.Lock()
	delete(j.dirty, l)
	j.dirtyMu.Unlock()
}

// kickCheckpoint starts a checkpoint in the background unless one runs.
func (j *DataJournal) kickCheckpoint() {
	if j.closed || j.manualCheckpoints || !j.cpRunning.CompareAndSwap(false, true) {
		return
	}
	j.cpWG.Add(1)
	go func() {
		defer j.cpWG.Done()
		defer j.cpRunning.Store(false)
		if err := j.Checkpoint(); err != nil {
			j.logger.Warn("storage: data journal checkpoint failed (retried when the ring fills)", "err", err)
		}
	}()
}

// Checkpoint writes out and fsyncs every log journaled so far, then moves
// the live start past their records (a start record, durable): the files
// wholly before it are reused. Cycles go on meanwhile.
func (j *DataJournal) Checkpoint() error {
	j.roundMu.Lock()
	cp := j.nextSeq
	j.roundMu.Unlock()
	j.dirtyMu.Lock()
	logs := j.dirty
	j.dirty = map[*Log]struct{}{}
	j.dirtyMu.Unlock()
	if err := flushLogs(logs); err != nil {
		j.dirtyMu.Lock()
		for l := range logs {
			j.dirty[l] = struct{}{}
		}
		j.dirtyMu.Unlock()
		return err
	}
	j.roundMu.Lock()
	defer j.roundMu.Unlock()
	if j.broken != nil {
		return j.broken
	}
	j.buf = j.buf[:0]
	if _, ok := j.addLocked(jkStart, u64b(cp)); !ok {
		// In the reserve: a start record always fits.
		j.buf = appendJRec(j.buf, j.nextSeq, j.gen, jkStart, u64b(cp))
		j.nextSeq++
	}
	if err := j.writeLocked(); err != nil {
		return err
	}
	j.liveStart = cp
	for d, s := range j.dirLast {
		if s < cp {
			delete(j.dirLast, d)
		}
	}
	j.checkpoints.Add(1)
	return nil
}

// flushLogs writes out and makes durable the segments of logs that may
// hold journaled bytes, on up to groupWriters goroutines: a write-out
// each, then one syncfs per filesystem where it reports errors (an
// fdatasync per log was a journal commit each on ext4), else an fdatasync
// per segment.
func flushLogs(logs map[*Log]struct{}) error {
	type item struct {
		l    *Log
		segs []*segment
	}
	var items []item
	var errs []error
	for l := range logs {
		segs, err := l.journalSegs()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(segs) > 0 {
			items = append(items, item{l, segs})
		}
	}
	defer func() {
		for _, it := range items {
			for _, s := range it.segs {
				s.unref()
			}
		}
	}()
	var next atomic.Int64
	var mu sync.Mutex
	byDev := map[uint64]File{}
	var wg sync.WaitGroup
	for range min(len(items), groupWriters) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(items) {
					return
				}
				it := items[i]
				for _, s := range it.segs {
					var err error
					af, ok := s.f.(*appendFile)
					if it.l.dev != 0 && ok {
						err = af.Flush()
					} else {
						err = s.f.Sync()
					}
					mu.Lock()
					if err != nil {
						errs = append(errs, fmt.Errorf("storage: %s: journal checkpoint: %w", it.l.dir, err))
					} else if it.l.dev != 0 && ok && byDev[it.l.dev] == nil {
						byDev[it.l.dev] = s.f
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, f := range byDev {
		errs = append(errs, syncFilesystemOf(f))
	}
	return errors.Join(errs...)
}

// Close stops the journal: after a clean stop (every journaled log closed,
// its bytes fsynced) a start record says nothing is to be replayed.
func (j *DataJournal) Close() error {
	if j == nil {
		return nil
	}
	j.roundMu.Lock()
	j.closed = true
	j.roundMu.Unlock()
	j.cpWG.Wait()
	j.roundMu.Lock()
	defer j.roundMu.Unlock()
	j.dirtyMu.Lock()
	clean := len(j.dirty) == 0
	j.dirtyMu.Unlock()
	var err error
	if clean && j.broken == nil {
		j.buf = j.buf[:0]
		j.buf = appendJRec(j.buf, j.nextSeq, j.gen, jkStart, u64b(j.nextSeq+1))
		j.nextSeq++
		err = j.writeLocked()
	}
	j.closeFiles()
	return err
}

// JournalStats count the journal's work.
type JournalStats struct {
	Rounds      int64 // cycles that wrote the journal
	Journaled   int64 // log syncs made durable by the journal
	OldPath     int64 // log syncs in journaled cycles that took the old path
	Checkpoints int64
	Cuts        int64
}

// Stats returns the counters.
func (j *DataJournal) Stats() JournalStats {
	if j == nil {
		return JournalStats{}
	}
	return JournalStats{Rounds: j.rounds.Load(), Journaled: j.journaled.Load(), OldPath: j.oldPath.Load(),
		Checkpoints: j.checkpoints.Load(), Cuts: j.cuts.Load()}
}
