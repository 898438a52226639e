package controller

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"holdfast/internal/storage"
)

// maxFileBytes bounds the metadata file we are willing to read: far above
// any real cluster's topic list, far below what would hurt the node.
const maxFileBytes = 64 << 20

func join(dir, name string) string { return filepath.Join(dir, name) }

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

func readFile(fsys storage.FS, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	if n > maxFileBytes {
		return nil, errors.New("metadata file too large")
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		return nil, err
	}
	return b, nil
}

// writeFileAtomic replaces dir/name with data: write dir/tmp, fsync it,
// rename it over dir/name, fsync dir. renamed reports whether the new file
// replaced the old one (it may be durable even if err is not nil).
func writeFileAtomic(fsys storage.FS, dir, name, tmp string, data []byte) (renamed bool, err error) {
	tmpPath := join(dir, tmp)
	f, err := fsys.OpenFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
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
		return false, errors.Join(err, fsys.Remove(tmpPath))
	}
	if err := fsys.Rename(tmpPath, join(dir, name)); err != nil {
		return false, err
	}
	return true, fsys.SyncDir(dir)
}
