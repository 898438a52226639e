package storage

import (
	"testing"
	"time"
)

// RetentionPoint names exactly the start EnforceRetention then leaves, by
// bytes and by time, and deletes nothing itself.
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
		if _, err := l.EnforceRetention(); err != nil {
			t.Fatal(err)
		}
		if got := l.StartOffset(); got != p {
			t.Fatalf("%s: RetentionPoint %d, EnforceRetention left start %d", what, p, got)
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
