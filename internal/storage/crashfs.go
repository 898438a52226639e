package storage

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// CrashFS is an in-memory FS for tests that models what survives a power
// loss, strictly: file contents survive only up to the last Sync of that
// file, and creations, renames and removals only once the parent directory
// was synced (SyncDir). Directories are entries of their parent like files:
// a directory made by MkdirAll (and all below it) is gone after a crash
// unless its parent was synced since; a directory renamed is back at its
// old name, and one removed by RemoveAll is back, until the parent's sync.
// Crash drops everything else; CrashTorn additionally keeps a random prefix
// of each file's unsynced appended bytes (a torn write), and a directory
// that RemoveAll removed without its parent's sync comes back with only
// some of its entries (the unlinks inside it reached the disk in part).
//
// Errors can be injected per operation and path substring, and a capacity
// makes writes fail with ENOSPC once the total size would exceed it.
type CrashFS struct {
	mu       sync.Mutex
	rng      *rand.Rand
	roots    map[string]*memDir // "/" and "." (relative paths): always there, durably
	gen      int                // bumped by a crash; older handles are dead
	capacity int64
	inject   []injected
	delay    time.Duration // added to every Sync, to model device latency
	reads    int64         // ReadAt calls, to prove lookups use the index
	// Power cut at a chosen point: ops counts mutating operations;
	// crashIn > 0 crashes the FS when that many more have been asked for
	// (the last one does not happen), after which it is down - every
	// operation fails - until Reboot.
	ops       int64
	crashIn   int64
	crashTorn bool // the power cut CrashAfter chose is CrashTorn's
	down      bool
	onSync    func(path string)
	delayFor  map[string]time.Duration // extra Sync delay by path substring
	direct    bool                     // files accept WriteDirect (SetDirectIO)
	directs   int64                    // WriteDirect calls that wrote
	// pending: directory changes not yet made durable by their
	// directory's SyncDir, in the order they were made (SetDirPrefix).
	pending   []dirOp
	opGroup   int
	dirPrefix bool
	dirRng    *rand.Rand // its own source: fs.rng's draws (torn lengths) stay what they were per seed
	syncfs    bool       // SetSyncfs
}

// SetSyncfs gives the files a filesystem that takes syncfs(2) (as an OS
// filesystem on Linux >= 5.8): a Syncer then covers the logs of one cycle
// with one call that makes every file's content and every directory's
// entries durable, as it does on the OS. Call before opening logs.
func (fs *CrashFS) SetSyncfs(on bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.syncfs = on
}

// syncAllLocked is syncfs(2): everything reachable durable.
func (fs *CrashFS) syncAllLocked() {
	var syncTree func(d *memDir)
	syncTree = func(d *memDir) {
		d.dur = maps.Clone(d.cur)
		for _, e := range d.cur {
			if e.f != nil {
				e.f.synced = append(e.f.synced[:0:0], e.f.data...)
				e.f.overwritten = false
			} else if e.d != nil {
				syncTree(e.d)
			}
		}
	}
	for _, r := range fs.roots {
		syncTree(r)
	}
	fs.pending = nil
}

// dirOp is one change of a directory entry: name set to e, or removed.
// The two halves of a rename share a group and persist together.
type dirOp struct {
	d       *memDir
	name    string
	e       memEntry
	present bool
	group   int
}

// SetDirPrefix makes CrashTorn (and CrashTornAfter) also keep a random
// prefix, in the order they were made, of the directory changes that no
// SyncDir made durable yet: a journaling filesystem (ext4) commits them in
// order, and a power cut can fall after any commit. A rename's two entries
// persist together. Off, every unsynced directory change is lost.
func (fs *CrashFS) SetDirPrefix(on bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.dirPrefix = on
}

// noteOp records a directory change (fs.mu held).
func (fs *CrashFS) noteOp(d *memDir, name string, e memEntry, present bool, newGroup bool) {
	if newGroup {
		fs.opGroup++
	}
	fs.pending = append(fs.pending, dirOp{d: d, name: name, e: e, present: present, group: fs.opGroup})
}

