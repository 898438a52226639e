package wire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// rawReader over a real loopback socket: every byte in order (reads that
// wait in the poller and reads that find data), a deadline that passes
// with nothing to read, and the peer's close as io.EOF.
func TestRawReader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	r := socketReader(server, true)
	if _, ok := r.(*rawReader); !ok {
		t.Fatalf("a plain TCP connection reads through %T, not rawReader", r)
	}

	want := make([]byte, 5<<20)
	for i := range want {
		want[i] = byte(i * 13)
	}
	sent := make(chan error, 1)
	go func() {
		// In pieces with pauses, so some reads wait in the poller.
		for off := 0; off < len(want); off += 1 << 20 {
			if _, err := client.Write(want[off : off+1<<20]); err != nil {
				sent <- err
				return
			}
			time.Sleep(time.Millisecond) // the pause is the point: some reads find nothing and wait in the poller
		}
		sent <- nil
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes read differ from the bytes sent")
	}

	server.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	var one [1]byte
	_, err = r.Read(one[:])
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v; want a timeout", err)
	}
	server.SetReadDeadline(time.Time{})

	client.Write([]byte("xy"))
	client.Close()
	var rest [8]byte
	n, err := io.ReadAtLeast(r, rest[:], 2)
	if err != nil || string(rest[:n]) != "xy" {
		t.Fatalf("read of the last bytes: %q, %v", rest[:n], err)
	}
	if _, err := r.Read(rest[:]); err != io.EOF {
		t.Fatalf("read after the peer closed: %v; want io.EOF", err)
	}
}
