package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
)

// The descriptor cache (log.max.open.files). A node keeps a File for every
// segment of every partition replica, but holds a descriptor only for the
// files in use lately: at most max of them, as pebble's and RocksDB's
// table caches do. A file is opened on use and the least recently used
// idle ones are closed to make room (a CLOCK approximation of LRU: one
// "used" bit per file, no list to move on every read). The bound holds
// whatever the partition count: an idle partition's active segment is
// closed like a sealed one and reopened (by name, O_APPEND, never
// O_CREATE or O_TRUNC again) at its next write or read. At 20,000
// partitions a node without it held a descriptor per partition and died of
// EMFILE (issue 27).
//
// Every use of the descriptor (a read, a write, an fdatasync, a sendfile
// through PinFd) holds a reference on the file for its duration; only a
// file with none is closed, so nothing in flight ever sees a closed or
// reused descriptor. A Slice being sent pins its file until Released
// (Slice.PinFd). Those pins, which last as long as a client takes to read
// a response, hold at most half of the descriptors: past that a Slice is
// sent from a copy (Bytes) instead. An open or a use of a file never
// fails for want of a place (a log would go offline): when every other
// descriptor is in use at that moment - more than half the bound in
// system calls at once - it opens past the bound for its duration.
//
// Durability: a file written through a descriptor since its last
// successful Sync is fdatasynced before that descriptor is closed. A
// writeback error is reported (once, by errseq) only to descriptors open
// when it happened, so closing a file with unsynced writes and reopening
// it could hide a lost write from the next fdatasync (PostgreSQL's
// "fsyncgate"). If that fdatasync fails the file stays open and the error
// is returned by its next Write, Sync or Truncate (sticky): the log fails
// as after any failed fsync. What a successful syncfs of the syncer
// covered counts as synced too (syncMarker), and clean idle files are
// closed first, so a node whose partitions outnumber the descriptors does
// not pay an fdatasync per reopen.
//
// Names: a file is reopened by the name it was opened with, which the log
// changes only through the same FS: Rename moves the names of the files
// it holds (a file renamed, or a file in a directory renamed), and a file
// removed, or replaced by a rename over it, while its File is still held
// (a reader of a segment retention deleted) is opened first and then kept
// open until Closed (pinned: it has no name to be reopened by). Such pins
// may take the cache past its bound for as long as they are held; so may
// a file whose eviction fdatasync failed.

// CachedFS returns fsys with at most max of its files' descriptors open at
// once (max <= 0: fsys itself). Files are opened through fsys and closed
// when idle; see above.
func CachedFS(fsys FS, max int) FS {
	if max <= 0 {
		return fsys
	}
	return &cacheFS{inner: fsys, c: &fdCache{max: max, byDir: map[string][]*cachedFile{}}}
}

type cacheFS struct {
	inner FS
	c     *fdCache
}

// fdCache is the bounded set of open descriptors.
type fdCache struct {
	max int

	mu   sync.Mutex
	open []*cachedFile // files holding a descriptor (each's slot is its index)
	held int           // descriptors held or reserved: len(open) + opens under way
	hand int           // the CLOCK hand into open
	pins int           // uses held by tryPinFd (sendfile), at most max/2

	pmu sync.Mutex // guards byDir and every file's dir, base
	// byDir: the live files by directory, for Rename and Remove. A slice
	// per directory, not a set: a partition's directory holds a few files
	// (a segment and its two indexes), and a map per partition was ~0.1
	// KiB more (issue 27).
	byDir map[string][]*cachedFile

	evictions atomic.Int64
	reopens   atomic.Int64
	// forced: descriptors taken past max because every open file was in
	// use (reserve with force): the documented moment the bound is passed.
	forced atomic.Int64
}

// cachedFile is a File whose descriptor comes and goes.
type cachedFile struct {
	c     *fdCache
	inner FS
	flag  int // for reopening: the open's flags less O_CREATE, O_EXCL, O_TRUNC
	perm  os.FileMode
	// users counts the uses in flight; -1 while the file is being
	// evicted or after Close. Only a file with none is evicted. (The
	// 4-byte fields sit in pairs: a word of padding each otherwise, and a
	// partition has a few files, issue 27.)
	users atomic.Int32

	dir, base string // current name; guarded by c.pmu

	mu   sync.Mutex  // held while the descriptor is opened or closed
	used atomic.Bool // the CLOCK bit: used since the hand passed
	// pinned: never evicted (its name is gone: removed or replaced);
	// guarded by c.mu.
	pinned bool
	closed bool                    // Close was called; guarded by mu
	f      atomic.Pointer[fileBox] // nil: no descriptor now
	slot   int                     // index in c.open while open; guarded by c.mu

	writes  atomic.Uint64 // writes so far
	synced  atomic.Uint64 // writes covered by the last successful Sync
	errMu   sync.Mutex
	syncErr error // sticky: an eviction's fdatasync failed
}