// applyPrefixLocked makes a random prefix of the pending directory changes
// durable (a torn crash with SetDirPrefix).
func (fs *CrashFS) applyPrefixLocked() {
	k := fs.dirRng.Intn(len(fs.pending) + 1)
	for k > 0 && k < len(fs.pending) && fs.pending[k].group == fs.pending[k-1].group {
		k++
	}
	for _, op := range fs.pending[:k] {
		if op.present {
			op.d.dur[op.name] = op.e
		} else {
			delete(op.d.dur, op.name)
		}
	}
}

// SetDirectIO makes the files accept direct writes (log.direct.io), with
// the kernel's alignment rules checked strictly: a misaligned offset,
// length or buffer is an error, not a fallback. Direct writes are
// appends like any other for the crash model: lost unless fsynced (the
// device's volatile cache), torn by CrashTorn. Off (the default), a
// direct write is refused as unsupported, like tmpfs does.
func (fs *CrashFS) SetDirectIO(on bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.direct = on
}

// DirectWrites is the number of direct writes that wrote something.
func (fs *CrashFS) DirectWrites() int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.directs
}

// CrashAfter arranges a power cut (Crash) in place of the n-th mutating
// operation from now (create, write, sync, truncate, remove, rename, dir
// sync); the FS is then down until Reboot.
func (fs *CrashFS) CrashAfter(n int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.crashIn, fs.crashTorn = n, false
}

// CrashTornAfter is CrashAfter with a torn power cut (CrashTorn).
func (fs *CrashFS) CrashTornAfter(n int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.crashIn, fs.crashTorn = n, true
}

// Reboot brings a crashed FS back up (the machine restarted).
func (fs *CrashFS) Reboot() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.down, fs.crashIn = false, 0
}

// Down reports whether a power cut chosen by CrashAfter happened (the FS
// fails every operation until Reboot).
func (fs *CrashFS) Down() bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.down
}

// Ops is the number of mutating operations asked for so far.
func (fs *CrashFS) Ops() int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.ops
}

// tick accounts for a mutating operation (fs.mu held): it fails if the FS
// is down or this is the operation CrashAfter chose, which crashes it.
func (fs *CrashFS) tick(op, path string) error {
	if fs.down {
		return &os.PathError{Op: op, Path: path, Err: errCrashed}
	}
	fs.ops++
	if fs.crashIn > 0 {
		if fs.crashIn--; fs.crashIn == 0 {
			fs.crashLocked(fs.crashTorn)
			fs.down = true
			return &os.PathError{Op: op, Path: path, Err: errCrashed}
		}
	}
	return nil
}

// SetSyncDelayFor makes Sync of every file whose path contains pathSubstr
// take d more: to let one file's fsync finish after another's, and so test
// that the code waits for the order it needs rather than getting it by luck.
func (fs *CrashFS) SetSyncDelayFor(pathSubstr string, d time.Duration) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.delayFor == nil {
		fs.delayFor = map[string]time.Duration{}
	}
	fs.delayFor[pathSubstr] = d
}

// OnSync calls fn (outside the FS's lock) after every successful Sync and
// SyncDir, with the path: a test can take a DurableCopy at each step
// where durable state changed, to check recovery from every one of them.
func (fs *CrashFS) OnSync(fn func(path string)) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.onSync = fn
}

func (fs *CrashFS) synced(path string) {
	fs.mu.Lock()
	fn := fs.onSync
	fs.mu.Unlock()
	if fn != nil {
		fn(path)
	}
}

// DurableCopy returns a new CrashFS holding what would survive a power loss
// now, leaving fs untouched.
func (fs *CrashFS) DurableCopy() *CrashFS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := NewCrashFS(1)
	out.roots = fs.durableTree(false)
	return out
}

// Reads returns the number of ReadAt calls so far.
func (fs *CrashFS) Reads() int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.reads
}

