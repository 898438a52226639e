package wire

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A response can carry byte ranges of files that the writer sends with
// sendfile(2), straight from the page cache to the socket, instead of copying
// them into the encoded response. kmsg stays the only encoder: the handler
// puts a Placeholder where the bytes belong (a record batches field), and the
// writer replaces each placeholder and its length prefix with the range.

// FileRange is bytes [Off, Off+Len) of an open file.
type FileRange struct {
	Fd  uintptr // 0: not an OS file; ReadAt is used instead
	Off int64
	Len int
	// ReadAt reads the range when it cannot be sent with sendfile (no Fd,
	// or a socket that is not TCP).
	ReadAt func(p []byte, off int64) (int, error)
	// Mem, if not nil, holds the range's bytes in memory (the storage's
	// read cache), Len in all: written with writev, not sendfile.
	Mem [][]byte
}

// Spliced is a response with file ranges. Placeholders[i] stands for
// Ranges[i] in the encoding of the embedded response. Release runs once the
// response is written or abandoned, so the files can be let go.
type Spliced struct {
	kmsg.Response
	Placeholders [][]byte
	Ranges       []FileRange
	Release      func()
}

// placeholderLen is long enough that a random placeholder never occurs by
// chance in the rest of a response.
const placeholderLen = 16

// NewPlaceholder returns a fresh random placeholder.
func NewPlaceholder() []byte {
	p := make([]byte, placeholderLen)
	rand.Read(p)
	return p
}

// part is either bytes or a file range.
type part struct {
	b []byte
	f *FileRange
}

// splice cuts the encoded frame (size prefix included) at each placeholder
// and its length prefix, putting the file range's length and the range in
// their place, and fixes the frame size. A flexible encoding prefixes the
// placeholder with a uvarint of len+1, a classic one with an int32 len.
func splice(frame []byte, s *Spliced, flexible bool) ([]part, error) {
	parts := make([]part, 0, 2*len(s.Ranges)+1)
	total := len(frame) - 4
	rest := frame
	for i, ph := range s.Placeholders {
		at := bytes.Index(rest, ph)
		if at < 0 {
			return nil, fmt.Errorf("wire: placeholder %d not in the encoded response", i)
		}
		r := &s.Ranges[i]
		var prefix []byte
		var oldPrefix int
		if flexible {
			oldPrefix = 1 // uvarint(17)
			prefix = binary.AppendUvarint(nil, uint64(r.Len)+1)
		} else {
			oldPrefix = 4
			prefix = binary.BigEndian.AppendUint32(nil, uint32(r.Len))
		}
		if at < oldPrefix {
			return nil, errors.New("wire: placeholder without its length prefix")
		}
		head := rest[:at-oldPrefix]
		parts = append(parts, part{b: head}, part{b: prefix}, part{f: r})
		total += len(prefix) - oldPrefix + r.Len - placeholderLen
		rest = rest[at+placeholderLen:]
	}
	parts = append(parts, part{b: rest})
	binary.BigEndian.PutUint32(frame, uint32(total))
	return parts, nil
}

// writeParts writes bytes parts with writev and file ranges with sendfile;
// it returns the bytes written.
func writeParts(nc net.Conn, parts []part) (int64, error) {
	var written int64
	var bufs net.Buffers
	flush := func() error {
		n, err := bufs.WriteTo(nc)
		written += n
		bufs = bufs[:0]
		return err
	}
	for _, p := range parts {
		if p.f == nil {
			if len(p.b) > 0 {
				bufs = append(bufs, p.b)
			}
			continue
		}
		if p.f.Mem != nil {
			bufs = append(bufs, p.f.Mem...)
			continue
		}
		if err := flush(); err != nil {
			return written, err
		}
		n, err := sendRange(nc, p.f)
		written += n
		if err != nil {
			return written, err
		}
	}
	return written, flush()
}

// sendRange sends a file range with sendfile(2) at an explicit offset (the
// file's own offset is shared with concurrent readers, so io.Copy's sendfile
// path, which uses it, does not fit), falling back to a read and a write.
func sendRange(nc net.Conn, r *FileRange) (int64, error) {
	tc, ok := nc.(*net.TCPConn)
	if r.Fd == 0 || !ok {
		buf := make([]byte, r.Len)
		if n, err := r.ReadAt(buf, r.Off); n < r.Len {
			return 0, fmt.Errorf("wire: reading file range: %w", err)
		}
		n, err := nc.Write(buf)
		return int64(n), err
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0, err
	}
	off, remain := r.Off, r.Len
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		for remain > 0 {
			n, err := syscall.Sendfile(int(fd), int(r.Fd), &off, remain)
			if n > 0 {
				remain -= n
			}
			switch {
			case err == syscall.EAGAIN:
				return false // wait until the socket is writable
			case err == syscall.EINTR:
				continue
			case err != nil:
				serr = err
				return true
			case n == 0:
				serr = fmt.Errorf("wire: sendfile: file ended %d bytes early", remain)
				return true
			}
		}
		return true
	})
	sent := int64(r.Len - remain)
	if serr != nil {
		return sent, serr
	}
	return sent, err
}

// flatten joins parts into one buffer, reading file ranges (for a
// connection that cannot sendfile, such as TLS).
func flatten(parts []part) ([]byte, error) {
	n := 0
	for _, p := range parts {
		if p.f != nil {
			n += p.f.Len
		} else {
			n += len(p.b)
		}
	}
	out := make([]byte, 0, n)
	for _, p := range parts {
		if p.f == nil {
			out = append(out, p.b...)
			continue
		}
		if p.f.Mem != nil {
			for _, b := range p.f.Mem {
				out = append(out, b...)
			}
			continue
		}
		at := len(out)
		out = out[:at+p.f.Len]
		if got, err := p.f.ReadAt(out[at:], p.f.Off); got < p.f.Len {
			return nil, fmt.Errorf("wire: reading file range: %w", err)
		}
	}
	return out, nil
}
