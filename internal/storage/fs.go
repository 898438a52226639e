package storage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
)

// File is the part of *os.File the log uses. Writes always append (files are
// opened with O_APPEND), so a segment is written strictly sequentially.
type File interface {
	io.ReaderAt
	io.Writer
	io.Closer
	Sync() error // fdatasync: data and the size, not mtime
	Truncate(size int64) error
	Size() (int64, error)
	Name() string
	Fd() uintptr // 0 if not an OS file (no sendfile)
}

// FS is the filesystem seam: OSFS in production, CrashFS in tests.
type FS interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Remove(name string) error
	Rename(oldname, newname string) error
	MkdirAll(dir string, perm os.FileMode) error
	ReadDir(dir string) ([]string, error) // base names, sorted
	RemoveAll(dir string) error
	SyncDir(dir string) error // makes creations, renames and removals in dir durable
}

// OSFS returns the operating system's filesystem.
func OSFS() FS { return osFS{} }

// OSFSDirectIO returns the operating system's filesystem with direct I/O
// for segment appends (log.direct.io): a sync cycle's large write-outs go
// to the device with O_DIRECT, past the page cache (appendbuf.go). Where
// the filesystem refuses O_DIRECT (tmpfs) a log writes through the page
// cache and says so once.
func OSFSDirectIO() FS { return osFS{direct: true} }

// OSFSBudget is OSFS (OSFSDirectIO with direct) holding at most maxOpen
// files open at once (log.max.open.files): an open past it fails with
// ErrOpenFileBudget, so data files - a segment per partition replica and
// more - cannot use up the process's descriptors and leave none for
// connections. The log that cannot open goes offline and is retried
// (KAFKA_STORAGE_ERROR), as after EMFILE; everything else keeps running.
// maxOpen <= 0: no budget.
func OSFSBudget(direct bool, maxOpen int) FS {
	if maxOpen <= 0 {
		return osFS{direct: direct}
	}
	return osFS{direct: direct, budget: &fileBudget{max: int64(maxOpen)}}
}

// ErrOpenFileBudget: an OSFSBudget filesystem holds its budget of open
// files.
var ErrOpenFileBudget = errors.New("storage: the open-file budget for data files is used up (log.max.open.files)")

// OpenFiles reports the files fsys holds open and its budget, if it is an
// OSFSBudget filesystem.
func OpenFiles(fsys FS) (open, budget int64, ok bool) {
	if held, max, _, _, isCache := FDCacheStats(fsys); isCache {
		return int64(held), int64(max), true
	}
	o, isOS := fsys.(osFS)
	if !isOS || o.budget == nil {
		return 0, 0, false
	}
	return o.budget.open.Load(), o.budget.max, true
}

type osFS struct {
	direct bool
	budget *fileBudget // nil: none
}

type fileBudget struct {
	max  int64
	open atomic.Int64
}

func (b *fileBudget) take() bool {
	for {
		n := b.open.Load()
		if n >= b.max {
			return false
		}
		if b.open.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// directBlock: O_DIRECT writes have their offset, length and memory
// aligned to this; 4 KiB covers the logical block size of every device
// in use (512 B or 4 KiB).
const directBlock = 4096

// directWriter is a File that can also write whole blocks past the page
// cache (O_DIRECT).
type directWriter interface {
	// DirectIO reports whether direct writes are enabled for the file.
	DirectIO() bool
	// WriteDirect writes p at off, the file's size (an append): off,
	// len(p) and p's address are multiples of directBlock. An error
	// wrapping errDirectUnsupported means nothing was written and the
	// filesystem refuses O_DIRECT (tmpfs): write through the page cache.
	WriteDirect(p []byte, off int64) (int, error)
}

var errDirectUnsupported = errors.New("O_DIRECT not supported")

// osDirectWrites counts the O_DIRECT writes of this process.
var osDirectWrites atomic.Int64

type osFile struct {
	*os.File
	direct bool
	budget *fileBudget // given back once, at the first Close
	closed atomic.Bool

	dmu  sync.Mutex
	dfd  *os.File // the same file opened with O_DIRECT, on first use
	dErr error    // opening it failed: unsupported here
}

func (f *osFile) DirectIO() bool { return f.direct }

func (f *osFile) WriteDirect(p []byte, off int64) (int, error) {
	f.dmu.Lock()
	defer f.dmu.Unlock()
	if f.dfd == nil {
		if f.dErr != nil {
			return 0, f.dErr
		}
		// The same inode (not the name, which a rename could reuse).
		d, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.File.Fd()), os.O_WRONLY|syscall.O_DIRECT, 0)
		if err != nil {
			f.dErr = fmt.Errorf("%w: open %s: %w", errDirectUnsupported, f.Name(), err)
			return 0, f.dErr
		}
		f.dfd = d
	}
	n, err := f.dfd.WriteAt(p, off)
	if n > 0 {
		osDirectWrites.Add(1)
	}
	if n == 0 && errors.Is(err, syscall.EINVAL) {
		// Refused as a whole (an alignment the device does not accept).
		f.dErr = fmt.Errorf("%w: write %s: %w", errDirectUnsupported, f.Name(), err)
		f.dfd.Close()
		f.dfd = nil
		return 0, f.dErr
	}
	return n, err
}

