package storage

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// maxParallelSyncs bounds the fsyncs one cycle runs at once: enough to keep
// a device queue busy, few enough not to thrash.
const maxParallelSyncs = 16

// groupWriters: goroutines writing out the logs of one syncfs group.
const groupWriters = 8

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

	noSyncfs bool

	journal *DataJournal // SetJournal (journalround.go); nil: none

	// The index creator (indexcreate.go): one goroutine making active
	// segments' index files off the sync cycle.
	idxMu       sync.Mutex
	idxJobs     []indexJob
	idxRunning  bool
	idxClosed   bool
	idxIdle     *sync.Cond // on idxMu: the queue emptied
	idxKick     chan struct{}
	manualIndex bool // tests: jobs wait for runIndexJobs

	cycles, fsyncs, syncfs, requests atomic.Int64
	latency                          Histogram // of each fdatasync or syncfs

	// writes: the bytes the segment files of this Syncer's logs were
	// written (appendbuf.go), one count per node.
	writes writeCounters
}

// syncfsMinLogs: from this many logs of one filesystem in a cycle, one
// syncfs replaces their fdatasyncs.
const syncfsMinLogs = 4

// SyncerStats counts the Syncer's work: Requests/Cycles shows how many
// waiters one fsync cycle served.
type SyncerStats struct {
	Cycles, Fsyncs, Syncfs, Requests int64
}

// DisableSyncfs makes every cycle use one fdatasync per log (for
// comparison, or a filesystem where syncfs is slow). Call before use.
func (s *Syncer) DisableSyncfs() { s.noSyncfs = true }

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
		idxKick: make(chan struct{}, 1),
	}
	s.idxIdle = sync.NewCond(&s.idxMu)
	s.wg.Add(2)
	go s.loop()
	go s.indexLoop()
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
	return SyncerStats{Cycles: s.cycles.Load(), Fsyncs: s.fsyncs.Load(), Syncfs: s.syncfs.Load(), Requests: s.requests.Load()}
}

// Latency returns the durations of the fsyncs (and syncfs calls) so far.
func (s *Syncer) Latency() HistogramSnapshot { return s.latency.Snapshot() }

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

// cycle fsyncs every log of batch, in parallel, and returns when all are
// done. Logs sharing a filesystem are covered by one syncfs when there are
// enough of them.
func (s *Syncer) cycle(batch map[*Log]struct{}) {
	if s.journal != nil {
		s.journalCycle(batch)
		return
	}
	s.cycles.Add(1)
	s.cycleOld(batch, syncfsMinLogs)
}

// cycleOld is the cycle without the journal: from minGroup logs of one
// filesystem, one syncfs for them.
func (s *Syncer) cycleOld(batch map[*Log]struct{}, minGroup int) {
	var jobs []func()
	groups := map[uint64][]*Log{}
	for l := range batch {
		if l.dev != 0 && !s.noSyncfs {
			groups[l.dev] = append(groups[l.dev], l)
			continue
		}
		jobs = append(jobs, func() { s.syncLog(l) })
	}
	for _, ls := range groups {
		if len(ls) < minGroup {
			for _, l := range ls {
				jobs = append(jobs, func() { s.syncLog(l) })
			}
			continue
		}
		jobs = append(jobs, func() { s.syncGroup(ls) })
	}
	if len(jobs) == 1 {
		jobs[0]()
		return
	}
	sem := make(chan struct{}, maxParallelSyncs)
	var wg sync.WaitGroup
	for _, job := range jobs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			job()
		}()
	}
	wg.Wait()
}

