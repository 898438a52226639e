package replica

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"holdfast/internal/metadata"
	"holdfast/internal/partition"
	"holdfast/internal/storage"
)

// The log cleaner: cleanup.policy=compact for every topic that asks for
// it, the internal topics included. Threads (log.cleaner.threads) each
// take the dirtiest due partition of this node, run one pass
// (storage.Log.Clean, see docs/compaction.md) and look again; when
// nothing is due they sleep log.cleaner.backoff.ms. One throttle
// (log.cleaner.io.max.bytes.per.second) bounds their I/O together, and
// log.cleaner.dedupe.buffer.size is shared out among them as offset maps.
// Every replica cleans its own log, within the limits
// partition.CleanLimits gives.

// CleanerConfig is the log cleaner's config (Kafka's log.cleaner.*).
type CleanerConfig struct {
	Enable              bool          // log.cleaner.enable
	Threads             int           // log.cleaner.threads
	DedupeBufferSize    int64         // log.cleaner.dedupe.buffer.size, shared by the threads
	IOBufferSize        int           // log.cleaner.io.buffer.size
	IOMaxBytesPerSecond float64       // log.cleaner.io.max.bytes.per.second; <= 0: unlimited
	Backoff             time.Duration // log.cleaner.backoff.ms
}

// Bounds of the cleaner's config.
const (
	maxCleanerThreads    = 64
	minDedupeBufferBytes = 1 << 20
)

// DefaultCleanerConfig is Kafka's defaults.
func DefaultCleanerConfig() CleanerConfig {
	return CleanerConfig{Enable: true, Threads: 1, DedupeBufferSize: 128 << 20, IOBufferSize: 512 << 10, Backoff: 15 * time.Second}
}

// Validate checks the config's bounds.
func (c CleanerConfig) Validate() error {
	switch {
	case c.Threads < 1 || c.Threads > maxCleanerThreads:
		return fmt.Errorf("log.cleaner.threads %d: want 1..%d", c.Threads, maxCleanerThreads)
	case c.DedupeBufferSize < int64(c.Threads)*minDedupeBufferBytes:
		return fmt.Errorf("log.cleaner.dedupe.buffer.size %d: want at least 1 MiB per cleaner thread", c.DedupeBufferSize)
	case c.DedupeBufferSize > 1<<40:
		return fmt.Errorf("log.cleaner.dedupe.buffer.size %d: too large", c.DedupeBufferSize)
	case c.IOBufferSize < 4<<10 || c.IOBufferSize > 64<<20:
		return fmt.Errorf("log.cleaner.io.buffer.size %d: want 4 KiB..64 MiB", c.IOBufferSize)
	case c.Backoff <= 0:
		return fmt.Errorf("log.cleaner.backoff.ms %v: must be positive", c.Backoff)
	}
	return nil
}

// CleanerStats is what the cleaner shows (metrics, named after Kafka's
// kafka.log:type=LogCleaner and LogCleanerManager).
type CleanerStats struct {
	Enabled                 bool
	Threads                 int
	Runs, Aborted, Failed   int64
	BytesRead, BytesWritten int64
	BytesReclaimed          int64 // segment bytes before minus after, over all passes
	RecordsRemoved          int64
	TombstonesRemoved       int64
	MarkersRemoved          int64
	MaxBufferUtilization    float64       // of the last pass of each thread, the highest
	RecopyPercent           float64       // the last pass: bytes written / bytes of the segments rewritten
	MaxCleanTime            time.Duration // the last pass of each thread, the longest
	MaxDirtyPercent         float64       // the dirtiest compacted partition at the last look
	MaxCompactionDelay      time.Duration // how far past max.compaction.lag.ms the worst partition is
	Uncleanable             int           // partitions the cleaner gave up on (until restart)
	SinceLastRun            time.Duration
	Throttled               time.Duration // total time the I/O throttle made threads wait
	Partitions              []CleanerPartition
	lastRun                 time.Time
	lastUtil, lastTime      map[int]float64
}

// CleanerPartition is one compacted partition of this node.
type CleanerPartition struct {
	Topic       string
	Partition   int32
	Internal    bool // __consumer_offsets, __transaction_state
	DirtyRatio  float64
	FirstDirty  int64 // the cleaner checkpoint: progress
	Uncleanable bool
}

