package storage

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Write appends p to the file with write(2) issued as a raw system call,
// one that does not tell the Go scheduler it is in a system call.
//
// Why: a buffered write of a produce batch (up to a few MiB at a saturated
// producer) spends a few hundred microseconds copying into the page cache.
// Through os.File.Write the goroutine enters a system call; after 20 us
// the runtime's sysmon thread takes its P away and hands it to another
// thread (handoffp, startm: a futex wake-up and a context switch), the
// writer then has to get a P back when it returns, and sysmon, having
// found something to retake, keeps polling every 20 us instead of backing
// off to 10 ms. On this machine's two shared cores that machinery was
// 10-15% of the broker's CPU at 6 partitions (perf: sysmon's nanosleep,
// finish_task_switch, startm), for a system call that is a memory copy:
// the core is busy copying either way, a handed-off P finds no core to
// run on. (docs/benchmarks.md, "Round 10", h-6p.)
//
// What it gives up: while the write runs its P is not handed off, so with
// GOMAXPROCS=2 the other goroutines have one P until it returns, and a
// stop-the-world phase of the garbage collector waits for it. A buffered
// write sleeps only if the kernel makes it (dirty-page throttling, memory
// reclaim); every write here is followed by an fdatasync within the sync
// cycle, so dirty pages stay far below the throttling thresholds.
// fdatasync, syncfs and O_DIRECT writes wait for the device and stay
// ordinary system calls. Nothing about durability changes: the bytes and
// the order of write and fdatasync are the same.
//
// A write to a page under writeback waits for the device where the device
// or the filesystem wants stable pages (btrfs, data-integrity devices): an
// append to the last partial page while an fdatasync is in flight would
// then hold its P for the device's latency. So writes go raw only on ext4,
// XFS and tmpfs, and on ext4 and XFS only when the block device does not
// ask for stable writes (rawWriteAllowed); elsewhere os.File.Write.
func (f *osFile) Write(p []byte) (int, error) {
	if !f.raw {
		return f.File.Write(p)
	}
	rc, err := f.File.SyscallConn()
	if err != nil {
		return 0, err
	}
	n := 0
	var werr error
	// rc.Write holds the descriptor (a concurrent Close waits), so fd is
	// not reused under the write.
	cerr := rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			k, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n))
			switch {
			case e == syscall.EINTR:
				continue
			case e != 0:
				werr = &os.PathError{Op: "write", Path: f.File.Name(), Err: e}
				return true
			case k == 0:
				werr = io.ErrShortWrite
				return true
			}
			n += int(k)
		}
		return true
	})
	if werr == nil && cerr != nil {
		werr = &os.PathError{Op: "write", Path: f.File.Name(), Err: cerr}
	}
	return n, werr
}

// Filesystem types (statfs f_type) whose buffered writes wait for
// writeback only if the block device asks for stable pages.
const (
	ext4Magic  = 0xEF53
	xfsMagic   = 0x58465342
	tmpfsMagic = 0x01021994
)

// rawWriteDevs caches rawWriteAllowed by device.
var rawWriteDevs sync.Map // uint64 -> bool

// rawWriteAllowed reports whether writes to f may go as raw system calls
// (osFile.Write): its filesystem is tmpfs, or ext4 or XFS on a block device
// whose queue/stable_writes is 0. Anything unknown answers false.
func rawWriteAllowed(f *os.File) bool {
	var st syscall.Stat_t
	if syscall.Fstat(int(f.Fd()), &st) != nil {
		return false
	}
	if v, ok := rawWriteDevs.Load(uint64(st.Dev)); ok {
		return v.(bool)
	}
	ok := false
	var fs syscall.Statfs_t
	if syscall.Fstatfs(int(f.Fd()), &fs) == nil {
		switch fs.Type {
		case tmpfsMagic:
			ok = true
		case ext4Magic, xfsMagic:
			ok = !stableWrites(uint64(st.Dev))
		}
	}
	rawWriteDevs.Store(uint64(st.Dev), ok)
	return ok
}

// stableWrites reports whether the block device dev (or, for a partition,
// its disk) asks for stable pages; true when that cannot be read.
func stableWrites(dev uint64) bool {
	base := fmt.Sprintf("/sys/dev/block/%d:%d/", unix.Major(dev), unix.Minor(dev))
	for _, q := range []string{"queue/stable_writes", "../queue/stable_writes"} {
		if b, err := os.ReadFile(base + q); err == nil {
			return strings.TrimSpace(string(b)) != "0"
		}
	}
	return true
}
