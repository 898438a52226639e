package storage

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// FlushMode says when appended data is fsynced.
type FlushMode int

const (
	// FlushSync: fsync (group commit) before an append is acknowledged.
	FlushSync FlushMode = iota
	// FlushInterval: fsync at most Interval after an append.
	FlushInterval
	// FlushOS: leave it to the page cache (Kafka's default); fsync only on
	// segment roll, Close, or an explicit Sync/WaitDurable.
	FlushOS
)

// FlushPolicy is a log's durability policy.
type FlushPolicy struct {
	Mode     FlushMode
	Interval time.Duration // FlushInterval only
}

// ParseFlushPolicy parses "sync", "interval:100ms" or "os".
func ParseFlushPolicy(s string) (FlushPolicy, error) {
	switch {
	case s == "sync" || s == "":
		return FlushPolicy{Mode: FlushSync}, nil
	case s == "os":
		return FlushPolicy{Mode: FlushOS}, nil
	case strings.HasPrefix(s, "interval:"):
		d, err := time.ParseDuration(strings.TrimPrefix(s, "interval:"))
		if err != nil {
			return FlushPolicy{}, fmt.Errorf("storage: flush policy %q: %w", s, err)
		}
		if d <= 0 || d > time.Hour {
			return FlushPolicy{}, fmt.Errorf("storage: flush policy %q: interval must be in (0, 1h]", s)
		}
		return FlushPolicy{Mode: FlushInterval, Interval: d}, nil
	}
	return FlushPolicy{}, fmt.Errorf("storage: flush policy %q: want sync, interval:<duration> or os", s)
}

func (p FlushPolicy) String() string {
	switch p.Mode {
	case FlushSync:
		return "sync"
	case FlushInterval:
		return "interval:" + p.Interval.String()
	case FlushOS:
		return "os"
	}
	return fmt.Sprintf("flush(%d)", int(p.Mode))
}

// Config is a log's configuration, named after Kafka's topic configs.
type Config struct {
	SegmentBytes       int64         // segment.bytes
	SegmentMs          time.Duration // segment.ms
	RetentionBytes     int64         // retention.bytes (-1 unlimited)
	RetentionMs        time.Duration // retention.ms (<0 unlimited)
	MaxMessageBytes    int           // max.message.bytes
	IndexIntervalBytes int           // index.interval.bytes
	Flush              FlushPolicy
	// FlushMessages is flush.messages: with a policy other than sync, an
	// fsync is started (in the background) each time this many records
	// were appended since the last one; 0 or 1 add nothing (1 is sync,
	// which the caller expresses as Flush).
	FlushMessages int64
	// SegmentJitter is segment.jitter.ms: each segment rolls a random
	// time in [0, SegmentJitter) before SegmentMs, so that logs created
	// together do not all roll at once.
	SegmentJitter time.Duration
	// IndexMaxEntries is segment.index.bytes / 8 (Kafka's offset index
	// entry size): a segment rolls once its offset index holds this many
	// entries. At most 1 Mi (Holdfast's per-segment bound).
	IndexMaxEntries int

	// Compaction (cleaner.go). Compact is cleanup.policy containing
	// "compact"; the rest are Kafka's topic configs of the same names.
	Compact           bool
	MinCompactionLag  time.Duration // min.compaction.lag.ms
	MaxCompactionLag  time.Duration // max.compaction.lag.ms; <= 0 for none
	MinCleanableRatio float64       // min.cleanable.dirty.ratio
	DeleteRetention   time.Duration // delete.retention.ms
}

// Limits applied by normalize so a bad config cannot break an invariant.
const (
	minSegmentBytes = 14 // Kafka's (LegacyRecord.RECORD_OVERHEAD_V0): a segment then holds one batch
	// Index positions are uint32; keep segments below 2 GiB as Kafka does.
	maxSegmentBytes       = 1<<31 - 1
	maxMaxMessageBytes    = 64 << 20
	maxIndexEntries       = 1 << 20 // per segment; the segment rolls when full
	defaultMaxMessageSize = 1048588
)

// DefaultConfig returns Kafka's defaults with flush=sync.
func DefaultConfig() Config {
	return Config{
		SegmentBytes:       1 << 30,
		SegmentMs:          7 * 24 * time.Hour,
		RetentionBytes:     -1,
		RetentionMs:        7 * 24 * time.Hour,
		MaxMessageBytes:    defaultMaxMessageSize,
		IndexIntervalBytes: 4096,
		Flush:              FlushPolicy{Mode: FlushSync},
		IndexMaxEntries:    maxIndexEntries,
		MinCleanableRatio:  0.5,
		DeleteRetention:    24 * time.Hour,
	}
}

// rollMs is how long after its first append a segment rolls: segment.ms,
// or max.compaction.lag.ms if shorter on a compacted log (Kafka's rule: the
// active segment is never cleaned, so it must roll for the lag to hold),
// less the segment's jitter.
func (c Config) rollMs(jitter time.Duration) int64 {
	d := c.SegmentMs
	if c.Compact && c.MaxCompactionLag > 0 {
		d = min(d, c.MaxCompactionLag)
	}
	return max((d - jitter).Milliseconds(), 1)
}

// normalize fills zero values with defaults and clamps to the limits.
func (c Config) normalize() Config {
	d := DefaultConfig()
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = d.SegmentBytes
	}
	c.SegmentBytes = min(max(c.SegmentBytes, minSegmentBytes), maxSegmentBytes)
	if c.SegmentMs <= 0 {
		c.SegmentMs = d.SegmentMs
	}
	if c.RetentionBytes == 0 {
		c.RetentionBytes = d.RetentionBytes
	}
	if c.RetentionMs == 0 {
		c.RetentionMs = d.RetentionMs
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = d.MaxMessageBytes
	}
	c.MaxMessageBytes = min(c.MaxMessageBytes, maxMaxMessageBytes)
	if c.IndexIntervalBytes <= 0 {
		c.IndexIntervalBytes = d.IndexIntervalBytes
	}
	if c.IndexMaxEntries <= 0 || c.IndexMaxEntries > maxIndexEntries {
		c.IndexMaxEntries = maxIndexEntries
	}
	c.SegmentJitter = max(c.SegmentJitter, 0)
	c.MinCleanableRatio = min(max(c.MinCleanableRatio, 0), 1)
	c.MinCompactionLag = max(c.MinCompactionLag, 0)
	c.DeleteRetention = max(c.DeleteRetention, 0)
	if c.Flush.Mode == FlushInterval && c.Flush.Interval <= 0 {
		c.Flush.Interval = time.Second
	}
	return c
}

// configs interns the logs' configurations: a node's partitions share a
// handful (a topic's partitions one), and a Config held by value in each
// Log was 128 bytes per partition (issue 27). Bounded: past
// maxInternedConfigs distinct values a log keeps its own copy.
var configs struct {
	mu sync.Mutex
	m  map[Config]*Config
}

const maxInternedConfigs = 4096

// internConfig returns a shared copy of c. Nobody changes a Config through
// the pointer: Log.SetConfig swaps it.
func internConfig(c Config) *Config {
	configs.mu.Lock()
	defer configs.mu.Unlock()
	if p := configs.m[c]; p != nil {
		return p
	}
	p := &c
	if configs.m == nil {
		configs.m = map[Config]*Config{}
	}
	if len(configs.m) < maxInternedConfigs {
		configs.m[c] = p
	}
	return p
}
