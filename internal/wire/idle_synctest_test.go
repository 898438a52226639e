package wire

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestIdleConnectionOnTheBubblesClock: the connection loop in a synctest
// bubble over an in-memory pipe. A client that keeps sending requests is
// served for as long as it likes; one that goes quiet is closed once
// connections.max.idle.ms (10 minutes here) has passed on the bubble's
// clock, not before. No real time passes.
func TestIdleConnectionOnTheBubblesClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(&principalHandler{}, Limits{IdleTimeout: 10 * time.Minute}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		ln := &pipeListener{conns: make(chan net.Conn, 1), done: make(chan struct{})}
		client, server := net.Pipe()
		ln.conns <- server
		go s.ServeListener(ln, DefaultListener())
		defer func() {
			ln.Close()
			s.Close()
			client.Close()
		}()
		// Busy for 30 minutes: a request every 9, never idle for 10.
		for i := range 4 {
			if i > 0 {
				time.Sleep(9 * time.Minute) // bubble time
			}
			client.Write(frame(kmsg.NewPtrMetadataRequest(), 1, int32(i)))
			readResponse(t, client, kmsg.NewPtrMetadataRequest().ResponseKind())
		}
		// Quiet: still open just before the idle timeout...
		start := time.Now()
		time.Sleep(10*time.Minute - time.Second) // bubble time
		synctest.Wait()
		if s.Stats.Open.Load() != 1 {
			t.Fatalf("closed after %v of silence, before connections.max.idle.ms", time.Since(start))
		}
		// ...and closed once it passes.
		if _, err := client.Read(make([]byte, 1)); err == nil {
			t.Fatal("read a byte from an idle connection")
		}
		if d := time.Since(start); d != 10*time.Minute {
			t.Fatalf("closed after %v of silence, want 10m", d)
		}
		synctest.Wait()
		if s.Stats.Open.Load() != 0 {
			t.Fatalf("%d connections open after the idle close", s.Stats.Open.Load())
		}
	})
}