// syncGroup makes every log of ls durable with one syncfs: the ends are
// captured first, so whatever was written before is covered.
//
// The logs' write-outs (syncBegin) run on up to groupWriters goroutines:
// an O_DIRECT write waits for the device, and one log's wait should not
// hold up the next log's write.
func (s *Syncer) syncGroup(ls []*Log) {
	slots := make([]syncTicket, len(ls))
	okAt := make([]bool, len(ls))
	var next atomic.Int64
	work := func() {
		for {
			i := int(next.Add(1)) - 1
			if i >= len(ls) {
				return
			}
			l := ls[i]
			t, ok, err := l.syncBegin()
			if err != nil {
				s.logger.Debug("storage: sync", "dir", l.dir, "err", err)
			}
			if !ok {
				continue
			}
			// A roll to make durable first (rare): its own fsyncs; a new
			// epoch's checkpoint goes with the shared syncfs
			// (syncPrepareGroup).
			if err := l.syncPrepareGroup(&t); err != nil {
				if e := t.syncEnd(err); e != nil {
					s.logger.Warn("storage: fsync cycle failed", "dir", t.l.dir, "err", e)
				}
				continue
			}
			slots[i], okAt[i] = t, true
		}
	}
	var wg sync.WaitGroup
	for range min(len(ls), groupWriters) - 1 {
		wg.Add(1)
		go func() { defer wg.Done(); work() }()
	}
	work()
	wg.Wait()
	var tickets []syncTicket
	for i, ok := range okAt {
		if ok {
			tickets = append(tickets, slots[i])
		}
	}
	if len(tickets) == 0 {
		return
	}
	s.syncfs.Add(1)
	start := time.Now()
	// What was written to the logs' cached files so far is clean once
	// the syncfs succeeds: closing them when idle needs no fdatasync.
	var marks []func()
	for _, t := range tickets {
		if m := syncMarker(t.s.f); m != nil {
			marks = append(marks, m)
		}
	}
	err := syncFilesystemOf(tickets[0].s.f)
	errs := s.renameEpochs(tickets, &err)
	if err == nil {
		for _, m := range marks {
			m()
		}
	}
	s.latency.Observe(time.Since(start))
	for i, t := range tickets {
		t.named = err == nil // the syncfs made the segment's name durable too
		if e := t.syncEnd(errors.Join(err, errs[i])); e != nil {
			s.logger.Warn("storage: fsync cycle failed", "dir", t.l.dir, "err", e)
		}
	}
}

// renameEpochs puts in place the epoch checkpoints the group's first
// syncfs (err: its outcome) made durable, and makes the renames durable
// with a second one (err becomes its outcome): errs[i] is ticket i's own
// failure.
func (s *Syncer) renameEpochs(tickets []syncTicket, err *error) []error {
	errs := make([]error, len(tickets))
	renamed := false
	for i := range tickets {
		if tickets[i].epochsInPlace {
			tickets[i].l.sealMu.Unlock() // written in place: the syncfs made it durable, nothing to rename
			continue
		}
		if !tickets[i].epochsTmp {
			continue
		}
		r, rerr := tickets[i].l.epochsRename(&tickets[i], *err == nil)
		if *err == nil {
			errs[i] = rerr
		} else if rerr != nil {
			s.logger.Debug("storage: removing an epoch checkpoint's temp file", "dir", tickets[i].l.dir, "err", rerr)
		}
		renamed = renamed || r
	}
	if renamed && *err == nil {
		s.syncfs.Add(1)
		*err = syncFilesystemOf(tickets[0].s.f)
	}
	return errs
}

func (s *Syncer) syncLog(l *Log) {
	if err := s.fsync(l); err != nil {
		s.logger.Warn("storage: fsync cycle failed", "dir", l.dir, "err", err)
	}
}

// fsync is one log's fdatasync, counted and timed. syncOnce wakes the
// log's waiters itself, with success or the error.
func (s *Syncer) fsync(l *Log) error {
	s.fsyncs.Add(1)
	start := time.Now()
	err := l.syncOnce()
	s.latency.Observe(time.Since(start))
	return err
}

// syncNowOne is SyncNow for one log (Log.SyncNow): a cycle of its own on
// the caller's goroutine, counted and timed like the loop's.
func (s *Syncer) syncNowOne(l *Log) error {
	s.requests.Add(1)
	s.cycles.Add(1)
	return s.fsync(l)
}

// SyncNow runs one fsync cycle over logs on the caller's goroutine - the
// same cycle the Syncer's loop runs (syncfs for a device with many logs,
// parallel fdatasyncs otherwise) - for a caller that waits for it anyway
// (the Raft Ready loop's group commit), without the hand-off to the loop.
// It returns, for each log in order, nil if the log is durable up to the
// end it had when SyncNow began, else why not.
func (s *Syncer) SyncNow(logs []*Log) []error {
	ends := make([]int64, len(logs))
	batch := make(map[*Log]struct{}, len(logs))
	for i, l := range logs {
		ends[i] = l.EndOffset()
		batch[l] = struct{}{}
	}
	s.requests.Add(int64(len(logs)))
	s.cycle(batch)
	errs := make([]error, len(logs))
	for i, l := range logs {
		if l.DurableOffset() >= ends[i] {
			continue
		}
		if errs[i] = l.Failed(); errs[i] == nil {
			// A truncation or close raced the cycle: wait the usual way.
			errs[i] = l.WaitDurable(context.Background(), ends[i])
		}
	}
	return errs
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
	s.idxMu.Lock()
	s.idxClosed = true
	s.idxIdle.Broadcast()
	s.idxMu.Unlock()
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