type memNode struct {
	data   []byte // what reads see
	synced []byte // content as of the last Sync
	// overwritten: WriteAt changed bytes in place since the last Sync (a
	// torn crash then keeps a prefix of the change; other files keep
	// their draws of the random source as before WriteAt existed).
	overwritten bool
}

// memDir is a directory (an inode): its entries now, and as of its last
// SyncDir, which is what a crash leaves of it if it is itself still
// reachable through durable entries from a root.
type memDir struct {
	cur, dur map[string]memEntry
	// removing: RemoveAll unlinked everything in it (CrashTorn keeps a
	// random part of the durable entries of such a directory).
	removing bool
}

// memEntry is a directory entry: a file or a directory.
type memEntry struct {
	f *memNode
	d *memDir
}

func newMemDir() *memDir {
	return &memDir{cur: map[string]memEntry{}, dur: map[string]memEntry{}}
}

// split returns the root and the components of a cleaned path.
func splitPath(name string) (root string, parts []string) {
	name = filepath.Clean(name)
	if filepath.IsAbs(name) {
		root, name = "/", strings.TrimLeft(name, "/")
	} else {
		root = "."
	}
	if name == "" || name == "." {
		return root, nil
	}
	return root, strings.Split(name, string(filepath.Separator))
}

// lookupDir returns the directory at path now, or nil (fs.mu held).
func (fs *CrashFS) lookupDir(path string) *memDir {
	root, parts := splitPath(path)
	d := fs.roots[root]
	for _, p := range parts {
		e := d.cur[p]
		if e.d == nil {
			return nil
		}
		d = e.d
	}
	return d
}

// parentOf returns the directory holding name's entry now (nil if none)
// and the entry's name in it (fs.mu held).
func (fs *CrashFS) parentOf(name string) (*memDir, string) {
	root, parts := splitPath(name)
	if len(parts) == 0 {
		return nil, ""
	}
	d := fs.roots[root]
	for _, p := range parts[:len(parts)-1] {
		e := d.cur[p]
		if e.d == nil {
			return nil, ""
		}
		d = e.d
	}
	return d, parts[len(parts)-1]
}

// walk calls fn for every file reachable now, with its path.
func (fs *CrashFS) walk(fn func(path string, n *memNode)) {
	var rec func(path string, d *memDir)
	rec = func(path string, d *memDir) {
		for name, e := range d.cur {
			p := filepath.Join(path, name)
			if e.f != nil {
				fn(p, e.f)
			} else {
				rec(p, e.d)
			}
		}
	}
	for root, d := range fs.roots {
		rec(root, d)
	}
}