type fileBox struct{ f File }

func (fs *cacheFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	h := &cachedFile{c: fs.c, inner: fs.inner, flag: flag &^ (os.O_CREATE | os.O_EXCL | os.O_TRUNC), perm: perm}
	h.dir, h.base = filepath.Split(filepath.Clean(name))
	h.dir = filepath.Clean(h.dir)
	fs.c.reserve(true)
	f, err := fs.inner.OpenFile(name, flag, perm)
	if err != nil {
		fs.c.unreserve()
		return nil, err
	}
	h.f.Store(&fileBox{f})
	h.used.Store(true)
	fs.c.addOpen(h)
	fs.c.pmu.Lock()
	fs.c.addToDirLocked(h)
	fs.c.pmu.Unlock()
	return h, nil
}

// reserve takes a descriptor's place, closing idle files to make one;
// force takes it even past the bound when none is idle, else that is
// ErrOpenFileBudget.
func (c *fdCache) reserve(force bool) error {
	for {
		c.mu.Lock()
		if c.held < c.max {
			c.held++
			c.mu.Unlock()
			return nil
		}
		v := c.victimLocked()
		if v == nil {
			if force {
				c.held++
				c.forced.Add(1)
				c.mu.Unlock()
				return nil
			}
			c.mu.Unlock()
			return fmt.Errorf("%w: %d files open, all in use", ErrOpenFileBudget, c.max)
		}
		// v's place is ours if its close goes well.
		c.removeOpenLocked(v)
		c.mu.Unlock()
		if err := v.evict(); err != nil {
			// Kept open (its fdatasync failed): it keeps its place.
			c.mu.Lock()
			c.addOpenLocked(v)
			v.pinned = true
			c.mu.Unlock()
			v.users.Store(0)
			v.mu.Unlock()
			continue
		}
		c.evictions.Add(1)
		v.users.Store(0)
		v.mu.Unlock()
		return nil
	}
}

func (c *fdCache) unreserve() {
	c.mu.Lock()
	c.held--
	c.mu.Unlock()
}

func (c *fdCache) addOpen(h *cachedFile) {
	c.mu.Lock()
	c.addOpenLocked(h)
	c.mu.Unlock()
}

// addOpenLocked lists h as holding a descriptor whose place is reserved.
func (c *fdCache) addOpenLocked(h *cachedFile) {
	h.slot = len(c.open)
	c.open = append(c.open, h)
}

// removeOpenLocked unlists h; its place stays reserved (held) for the
// caller to use or give back.
func (c *fdCache) removeOpenLocked(h *cachedFile) {
	i := h.slot
	last := len(c.open) - 1
	c.open[i] = c.open[last]
	c.open[i].slot = i
	c.open[last] = nil
	c.open = c.open[:last]
	h.slot = -1
	if c.hand > len(c.open) {
		c.hand = 0
	}
}

// victimLocked finds an idle file to close (CLOCK: a file used since the
// hand last passed gets another round), and returns it with its mu held
// and users at -1, or nil if every file is in use. A clean file (nothing
// written since its last fsync) is preferred: closing a dirty one costs
// an fdatasync. The first dirty candidate is taken if no clean one turns
// up within dirtySkip more files.
func (c *fdCache) victimLocked() *cachedFile {
	const dirtySkip = 64
	var dirty *cachedFile
	left := 2*len(c.open) + 1
	for ; left > 0 && len(c.open) > 0; left-- {
		if c.hand >= len(c.open) {
			c.hand = 0
		}
		h := c.open[c.hand]
		c.hand++
		if h.pinned || h.users.Load() != 0 || h == dirty {
			continue
		}
		if h.used.Swap(false) {
			continue
		}
		if h.writes.Load() != h.synced.Load() {
			if dirty == nil {
				dirty, left = h, min(left, dirtySkip+1)
			}
			continue
		}
		if v := c.claimLocked(h); v != nil {
			return v
		}
	}
	if dirty != nil {
		return c.claimLocked(dirty)
	}
	return nil
}

