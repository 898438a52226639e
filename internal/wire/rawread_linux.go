package wire

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// rawReader reads a TCP socket with read(2) issued as a raw system call,
// one that does not tell the Go scheduler it is in a system call; when the
// socket has nothing to read it waits in the runtime's poller as net.Conn
// does (the connection's deadlines apply).
//
// Why: the socket is non-blocking, so read(2) never sleeps; it copies what
// the kernel holds, up to a produce frame's few MiB, which takes long
// enough (tens to hundreds of microseconds) for the runtime's sysmon to
// take the reader's P away and hand it to another thread, and to keep
// sysmon polling every 20 us (storage's osFile.Write says the same of
// page-cache writes). A raw read keeps its P: the core is copying either
// way.
//
// One per connection, used by its reader goroutine alone: the state of a
// Read lives in it, so a Read allocates nothing (a closure over p per call
// was one allocation per read(2), dozens per produce frame).
type rawReader struct {
	rc    syscall.RawConn
	fn    func(fd uintptr) bool // r.read, bound once
	p     []byte
	n     int
	errno syscall.Errno
}

func newRawReader(rc syscall.RawConn) *rawReader {
	r := &rawReader{rc: rc}
	r.fn = r.read
	return r
}

func (r *rawReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.errno = p, 0, 0
	err := r.rc.Read(r.fn)
	n, errno := r.n, r.errno
	r.p = nil
	switch {
	case err != nil:
		return 0, err // closed, or the deadline passed
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (r *rawReader) read(fd uintptr) bool {
	for {
		k, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait in the poller, then try again
		case 0:
			r.n = int(k)
		default:
			r.errno = e
		}
		return true
	}
}

// socketReader is what the connection's frames are read from: a rawReader
// on a plain TCP socket, else the connection itself (TLS).
func socketReader(nc net.Conn, plainTCP bool) io.Reader {
	if sc, ok := nc.(syscall.Conn); ok && plainTCP {
		if rc, err := sc.SyscallConn(); err == nil {
			return newRawReader(rc)
		}
	}
	return nc
}