// durableTree builds the namespace a power loss leaves: from each root,
// the entries as of each directory's last sync, and each file's content as
// of its last Sync (torn: plus a random part of what was appended since).
// fs is not changed but for its rng (fs.mu held).
func (fs *CrashFS) durableTree(torn bool) map[string]*memDir {
	// The durable files in path order: a deterministic use of the rng.
	type pathNode struct {
		path string
		n    *memNode
	}
	var files []pathNode
	seen := map[*memDir]bool{}
	var collect func(path string, d *memDir)
	collect = func(path string, d *memDir) {
		if seen[d] {
			return
		}
		seen[d] = true
		for name, e := range d.dur {
			p := filepath.Join(path, name)
			if e.f != nil {
				files = append(files, pathNode{p, e.f})
			} else {
				collect(p, e.d)
			}
		}
	}
	roots := slices.Sorted(maps.Keys(fs.roots))
	for _, r := range roots {
		collect(r, fs.roots[r])
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	nodes := map[*memNode]*memNode{}
	for _, pn := range files {
		if nodes[pn.n] == nil {
			nodes[pn.n] = fs.survivor(pn.n, torn)
		}
	}
	dirs := map[*memDir]*memDir{}
	var build func(d *memDir) *memDir
	build = func(d *memDir) *memDir {
		if nd := dirs[d]; nd != nil {
			return nd
		}
		nd := newMemDir()
		dirs[d] = nd
		for _, name := range slices.Sorted(maps.Keys(d.dur)) {
			e := d.dur[name]
			if torn && d.removing && fs.rng.Intn(2) == 0 {
				continue // its unlink reached the disk
			}
			var ne memEntry
			if e.f != nil {
				ne.f = nodes[e.f]
			} else {
				ne.d = build(e.d)
			}
			nd.cur[name], nd.dur[name] = ne, ne
		}
		return nd
	}
	out := map[string]*memDir{}
	for _, r := range roots {
		out[r] = build(fs.roots[r])
	}
	return out
}

// survivor is what a crash leaves of a file (fs.mu held).
func (fs *CrashFS) survivor(n *memNode, torn bool) *memNode {
	data := append([]byte(nil), n.synced...)
	if torn && n.overwritten && !(len(n.data) >= len(n.synced) && string(n.data[:len(n.synced)]) == string(n.synced)) {
		// Overwritten in place since the last sync (WriteAt): the bytes
		// from the first changed one reached the disk up to a random point.
		d := 0
		for d < len(n.data) && d < len(n.synced) && n.data[d] == n.synced[d] {
			d++
		}
		k := d + fs.rng.Intn(len(n.data)-d+1)
		if k > len(data) {
			data = append(data, make([]byte, k-len(data))...)
		}
		copy(data[d:k], n.data[d:k])
		return &memNode{data: data, synced: append([]byte(nil), data...)}
	}
	if torn && len(n.data) > len(n.synced) && string(n.data[:len(n.synced)]) == string(n.synced) {
		extra := n.data[len(n.synced):]
		k := fs.rng.Intn(len(extra) + 1)
		data = append(data, extra[:k]...)
		if k > 0 && fs.rng.Intn(2) == 0 {
			data[len(data)-1] ^= byte(1 + fs.rng.Intn(255))
		}
		if fs.direct && k > 0 && fs.rng.Intn(3) == 0 {
			// Writes reach the device out of order (direct writes,
			// writeback): a block within the kept bytes was never
			// written and reads as zeros.
			first := int64(len(n.synced))
			b := (first + fs.rng.Int63n(int64(k))) / directBlock * directBlock
			for i := max(b, first); i < min(b+directBlock, int64(len(data))); i++ {
				data[i] = 0
			}
		}
	}
	return &memNode{data: data, synced: append([]byte(nil), data...)}
}

type injected struct {
	op, path string
	err      error
	exact    bool // path is the whole path, not a substring
}

// NewCrashFS returns an empty CrashFS; seed drives torn-write lengths.
func NewCrashFS(seed int64) *CrashFS {
	return &CrashFS{
		rng:      rand.New(rand.NewSource(seed)),
		dirRng:   rand.New(rand.NewSource(seed*7877 + 1)),
		roots:    map[string]*memDir{"/": newMemDir(), ".": newMemDir()},
		capacity: -1,
	}
}

// Ops accepted by InjectError.
const (
	OpOpen     = "open"
	OpWrite    = "write"
	OpRead     = "read"
	OpSync     = "sync"
	OpTruncate = "truncate"
	OpRemove   = "remove"
	OpRename   = "rename"
	OpSyncDir  = "syncdir"
	// OpMkdir fails MkdirAll when it would create a directory whose path
	// matches (one that exists is not made again, so not matched).
	OpMkdir     = "mkdir"
	OpRemoveAll = "removeall"
	OpReadDir   = "readdir"
)

// InjectError makes op on every path containing pathSubstr fail with err
// until ClearErrors. For a rename the old name is matched.
func (fs *CrashFS) InjectError(op, pathSubstr string, err error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.inject = append(fs.inject, injected{op: op, path: pathSubstr, err: err})
}

// InjectErrorPath is InjectError for exactly one path (a directory whose
// name is a prefix of every path below it: its own SyncDir only).
func (fs *CrashFS) InjectErrorPath(op, path string, err error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.inject = append(fs.inject, injected{op: op, path: filepath.Clean(path), err: err, exact: true})
}

// ClearErrors removes all injected errors and the capacity limit.
func (fs *CrashFS) ClearErrors() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.inject = nil
	fs.capacity = -1
}

