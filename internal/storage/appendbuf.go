package storage

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Write coalescing. A node with many partitions appends small batches to
// many logs, and a write(2) per batch was the largest item of its profile
// (35% of the CPU with 1,000 partitions, issue 17). A segment file
// therefore keeps small appends in a buffer and writes them with one
// write(2) when the sync cycle that covers them begins (Log.syncBegin), or
// earlier when the buffer fills, a large batch follows, or something reads
// or syncs the file. Nothing is acknowledged before the fsync that follows
// that write, so what a crash takes from the buffer was never acknowledged;
// a torn write of the buffer is a torn tail like any other.
const (
	// appendBufSize: small appends are gathered up to this many bytes.
	appendBufSize = 256 << 10
	// appendDirect: a batch at least this large is written at once (after
	// whatever is buffered): copying it would cost more than the write.
	appendDirect = 64 << 10
)

// appendBufSmall: a log's buffer starts this small and moves to one of
// appendBufSize only when more is pending: with 1,000 partitions every log
// has a little pending at any time, and 256 KiB each was 256 MiB of RSS.
const appendBufSmall = 16 << 10

// appendBufTiny: without direct I/O a log's buffer starts smaller still,
// and unaligned (nothing goes to the device with O_DIRECT, so the bytes
// need no particular address). A write to each of 100,000 partitions held
// one aligned 16 KiB buffer apiece (24 KiB allocated with the alignment
// slack) until the sync cycle wrote it out: 2.3 GiB for one small record
// per partition (issue 27). A buffer that outgrows this moves on to the
// classes above, as before.
const appendBufTiny = 2 << 10

// With direct I/O (log.direct.io, OSFSDirectIO) a write-out whose whole
// blocks come to at least directMin bytes goes to the device with O_DIRECT:
// the part before the first block boundary and the partial last block go
// through the page cache as before (so no page is ever written both ways,
// and the file never holds padding), the whole blocks between them with
// one O_DIRECT write straight from the buffer, which is laid out so that
// file blocks sit at aligned addresses. Smaller write-outs (a log among
// 1,000 with a few KiB per cycle) stay in the page cache: an O_DIRECT
// write waits for the device, and 1,000 of them per cycle were 3-7x
// slower than one syncfs over dirty pages (docs/benchmarks.md). Buffers
// then grow to directBufSize and batches below it are buffered too: one
// large write per cycle is what makes O_DIRECT pay (1 MiB: 1.6 GB/s
// durable here, against 0.25-0.9 GB/s through the page cache).
const directBufSize = 1 << 20

// directMin is 64 KiB; tests lower it to exercise O_DIRECT writes with
// small logs.
var directMin atomic.Int64

func init() { directMin.Store(64 << 10) }

// Buffers of files that have nothing pending wait in these pools (by
// capacity), so an idle log holds none (a node may have thousands of logs).
// Each is directBlock-aligned and directBlock longer than its class: a
// buffer's bytes start at the file offset's remainder modulo directBlock.
var (
	appendBufsTiny  = sync.Pool{New: func() any { b := make([]byte, appendBufTiny); return &b }}
	appendBufsSmall = sync.Pool{New: func() any { return alignedBuf(appendBufSmall) }}
	appendBufs      = sync.Pool{New: func() any { return alignedBuf(appendBufSize) }}
	appendBufsLarge = sync.Pool{New: func() any { return alignedBuf(directBufSize) }}
)

func alignedBuf(class int) *[]byte {
	raw := make([]byte, class+2*directBlock)
	off := (directBlock - int(uintptr(unsafe.Pointer(&raw[0]))%directBlock)) % directBlock
	b := raw[off : off+class+directBlock : off+class+directBlock]
	return &b
}

func bufPool(class int) *sync.Pool {
	switch class {
	case appendBufTiny:
		return &appendBufsTiny
	case appendBufSmall:
		return &appendBufsSmall
	case appendBufSize:
		return &appendBufs
	}
	return &appendBufsLarge
}

// errAppendFailed marks a buffered write that failed and whose partial
// bytes could not be cut off again: the file is in an unknown state.
var errAppendFailed = errors.New("storage: buffered write failed and could not be undone")

// maxQueued: full buffers waiting for the next write-out, per file. An
// append that fills its buffer queues it and takes a fresh one instead of
// writing under the log's lock (an O_DIRECT write waits for the device);
// past this many it writes them out itself.
const maxQueued = 3

// pendBuf is a run of bytes waiting for the file, in a pooled buffer whose
// bytes start at the file offset's remainder modulo directBlock.
type pendBuf struct {
	back  *[]byte // pooled backing array (nil: none)
	class int     // back's size class
	data  []byte  // the bytes: (*back)[offset%directBlock:]
}

