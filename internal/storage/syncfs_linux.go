package storage

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// syncfs(2) commits every dirty inode of one filesystem in a single
// journal commit. For a cycle over many logs on one disk it is cheaper than
// one fdatasync per file, which on ext4 costs a journal commit each. Only
// used on Linux >= 5.8, where syncfs reports writeback errors (errseq on the
// superblock); before that it could return success after a lost write.
func syncfs(fd uintptr) error {
	for {
		err := unix.Syncfs(int(fd))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &os.SyscallError{Syscall: "syncfs", Err: err}
		}
		return nil
	}
}

var (
	syncfsOnce sync.Once
	syncfsOK   bool
)

func syncfsReportsErrors() bool {
	syncfsOnce.Do(func() {
		var u syscall.Utsname
		if syscall.Uname(&u) != nil {
			return
		}
		var b []byte
		for _, c := range u.Release {
			if c == 0 {
				break
			}
			b = append(b, byte(c))
		}
		parts := strings.SplitN(string(b), ".", 3)
		if len(parts) < 2 {
			return
		}
		major, err1 := strconv.Atoi(parts[0])
		minor, err2 := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
		syncfsOK = err1 == nil && err2 == nil && (major > 5 || (major == 5 && minor >= 8))
	})
	return syncfsOK
}

// filesystemSyncer is a File of a filesystem with a syncfs of its own
// (CrashFS with SetSyncfs).
type filesystemSyncer interface {
	FilesystemID() uint64 // 0: no syncfs
	SyncFilesystem() error
}

// ownSyncfs returns f (under its append buffer) as a filesystemSyncer.
func ownSyncfs(f File) (filesystemSyncer, bool) {
	if a, ok := f.(*appendFile); ok {
		f = a.File
	}
	fs, ok := f.(filesystemSyncer)
	return fs, ok
}

// syncFilesystemOf makes every change to f's filesystem durable (syncfs).
func syncFilesystemOf(f File) error {
	if fs, ok := ownSyncfs(f); ok {
		return fs.SyncFilesystem()
	}
	// Pinned: a cached file's descriptor stays open for the call.
	fd, unpin, err := PinFd(f)
	if err == nil {
		err = syncfs(fd)
	}
	unpin()
	return err
}

// fileDevice returns the filesystem of a file for syncfs grouping: the
// device of an OS file where syncfs reports errors, 0 if unknown or none.
func fileDevice(f File) uint64 {
	if fs, ok := ownSyncfs(f); ok {
		return fs.FilesystemID()
	}
	if !syncfsReportsErrors() {
		return 0
	}
	fd, unpin, err := PinFd(f)
	defer unpin()
	if err != nil || fd == 0 {
		return 0
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(fd), &st); err != nil {
		return 0
	}
	return uint64(st.Dev)
}