// SetSyncDelay makes every file Sync take d (group commit tests).
func (fs *CrashFS) SetSyncDelay(d time.Duration) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.delay = d
}

// SetCapacity limits the total bytes of all files (<0: unlimited).
func (fs *CrashFS) SetCapacity(bytes int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.capacity = bytes
}

func (fs *CrashFS) injectedErr(op, path string) error {
	for _, in := range fs.inject {
		if in.op == op && (in.path == path || !in.exact && strings.Contains(path, in.path)) {
			return &os.PathError{Op: op, Path: path, Err: in.err}
		}
	}
	return nil
}

// Crash simulates a power loss: unsynced data and namespace changes vanish
// and every open handle becomes unusable.
func (fs *CrashFS) Crash() { fs.crash(false) }

// PowerCut is Crash, and the FS then stays down (every operation fails)
// until Reboot: what a process whose machine lost power does next - its
// Close, say - reaches no disk.
func (fs *CrashFS) PowerCut() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.crashLocked(false)
	fs.down = true
}

// CrashTorn is Crash, but each file keeps a random prefix of the bytes
// appended after its last Sync, the last of which may be garbage; with
// SetDirectIO, one block of that prefix may also read as zeros (written
// out of order).
func (fs *CrashFS) CrashTorn() { fs.crash(true) }

func (fs *CrashFS) crash(torn bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.crashLocked(torn)
}

func (fs *CrashFS) crashLocked(torn bool) {
	if torn && fs.dirPrefix && len(fs.pending) > 0 {
		fs.applyPrefixLocked()
	}
	fs.pending = nil
	fs.gen++
	fs.roots = fs.durableTree(torn)
}

func (fs *CrashFS) used() int64 {
	var n int64
	fs.walk(func(_ string, f *memNode) { n += int64(len(f.data)) })
	return n
}

// OpenFile supports O_RDONLY, O_RDWR, O_WRONLY, O_CREATE, O_EXCL, O_TRUNC and
// O_APPEND; writes always append.
func (fs *CrashFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	name = filepath.Clean(name)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.injectedErr(OpOpen, name); err != nil {
		return nil, err
	}
	if fs.down {
		return nil, &os.PathError{Op: "open", Path: name, Err: errCrashed}
	}
	if flag&(os.O_CREATE|os.O_TRUNC) != 0 {
		if err := fs.tick("open", name); err != nil {
			return nil, err
		}
	}
	dir, base := fs.parentOf(name)
	if dir == nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
	}
	e, ok := dir.cur[base]
	if e.d != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	}
	n := e.f
	switch {
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrExist}
	case !ok && flag&os.O_CREATE == 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
	case !ok:
		n = &memNode{}
		dir.cur[base] = memEntry{f: n}
		fs.noteOp(dir, base, dir.cur[base], true, true)
	}
	if flag&os.O_TRUNC != 0 {
		n.data = nil
	}
	return &memFile{fs: fs, node: n, name: name, gen: fs.gen, writable: flag&(os.O_RDWR|os.O_WRONLY) != 0}, nil
}

// Remove removes a file or an empty directory (open handles keep working,
// as on Linux).
func (fs *CrashFS) Remove(name string) error {
	name = filepath.Clean(name)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.injectedErr(OpRemove, name); err != nil {
		return err
	}
	if err := fs.tick(OpRemove, name); err != nil {
		return err
	}
	dir, base := fs.parentOf(name)
	if dir == nil {
		return &os.PathError{Op: "remove", Path: name, Err: os.ErrNotExist}
	}
	e, ok := dir.cur[base]
	switch {
	case !ok:
		return &os.PathError{Op: "remove", Path: name, Err: os.ErrNotExist}
	case e.d != nil && len(e.d.cur) > 0:
		return &os.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
	}
	delete(dir.cur, base)
	fs.noteOp(dir, base, memEntry{}, false, true)
	return nil
}