type logCleaner struct {
	m        *Manager
	cfg      CleanerConfig
	throttle *storage.Throttle
	wake     chan struct{}

	mu          sync.Mutex
	busy        map[*storage.Log]bool
	uncleanable map[*storage.Log]string
	stats       CleanerStats
	topics      *metadata.TopicsCache
}

// startCleaner starts the cleaner's threads (none if it is disabled).
func (m *Manager) startCleaner() error {
	cfg := m.cfg.Cleaner
	if cfg == (CleanerConfig{}) {
		cfg = DefaultCleanerConfig()
	}
	lc := &logCleaner{m: m, cfg: cfg, wake: make(chan struct{}, 1),
		busy: map[*storage.Log]bool{}, uncleanable: map[*storage.Log]string{}, topics: m.meta.NewTopicsCache()}
	lc.stats.Enabled, lc.stats.Threads = cfg.Enable, cfg.Threads
	lc.stats.lastUtil, lc.stats.lastTime = map[int]float64{}, map[int]float64{}
	m.cleaner = lc
	if !cfg.Enable {
		m.log.Warn("log cleaner disabled (log.cleaner.enable=false): compacted topics, __consumer_offsets and __transaction_state grow without bound")
		return nil
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	lc.throttle = storage.NewThrottle(cfg.IOMaxBytesPerSecond)
	for i := 0; i < cfg.Threads; i++ {
		m.goLoop(func(stop <-chan struct{}) { lc.thread(i, stop) })
	}
	return nil
}

// KickCleaner makes idle cleaner threads look for work now (tests, and
// after a config change).
func (m *Manager) KickCleaner() {
	if m.cleaner == nil {
		return
	}
	select {
	case m.cleaner.wake <- struct{}{}:
	default:
	}
}

func (lc *logCleaner) thread(id int, stop <-chan struct{}) {
	var m *storage.OffsetMap // allocated at the first pass: a node without dirty compacted logs never pays for it
	for {
		select {
		case <-stop:
			return
		default:
		}
		p, ok := lc.pick()
		if !ok {
			t := lc.m.clk.NewTimer(lc.cfg.Backoff)
			select {
			case <-stop:
				t.Stop()
				return
			case <-lc.wake:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		if m == nil {
			m = storage.NewOffsetMap(int(lc.cfg.DedupeBufferSize / int64(lc.cfg.Threads)))
			if lc.m.cfg.OnHeld != nil {
				lc.m.cfg.OnHeld(int64(m.Bytes()))
			}
		}
		lc.clean(id, p, m, stop)
	}
}

// pick reserves the dirtiest due compacted partition of this node.
func (lc *logCleaner) pick() (*partition.Partition, bool) {
	type cand struct {
		p *partition.Partition
		c storage.Cleanable
	}
	var cands []cand
	var parts []CleanerPartition
	open := map[*storage.Log]bool{}
	maxDirty, maxDelay := 0.0, time.Duration(0)
	// Shared and read only: no copy of every topic each pass.
	for _, t := range lc.topics.Topics() {
		// A topic's replicas share its config: one not compacted is passed
		// over whole after its first open replica here (10,000 partitions
		// of a delete-policy topic were looked up one by one every pass).
		skip := false
		for i := int32(0); i < t.Partitions && !skip; i++ {
			p := lc.m.parts.Get(t.Name, i)
			if p == nil {
				continue
			}
			if !p.Log().Config().Compact {
				skip = true
				continue
			}
			l := p.Log()
			open[l] = true
			committed, removeBelow := p.CleanLimits()
			c, err := l.CleanableState(committed, removeBelow)
			if err != nil {
				continue
			}
			maxDirty = max(maxDirty, c.Ratio)
			maxDelay = max(maxDelay, c.CompactionDelay)
			lc.mu.Lock()
			_, bad := lc.uncleanable[l]
			busy := lc.busy[l]
			lc.mu.Unlock()
			parts = append(parts, CleanerPartition{Topic: t.Name, Partition: i, Internal: t.Internal, DirtyRatio: c.Ratio, FirstDirty: c.FirstDirty, Uncleanable: bad})
			if !bad && !busy && c.Due {
				cands = append(cands, cand{p, c})
			}
		}
	}
	sort.Slice(parts, func(i, j int) bool {
		if parts[i].Topic != parts[j].Topic {
			return parts[i].Topic < parts[j].Topic
		}
		return parts[i].Partition < parts[j].Partition
	})
	// Overdue logs (max.compaction.lag.ms) first, then the dirtiest.
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].c.MaxLagExceeded != cands[j].c.MaxLagExceeded {
			return cands[i].c.MaxLagExceeded
		}
		return cands[i].c.Ratio > cands[j].c.Ratio
	})
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for l := range lc.uncleanable {
		if !open[l] {
			delete(lc.uncleanable, l) // deleted or reopened: a fresh start
		}
	}
	lc.stats.Partitions, lc.stats.MaxDirtyPercent, lc.stats.Uncleanable = parts, 100*maxDirty, len(lc.uncleanable)
	lc.stats.MaxCompactionDelay = maxDelay
	for _, c := range cands {
		if !lc.busy[c.p.Log()] {
			lc.busy[c.p.Log()] = true
			return c.p, true
		}
	}
	return nil, false
}