func (b *pendBuf) release() {
	if b.back != nil {
		*b.back = (*b.back)[:cap(*b.back)]
		bufPool(b.class).Put(b.back)
	}
	*b = pendBuf{}
}

// appendFile is a segment's File with write coalescing. Writes (appends)
// come under the log's write lock; reads, Fd and Sync may come from any
// goroutine (a Slice being sent, a sync cycle) and first write out what the
// bytes they need are still waiting in.
//
// The bytes past the file's end wait in queued full buffers, then in the
// current one. A write-out (Flush, WriteQueued) holds wmu, not mu, while
// it writes: appends go on into the current buffer meanwhile, and readers
// find the bytes being written in their buffer until written moves past
// them. Lock order: wmu, then mu.
type appendFile struct {
	File
	wmu     sync.Mutex   // held while writing to the file
	mu      sync.Mutex   // guards the fields below (written: changes only under both)
	queued  []pendBuf    // full buffers, oldest first
	cur     pendBuf      // the buffer appends go to
	written atomic.Int64 // bytes in the file itself
	broken  error        // a failed write left a partial tail

	// The flags sit in pairs (a lone one took a word of padding: a file
	// per partition, issue 27).
	writingBehind atomic.Bool // a background write-out of full buffers runs
	cacheOn       atomic.Bool // the read cache is on (below)
	direct        bool        // write-outs may use O_DIRECT
	closed        bool        // guarded by mu (the read cache, below)
	onDirectOff   func(error) // told once when O_DIRECT turns out unsupported

	// The read cache (readcache.go): written bytes kept in memory, on
	// (cacheOn) with direct I/O. cached and closed are guarded by mu.
	rc        *ReadCache     // the budget (the log's Options.ReadCache)
	writes    *writeCounters // the log's Syncer's (SegmentWrites)
	cached    []*cacheChunk
	lastFetch *atomic.Int64 // the log's: when a fetch last asked the cache
}

func newAppendFile(f File, size int64) *appendFile {
	a := &appendFile{File: f}
	a.written.Store(size)
	if dw, ok := f.(directWriter); ok && dw.DirectIO() {
		a.direct = true
		a.cacheOn.Store(true)
	}
	return a
}

// bufMax is the most a buffer gathers; batches at least bigBatch long are
// written at once.
func (a *appendFile) bufMax() int {
	if a.direct {
		return directBufSize
	}
	return appendBufSize
}

func (a *appendFile) bigBatch() int {
	if a.direct {
		return directBufSize
	}
	return appendDirect
}

// pendingLocked is the number of bytes past the file's end.
func (a *appendFile) pendingLocked() int64 {
	n := int64(len(a.cur.data))
	for _, b := range a.queued {
		n += int64(len(b.data))
	}
	return n
}

// Write appends b: buffered if it is small, else written at once after
// what is buffered. An error leaves neither b nor any byte of it in the
// file; what was buffered before stays buffered.
func (a *appendFile) Write(b []byte) (int, error) {
	a.mu.Lock()
	if a.broken != nil {
		defer a.mu.Unlock()
		return 0, a.broken
	}
	if len(b) >= a.bigBatch() {
		a.mu.Unlock()
		a.wmu.Lock()
		defer a.wmu.Unlock()
		if err := a.writeQueued(true); err != nil {
			return 0, err
		}
		n, err := a.writeOut(b, false)
		a.mu.Lock()
		a.written.Add(int64(n))
		a.mu.Unlock()
		return n, err // the log cuts a partial batch (Truncate)
	}
	if a.cur.back != nil && len(a.cur.data)+len(b) > a.bufMax() {
		if len(a.queued) >= maxQueued {
			a.mu.Unlock()
			if err := a.Flush(); err != nil {
				return 0, err
			}
			a.mu.Lock()
		} else {
			a.queued = append(a.queued, a.cur)
			a.cur = pendBuf{}
			// Start writing it now, in the background: the device works
			// while appends fill the next buffer, and the sync cycle has
			// only the rest to write. A failure leaves the bytes queued;
			// the cycle's write-out retries and reports it.
			if a.writingBehind.CompareAndSwap(false, true) {
				go func() {
					a.WriteQueued()
					a.writingBehind.Store(false)
				}()
			}
		}
	}
	defer a.mu.Unlock()
	if a.cur.back == nil {
		class := appendBufSmall
		if !a.direct {
			class = appendBufTiny
		}
		a.cur = a.takeLocked(class)
	}
	if need := len(a.cur.data) + len(b); need > a.cur.class {
		class := a.bufMax()
		if need <= appendBufSmall && a.cur.class < appendBufSmall {
			class = appendBufSmall
		} else if need <= appendBufSize && a.cur.class < appendBufSize {
			// With direct I/O 256 KiB before 1 MiB: a written buffer
			// stays in the read cache, which counts its capacity.
			class = appendBufSize
		}
		nb := a.takeLocked(class)
		nb.data = append(nb.data, a.cur.data...)
		a.cur.release()
		a.cur = nb
	}
	a.cur.data = append(a.cur.data, b...)
	return len(b), nil
}