// Rename moves a file or a directory (with everything below it). The old
// name stays durable, and the new one is not, until each parent's SyncDir.
func (fs *CrashFS) Rename(oldname, newname string) error {
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.injectedErr(OpRename, oldname); err != nil {
		return err
	}
	if err := fs.tick(OpRename, oldname); err != nil {
		return err
	}
	from, fromBase := fs.parentOf(oldname)
	if from == nil {
		return &os.PathError{Op: "rename", Path: oldname, Err: os.ErrNotExist}
	}
	e, ok := from.cur[fromBase]
	if !ok {
		return &os.PathError{Op: "rename", Path: oldname, Err: os.ErrNotExist}
	}
	to, toBase := fs.parentOf(newname)
	if to == nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: os.ErrNotExist}
	}
	if e.d != nil && (newname == oldname || strings.HasPrefix(newname, oldname+string(filepath.Separator))) {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.EINVAL}
	}
	if old, ok := to.cur[toBase]; ok {
		switch {
		case e.f != nil && old.d != nil:
			return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.EISDIR}
		case e.d != nil && old.f != nil:
			return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.ENOTDIR}
		case old.d != nil && len(old.d.cur) > 0:
			return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.ENOTEMPTY}
		}
	}
	delete(from.cur, fromBase)
	to.cur[toBase] = e
	fs.noteOp(to, toBase, e, true, true)
	fs.noteOp(from, fromBase, memEntry{}, false, false)
	return nil
}

// MkdirAll creates dir and any missing parents; each new directory's name
// is durable only once its parent is synced (SyncDir).
func (fs *CrashFS) MkdirAll(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.down {
		return &os.PathError{Op: "mkdir", Path: dir, Err: errCrashed}
	}
	root, parts := splitPath(dir)
	d := fs.roots[root]
	for i, p := range parts {
		e, ok := d.cur[p]
		switch {
		case ok && e.f != nil:
			return &os.PathError{Op: "mkdir", Path: filepath.Join(append([]string{root}, parts[:i+1]...)...), Err: syscall.ENOTDIR}
		case !ok:
			made := filepath.Join(append([]string{root}, parts[:i+1]...)...)
			if err := fs.injectedErr(OpMkdir, made); err != nil {
				return err
			}
			if err := fs.tick(OpMkdir, made); err != nil {
				return err
			}
			e = memEntry{d: newMemDir()}
			d.cur[p] = e
			fs.noteOp(d, p, e, true, true)
		}
		d = e.d
	}
	return nil
}

func (fs *CrashFS) ReadDir(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.injectedErr(OpReadDir, dir); err != nil {
		return nil, err
	}
	if fs.down {
		return nil, &os.PathError{Op: "readdir", Path: dir, Err: errCrashed}
	}
	d := fs.lookupDir(dir)
	if d == nil {
		return nil, &os.PathError{Op: "readdir", Path: dir, Err: os.ErrNotExist}
	}
	return slices.Sorted(maps.Keys(d.cur)), nil
}

// RemoveAll removes dir and everything below it. Until the parent's
// SyncDir a crash brings the directory back: whole after Crash, with part
// of its entries after CrashTorn.
func (fs *CrashFS) RemoveAll(dir string) error {
	dir = filepath.Clean(dir)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.injectedErr(OpRemoveAll, dir); err != nil {
		return err
	}
	if fs.down {
		return &os.PathError{Op: "removeall", Path: dir, Err: errCrashed}
	}
	parent, base := fs.parentOf(dir)
	if parent == nil {
		return nil
	}
	e, ok := parent.cur[base]
	if !ok {
		return nil
	}
	if err := fs.tick("removeall", dir); err != nil {
		return err
	}
	delete(parent.cur, base)
	fs.noteOp(parent, base, memEntry{}, false, true)
	if e.d != nil {
		var unlink func(d *memDir)
		unlink = func(d *memDir) {
			d.removing = true
			for name, e := range d.cur {
				if e.d != nil {
					unlink(e.d)
				}
				delete(d.cur, name)
			}
		}
		unlink(e.d)
	}
	return nil
}

