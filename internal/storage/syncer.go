package storage

import (
	"log/slog"
	"sync"
	"sync/atomic"
)

// maxParallelSyncs bounds the fsyncs one cycle runs at once: enough to keep
// a device queue busy, few enough not to thrash.
const maxParallelSyncs = 16

// Syncer is the node's group-commit engine: while one fsync cycle runs, new
// requests queue; the next cycle fsyncs every log that asked (in parallel)
// and each log then wakes all its waiters. One per node, shared by all logs.
type Syncer struct {
	logger *slog.Logger

	mu      sync.Mutex
	pending map[*Log]struct{}
	running map[*Log]struct{} // logs in the current cycle
	closed  bool
	kick    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup

	cycles, fsyncs, requests atomic.Int64
}

// SyncerStats counts the Syncer's work: Requests/Cycles shows how many
// waiters one fsync cycle served.
type SyncerStats struct {
	Cycles, Fsyncs, Requests int64
}

// NewSyncer starts a Syncer.
func NewSyncer(logger *slog.Logger) *Syncer {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Syncer{
		logger:  logger,
		pending: map[*Log]struct{}{},
		running: map[*Log]struct{}{},
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	s.wg.Add(1)
	go s.loop()
	return s
}

var (
	defaultSyncerOnce sync.Once
	defaultSyncerV    *Syncer
)

func defaultSyncer() *Syncer {
	defaultSyncerOnce.Do(func() { defaultSyncerV = NewSyncer(nil) })
	return defaultSyncerV
}

// Stats returns the counters.
func (s *Syncer) Stats() SyncerStats {
	return SyncerStats{Cycles: s.cycles.Load(), Fsyncs: s.fsyncs.Load(), Requests: s.requests.Load()}
}

// request queues l for the next cycle. After Close it syncs inline, so
// waiters never hang.
func (s *Syncer) request(l *Log) {
	s.requests.Add(1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.fsyncs.Add(1)
		if err := l.syncOnce(); err != nil {
			s.logger.Debug("storage: sync", "dir", l.dir, "err", err)
		}
		return
	}
	s.pending[l] = struct{}{}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// isIdle reports whether l is neither queued nor being synced (a waiter
// whose wake-up did not satisfy it must ask again).
func (s *Syncer) isIdle(l *Log) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, p := s.pending[l]
	_, r := s.running[l]
	return !p && !r
}

func (s *Syncer) loop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.kick:
		case <-s.done:
			return
		}
		s.mu.Lock()
		batch := s.pending
		s.pending = map[*Log]struct{}{}
		s.running = batch
		s.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		s.cycle(batch)
		s.mu.Lock()
		s.running = map[*Log]struct{}{}
		s.mu.Unlock()
	}
}

// cycle fsyncs every log of batch, in parallel, and returns when all are done.
func (s *Syncer) cycle(batch map[*Log]struct{}) {
	s.cycles.Add(1)
	s.fsyncs.Add(int64(len(batch)))
	if len(batch) == 1 {
		for l := range batch {
			s.syncLog(l)
		}
		return
	}
	sem := make(chan struct{}, maxParallelSyncs)
	var wg sync.WaitGroup
	for l := range batch {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.syncLog(l)
		}()
	}
	wg.Wait()
}

func (s *Syncer) syncLog(l *Log) {
	// syncOnce wakes the log's waiters itself, with success or the error.
	if err := l.syncOnce(); err != nil {
		s.logger.Warn("storage: fsync cycle failed", "dir", l.dir, "err", err)
	}
}

// Close stops the cycle goroutine; later requests sync inline.
func (s *Syncer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	s.wg.Wait()
	// Serve whatever was queued when Close ran.
	s.mu.Lock()
	batch := s.pending
	s.pending = map[*Log]struct{}{}
	s.mu.Unlock()
	if len(batch) > 0 {
		s.cycle(batch)
	}
	return nil
}
