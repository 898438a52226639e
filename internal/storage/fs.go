package storage

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
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

type osFS struct{}

type osFile struct{ *os.File }

func (f osFile) Sync() error {
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

func (f osFile) Size() (int64, error) {
	st, err := f.File.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
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
	tmp := name + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return false, err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, errors.Join(err, fsys.Remove(tmp))
	}
	if err := fsys.Rename(tmp, name); err != nil {
		return false, err
	}
	return true, fsys.SyncDir(filepath.Dir(name))
}

func writeFileAtomic(fsys FS, name string, data []byte) error {
	_, err := WriteFileAtomic(fsys, name, data)
	return err
}

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
		return nil, errors.New("file too large")
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && !(err == io.EOF && n == 0) {
		return nil, err
	}
	return b, nil
}