// claimLocked takes idle h for eviction: its mu held and users -1, or nil
// if it is busy after all.
func (c *fdCache) claimLocked(h *cachedFile) *cachedFile {
	if !h.mu.TryLock() {
		return nil
	}
	if !h.users.CompareAndSwap(0, -1) {
		h.mu.Unlock()
		return nil
	}
	return h
}

// syncMarker records, for a file written through the cache, the writes
// made so far; the function it returns (nil for other files) marks them
// synced. The syncer calls it before a syncfs and the function after the
// syncfs succeeded: the file is then clean, and closing it needs no
// fdatasync of its own.
func syncMarker(f File) func() {
	if a, ok := f.(*appendFile); ok {
		f = a.File
	}
	h, ok := f.(*cachedFile)
	if !ok {
		return nil
	}
	w := h.writes.Load()
	return func() { h.markSynced(w) }
}

func (h *cachedFile) markSynced(w uint64) {
	for {
		s := h.synced.Load()
		if s >= w || h.synced.CompareAndSwap(s, w) {
			return
		}
	}
}

// evict closes h's descriptor (h.mu held, users -1), fdatasyncing first
// what was written through it since its last Sync. On a failed
// fdatasync the descriptor stays open and the error sticks.
func (h *cachedFile) evict() error {
	b := h.f.Load()
	if w := h.writes.Load(); w != h.synced.Load() {
		if err := b.f.Sync(); err != nil {
			h.setSyncErr(fmt.Errorf("storage: fdatasync before closing an idle file: %w", err))
			return err
		}
		h.synced.Store(w)
	}
	h.f.Store(nil)
	b.f.Close()
	return nil
}

func (h *cachedFile) setSyncErr(err error) {
	h.errMu.Lock()
	if h.syncErr == nil {
		h.syncErr = err
	}
	h.errMu.Unlock()
}

func (h *cachedFile) stickyErr() error {
	h.errMu.Lock()
	defer h.errMu.Unlock()
	return h.syncErr
}

// acquire returns the descriptor's File with a use counted (release gives
// it back), opening it again if it was closed.
func (h *cachedFile) acquire() (File, error) {
	for {
		n := h.users.Load()
		if n < 0 {
			break
		}
		if h.users.CompareAndSwap(n, n+1) {
			if b := h.f.Load(); b != nil {
				if !h.used.Load() {
					h.used.Store(true)
				}
				return b.f, nil
			}
			h.users.Add(-1)
			break
		}
	}
	return h.acquireSlow(true)
}

// acquireSlow opens the descriptor again (force: even past the bound).
func (h *cachedFile) acquireSlow(force bool) (File, error) {
	h.mu.Lock() // an eviction under way holds it
	defer h.mu.Unlock()
	if h.closed {
		return nil, os.ErrClosed
	}
	h.users.Add(1) // no eviction can start: they TryLock mu
	h.used.Store(true)
	if b := h.f.Load(); b != nil {
		return b.f, nil
	}
	if err := h.c.reserve(force); err != nil {
		h.users.Add(-1)
		return nil, &os.PathError{Op: "open", Path: h.Name(), Err: err}
	}
	f, err := h.inner.OpenFile(h.Name(), h.flag, h.perm)
	if err != nil {
		h.c.unreserve()
		h.users.Add(-1)
		return nil, err
	}
	h.c.reopens.Add(1)
	h.f.Store(&fileBox{f})
	h.c.addOpen(h)
	return f, nil
}

func (h *cachedFile) release() { h.users.Add(-1) }

// pin keeps h's descriptor open until Close: its name is about to go.
func (h *cachedFile) pin() {
	if _, err := h.acquireSlow(true); err != nil {
		return // closed meanwhile, or gone already: nothing to keep
	}
	h.c.mu.Lock()
	h.pinned = true
	h.c.mu.Unlock()
	h.release()
}

func (h *cachedFile) Name() string {
	h.c.pmu.Lock()
	defer h.c.pmu.Unlock()
	return filepath.Join(h.dir, h.base)
}

func (h *cachedFile) ReadAt(p []byte, off int64) (int, error) {
	f, err := h.acquire()
	if err != nil {
		return 0, err
	}
	defer h.release()
	return f.ReadAt(p, off)
}

func (h *cachedFile) Write(p []byte) (int, error) {
	if err := h.stickyErr(); err != nil {
		return 0, err
	}
	f, err := h.acquire()
	if err != nil {
		return 0, err
	}
	defer h.release()
	h.writes.Add(1)
	return f.Write(p)
}

