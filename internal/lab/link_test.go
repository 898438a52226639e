package lab

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// echoBroker answers every request frame with a response frame of the
// same correlation id (and the request's api key as body), as a broker's
// framing does.
func echoBroker(t *testing.T) (addr string, received func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				for {
					var size [4]byte
					if _, err := io.ReadFull(c, size[:]); err != nil {
						return
					}
					frame := make([]byte, binary.BigEndian.Uint32(size[:]))
					if _, err := io.ReadFull(c, frame); err != nil {
						return
					}
					mu.Lock()
					n++
					mu.Unlock()
					resp := binary.BigEndian.AppendUint32(nil, 6)
					resp = append(resp, frame[4:8]...) // correlation id
					resp = append(resp, frame[0:2]...) // api key
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// dial is the link's dialer without franz-go: a connection through l.
func (l *link) dial(t *testing.T, addr string) *linkConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	lc := &linkConn{Conn: c, l: l, produces: map[int32]bool{}}
	l.mu.Lock()
	l.conns[lc] = struct{}{}
	l.mu.Unlock()
	t.Cleanup(func() { lc.Close() })
	return lc
}

func request(key kmsg.Key, corr int32) []byte {
	b := binary.BigEndian.AppendUint32(nil, 10)
	b = binary.BigEndian.AppendUint16(b, uint16(key))
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	return binary.BigEndian.AppendUint16(b, 0xffff) // null client id
}

// readResponse reads one response frame through c in small pieces (as a
// client's bufio would) and returns its correlation id and api key.
func readResponse(c *linkConn) (int32, int16, error) {
	buf := make([]byte, 10)
	got := 0
	for got < len(buf) {
		n, err := c.Read(buf[got:min(got+3, len(buf))])
		if err != nil {
			return 0, 0, err
		}
		got += n
	}
	return int32(binary.BigEndian.Uint32(buf[4:])), int16(binary.BigEndian.Uint16(buf[8:])), nil
}

// TestLinkDropsProduceResponses: the link loses the first Produce
// response and every n-th after it (the connection breaks with it), and
// no other response.
func TestLinkDropsProduceResponses(t *testing.T) {
	addr, _ := echoBroker(t)
	l := newLink()
	l.dropEvery.Store(2)
	var results []string
	for corr := int32(1); corr <= 6; corr++ {
		c := l.dial(t, addr)
		// A Metadata request first, then a Produce written in two pieces.
		if _, err := c.Write(request(kmsg.Metadata, 100+corr)); err != nil {
			t.Fatal(err)
		}
		if got, key, err := readResponse(c); err != nil || got != 100+corr || key != kmsg.Metadata.Int16() {
			t.Fatalf("metadata response: %d %d %v", got, key, err)
		}
		req := request(kmsg.Produce, corr)
		if _, err := c.Write(req[:5]); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(req[5:]); err != nil {
			t.Fatal(err)
		}
		got, _, err := readResponse(c)
		switch {
		case errors.Is(err, errResponseLost):
			results = append(results, "lost")
		case err != nil || got != corr:
			t.Fatalf("produce %d: %d %v", corr, got, err)
		default:
			results = append(results, "ok")
		}
	}
	want := []string{"lost", "ok", "lost", "ok", "lost", "ok"}
	for i := range want {
		if results[i] != want[i] {
			t.Fatalf("produce responses %v, want %v", results, want)
		}
	}
	if l.responses.Load() != 6 || l.dropped.Load() != 3 {
		t.Fatalf("responses %d dropped %d", l.responses.Load(), l.dropped.Load())
	}
}

// TestLinkBlackholeAndCut: a blackholed link swallows what the client
// sends (the broker sees nothing); cut drops every connection.
func TestLinkBlackholeAndCut(t *testing.T) {
	addr, received := echoBroker(t)
	l := newLink()
	a, b := l.dial(t, addr), l.dial(t, addr)
	if _, err := a.Write(request(kmsg.ApiVersions, 1)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readResponse(a); err != nil {
		t.Fatal(err)
	}
	l.blackhole.Store(true)
	req := request(kmsg.Produce, 2)
	if n, err := b.Write(req); n != len(req) || err != nil {
		t.Fatalf("blackholed write: %d %v", n, err)
	}
	if l.swallowed.Load() != int64(len(req)) {
		t.Fatalf("swallowed %d", l.swallowed.Load())
	}
	l.blackhole.Store(false)
	// The broker answers the next request on b and nothing else: the
	// swallowed one never reached it.
	if _, err := b.Write(request(kmsg.ApiVersions, 3)); err != nil {
		t.Fatal(err)
	}
	if corr, _, err := readResponse(b); err != nil || corr != 3 {
		t.Fatalf("after the blackhole: %d %v", corr, err)
	}
	if received() != 2 {
		t.Fatalf("the broker got %d requests, want 2", received())
	}
	l.cut()
	if l.connsCut.Load() != 2 {
		t.Fatalf("cut %d connections", l.connsCut.Load())
	}
	if _, _, err := readResponse(a); err == nil {
		t.Fatal("a read on a cut connection succeeded")
	}
	l.mu.Lock()
	left := len(l.conns)
	l.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d connections left after cut", left)
	}
}

// TestLinkRefusesBadFrames: a response frame of a size no broker sends is
// an error, not an allocation.
func TestLinkRefusesBadFrames(t *testing.T) {
	for _, size := range []uint32{0, 3, 200 << 20} {
		client, server := net.Pipe()
		l := newLink()
		c := &linkConn{Conn: client, l: l, produces: map[int32]bool{}}
		go func() {
			server.Write(binary.BigEndian.AppendUint32(nil, size))
			server.Close()
		}()
		if _, err := c.Read(make([]byte, 16)); err == nil || err.Error() != "lab: bad response frame" {
			t.Errorf("frame of %d bytes: %v", size, err)
		}
		c.Close()
	}
}
