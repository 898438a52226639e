package storage

import (
	"math"
	"syscall"
)

// FreeBytes is the space left for a non-privileged writer on the
// filesystem holding dir, as statfs(2) tells it (f_bavail); ok is false
// where it cannot be told. A filesystem of tests reports its own
// (CrashFS: its capacity less what its files hold).
func FreeBytes(fs FS, dir string) (free int64, ok bool) {
	switch f := fs.(type) {
	case interface{ FreeBytes(string) (int64, bool) }:
		return f.FreeBytes(dir)
	case osFS:
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			return 0, false
		}
		return int64(min(st.Bavail*uint64(st.Bsize), math.MaxInt64)), true
	}
	return 0, false
}

// FreeBytes is what writes may still add before they fail with ENOSPC
// (SetCapacity); unlimited: math.MaxInt64.
func (fs *CrashFS) FreeBytes(string) (int64, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.capacity < 0 {
		return math.MaxInt64, true
	}
	return max(fs.capacity-fs.used(), 0), true
}