// takeLocked gets an empty buffer of the class for bytes that start where
// the current buffer starts (after the file and the queued buffers), laid
// out so that whole file blocks sit at aligned addresses (O_DIRECT).
func (a *appendFile) takeLocked(class int) pendBuf {
	back := bufPool(class).Get().(*[]byte)
	if class == appendBufTiny {
		return pendBuf{back: back, class: class, data: (*back)[:0]} // unaligned: never written with O_DIRECT
	}
	off := a.written.Load() + a.pendingLocked() - int64(len(a.cur.data))
	skip := int(off % directBlock)
	return pendBuf{back: back, class: class, data: (*back)[skip:skip]}
}

// Flush writes out everything buffered.
func (a *appendFile) Flush() error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return a.writeQueued(true)
}

// Detach queues the current buffer for the next write-out (WriteQueued):
// a sync cycle takes what it covers under the log's lock, quickly, and
// writes it after releasing the lock.
func (a *appendFile) Detach() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur.back != nil {
		a.queued = append(a.queued, a.cur)
		a.cur = pendBuf{}
	}
}

// WriteQueued writes out the queued buffers (not the current one).
func (a *appendFile) WriteQueued() error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return a.writeQueued(false)
}

// writeQueued writes the queued buffers, and with all the current one too,
// in order (wmu held). A failed write is cut off again and its bytes stay
// queued for a retry.
func (a *appendFile) writeQueued(all bool) error {
	a.mu.Lock()
	if all && a.cur.back != nil {
		a.queued = append(a.queued, a.cur)
		a.cur = pendBuf{}
	}
	for a.broken == nil && len(a.queued) > 0 {
		b := a.queued[0]
		a.mu.Unlock()
		w := a.written.Load()
		n, err := a.writeOut(b.data, true)
		if err == nil && n != len(b.data) {
			err = fmt.Errorf("short write of %d/%d bytes", n, len(b.data))
		}
		a.mu.Lock()
		if err != nil {
			defer a.mu.Unlock()
			if n > 0 {
				// Cut the partial write; the bytes stay queued.
				if terr := a.File.Truncate(w); terr != nil {
					a.broken = fmt.Errorf("%w: %s: %w", errAppendFailed, a.Name(), errors.Join(err, terr))
					return a.broken
				}
			}
			return fmt.Errorf("write %s: %w", a.Name(), err)
		}
		a.written.Add(int64(n))
		a.queued = a.queued[1:]
		a.mu.Unlock()
		if !a.keepChunk(b, w) {
			b.release()
		}
		a.mu.Lock()
	}
	defer a.mu.Unlock()
	if len(a.queued) == 0 {
		a.queued = nil
	}
	return a.broken
}

// writeOut writes p at the file's end (a.written, not yet advanced; wmu
// held) and returns how many bytes reached the file, in order from the
// start. With direct I/O and aligned (p laid out by takeLocked), the whole
// blocks in the middle go with one O_DIRECT write and the edges through
// the page cache; otherwise everything goes through the page cache.
func (a *appendFile) writeOut(p []byte, aligned bool) (int, error) {
	a.mu.Lock()
	direct := a.direct
	a.mu.Unlock()
	if !direct || !aligned {
		return a.writeCached(p)
	}
	w := a.written.Load()
	start := (w + directBlock - 1) / directBlock * directBlock
	end := (w + int64(len(p))) / directBlock * directBlock
	if end-start < directMin.Load() {
		return a.writeCached(p)
	}
	n := 0
	if h := int(start - w); h > 0 {
		k, err := a.writeCached(p[:h])
		if n += k; err != nil || k != h {
			return n, err
		}
	}
	mid := p[n : n+int(end-start)]
	k, err := a.File.(directWriter).WriteDirect(mid, start)
	if errors.Is(err, errDirectUnsupported) {
		a.mu.Lock()
		a.direct = false
		a.cacheOn.Store(false) // the page cache holds what is written
		a.mu.Unlock()
		if a.onDirectOff != nil {
			a.onDirectOff(err)
		}
		k, err = a.writeCached(mid)
	} else {
		a.writes.direct(int64(k))
	}
	if n += k; err != nil || k != len(mid) {
		return n, err
	}
	if n < len(p) {
		k, err := a.writeCached(p[n:])
		return n + k, err
	}
	return n, nil
}

// writeCached writes p through the page cache.
func (a *appendFile) writeCached(p []byte) (int, error) {
	n, err := a.File.Write(p)
	a.writes.cached(int64(n))
	return n, err
}

// writeCounters: the bytes segment files were written, with O_DIRECT and
// through the page cache (a nil one counts nothing).
type writeCounters struct{ directBytes, cachedBytes atomic.Int64 }