// SyncDir makes the current entries of dir durable.
func (fs *CrashFS) SyncDir(dir string) error {
	dir = filepath.Clean(dir)
	fs.mu.Lock()
	if err := fs.injectedErr(OpSyncDir, dir); err != nil {
		fs.mu.Unlock()
		return err
	}
	if err := fs.tick(OpSyncDir, dir); err != nil {
		fs.mu.Unlock()
		return err
	}
	d := fs.lookupDir(dir)
	if d == nil {
		fs.mu.Unlock()
		return &os.PathError{Op: "open", Path: dir, Err: os.ErrNotExist}
	}
	d.dur = make(map[string]memEntry, len(d.cur))
	for name, e := range d.cur {
		d.dur[name] = e
	}
	fs.pending = slices.DeleteFunc(fs.pending, func(op dirOp) bool { return op.d == d })
	fs.mu.Unlock()
	fs.synced(dir)
	return nil
}

// Sizes returns the current size of every file (for tests).
func (fs *CrashFS) Sizes() map[string]int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	m := map[string]int{}
	fs.walk(func(path string, n *memNode) { m[path] = len(n.data) })
	return m
}

// WriteFileForTest replaces a file's content, durably, creating its
// directory durably if need be (for damage tests).
func (fs *CrashFS) WriteFileForTest(name string, data []byte) {
	name = filepath.Clean(name)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	d := fs.mkdirDurableLocked(filepath.Dir(name))
	n := &memNode{data: append([]byte(nil), data...), synced: append([]byte(nil), data...)}
	e := memEntry{f: n}
	d.cur[filepath.Base(name)], d.dur[filepath.Base(name)] = e, e
}

// MkdirAllForTest creates dir and its parents durably, as if they were
// there before the test (a data directory the operator made): a crash
// keeps them, and what is in them follows the usual rules.
func (fs *CrashFS) MkdirAllForTest(dir string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.mkdirDurableLocked(dir)
}

func (fs *CrashFS) mkdirDurableLocked(dir string) *memDir {
	root, parts := splitPath(dir)
	d := fs.roots[root]
	for _, p := range parts {
		e, ok := d.cur[p]
		if !ok || e.d == nil {
			e = memEntry{d: newMemDir()}
			d.cur[p] = e
		}
		d.dur[p] = e
		d = e.d
	}
	return d
}

// ReadFileForTest returns a file's current content.
func (fs *CrashFS) ReadFileForTest(name string) ([]byte, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base := fs.parentOf(name)
	if dir == nil || dir.cur[base].f == nil {
		return nil, false
	}
	n := dir.cur[base].f
	return append([]byte(nil), n.data...), true
}

var errCrashed = errors.New("crashfs: handle from before a crash")

type memFile struct {
	fs       *CrashFS
	node     *memNode
	name     string
	gen      int
	writable bool
	closed   bool
}

