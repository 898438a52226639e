package storage

import (
	"sync/atomic"
	"time"
)

// Histogram counts durations in exponential buckets without locks, for
// metrics that must not cost the hot path more than two atomic adds. The
// metrics package turns a snapshot into a Prometheus histogram.
type Histogram struct {
	counts [histBuckets + 1]atomic.Int64 // the last one: above every bound
	sum    atomic.Int64                  // nanoseconds
}

const (
	histBuckets = 18
	histFirst   = 50 * time.Microsecond // bounds: 50µs, 100µs, ... ~6.5s
)

// HistogramBounds are the upper bounds of the buckets.
func HistogramBounds() []time.Duration {
	out := make([]time.Duration, histBuckets)
	b := histFirst
	for i := range out {
		out[i] = b
		b *= 2
	}
	return out
}

// Observe counts one duration.
func (h *Histogram) Observe(d time.Duration) {
	i, b := 0, histFirst
	for i < histBuckets && d > b {
		i++
		b *= 2
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// HistogramSnapshot is a Histogram's counts at one time: Counts[i] is the
// observations in bucket i (not cumulative), the last one above every
// bound.
type HistogramSnapshot struct {
	Counts []int64
	Sum    time.Duration
}

// Snapshot reads the counts.
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Counts: make([]int64, len(h.counts)), Sum: time.Duration(h.sum.Load())}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
	}
	return s
}
