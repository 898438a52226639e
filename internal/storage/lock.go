package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFileName is the lock file in a data directory (Kafka's name).
const LockFileName = ".lock"

// ErrDirLocked: another process (or another broker in this process) holds
// the data directory.
var ErrDirLocked = errors.New("storage: data directory is in use")

// DirLock is an exclusive flock on <dir>/.lock, held until Unlock (or the
// process exits: the kernel drops it, so a crash never leaves a stale lock).
// The file holds the holder's process id, for the message another process
// gets.
type DirLock struct {
	f *os.File
}

// LockDir creates dir if needed and locks it. A directory already locked
// is ErrDirLocked, with the holder's process id in the message when the
// lock file names one.
func LockDir(dir string) (*DirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	name := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			if holder != "" {
				return nil, fmt.Errorf("%w: %s is locked by process %s (%s); stop that process, or give this one another --data-dir", ErrDirLocked, dir, holder, name)
			}
			return nil, fmt.Errorf("%w: %s is locked by another process (%s); stop it, or give this one another --data-dir", ErrDirLocked, dir, name)
		}
		return nil, fmt.Errorf("storage: locking %s: %w", name, err)
	}
	// Ours now: say who holds it. Not fsynced - the content is advice for
	// the operator, the flock itself is the lock.
	pid := strconv.Itoa(os.Getpid()) + "\n"
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(pid), 0)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("storage: writing %s: %w", name, err)
		}
	}
	return &DirLock{f: f}, nil
}

// readHolder returns the process id written in the lock file ("" if none).
func readHolder(f *os.File) string {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	s := strings.TrimSpace(string(b[:n]))
	if _, err := strconv.Atoi(s); err != nil {
		return ""
	}
	return s
}

// Unlock releases the lock. The file stays (Kafka leaves its .lock too);
// its content names the last holder.
func (l *DirLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the only descriptor releases the flock
	l.f = nil
	return err
}

// IsOS reports whether fsys is the operating system's filesystem (the only
// one a flock means anything on).
func IsOS(fsys FS) bool {
	if c, cached := fsys.(*cacheFS); cached {
		fsys = c.inner
	}
	_, ok := fsys.(osFS)
	return ok
}