// clean runs one pass on p and accounts for it.
func (lc *logCleaner) clean(id int, p *partition.Partition, m *storage.OffsetMap, stop <-chan struct{}) {
	l := p.Log()
	defer func() {
		lc.mu.Lock()
		delete(lc.busy, l)
		lc.mu.Unlock()
	}()
	res, err := p.Clean(storage.CleanOptions{Map: m, Throttle: lc.throttle, IOBuffer: lc.cfg.IOBufferSize, Stop: stop})
	lg := lc.m.log.With("topic", p.Topic(), "partition", p.Index())
	lc.mu.Lock()
	defer lc.mu.Unlock()
	s := &lc.stats
	s.lastRun = time.Now()
	s.BytesRead += res.BytesRead
	s.BytesWritten += res.BytesWritten
	s.Throttled = lc.throttle.Slept()
	switch {
	case err == nil:
	case errors.Is(err, storage.ErrCleanAborted), errors.Is(err, storage.ErrClosed), errors.Is(err, storage.ErrCleaning):
		s.Aborted++
		lg.Debug("log cleaning aborted", "err", err)
		return
	default:
		// Kafka's rule: a partition the cleaner failed on is left alone
		// (and counted) until the next start.
		s.Failed++
		lc.uncleanable[l] = err.Error()
		lg.Warn("log cleaning failed; partition marked uncleanable until restart", "err", err)
		return
	}
	s.Runs++
	s.BytesReclaimed += res.BytesBefore - res.BytesAfter
	s.RecordsRemoved += res.RecordsRemoved
	s.TombstonesRemoved += res.Tombstones
	s.MarkersRemoved += res.Markers
	s.lastUtil[id], s.lastTime[id] = res.MapUtilization, res.Took.Seconds()
	if res.BytesBefore > 0 {
		s.RecopyPercent = 100 * float64(res.BytesAfter) / float64(res.BytesBefore)
	}
	s.MaxBufferUtilization, s.MaxCleanTime = 0, 0
	for k := range s.lastUtil {
		s.MaxBufferUtilization = max(s.MaxBufferUtilization, s.lastUtil[k])
		s.MaxCleanTime = max(s.MaxCleanTime, time.Duration(s.lastTime[k]*float64(time.Second)))
	}
	if res.Segments > 0 {
		lg.Info("log cleaned", "first_dirty", res.FirstDirty, "end", res.End, "segments", res.Segments, "segments_after", res.SegmentsAfter,
			"bytes_before", res.BytesBefore, "bytes_after", res.BytesAfter, "records_removed", res.RecordsRemoved,
			"tombstones_removed", res.Tombstones, "markers_removed", res.Markers, "took", res.Took.Round(time.Millisecond))
	}
}

// CleanerStats returns the cleaner's figures.
func (m *Manager) CleanerStats() CleanerStats {
	lc := m.cleaner
	if lc == nil {
		return CleanerStats{}
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	s := lc.stats
	s.Partitions = append([]CleanerPartition(nil), s.Partitions...)
	s.Throttled = lc.throttle.Slept()
	if !s.lastRun.IsZero() {
		s.SinceLastRun = time.Since(s.lastRun)
	}
	s.lastUtil, s.lastTime = nil, nil
	return s
}
