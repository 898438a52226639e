// Package txn holds producer ids and, later (issue 5), the transaction
// coordinator. For now: the durable producer id allocator.
package txn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"os"
	"sync"

	"holdfast/internal/storage"
)

// IDBlock is how many producer ids one durable write reserves. A restart
// skips the unused rest of a block; with 2^63 ids that costs nothing.
const IDBlock = 1000

// ErrIDsExhausted: every producer id has been handed out.
var ErrIDsExhausted = errors.New("txn: producer ids exhausted")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// IDAllocator hands out producer ids that are never reused, across
// restarts and crashes: the end of the reserved block is fsynced before any
// id from it is returned.
type IDAllocator struct {
	fs   storage.FS
	path string

	mu    sync.Mutex
	next  int64
	limit int64 // ids below limit are reserved on disk
}

// OpenIDAllocator opens (creating if needed) the allocator whose state is
// the file path.
func OpenIDAllocator(fsys storage.FS, path string) (*IDAllocator, error) {
	if fsys == nil {
		fsys = storage.OSFS()
	}
	a := &IDAllocator{fs: fsys, path: path}
	limit, err := a.read()
	if err != nil {
		return nil, err
	}
	// Ids below the persisted limit may have been handed out before a
	// crash: start above them.
	a.next, a.limit = limit, limit
	return a, nil
}

func (a *IDAllocator) read() (int64, error) {
	f, err := a.fs.OpenFile(a.path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var b [12]byte
	if _, err := f.ReadAt(b[:], 0); err != nil && err != io.EOF {
		return 0, fmt.Errorf("txn: reading %s: %w", a.path, err)
	}
	v := binary.BigEndian.Uint64(b[:8])
	if crc32.Checksum(b[:8], castagnoli) != binary.BigEndian.Uint32(b[8:]) || v > math.MaxInt64 {
		// The file is replaced atomically, so a bad one is not a torn
		// write but damage; refusing is the only way not to reuse an id.
		return 0, fmt.Errorf("txn: %s is corrupt", a.path)
	}
	return int64(v), nil
}

func (a *IDAllocator) write(limit int64) error {
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], uint64(limit))
	binary.BigEndian.PutUint32(b[8:], crc32.Checksum(b[:8], castagnoli))
	_, err := storage.WriteFileAtomic(a.fs, a.path, b[:])
	return err
}

// Limit is the end of the reserved block: every id handed out is below it.
func (a *IDAllocator) Limit() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limit
}

// Next returns a producer id never returned before.
func (a *IDAllocator) Next() (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next == a.limit {
		if a.limit > math.MaxInt64-IDBlock {
			return 0, ErrIDsExhausted
		}
		if err := a.write(a.limit + IDBlock); err != nil {
			return 0, fmt.Errorf("txn: reserving producer ids: %w", err)
		}
		a.limit += IDBlock
	}
	id := a.next
	a.next++
	return id, nil
}

// Issued reports whether id may have been handed out by this allocator
// (in this or an earlier run).
func (a *IDAllocator) Issued(id int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return id >= 0 && id < a.limit
}