func (w *writeCounters) direct(n int64) {
	if w != nil {
		w.directBytes.Add(n)
	}
}

func (w *writeCounters) cached(n int64) {
	if w != nil {
		w.cachedBytes.Add(n)
	}
}

// WriteStats are the bytes written to segment files: with O_DIRECT
// (log.direct.io) and through the page cache.
type WriteStats struct{ DirectBytes, CachedBytes int64 }

// SegmentWrites returns the bytes the segment files of the logs synced by
// s (a node's) were written.
func (s *Syncer) SegmentWrites() WriteStats {
	return WriteStats{DirectBytes: s.writes.directBytes.Load(), CachedBytes: s.writes.cachedBytes.Load()}
}

// ReadAt reads what is still buffered from the buffers (a follower being
// sent entries the leader has not synced yet, a header walk over the
// newest batches), the rest from the file.
func (a *appendFile) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) <= a.written.Load() {
		if a.cacheOn.Load() {
			a.mu.Lock()
			parts := a.cachedRangeLocked(off, len(p))
			n := 0
			for _, b := range parts {
				n += copy(p[n:], b)
			}
			a.mu.Unlock()
			if parts != nil {
				return n, nil
			}
		}
		return a.File.ReadAt(p, off)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.written.Load() // stable while mu is held
	n := 0
	if off < w {
		q := p[:min(int64(len(p)), w-off)]
		if parts := a.cachedRangeLocked(off, len(q)); parts != nil {
			for _, b := range parts {
				n += copy(q[n:], b)
			}
		} else {
			k, err := a.File.ReadAt(q, off)
			if n = k; err != nil {
				return n, err
			}
		}
	}
	pos := w // file offset of the next buffer's first byte
	for i := 0; i <= len(a.queued) && n < len(p); i++ {
		buf := a.cur.data
		if i < len(a.queued) {
			buf = a.queued[i].data
		}
		if at := off + int64(n); at >= pos && at < pos+int64(len(buf)) {
			n += copy(p[n:], buf[at-pos:])
		}
		pos += int64(len(buf))
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Fd writes out the buffers: whoever wants the descriptor (sendfile,
// syncfs) wants the file's bytes.
func (a *appendFile) Fd() uintptr {
	a.Flush() // an error shows in the sendfile's short count or the sync
	return a.File.Fd()
}

// pinFd is Fd held open until unpin (a cached file's descriptor, fdcache.go).
func (a *appendFile) pinFd(try bool) (uintptr, func(), error) {
	a.Flush() // as Fd
	return pinFd(a.File, try)
}

// Sync writes out the buffers, then fdatasyncs.
func (a *appendFile) Sync() error {
	if err := a.Flush(); err != nil {
		return err
	}
	return a.File.Sync()
}

// Truncate cuts the file (and the buffers) to size bytes.
func (a *appendFile) Truncate(size int64) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	var dropped []*cacheChunk
	defer func() { a.rc.remove(dropped) }() // after mu is released
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.written.Load()
	if size >= w {
		// Inside the buffers: keep what lies below size.
		keep := size - w
		var out []pendBuf
		for i := 0; i <= len(a.queued); i++ {
			b := &a.cur
			if i < len(a.queued) {
				b = &a.queued[i]
			}
			if keep <= 0 {
				b.release()
				continue
			}
			if int64(len(b.data)) > keep {
				b.data = b.data[:keep]
			}
			keep -= int64(len(b.data))
			if i < len(a.queued) {
				out = append(out, *b)
			}
		}
		a.queued = out
		if len(a.cur.data) == 0 {
			a.cur.release()
		}
		return nil
	}
	for i := range a.queued {
		a.queued[i].release()
	}
	a.queued = nil
	a.cur.release()
	// The cache goes first: whatever the file holds past size after a
	// failed Truncate, the cache holds none of it.
	dropped = a.dropCachedFromLocked(size)
	if err := a.File.Truncate(size); err != nil {
		return err
	}
	a.written.Store(size)
	a.broken = nil // the partial tail is gone
	return nil
}

// Size is the file's size with what is buffered.
func (a *appendFile) Size() (int64, error) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	n, err := a.File.Size()
	return n + a.pendingLocked(), err
}

// Close drops what is buffered: a log writes and syncs its data before an
// orderly close, and anything else left is what a crash would lose too.
func (a *appendFile) Close() error {
	a.wmu.Lock()
	a.mu.Lock()
	for i := range a.queued {
		a.queued[i].release()
	}
	a.queued = nil
	a.cur.release()
	a.closed = true
	dropped := a.dropCachedFromLocked(-1)
	a.mu.Unlock()
	a.wmu.Unlock()
	a.rc.remove(dropped)
	return a.File.Close()
}
