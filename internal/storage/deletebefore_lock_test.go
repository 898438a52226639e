package storage

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// gateFS holds the first removal of a segment's .log file once armed,
// until released: a disk slow to delete (and fsync) at a retention.
type gateFS struct {
	FS
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (g *gateFS) Remove(name string) error {
	g.mu.Lock()
	hold := g.armed && strings.HasSuffix(name, logSuffix)
	if hold {
		g.armed = false
	}
	g.mu.Unlock()
	if hold {
		close(g.entered)
		<-g.release
	}
	return g.FS.Remove(name)
}

// TestDeleteBeforeOffTheLock: while DeleteBefore removes segment files
// (and fsyncs the directory), appends and reads go on: the file work is
// off the log's lock. Before, the lock was held across the checkpoint's
// fsyncs, the unlinks and the directory's fsync, and every produce waited
// for a retention or a tiered upload's local delete (the tiered produce
// p99, docs/benchmarks.md round 14). Fails on the old code: the append
// below waits for the removal, which waits for the append.
func TestDeleteBeforeOffTheLock(t *testing.T) {
	g := &gateFS{FS: NewCrashFS(1), entered: make(chan struct{}), release: make(chan struct{})}
	l := openLog(t, g, "/d", testConfig(), newSyncer(t), nil)
	defer l.Close()
	for i := 0; i < 100; i++ {
		if _, err := l.Append(batch(t, 2, 40, int64(i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.WaitDurable(context.Background(), l.EndOffset()); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
	deleted := make(chan error, 1)
	go func() { deleted <- l.DeleteBefore(101) }()
	<-g.entered // DeleteBefore is removing files

	appended := make(chan error, 1)
	go func() {
		_, err := l.Append(batch(t, 2, 40, 100), 0)
		if err == nil {
			var s Slice
			if s, err = l.Read(101, 1<<40, 1<<20); err == nil {
				s.Release()
			}
		}
		appended <- err
	}()
	var err error
	select {
	case err = <-appended:
	case <-time.After(10 * time.Second):
		t.Error("an append waited for DeleteBefore's file removal (the log's lock held across it)")
		close(g.release)
		err = <-appended
	}
	if err != nil {
		t.Fatal(err)
	}
	if !t.Failed() {
		close(g.release)
	}
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	if st := l.StartOffset(); st != 101 {
		t.Fatalf("start %d, want 101", st)
	}
	end := l.EndOffset()
	if err := l.WaitDurable(context.Background(), end); err != nil {
		t.Fatal(err)
	}
	l.Close()
	// The start and every record above it come back.
	l = openLog(t, g, "/d", testConfig(), newSyncer(t), nil)
	defer l.Close()
	if l.StartOffset() != 101 || l.EndOffset() != end {
		t.Fatalf("reopened: [%d, %d), want [101, %d)", l.StartOffset(), l.EndOffset(), end)
	}
	if got := readAll(t, l, 101); len(got) == 0 {
		t.Fatal("nothing read back from 101")
	}
}
