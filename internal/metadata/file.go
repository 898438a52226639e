package metadata

import (
	"errors"
	"io/fs"
	"path/filepath"

	"holdfast/internal/storage"
)

// maxFileBytes bounds the metadata file we are willing to read: far above
// any real cluster's topic list, far below what would hurt the node.
const maxFileBytes = 64 << 20

func join(dir, name string) string { return filepath.Join(dir, name) }

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

func readFile(fsys storage.FS, name string) ([]byte, error) {
	return storage.ReadFile(fsys, name, maxFileBytes)
}