func (f *memFile) check(op string) error {
	if f.closed {
		return &os.PathError{Op: op, Path: f.name, Err: os.ErrClosed}
	}
	if f.gen != f.fs.gen || f.fs.down {
		return &os.PathError{Op: op, Path: f.name, Err: errCrashed}
	}
	if err := f.fs.injectedErr(op, f.name); err != nil {
		return err
	}
	switch op {
	case OpWrite, OpSync, OpTruncate:
		return f.fs.tick(op, f.name)
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.fs.reads++
	if err := f.check(OpRead); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("crashfs: negative offset")
	}
	if off >= int64(len(f.node.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.node.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// writeCheckLocked is what a write or pwrite checks first: the fault
// injected at this operation, and a file opened for writing.
func (f *memFile) writeCheckLocked() error {
	if err := f.check(OpWrite); err != nil {
		return err
	}
	if !f.writable {
		return &os.PathError{Op: "write", Path: f.name, Err: os.ErrPermission}
	}
	return nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.writeCheckLocked(); err != nil {
		return 0, err
	}
	if f.fs.capacity >= 0 {
		room := max(f.fs.capacity-f.fs.used(), 0)
		if int64(len(p)) > room {
			// A partial write, then ENOSPC, like a real full disk.
			f.node.data = append(f.node.data, p[:room]...)
			return int(room), &os.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
		}
	}
	f.node.data = append(f.node.data, p...)
	return len(p), nil
}

// WriteAt writes p at off (pwrite(2)): over the file's bytes or past its
// end (a gap reads as zeros). The data journal's ring files and its
// replay into segment files use it; the logs' own writes append.
func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.writeCheckLocked(); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: os.ErrInvalid}
	}
	if end := off + int64(len(p)); end > int64(len(f.node.data)) {
		if grow := end - int64(len(f.node.data)); f.fs.capacity >= 0 && grow > max(f.fs.capacity-f.fs.used(), 0) {
			return 0, &os.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
		}
		f.node.data = append(f.node.data, make([]byte, end-int64(len(f.node.data)))...)
	}
	copy(f.node.data[off:], p)
	f.node.overwritten = true
	return len(p), nil
}

func (f *memFile) DirectIO() bool {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.fs.direct
}

func (f *memFile) WriteDirect(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	direct := f.fs.direct
	size := int64(len(f.node.data))
	f.fs.mu.Unlock()
	if !direct {
		return 0, fmt.Errorf("%w: %s: crashfs: %w", errDirectUnsupported, f.name, syscall.EINVAL)
	}
	if off%directBlock != 0 || len(p)%directBlock != 0 || len(p) == 0 || uintptr(unsafe.Pointer(&p[0]))%directBlock != 0 {
		return 0, fmt.Errorf("crashfs: misaligned direct write of %d bytes at %d to %s", len(p), off, f.name)
	}
	if off != size {
		return 0, fmt.Errorf("crashfs: direct write at %d to %s of %d bytes: not an append", off, f.name, size)
	}
	n, err := f.Write(p)
	if n > 0 {
		f.fs.mu.Lock()
		f.fs.directs++
		f.fs.mu.Unlock()
	}
	return n, err
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &os.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	f.closed = true
	return nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	d := f.fs.delay
	for sub, extra := range f.fs.delayFor {
		if strings.Contains(f.name, sub) {
			d += extra
		}
	}
	f.fs.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(OpSync); err != nil {
		return err
	}
	f.node.synced = append(f.node.synced[:0:0], f.node.data...)
	f.node.overwritten = false
	f.fs.mu.Unlock()
	f.fs.synced(f.name)
	f.fs.mu.Lock()
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(OpTruncate); err != nil {
		return err
	}
	if size < 0 || size > int64(len(f.node.data)) {
		return &os.PathError{Op: "truncate", Path: f.name, Err: os.ErrInvalid}
	}
	f.node.data = f.node.data[:size:size]
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("size"); err != nil {
		return 0, err
	}
	return int64(len(f.node.data)), nil
}

// FilesystemID is 1 where SetSyncfs is on: every file of a CrashFS is on
// one filesystem (0: no syncfs).
func (f *memFile) FilesystemID() uint64 {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.fs.syncfs {
		return 1
	}
	return 0
}

// SyncFilesystem is syncfs(2) on the file's filesystem (SetSyncfs).
func (f *memFile) SyncFilesystem() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.gen != f.fs.gen || f.fs.down {
		return &os.PathError{Op: "syncfs", Path: f.name, Err: errCrashed}
	}
	if err := f.fs.injectedErr(OpSync, f.name); err != nil {
		return err
	}
	if err := f.fs.tick(OpSync, f.name); err != nil {
		return err
	}
	f.fs.syncAllLocked()
	return nil
}

func (f *memFile) Name() string { return f.name }
func (f *memFile) Fd() uintptr  { return 0 }