func (f *osFile) Close() error {
	if f.budget != nil && f.closed.CompareAndSwap(false, true) {
		f.budget.open.Add(-1)
	}
	f.dmu.Lock()
	if f.dfd != nil {
		f.dfd.Close()
		f.dfd = nil
	}
	f.dmu.Unlock()
	return f.File.Close()
}

func (f *osFile) Sync() error {
	for {
		err := syscall.Fdatasync(int(f.File.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.File.Name(), Err: err}
			}
			return nil
		}
	}
}

func (f *osFile) Size() (int64, error) {
	st, err := f.File.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (fs osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if fs.budget != nil && !fs.budget.take() {
		return nil, &os.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w: %d files open", ErrOpenFileBudget, fs.budget.max)}
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		if fs.budget != nil {
			fs.budget.open.Add(-1)
		}
		return nil, err
	}
	return &osFile{File: f, direct: fs.direct, budget: fs.budget}, nil
}

func (osFS) Remove(name string) error               { return os.Remove(name) }
func (osFS) Rename(o, n string) error               { return os.Rename(o, n) }
func (osFS) MkdirAll(d string, p os.FileMode) error { return os.MkdirAll(d, p) }
func (osFS) RemoveAll(d string) error               { return os.RemoveAll(d) }

func (osFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteFileAtomic replaces name with data durably: write name.tmp, fsync
// it, rename it over name, fsync the directory. A crash leaves either the old
// or the new content. renamed reports whether name now holds data, which can
// be true with an error when only the directory fsync failed (the change
// may then not survive a power cut, but readers already see it).
func WriteFileAtomic(fsys FS, name string, data []byte) (renamed bool, err error) {
	if err := WriteFileAtomicNoDirSync(fsys, name, data); err != nil {
		return false, err
	}
	return true, fsys.SyncDir(filepath.Dir(name))
}

// WriteFileAtomicNoDirSync is WriteFileAtomic without the directory's
// fsync: the file's content is durable, its name only after the caller's
// next fsync of the directory (a new partition's directory, whose new log
// fsyncs it right after).
func WriteFileAtomicNoDirSync(fsys FS, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errors.Join(err, fsys.Remove(tmp))
	}
	return fsys.Rename(tmp, name)
}

func writeFileAtomic(fsys FS, name string, data []byte) error {
	_, err := WriteFileAtomic(fsys, name, data)
	return err
}

// errFileTooLarge: ReadFile found more than its limit (damaged content,
// not an I/O error).
var errFileTooLarge = errors.New("file too large")

// ReadFile reads a whole (small) file, refusing more than limit bytes.
func ReadFile(fsys FS, name string, limit int64) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, fmt.Errorf("%s: %w", name, errFileTooLarge)
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && !(err == io.EOF && n == 0) {
		return nil, err
	}
	return b, nil
}

// MkdirNew makes dir, whose parent exists, and reports whether this call
// made it: true, it is new and empty (its name not yet durable); false,
// it was there already. On the OS one mkdir(2) says both (a stat first,
// then a listing of the new directory, cost as much again for each of
// thousands of new partitions).
func MkdirNew(fsys FS, dir string) (made bool, err error) {
	if IsOS(fsys) {
		err := os.Mkdir(dir, 0o755)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, os.ErrExist):
			return false, nil // not a directory: the opens in it fail
		case errors.Is(err, os.ErrNotExist):
			return false, fsys.MkdirAll(dir, 0o755) // a missing parent: the old way
		}
		return false, err
	}
	if _, err := fsys.ReadDir(dir); err == nil {
		return false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	return true, fsys.MkdirAll(dir, 0o755)
}

// CanSyncFilesystem reports whether SyncFilesystem can make fsys's
// changes durable: an OS filesystem on Linux >= 5.8, whose syncfs(2)
// reports writeback errors.
func CanSyncFilesystem(fsys FS) bool { return IsOS(fsys) && syncfsReportsErrors() }

// SyncFilesystem makes every change to the filesystem holding dir durable
// - file contents, creations, renames, removals, in every directory - with
// one syncfs(2): one journal commit for what would be an fsync of each
// file and directory. Only where CanSyncFilesystem.
func SyncFilesystem(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = syncfs(d.Fd())
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// MkdirAllDurable is MkdirAll that also makes the names of the directories
// it creates durable: a new directory is an entry of its parent, which a
// power cut drops unless the parent is fsynced after the creation (and
// with it everything written below). It fsyncs the parent of each
// directory it made; it does nothing more where dir exists, so when an
// fsync fails it removes the directories it made before returning the
// error: its retry makes them again.
func MkdirAllDurable(fsys FS, dir string) error {
	dir = filepath.Clean(dir)
	var missing []string // deepest first
	exists := func(d string) error {
		if IsOS(fsys) {
			// A stat, not a listing of a data directory of thousands.
			st, err := os.Stat(d)
			if err == nil && !st.IsDir() {
				err = &os.PathError{Op: "mkdir", Path: d, Err: syscall.ENOTDIR}
			}
			return err
		}
		_, err := fsys.ReadDir(d)
		return err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if err := exists(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := fsys.SyncDir(filepath.Dir(missing[i])); err != nil {
			// Take back what was made (still empty: nothing was told
			// of it), or the retry would find it and fsync nothing.
			for _, d := range missing {
				fsys.Remove(d)
			}
			return err
		}
	}
	return nil
}