func (h *cachedFile) Sync() error {
	if err := h.stickyErr(); err != nil {
		return err
	}
	f, err := h.acquire()
	if err != nil {
		return err
	}
	defer h.release()
	w := h.writes.Load()
	if err := f.Sync(); err != nil {
		return err
	}
	h.markSynced(w)
	return nil
}

func (h *cachedFile) Truncate(size int64) error {
	if err := h.stickyErr(); err != nil {
		return err
	}
	f, err := h.acquire()
	if err != nil {
		return err
	}
	defer h.release()
	h.writes.Add(1)
	return f.Truncate(size)
}

func (h *cachedFile) Size() (int64, error) {
	f, err := h.acquire()
	if err != nil {
		return 0, err
	}
	defer h.release()
	return f.Size()
}

// Fd is 0: a descriptor of a cached file may be closed at any time after
// the call. PinFd gives one that stays open until unpinned.
func (h *cachedFile) Fd() uintptr { return 0 }

// pinFd returns the descriptor, held open until unpin. try (sendfile):
// 0 when pins already hold half the bound, or no descriptor is idle to
// make room (the caller copies instead).
func (h *cachedFile) pinFd(try bool) (uintptr, func(), error) {
	var f File
	var err error
	if try {
		c := h.c
		c.mu.Lock()
		if c.pins >= c.max/2 {
			c.mu.Unlock()
			return 0, nil, nil
		}
		c.pins++
		c.mu.Unlock()
		unpinned := func() { c.mu.Lock(); c.pins--; c.mu.Unlock() }
		if f, err = h.acquireTry(); err != nil || f == nil {
			unpinned()
			return 0, nil, nil
		}
		fd := f.Fd()
		if fd == 0 {
			h.release()
			unpinned()
			return 0, nil, nil
		}
		return fd, func() { h.release(); unpinned() }, nil
	}
	if f, err = h.acquire(); err != nil {
		return 0, nil, err
	}
	return f.Fd(), h.release, nil
}

// acquireTry is acquire that does not go past the bound: nil (and no use
// counted) when no descriptor is idle.
func (h *cachedFile) acquireTry() (File, error) {
	for {
		n := h.users.Load()
		if n < 0 {
			break
		}
		if h.users.CompareAndSwap(n, n+1) {
			if b := h.f.Load(); b != nil {
				h.used.Store(true)
				return b.f, nil
			}
			h.users.Add(-1)
			break
		}
	}
	f, err := h.acquireSlow(false)
	if errors.Is(err, ErrOpenFileBudget) {
		return nil, nil
	}
	return f, err
}

func (h *cachedFile) DirectIO() bool {
	f, err := h.acquire()
	if err != nil {
		return false
	}
	defer h.release()
	dw, ok := f.(directWriter)
	return ok && dw.DirectIO()
}

func (h *cachedFile) WriteDirect(p []byte, off int64) (int, error) {
	if err := h.stickyErr(); err != nil {
		return 0, err
	}
	f, err := h.acquire()
	if err != nil {
		return 0, err
	}
	defer h.release()
	dw, ok := f.(directWriter)
	if !ok {
		return 0, errDirectUnsupported
	}
	h.writes.Add(1)
	return dw.WriteDirect(p, off)
}

// Close closes the descriptor if open and forgets the file; idempotent.
func (h *cachedFile) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	var err error
	if b := h.f.Load(); b != nil {
		h.f.Store(nil)
		err = b.f.Close()
		h.c.mu.Lock()
		h.c.removeOpenLocked(h)
		h.c.held--
		h.c.mu.Unlock()
	}
	h.users.Store(-1)
	h.mu.Unlock()
	h.c.pmu.Lock()
	h.c.removeFromDirLocked(h)
	h.c.pmu.Unlock()
	return err
}

// addToDirLocked lists h under its directory (under pmu).
func (c *fdCache) addToDirLocked(h *cachedFile) {
	c.byDir[h.dir] = append(c.byDir[h.dir], h)
}

// removeFromDirLocked takes h off its directory's list (under pmu). The
// list stays in the order the files were opened: a log closes and
// retention removes its oldest segments first, found at the front.
func (c *fdCache) removeFromDirLocked(h *cachedFile) {
	fs := c.byDir[h.dir]
	i := slices.Index(fs, h)
	if i < 0 {
		return
	}
	if fs = slices.Delete(fs, i, i+1); len(fs) == 0 {
		delete(c.byDir, h.dir)
	} else {
		c.byDir[h.dir] = fs
	}
}

