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

// fileDevice returns the device of an OS file, 0 if unknown or not an OS file.
func fileDevice(f File) uint64 {
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
