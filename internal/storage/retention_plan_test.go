package storage

import (
	"testing"
	"time"
)

// applyRetention runs retention as a replica does: the point, then the
// log start moved there (production replicates the point through Raft
// first, replica/retention.go). It returns how many segments went.
func applyRetention(l *Log) (int, error) {
	before := l.Segments()
	p, err := l.RetentionPoint()
	if err != nil {
		return 0, err
	}
	if err := l.DeleteBefore(p); err != nil {
		return 0, err
	}
	return before - l.Segments(), nil
}

// RetentionPoint names a segment boundary (moving the start there deletes
// whole segments and leaves no partial one below it), by bytes and by
// time, deletes nothing itself, and is stable once applied.
func TestRetentionPoint(t *testing.T) {
	clk := &clock{t: time.UnixMilli(10_000_000)}
	cfg := testConfig()
	cfg.RetentionBytes = 3 * cfg.SegmentBytes
	l := openLog(t, NewCrashFS(1), "/d", cfg, newSyncer(t), clk.now)
	defer l.Close()
	for i := 0; i < 200; i++ {
		if _, err := l.Append(batch(t, 1, 100, clk.t.UnixMilli()), 0); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string) {
		t.Helper()
		segs := l.Segments()
		p, err := l.RetentionPoint()
		if err != nil {
			t.Fatal(err)
		}
		if l.Segments() != segs || l.StartOffset() != 0 && p < l.StartOffset() {
			t.Fatalf("%s: RetentionPoint changed the log or went backwards", what)
		}
		if err := l.DeleteBefore(p); err != nil {
			t.Fatal(err)
		}
		if got := l.StartOffset(); got != p {
			t.Fatalf("%s: RetentionPoint %d, DeleteBefore left start %d", what, p, got)
		}
		l.mu.RLock()
		base := l.segs[0].base
		l.mu.RUnlock()
		if base != p {
			t.Fatalf("%s: RetentionPoint %d is not a segment boundary (first segment at %d)", what, p, base)
		}
		if again, err := l.RetentionPoint(); err != nil || again != p {
			t.Fatalf("%s: RetentionPoint after applying %d: %d %v", what, p, again, err)
		}
	}
	if p, _ := l.RetentionPoint(); p == 0 {
		t.Fatalf("200 batches over 4 KiB segments with retention.bytes 12 KiB: nothing to delete")
	}
	check("by bytes")
	cfg.RetentionBytes = -1
	cfg.RetentionMs = time.Minute
	l.SetConfig(cfg)
	if p, _ := l.RetentionPoint(); p != l.StartOffset() {
		t.Fatalf("fresh segments retained by time: point %d, start %d", p, l.StartOffset())
	}
	clk.t = clk.t.Add(time.Hour)
	l.Append(batch(t, 1, 100, clk.t.UnixMilli()), 0)
	check("by time")
	if l.Segments() != 1 {
		t.Fatalf("%d segments after an hour with retention.ms 1m", l.Segments())
	}
}