// filesAt returns the live files named name, and those directly in name
// if it is a directory.
func (c *fdCache) filesAt(name string) []*cachedFile {
	name = filepath.Clean(name)
	dir, base := filepath.Split(name)
	dir = filepath.Clean(dir)
	c.pmu.Lock()
	defer c.pmu.Unlock()
	var out []*cachedFile
	for _, h := range c.byDir[dir] {
		if h.base == base {
			out = append(out, h)
		}
	}
	out = append(out, c.byDir[name]...)
	return out
}

func (fs *cacheFS) Remove(name string) error {
	for _, h := range fs.c.filesAt(name) {
		h.pin()
	}
	return fs.inner.Remove(name)
}

func (fs *cacheFS) RemoveAll(dir string) error {
	// Files directly in dir: the data layout has no deeper ones that
	// stay open (a partition's files are in its directory).
	for _, h := range fs.c.filesAt(dir) {
		h.pin()
	}
	return fs.inner.RemoveAll(dir)
}

func (fs *cacheFS) Rename(oldname, newname string) error {
	// A file renamed over keeps its descriptor: it has no name left.
	for _, h := range fs.c.filesAt(newname) {
		if h.Name() == filepath.Clean(newname) {
			h.pin()
		}
	}
	if err := fs.inner.Rename(oldname, newname); err != nil {
		return err
	}
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	c := fs.c
	c.pmu.Lock()
	defer c.pmu.Unlock()
	od, ob := filepath.Split(oldname)
	od = filepath.Clean(od)
	nd, nb := filepath.Split(newname)
	nd = filepath.Clean(nd)
	move := func(h *cachedFile, dir, base string) {
		c.removeFromDirLocked(h)
		h.dir, h.base = dir, base
		c.addToDirLocked(h)
	}
	var files, inDir []*cachedFile
	for _, h := range c.byDir[od] {
		if h.base == ob {
			files = append(files, h)
		}
	}
	inDir = append(inDir, c.byDir[oldname]...)
	for _, h := range files {
		move(h, nd, nb)
	}
	for _, h := range inDir {
		move(h, newname, h.base)
	}
	return nil
}

func (fs *cacheFS) MkdirAll(dir string, perm os.FileMode) error { return fs.inner.MkdirAll(dir, perm) }
func (fs *cacheFS) ReadDir(dir string) ([]string, error)        { return fs.inner.ReadDir(dir) }

// SyncDir opens the directory outside the budget for the fsync's moment,
// as every filesystem's does.
func (fs *cacheFS) SyncDir(dir string) error { return fs.inner.SyncDir(dir) }

// fdPinner is a File whose descriptor can be closed behind its back unless
// pinned.
type fdPinner interface {
	pinFd(try bool) (fd uintptr, unpin func(), err error)
}

// PinFd returns f's descriptor, held open until unpin is called (0 and a
// no-op unpin for a file without one). Whoever uses a descriptor after
// the call that returned it (syncfs, fstat) pins it: a cached file's
// descriptor may otherwise be closed and its number reused.
func PinFd(f File) (fd uintptr, unpin func(), err error) {
	return pinFd(f, false)
}

// tryPinFd is PinFd for sendfile, which can do without: 0 (and no error)
// when the cache's pins hold half its descriptors already.
func tryPinFd(f File) (fd uintptr, unpin func(), err error) {
	return pinFd(f, true)
}

func pinFd(f File, try bool) (fd uintptr, unpin func(), err error) {
	if p, ok := f.(fdPinner); ok {
		fd, unpin, err = p.pinFd(try)
		if unpin == nil {
			unpin = func() {}
		}
		return fd, unpin, err
	}
	return f.Fd(), func() {}, nil
}

// FDCacheStats reports a CachedFS's descriptors held, its bound, and its
// evictions (idle descriptors closed) and reopens so far.
func FDCacheStats(fsys FS) (held, max int, evictions, reopens int64, ok bool) {
	c, isCache := fsys.(*cacheFS)
	if !isCache {
		return 0, 0, 0, 0, false
	}
	c.c.mu.Lock()
	held = c.c.held
	c.c.mu.Unlock()
	return held, c.c.max, c.c.evictions.Load(), c.c.reopens.Load(), true
}

// FDCacheForcedOpens is how many descriptors a descriptor cache (CachedFS)
// took past its bound so far because every open file was in use at that
// moment; 0 for another FS. The files held exceed the bound by at most
// this many.
func FDCacheForcedOpens(fsys FS) int64 {
	if c, ok := fsys.(*cacheFS); ok {
		return c.c.forced.Load()
	}
	return 0
}
