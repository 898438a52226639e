package storage

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
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

// Buffers of files that have nothing pending wait in these pools (by
// capacity), so an idle log holds none (a node may have thousands of logs).
var (
	appendBufsSmall = sync.Pool{New: func() any { b := make([]byte, 0, appendBufSmall); return &b }}
	appendBufs      = sync.Pool{New: func() any { b := make([]byte, 0, appendBufSize); return &b }}
)

// errAppendFailed marks a buffered write that failed and whose partial
// bytes could not be cut off again: the file is in an unknown state.
var errAppendFailed = errors.New("storage: buffered write failed and could not be undone")

// appendFile is a segment's File with write coalescing. Writes (appends)
// come under the log's write lock; reads, Fd and Sync may come from any
// goroutine (a Slice being sent, a sync cycle) and first write out what the
// bytes they need are still waiting in.
type appendFile struct {
	File
	mu      sync.Mutex
	buf     *[]byte      // pending bytes, nil when none (guarded by mu)
	written atomic.Int64 // bytes in the file itself
	broken  error        // a failed write left a partial tail (guarded by mu)
}

func newAppendFile(f File, size int64) *appendFile {
	a := &appendFile{File: f}
	a.written.Store(size)
	return a
}

// Write appends b: buffered if it is small, else written at once after
// what is buffered. An error leaves neither b nor any byte of it in the
// file; what was buffered before stays buffered.
func (a *appendFile) Write(b []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.broken != nil {
		return 0, a.broken
	}
	if len(b) >= appendDirect || (a.buf != nil && len(*a.buf)+len(b) > appendBufSize) {
		if err := a.flushLocked(); err != nil {
			return 0, err
		}
	}
	if len(b) >= appendDirect {
		n, err := a.File.Write(b)
		a.written.Add(int64(n))
		return n, err // the log cuts a partial batch (Truncate)
	}
	if a.buf == nil {
		a.buf = appendBufsSmall.Get().(*[]byte)
	}
	if len(*a.buf)+len(b) > cap(*a.buf) {
		big := appendBufs.Get().(*[]byte)
		*big = append(*big, *a.buf...)
		a.releaseLocked()
		a.buf = big
	}
	*a.buf = append(*a.buf, b...)
	return len(b), nil
}

// Flush writes out what is buffered.
func (a *appendFile) Flush() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked()
}

func (a *appendFile) flushLocked() error {
	if a.broken != nil {
		return a.broken
	}
	if a.buf == nil {
		return nil
	}
	w := a.written.Load()
	n, err := a.File.Write(*a.buf)
	if err == nil && n != len(*a.buf) {
		err = fmt.Errorf("short write of %d/%d bytes", n, len(*a.buf))
	}
	if err != nil {
		if n > 0 {
			// Cut the partial write; the bytes stay buffered for a retry.
			if terr := a.File.Truncate(w); terr != nil {
				a.broken = fmt.Errorf("%w: %s: %w", errAppendFailed, a.Name(), errors.Join(err, terr))
				return a.broken
			}
		}
		return fmt.Errorf("write %s: %w", a.Name(), err)
	}
	a.written.Add(int64(n))
	a.releaseLocked()
	return nil
}

func (a *appendFile) releaseLocked() {
	if a.buf != nil {
		*a.buf = (*a.buf)[:0]
		if cap(*a.buf) == appendBufSmall {
			appendBufsSmall.Put(a.buf)
		} else {
			appendBufs.Put(a.buf)
		}
		a.buf = nil
	}
}

// ReadAt reads what is still buffered from the buffer (a follower being
// sent entries the leader has not synced yet, a header walk over the
// newest batches), the rest from the file.
func (a *appendFile) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) <= a.written.Load() {
		return a.File.ReadAt(p, off)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.written.Load()
	n := 0
	if off < w {
		k, err := a.File.ReadAt(p[:min(int64(len(p)), w-off)], off)
		if n = k; err != nil {
			return n, err
		}
	}
	var buf []byte
	if a.buf != nil {
		buf = *a.buf
	}
	// The file may have grown since the check above (a flush): then it
	// held everything.
	if start := off + int64(n) - w; n < len(p) && start >= 0 && start < int64(len(buf)) {
		n += copy(p[n:], buf[start:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Fd writes out the buffer: whoever wants the descriptor (sendfile,
// syncfs) wants the file's bytes.
func (a *appendFile) Fd() uintptr {
	a.Flush() // an error shows in the sendfile's short count or the sync
	return a.File.Fd()
}

// Sync writes out the buffer, then fdatasyncs.
func (a *appendFile) Sync() error {
	if err := a.Flush(); err != nil {
		return err
	}
	return a.File.Sync()
}

// Truncate cuts the file (and the buffer) to size bytes.
func (a *appendFile) Truncate(size int64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.written.Load()
	if a.buf != nil && size >= w {
		if keep := size - w; keep < int64(len(*a.buf)) {
			*a.buf = (*a.buf)[:keep]
		}
		if len(*a.buf) == 0 {
			a.releaseLocked()
		}
		return nil
	}
	a.releaseLocked()
	if err := a.File.Truncate(size); err != nil {
		return err
	}
	a.written.Store(size)
	a.broken = nil // the partial tail is gone
	return nil
}

// Size is the file's size with what is buffered.
func (a *appendFile) Size() (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, err := a.File.Size()
	if a.buf != nil {
		n += int64(len(*a.buf))
	}
	return n, err
}

// Close drops what is buffered: a log writes and syncs its data before an
// orderly close, and anything else left is what a crash would lose too.
func (a *appendFile) Close() error {
	a.mu.Lock()
	a.releaseLocked()
	a.mu.Unlock()
	return a.File.Close()
}
