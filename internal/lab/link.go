package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// link is the network between one of the lab's clients and the brokers:
// the client dials through it (kgo.Dialer), and the lab can make it lose
// what the client sends (bytes the client's kernel accepted and the
// network then lost), drop every connection, or lose Produce responses
// (the broker appended, the answer never arrives, the connection breaks).
type link struct {
	mu    sync.Mutex
	conns map[*linkConn]struct{}

	blackhole   atomic.Bool  // writes vanish
	dropEvery   atomic.Int64 // lose the 1st Produce response and every n-th after it; 0: none
	responses   atomic.Int64 // Produce responses seen
	dropped     atomic.Int64 // Produce responses lost
	swallowed   atomic.Int64 // request bytes lost
	connsCut    atomic.Int64 // connections dropped by cut
	maxFrameLen uint32
}

func newLink() *link {
	return &link{conns: map[*linkConn]struct{}{}, maxFrameLen: 100 << 20}
}

// dialer is the client option that routes the client's connections
// through the link.
func (l *link) dialer() kgo.Opt {
	var d net.Dialer
	return kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		lc := &linkConn{Conn: c, l: l, produces: map[int32]bool{}}
		l.mu.Lock()
		l.conns[lc] = struct{}{}
		l.mu.Unlock()
		return lc, nil
	})
}

// cut closes every connection through the link: the client sees them
// drop, and reconnects.
func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		c.Conn.Close()
		delete(l.conns, c)
		l.connsCut.Add(1)
	}
}

type linkConn struct {
	net.Conn
	l *link

	wmu      sync.Mutex
	wbuf     []byte // a request frame not yet complete
	pmu      sync.Mutex
	produces map[int32]bool // correlation ids of Produce requests sent
	rbuf     []byte         // the rest of a response frame being read
}

var errResponseLost = errors.New("lab: connection dropped with the produce response")

func (c *linkConn) Write(p []byte) (int, error) {
	if c.l.blackhole.Load() {
		c.l.swallowed.Add(int64(len(p)))
		return len(p), nil
	}
	c.wmu.Lock()
	c.wbuf = append(c.wbuf, p...)
	for len(c.wbuf) >= 4 {
		n := binary.BigEndian.Uint32(c.wbuf)
		if n > c.l.maxFrameLen || uint32(len(c.wbuf)-4) < n {
			break
		}
		frame := c.wbuf[4 : 4+n]
		if len(frame) >= 8 && int16(binary.BigEndian.Uint16(frame)) == kmsg.Produce.Int16() {
			c.pmu.Lock()
			c.produces[int32(binary.BigEndian.Uint32(frame[4:]))] = true
			c.pmu.Unlock()
		}
		c.wbuf = c.wbuf[4+n:]
	}
	if len(c.wbuf) == 0 {
		c.wbuf = nil
	}
	c.wmu.Unlock()
	return c.Conn.Write(p)
}

func (c *linkConn) Read(p []byte) (int, error) {
	if len(c.rbuf) == 0 {
		var size [4]byte
		if _, err := io.ReadFull(c.Conn, size[:]); err != nil {
			return 0, err
		}
		n := binary.BigEndian.Uint32(size[:])
		if n > c.l.maxFrameLen || n < 4 {
			return 0, errors.New("lab: bad response frame")
		}
		frame := make([]byte, 4+n)
		copy(frame, size[:])
		if _, err := io.ReadFull(c.Conn, frame[4:]); err != nil {
			return 0, err
		}
		corr := int32(binary.BigEndian.Uint32(frame[4:]))
		c.pmu.Lock()
		produce := c.produces[corr]
		delete(c.produces, corr)
		c.pmu.Unlock()
		if produce {
			k := c.l.responses.Add(1)
			if every := c.l.dropEvery.Load(); every > 0 && (k-1)%every == 0 {
				// From the first on: a producer that packed everything
				// into three requests (it waited for a leader) still
				// loses one answer.
				c.l.dropped.Add(1)
				c.Conn.Close()
				return 0, errResponseLost
			}
		}
		c.rbuf = frame
	}
	n := copy(p, c.rbuf)
	c.rbuf = c.rbuf[n:]
	return n, nil
}

func (c *linkConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
