package storage

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAppendDuringDeleteBefore: appends of 1 KiB every 0.5 ms (2 MiB/s,
// scripts/bench-tiered.sh's produce rate) on the real disk while
// DeleteBefore removes a 1 MiB segment, as a tiered upload's local delete
// does twice a second there. Reports the median over b.N deletions of the
// longest append during one (append-max-ns) and, as the baseline, of the
// longest in as long a window without one (baseline-max-ns). Round 14 in
// docs/benchmarks.md.
//
//	go test -run '^$' -bench AppendDuringDeleteBefore -benchtime 40x ./internal/storage
func BenchmarkAppendDuringDeleteBefore(b *testing.B) {
	cfg := DefaultConfig()
	cfg.SegmentBytes = 1 << 20
	l, err := Open(b.TempDir(), cfg, Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	rec := batch(b, 1, 1000, 1)
	appendFor := func(stop func() bool) time.Duration {
		var worst time.Duration
		for !stop() {
			t0 := time.Now()
			if _, err := l.Append(rec, 0); err != nil {
				b.Fatal(err)
			}
			worst = max(worst, time.Since(t0))
			time.Sleep(500 * time.Microsecond) // a benchmark's producer pace: appends spread over the delete, as a client's arrive
		}
		return worst
	}
	var during, baseline, deletes []time.Duration
	for b.Loop() {
		for l.Segments() < 3 {
			if _, err := l.Append(rec, 0); err != nil {
				b.Fatal(err)
			}
		}
		if err := l.Sync(); err != nil {
			b.Fatal(err)
		}
		segs, err := l.SealedSegments()
		if err != nil || len(segs) == 0 {
			b.Fatal(err, len(segs))
		}
		cut := segs[len(segs)-1].Next
		var done atomic.Bool
		var took time.Duration
		go func() {
			t0 := time.Now()
			if err := l.DeleteBefore(cut); err != nil {
				b.Error(err)
			}
			took = time.Since(t0)
			done.Store(true)
		}()
		during = append(during, appendFor(done.Load))
		deletes = append(deletes, took)
		end := time.Now().Add(took)
		baseline = append(baseline, appendFor(func() bool { return !time.Now().Before(end) }))
	}
	med := func(d []time.Duration) float64 { slices.Sort(d); return float64(d[len(d)/2]) }
	b.ReportMetric(med(during), "append-max-ns")
	b.ReportMetric(med(baseline), "baseline-max-ns")
	b.ReportMetric(med(deletes), "deletebefore-ns")
}
