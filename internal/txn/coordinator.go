package txn

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/clock"
	"holdfast/internal/records"
)

// The transaction coordinator (KIP-98). Each transactional id has one
// metadata record in __transaction_state (Kafka's TxnMetadataKey/Value
// formats), in partition abs(javaHashCode(id)) % N; the last record per id
// is its state, rebuilt by replay at start-up.
//
// Commit and abort are two-phase: PrepareCommit/PrepareAbort is made
// durable first, then a marker is written to every partition of the
// transaction, then CompleteCommit/CompleteAbort. A crash after the Prepare
// record is finished by replay, which rewrites the markers: a transaction
// whose commit was acknowledged is committed everywhere.

// Config holds the coordinator's settings; Kafka's names in the comments.
type Config struct {
	StatePartitions int32         // transaction.state.log.num.partitions (50)
	MaxTimeout      time.Duration // transaction.max.timeout.ms (15 minutes)
	AbortInterval   time.Duration // transaction.abort.timed.out.transaction.cleanup.interval.ms (10 s)
	IDExpiration    time.Duration // transactional.id.expiration.ms (7 days)

	// AfterPrepare, for tests, runs once a Prepare record is durable and
	// before any marker is written; returning true abandons the
	// transaction there, as a crash at that point would.
	AfterPrepare func(transactionalID string) bool
}

// concurrentWait bounds how long InitProducerId waits for the previous
// transaction of its id to complete before answering CONCURRENT_TRANSACTIONS.
const concurrentWait = 5 * time.Second

// DefaultConfig is Kafka's defaults.
func DefaultConfig() Config {
	return Config{StatePartitions: 50, MaxTimeout: 15 * time.Minute, AbortInterval: 10 * time.Second, IDExpiration: 7 * 24 * time.Hour}
}

// Log is one partition of __transaction_state.
type Log interface {
	Append(batch []byte) (end int64, err error)
	WaitCommitted(ctx context.Context, end int64) error
	Scan(fn func(batch []byte) error) error
}

// TopicPartition names a partition of a transaction.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// MarkerWriter writes a transaction's markers and returns once each is
// committed.
type MarkerWriter func(ctx context.Context, producerID int64, epoch int16, commit bool, parts []TopicPartition) error

// Options are the coordinator's collaborators.
type Options struct {
	Logger  *slog.Logger
	IDs     *IDAllocator
	Markers MarkerWriter
	// Clock drives the timeout loop (every AbortInterval) and
	// InitProducerID's wait for a completion; nil: the wall clock.
	Clock clock.Clock
	// Now tells the time of transactions' starts and timeouts; nil:
	// Clock's.
	Now func() time.Time
	// NextID, if set, allocates producer ids instead of IDs (as the
	// coordinator host sets it: blocks committed through the metadata log). It may wait for a
	// round trip, so it is never called with the coordinator's lock held.
	NextID func(context.Context) (int64, error)
	// Unowned starts every partition as led by another node, as the
	// coordinator host always does: its transactional ids answer
	// NOT_COORDINATOR until LoadPartition.
	Unowned bool
	// Leading reports whether this node leads __transaction_state
	// partition p now (its Raft leader): an unowned partition it leads is
	// about to load, and its ids answer COORDINATOR_LOAD_IN_PROGRESS, as
	// Kafka's do between the election and the load, not NOT_COORDINATOR
	// (which sends the client to look again for the node it just found).
	Leading func(p int32) bool
}

// Partition states of a coordinator.
const (
	partLoaded  = 0 // ours and replayed
	partUnowned = 1 // another node leads it
	partLoading = 2 // ours, replaying
)

// State is a transaction's state (Kafka's TransactionState numbering).
type State = kmsg.TransactionState

type txnMeta struct {
	id      string
	pid     int64
	epoch   int16
	timeout time.Duration
	state   State
	parts   map[TopicPartition]struct{}
	start   time.Time // of the ongoing transaction
	updated time.Time
	// timedOut is the epoch the producer had when the coordinator aborted
	// its transaction for taking too long (-1 if not): that producer is not
	// a zombie, and may recover with InitProducerId (KIP-360).
	timedOut int16

	// KIP-890 part 2 (EndTxn v5, transaction.version 2): tv2 is set once the
	// producer ended a transaction with EndTxn v5 (persisted as
	// ClientTransactionVersion 2). Every such EndTxn bumps the epoch;
	// lastEpoch is the epoch before the last bump (-1 if none), which a
	// retried EndTxn whose answer was lost still names. When the epoch is
	// exhausted the EndTxn also moves the producer to a new id: nextPID
	// (from Prepare until Complete, -1 otherwise), prevPID the id before it.
	tv2       bool
	lastEpoch int16
	nextPID   int64
	prevPID   int64

	// done is non-nil while markers are being written; closed when the
	// transaction reaches Complete*.
	done chan struct{}
}

// Coordinator runs the transactions whose state is on this node.
type Coordinator struct {
	cfg  Config
	opts Options
	log  *slog.Logger
	logs []Log

	mu     sync.Mutex
	txns   map[string]*txnMeta
	byPID  map[int64]*txnMeta
	closed bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	parts   []atomic.Int32  // per __transaction_state partition: part* state
	gens    []atomic.Uint64 // per partition: bumped by Load/UnloadPartition
	looping bool            // the timeout loop runs (mu)
}

// New returns a coordinator over the partitions of __transaction_state.
// Call Load before serving.
func New(cfg Config, logs []Log, opts Options) *Coordinator {
	def := DefaultConfig()
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = def.MaxTimeout
	}
	if cfg.AbortInterval <= 0 {
		cfg.AbortInterval = def.AbortInterval
	}
	if cfg.IDExpiration <= 0 {
		cfg.IDExpiration = def.IDExpiration
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Clock = clock.OrReal(opts.Clock)
	if opts.Now == nil {
		opts.Now = opts.Clock.Now
	}
	if len(logs) == 0 || (opts.IDs == nil && opts.NextID == nil) || opts.Markers == nil {
		panic("txn: coordinator needs logs, an id allocator and a marker writer")
	}
	c := &Coordinator{cfg: cfg, opts: opts, log: opts.Logger, logs: logs,
		txns: map[string]*txnMeta{}, byPID: map[int64]*txnMeta{},
		parts: make([]atomic.Int32, len(logs)), gens: make([]atomic.Uint64, len(logs))}
	if opts.NextID == nil {
		c.opts.NextID = func(context.Context) (int64, error) { return opts.IDs.Next() }
	}
	if opts.Unowned {
		for i := range c.parts {
			c.parts[i].Store(partUnowned)
		}
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// PartitionFor is the __transaction_state partition of a transactional id:
// Kafka's Utils.abs(id.hashCode()) % partitions.
func PartitionFor(id string, partitions int) int32 {
	var h int32
	for _, r := range id { // Java's String.hashCode, over UTF-16 code units
		if r >= 0x10000 {
			r -= 0x10000
			h = 31*h + int32(0xD800+(r>>10))
			h = 31*h + int32(0xDC00+(r&0x3FF))
			continue
		}
		h = 31*h + int32(r)
	}
	if h == math.MinInt32 {
		h = 0
	} else if h < 0 {
		h = -h
	}
	return h % int32(partitions)
}

func (c *Coordinator) logFor(id string) Log { return c.logs[PartitionFor(id, len(c.logs))] }

// Close stops the timeout loop and waits for marker writes in flight (their
// contexts are cancelled; replay finishes them after a restart).
func (c *Coordinator) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	return nil
}

// Load replays every partition, finishes the transactions a crash left in
// a Prepare state, and starts the loop that aborts timed-out transactions.
func (c *Coordinator) Load() error {
	for i, l := range c.logs {
		if err := c.replay(int32(i), l); err != nil {
			return err
		}
	}
	c.mu.Lock()
	var resume []*txnMeta
	for _, m := range c.txns {
		if m.state == kmsg.TransactionStatePrepareCommit || m.state == kmsg.TransactionStatePrepareAbort {
			m.done = make(chan struct{})
			resume = append(resume, m)
		}
	}
	for _, m := range resume {
		c.log.Info("completing a transaction left prepared", "transactional_id", m.id, "state", m.state.String())
		c.completeAsyncLocked(m)
	}
	c.looping = c.spawnLocked(c.timeoutLoop)
	c.mu.Unlock()
	return nil
}

// ownerErr is NOT_COORDINATOR for an id whose partition another node
// leads, COORDINATOR_LOAD_IN_PROGRESS while it replays or is about to
// (Options.Leading), else nil.
func (c *Coordinator) ownerErr(id string) error {
	p := PartitionFor(id, len(c.logs))
	switch c.parts[p].Load() {
	case partUnowned:
		if c.opts.Leading != nil && c.opts.Leading(p) {
			return kerr.CoordinatorLoadInProgress
		}
		return kerr.NotCoordinator
	case partLoading:
		return kerr.CoordinatorLoadInProgress
	}
	return nil
}

// LoadPartition makes this node the coordinator of partition p's
// transactional ids (it became the partition's leader; the caller makes
// sure the log holds everything committed before): p is replayed in the
// background, and transactions it left prepared are completed.
func (c *Coordinator) LoadPartition(p int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.dropLocked(p)
	gen := c.gens[p].Add(1)
	c.parts[p].Store(partLoading)
	c.spawnLocked(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.gens[p].Load() != gen || c.closed {
			return
		}
		// Under mu: the partition's ids are not served meanwhile anyway,
		// and replay fills the shared maps.
		if err := c.replay(p, c.logs[p]); err != nil {
			c.log.Error("replaying __transaction_state failed; stays loading until the next leadership change", "partition", p, "err", err)
			return
		}
		for _, m := range c.txns {
			if PartitionFor(m.id, len(c.logs)) != p || m.done != nil {
				continue
			}
			if m.state == kmsg.TransactionStatePrepareCommit || m.state == kmsg.TransactionStatePrepareAbort {
				c.log.Info("completing a transaction left prepared", "transactional_id", m.id, "state", m.state.String())
				m.done = make(chan struct{})
				c.completeAsyncLocked(m)
			}
		}
		if !c.looping {
			c.looping = c.spawnLocked(c.timeoutLoop)
		}
		c.parts[p].Store(partLoaded)
		c.log.Debug("loaded __transaction_state partition", "partition", p)
	})
}

// UnloadPartition drops partition p's transactional ids: this node no
// longer leads it, and their requests answer NOT_COORDINATOR. A completion
// in flight finishes its marker writes (harmless: the new leader replays
// the Prepare record and writes them again) but cannot record itself.
func (c *Coordinator) UnloadPartition(p int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gens[p].Add(1)
	c.parts[p].Store(partUnowned)
	c.dropLocked(p)
	c.log.Debug("unloaded __transaction_state partition", "partition", p)
}

func (c *Coordinator) dropLocked(p int32) {
	for id, m := range c.txns {
		if PartitionFor(id, len(c.logs)) == p {
			delete(c.txns, id)
			if c.byPID[m.pid] == m {
				delete(c.byPID, m.pid)
			}
		}
	}
}

// NumPartitions is the number of __transaction_state partitions.
func (c *Coordinator) NumPartitions() int { return len(c.logs) }

// Loaded reports whether partition p is this node's and replayed.
func (c *Coordinator) Loaded(p int32) bool { return c.parts[p].Load() == partLoaded }

func (c *Coordinator) replay(p int32, l Log) error {
	n := 0
	err := l.Scan(func(batch []byte) error {
		h, err := records.ParseHeader(batch)
		if err != nil {
			return err
		}
		if h.IsControl() {
			return nil
		}
		recs, err := records.Records(batch)
		if err != nil {
			return err
		}
		for _, r := range recs {
			n++
			var k kmsg.TxnMetadataKey
			if err := k.ReadFrom(r.Key); err != nil {
				return fmt.Errorf("offset %d: key: %w", r.Offset, err)
			}
			if old := c.txns[k.TransactionalID]; old != nil {
				delete(c.byPID, old.pid)
				delete(c.txns, k.TransactionalID)
			}
			if r.Value == nil {
				continue
			}
			var v kmsg.TxnMetadataValue
			if err := v.ReadFrom(r.Value); err != nil {
				return fmt.Errorf("offset %d: value: %w", r.Offset, err)
			}
			m := &txnMeta{id: k.TransactionalID, pid: v.ProducerID, epoch: v.ProducerEpoch, timedOut: -1, lastEpoch: -1, nextPID: -1, prevPID: -1,
				timeout: time.Duration(v.TimeoutMillis) * time.Millisecond, state: v.State,
				parts: map[TopicPartition]struct{}{}, start: time.UnixMilli(v.StartTimestamp), updated: time.UnixMilli(v.LastUpdateTimestamp)}
			for _, t := range v.Topics {
				for _, pp := range t.Partitions {
					m.parts[TopicPartition{t.Topic, pp}] = struct{}{}
				}
			}
			if v.Version >= 1 {
				m.tv2 = v.ClientTransactionVersion >= 2
				m.nextPID, m.prevPID = v.NextProducerID, v.PreviousProducerID
			}
			if m.tv2 {
				switch m.state {
				case kmsg.TransactionStatePrepareCommit, kmsg.TransactionStatePrepareAbort,
					kmsg.TransactionStateCompleteCommit, kmsg.TransactionStateCompleteAbort:
					// The EndTxn that decided it bumped the epoch: its
					// retry names the one before (after a new id: the
					// exhausted one).
					m.lastEpoch = m.epoch - 1
					if m.prevPID >= 0 && m.nextPID < 0 {
						m.lastEpoch = math.MaxInt16 - 1
					}
				}
			}
			c.txns[m.id] = m
			c.byPID[m.pid] = m
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("replay __transaction_state-%d: %w", p, err)
	}
	c.log.Debug("loaded __transaction_state partition", "partition", p, "records", n)
	return nil
}

// persist appends m's current state; the caller holds mu. It returns the
// offset to wait for.
func (c *Coordinator) persist(m *txnMeta) (Log, int64, error) {
	k := kmsg.NewTxnMetadataKey()
	k.TransactionalID = m.id
	v := kmsg.NewTxnMetadataValue()
	v.ProducerID, v.ProducerEpoch = m.pid, m.epoch
	if m.tv2 || m.nextPID >= 0 || m.prevPID >= 0 {
		// Kafka 4's TxnMetadataValue v1, with KIP-890 part 2's tags.
		v.Version = 1
		v.NextProducerID, v.PreviousProducerID = m.nextPID, m.prevPID
		if m.tv2 {
			v.ClientTransactionVersion = 2
		}
	}
	v.TimeoutMillis = int32(m.timeout / time.Millisecond)
	v.State = m.state
	v.LastUpdateTimestamp = m.updated.UnixMilli()
	v.StartTimestamp = -1
	if m.state != kmsg.TransactionStateEmpty {
		v.StartTimestamp = m.start.UnixMilli()
	}
	for _, tp := range m.sortedParts() {
		if n := len(v.Topics); n == 0 || v.Topics[n-1].Topic != tp.Topic {
			t := kmsg.NewTxnMetadataValueTopic()
			t.Topic = tp.Topic
			v.Topics = append(v.Topics, t)
		}
		t := &v.Topics[len(v.Topics)-1]
		t.Partitions = append(t.Partitions, tp.Partition)
	}
	batch, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]records.Record{{Timestamp: m.updated.UnixMilli(), Key: k.AppendTo(nil), Value: v.AppendTo(nil)}})
	if err != nil {
		return nil, 0, err
	}
	l := c.logFor(m.id)
	end, err := l.Append(batch)
	return l, end, err
}

func (m *txnMeta) sortedParts() []TopicPartition {
	out := make([]TopicPartition, 0, len(m.parts))
	for tp := range m.parts {
		out = append(out, tp)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// InitProducerID gives the transactional id its producer id and a bumped
// epoch, fencing every earlier producer with the same id; an ongoing
// transaction of the previous epoch is aborted first. reqPID/reqEpoch are
// the producer's current ones (KIP-360, -1 if none). It blocks (abort,
// fsync), so it runs in a Reply.
func (c *Coordinator) InitProducerID(ctx context.Context, id string, timeoutMs int32, reqPID int64, reqEpoch int16) (int64, int16, error) {
	if timeoutMs <= 0 || time.Duration(timeoutMs)*time.Millisecond > c.cfg.MaxTimeout {
		return -1, -1, kerr.InvalidTransactionTimeout
	}
	// A completion in progress (the previous transaction's markers) is
	// waited for a while, so the usual case needs no retry; past that the
	// client hears CONCURRENT_TRANSACTIONS and retries, as with Kafka.
	patience := c.opts.Clock.NewTimer(concurrentWait)
	defer patience.Stop()
	checked := false   // the named producer id/epoch was current once: our own bumps don't fence it
	spare := int64(-1) // a fresh producer id, allocated without the lock held
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return -1, -1, kerr.CoordinatorNotAvailable
		}
		if err := c.ownerErr(id); err != nil {
			c.mu.Unlock()
			return -1, -1, err
		}
		now := c.opts.Now()
		m := c.txns[id]
		if m != nil && m.done == nil && (m.state == kmsg.TransactionStatePrepareCommit || m.state == kmsg.TransactionStatePrepareAbort) {
			// Decided but not finished (a failed marker write): finish it
			// before anything else happens to this id.
			m.done = make(chan struct{})
			c.completeAsyncLocked(m)
		}
		if m != nil && m.done != nil {
			done := m.done
			c.mu.Unlock()
			select {
			case <-done:
				continue
			case <-patience.C:
				return -1, -1, kerr.ConcurrentTransactions
			case <-ctx.Done():
				return -1, -1, ctx.Err()
			}
		}
		if m != nil && reqPID >= 0 && !checked {
			if reqPID != m.pid || reqEpoch != m.epoch && reqEpoch != m.timedOut {
				c.mu.Unlock()
				return -1, -1, kerr.ProducerFenced
			}
			checked = true
		}
		if m != nil && m.state == kmsg.TransactionStateOngoing {
			// Fence the old producer: its transaction ends as an abort
			// with the bumped epoch, then we come round again.
			prev := *m
			c.prepareLocked(m, false, true, now)
			l, end, err := c.persist(m)
			if err != nil {
				*m = prev
			}
			c.mu.Unlock()
			if err != nil {
				c.log.Warn("fencing: writing PrepareAbort failed", "transactional_id", id, "err", err)
				return -1, -1, kerr.CoordinatorNotAvailable
			}
			c.log.Info("fencing producer: aborting its ongoing transaction", "transactional_id", id, "producer_id", m.pid, "epoch", m.epoch)
			// The abort completes in the background; the loop waits for it.
			c.finish(context.Background(), m, l, end, false)
			continue
		}
		isNew := m == nil
		if (isNew || m.epoch >= math.MaxInt16-1) && spare < 0 {
			// A new id may wait for the controller: not under the lock.
			// The state is looked at afresh afterwards.
			c.mu.Unlock()
			pid, err := c.opts.NextID(ctx)
			if err != nil {
				c.log.Warn("allocating a producer id", "transactional_id", id, "err", err)
				return -1, -1, kerr.CoordinatorNotAvailable
			}
			spare = pid
			continue
		}
		if isNew {
			m = &txnMeta{id: id, pid: spare, epoch: -1, parts: map[TopicPartition]struct{}{}, lastEpoch: -1, nextPID: -1, prevPID: -1}
			spare = -1
		}
		prev := *m
		if m.epoch >= math.MaxInt16-1 {
			m.pid, m.epoch = spare, -1
			spare = -1
		}
		m.timedOut, m.lastEpoch, m.prevPID, m.nextPID = -1, -1, -1, -1
		m.epoch++
		m.timeout = time.Duration(timeoutMs) * time.Millisecond
		m.state = kmsg.TransactionStateEmpty
		m.parts = map[TopicPartition]struct{}{}
		m.updated = now
		l, end, err := c.persist(m)
		if err != nil {
			if isNew {
				c.mu.Unlock()
			} else {
				*m = prev
				c.mu.Unlock()
			}
			c.log.Warn("writing transaction state failed", "transactional_id", id, "err", err)
			return -1, -1, kerr.CoordinatorNotAvailable
		}
		if prev.pid != m.pid {
			delete(c.byPID, prev.pid)
		}
		c.txns[id] = m
		c.byPID[m.pid] = m
		pid, epoch := m.pid, m.epoch
		c.mu.Unlock()
		if err := l.WaitCommitted(ctx, end); err != nil {
			return -1, -1, kerr.CoordinatorNotAvailable
		}
		return pid, epoch, nil
	}
}

// check finds id's metadata and checks the producer; the caller holds mu.
func (c *Coordinator) check(id string, pid int64, epoch int16) (*txnMeta, error) {
	if c.closed {
		return nil, kerr.CoordinatorNotAvailable
	}
	if err := c.ownerErr(id); err != nil {
		return nil, err
	}
	m := c.txns[id]
	switch {
	case m == nil || m.pid != pid:
		return nil, kerr.InvalidProducerIDMapping
	case epoch != m.epoch:
		return nil, kerr.InvalidProducerEpoch
	}
	return m, nil
}

// AddPartitions adds partitions to id's transaction, starting one if none
// is ongoing. The state changes now (in request order); the returned wait
// reports when it is durable.
func (c *Coordinator) AddPartitions(id string, pid int64, epoch int16, parts []TopicPartition) func(context.Context) error {
	fail := func(err error) func(context.Context) error { return func(context.Context) error { return err } }
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.check(id, pid, epoch)
	if err != nil {
		return fail(err)
	}
	switch m.state {
	case kmsg.TransactionStatePrepareCommit, kmsg.TransactionStatePrepareAbort, kmsg.TransactionStatePrepareEpochFence:
		return fail(kerr.ConcurrentTransactions)
	case kmsg.TransactionStateDead:
		return fail(kerr.InvalidTxnState)
	}
	now := c.opts.Now()
	if m.state == kmsg.TransactionStateOngoing {
		missing := false
		for _, tp := range parts {
			if _, ok := m.parts[tp]; !ok {
				missing = true
			}
		}
		if !missing {
			return fail(nil) // a retry: nothing new to persist
		}
	}
	prev := *m
	prevParts := m.parts
	m.parts = make(map[TopicPartition]struct{}, len(prevParts)+len(parts))
	for tp := range prevParts {
		m.parts[tp] = struct{}{}
	}
	if m.state != kmsg.TransactionStateOngoing {
		m.parts = map[TopicPartition]struct{}{}
		m.state, m.start = kmsg.TransactionStateOngoing, now
	}
	for _, tp := range parts {
		m.parts[tp] = struct{}{}
	}
	m.updated = now
	l, end, err := c.persist(m)
	if err != nil {
		*m = prev
		c.log.Warn("writing transaction state failed", "transactional_id", id, "err", err)
		return fail(kerr.CoordinatorNotAvailable)
	}
	return func(ctx context.Context) error {
		if err := l.WaitCommitted(ctx, end); err != nil {
			return kerr.CoordinatorNotAvailable
		}
		return nil
	}
}

// Verify reports whether a transactional batch of pid/epoch may be written
// to tp: the partition must be in the producer's ongoing transaction.
func (c *Coordinator) Verify(tp TopicPartition, pid int64, epoch int16) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byPID[pid]
	switch {
	case m == nil:
		return fmt.Errorf("producer %d has no transactional id: %w", pid, kerr.InvalidProducerIDMapping)
	case epoch < m.epoch:
		return fmt.Errorf("producer %d epoch %d, current %d: %w", pid, epoch, m.epoch, kerr.InvalidProducerEpoch)
	case epoch > m.epoch:
		return fmt.Errorf("producer %d epoch %d is ahead of the coordinator's %d: %w", pid, epoch, m.epoch, kerr.InvalidProducerEpoch)
	case m.state != kmsg.TransactionStateOngoing:
		return fmt.Errorf("producer %d has no ongoing transaction (%s): %w", pid, m.state, kerr.InvalidTxnState)
	}
	if _, ok := m.parts[tp]; !ok {
		return fmt.Errorf("%s-%d was not added to the transaction of producer %d: %w", tp.Topic, tp.Partition, pid, kerr.InvalidTxnState)
	}
	return nil
}

// prepareLocked moves m to PrepareCommit or PrepareAbort; fence bumps the
// epoch first so the old producer can do nothing more.
func (c *Coordinator) prepareLocked(m *txnMeta, commit, fence bool, now time.Time) {
	if fence {
		m.epoch++
	}
	m.state = kmsg.TransactionStatePrepareAbort
	if commit {
		m.state = kmsg.TransactionStatePrepareCommit
	}
	m.updated = now
	m.done = make(chan struct{})
}

// EndTxn commits or aborts id's transaction. The Prepare record is appended
// now; the returned wait makes it durable, writes the markers and records
// the completion.
func (c *Coordinator) EndTxn(id string, pid int64, epoch int16, commit bool) func(context.Context) error {
	fail := func(err error) func(context.Context) error { return func(context.Context) error { return err } }
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.check(id, pid, epoch)
	if err != nil {
		return fail(err)
	}
	switch st := m.state; {
	case st == kmsg.TransactionStateOngoing:
	case st == kmsg.TransactionStatePrepareCommit && commit, st == kmsg.TransactionStatePrepareAbort && !commit:
		return fail(kerr.ConcurrentTransactions) // the retry of one in progress
	case st == kmsg.TransactionStateCompleteCommit && commit, st == kmsg.TransactionStateCompleteAbort && !commit:
		return fail(nil) // the retry of one that finished
	default:
		return fail(fmt.Errorf("end transaction (commit %v) in state %s: %w", commit, st, kerr.InvalidTxnState))
	}
	prev := *m
	c.prepareLocked(m, commit, false, c.opts.Now())
	l, end, err := c.persist(m)
	if err != nil {
		*m = prev
		c.log.Warn("writing transaction state failed", "transactional_id", id, "err", err)
		return fail(kerr.CoordinatorNotAvailable)
	}
	return func(ctx context.Context) error { return c.finish(ctx, m, l, end, true) }
}

// EndTxnV2 is EndTxn v5 (KIP-890 part 2, transaction.version 2): every
// commit and abort bumps the producer epoch, the markers carry the bumped
// epoch, and the answer is the producer id and epoch for the next
// transaction. A produce of the old epoch arriving late (a zombie, a retry
// stuck in the network) is then refused by every partition the markers
// reached and by the coordinator (INVALID_PRODUCER_EPOCH), instead of
// joining the next transaction. An abort with nothing ongoing is allowed
// (partitions join implicitly, so the client cannot know) and bumps the
// epoch too. A retry whose answer was lost names the epoch before the bump
// and gets the same answer. When the epoch is exhausted the producer moves
// to a new producer id (allocated here, perhaps from the controller).
func (c *Coordinator) EndTxnV2(ctx context.Context, id string, pid int64, epoch int16, commit bool) func(context.Context) (int64, int16, error) {
	fail := func(err error) func(context.Context) (int64, int16, error) {
		return func(context.Context) (int64, int16, error) { return -1, -1, err }
	}
	spare := int64(-1)
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return fail(kerr.CoordinatorNotAvailable)
		}
		if err := c.ownerErr(id); err != nil {
			c.mu.Unlock()
			return fail(err)
		}
		m := c.txns[id]
		if m == nil {
			c.mu.Unlock()
			return fail(kerr.InvalidProducerIDMapping)
		}
		if m.lastEpoch >= 0 && epoch == m.lastEpoch && (pid == m.pid && epoch != m.epoch || pid == m.prevPID && m.prevPID >= 0) {
			// The retry of the EndTxn that made the last bump.
			st, npid, nepoch := m.state, m.pid, m.epoch
			c.mu.Unlock()
			switch {
			case st == kmsg.TransactionStatePrepareCommit && commit, st == kmsg.TransactionStatePrepareAbort && !commit:
				return fail(kerr.ConcurrentTransactions) // still writing markers
			case st == kmsg.TransactionStateCompleteCommit && commit, st == kmsg.TransactionStateCompleteAbort && !commit:
				return func(context.Context) (int64, int16, error) { return npid, nepoch, nil }
			}
			return fail(kerr.ProducerFenced)
		}
		switch {
		case m.pid != pid:
			c.mu.Unlock()
			return fail(kerr.InvalidProducerIDMapping)
		case m.epoch != epoch:
			c.mu.Unlock()
			return fail(kerr.ProducerFenced)
		}
		switch st := m.state; {
		case st == kmsg.TransactionStateOngoing:
		case !commit && (st == kmsg.TransactionStateEmpty || st == kmsg.TransactionStateCompleteCommit || st == kmsg.TransactionStateCompleteAbort):
			// An empty abort: nothing to mark, but the epoch moves on.
		case st == kmsg.TransactionStatePrepareCommit, st == kmsg.TransactionStatePrepareAbort:
			c.mu.Unlock()
			return fail(kerr.ConcurrentTransactions)
		default:
			c.mu.Unlock()
			return fail(fmt.Errorf("end transaction (commit %v) in state %s: %w", commit, st, kerr.InvalidTxnState))
		}
		exhausted := m.epoch >= math.MaxInt16-1
		if exhausted && spare < 0 {
			c.mu.Unlock()
			nid, err := c.opts.NextID(ctx)
			if err != nil {
				c.log.Warn("allocating a producer id", "transactional_id", id, "err", err)
				return fail(kerr.CoordinatorNotAvailable)
			}
			spare = nid
			continue
		}
		prev := *m
		if m.state != kmsg.TransactionStateOngoing {
			m.parts = map[TopicPartition]struct{}{}
			m.start = c.opts.Now()
		}
		m.tv2, m.lastEpoch, m.prevPID, m.timedOut = true, m.epoch, -1, -1
		if exhausted {
			m.nextPID = spare
		}
		c.prepareLocked(m, commit, true, c.opts.Now())
		l, end, err := c.persist(m)
		if err != nil {
			*m = prev
			c.mu.Unlock()
			c.log.Warn("writing transaction state failed", "transactional_id", id, "err", err)
			return fail(kerr.CoordinatorNotAvailable)
		}
		npid, nepoch := m.pid, m.epoch
		if exhausted {
			npid, nepoch = spare, 0
		}
		c.mu.Unlock()
		return func(ctx context.Context) (int64, int16, error) {
			if err := c.finish(ctx, m, l, end, true); err != nil {
				return -1, -1, err
			}
			return npid, nepoch, nil
		}
	}
}

// finish waits for m's Prepare record (at end of l) to be durable, then
// completes the transaction. The work runs in the background on the
// coordinator's context, so a client that disconnects (ctx) does not leave
// a decided transaction half-written until the next timeout pass.
//
// With wait unset it returns at once.
func (c *Coordinator) finish(ctx context.Context, m *txnMeta, l Log, end int64, wait bool) error {
	errc := make(chan error, 1)
	c.mu.Lock()
	ok := c.spawnLocked(func() { errc <- c.finishNow(c.ctx, m, l, end) })
	if !ok && m.done != nil {
		close(m.done)
		m.done = nil
	}
	c.mu.Unlock()
	if !ok {
		return kerr.CoordinatorNotAvailable // closing; replay finishes it
	}
	if !wait {
		return nil
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Coordinator) finishNow(ctx context.Context, m *txnMeta, l Log, end int64) error {
	if err := l.WaitCommitted(ctx, end); err != nil {
		// Not durable, so not decided: the timeout loop retries it.
		c.releaseLater(m)
		return kerr.CoordinatorNotAvailable
	}
	if h := c.cfg.AfterPrepare; h != nil && h(m.id) {
		return kerr.CoordinatorNotAvailable // a simulated crash: left for replay
	}
	return c.complete(ctx, m)
}

// releaseLater lets the timeout loop pick up a transaction whose
// completion could not proceed.
func (c *Coordinator) releaseLater(m *txnMeta) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.done != nil {
		close(m.done)
		m.done = nil
	}
}

// complete writes m's markers and then its Complete record. m is in a
// Prepare state with done set (so nobody else completes it).
func (c *Coordinator) complete(ctx context.Context, m *txnMeta) error {
	c.mu.Lock()
	commit := m.state == kmsg.TransactionStatePrepareCommit
	pid, epoch, parts := m.pid, m.epoch, m.sortedParts()
	c.mu.Unlock()
	if err := c.opts.Markers(ctx, pid, epoch, commit, parts); err != nil {
		c.log.Warn("writing transaction markers failed; will retry", "transactional_id", m.id, "producer_id", pid, "err", err)
		c.releaseLater(m)
		return kerr.CoordinatorNotAvailable
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m.state = kmsg.TransactionStateCompleteAbort
	if commit {
		m.state = kmsg.TransactionStateCompleteCommit
	}
	m.parts = map[TopicPartition]struct{}{}
	m.updated = c.opts.Now()
	if m.nextPID >= 0 {
		// The epoch was exhausted: the producer goes on with its new id.
		if c.byPID[m.pid] == m {
			delete(c.byPID, m.pid)
		}
		m.prevPID, m.pid, m.epoch, m.nextPID = m.pid, m.nextPID, 0, -1
		c.byPID[m.pid] = m
	}
	// Not waited for: if it is lost, replay finds the Prepare record and
	// writes the markers again, which changes nothing.
	if _, _, err := c.persist(m); err != nil {
		c.log.Warn("writing transaction completion failed", "transactional_id", m.id, "err", err)
	}
	if m.done != nil {
		close(m.done)
		m.done = nil
	}
	return nil
}

// spawnLocked runs fn in the background unless the coordinator is closed
// (Close waits for it). Called with mu held.
func (c *Coordinator) spawnLocked(fn func()) bool {
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		fn()
	}()
	return true
}

// completeAsyncLocked completes m (done set) in the background. Called with
// mu held.
func (c *Coordinator) completeAsyncLocked(m *txnMeta) {
	if !c.spawnLocked(func() { c.complete(c.ctx, m) }) {
		close(m.done) // closing: replay finishes it
		m.done = nil
	}
}

// timeoutLoop aborts transactions open for longer than their timeout
// (bumping the epoch, so the producer is fenced) and retries completions
// that failed.
func (c *Coordinator) timeoutLoop() {
	t := c.opts.Clock.NewTicker(c.cfg.AbortInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			c.abortTimedOut()
		}
	}
}

// abortTimedOut runs one pass of the timeout loop.
func (c *Coordinator) abortTimedOut() {
	c.mu.Lock()
	now := c.opts.Now()
	var todo []*txnMeta
	for _, m := range c.txns {
		if m.done != nil {
			continue
		}
		switch m.state {
		case kmsg.TransactionStateOngoing:
			if now.Before(m.start.Add(m.timeout)) {
				continue
			}
			prev := *m
			m.timedOut = m.epoch
			if m.epoch < math.MaxInt16-1 {
				m.lastEpoch = m.epoch // an EndTxn v5 abort of it is answered as a retry
			}
			c.prepareLocked(m, false, m.epoch < math.MaxInt16-1, now)
			if _, _, err := c.persist(m); err != nil {
				c.log.Warn("aborting timed-out transaction: writing PrepareAbort failed", "transactional_id", m.id, "err", err)
				*m = prev // still Ongoing; the next pass tries again
				continue
			}
			c.log.Info("aborting timed-out transaction", "transactional_id", m.id, "producer_id", m.pid, "timeout", m.timeout)
		case kmsg.TransactionStatePrepareCommit, kmsg.TransactionStatePrepareAbort:
			m.done = make(chan struct{})
		default:
			if now.Sub(m.updated) >= c.cfg.IDExpiration {
				c.expireLocked(m)
			}
			continue
		}
		todo = append(todo, m)
	}
	for _, m := range todo {
		c.completeAsyncLocked(m)
	}
	c.mu.Unlock()
}

// expireLocked forgets an idle transactional id
// (transactional.id.expiration.ms) with a tombstone; its next
// InitProducerId starts afresh with a new producer id.
func (c *Coordinator) expireLocked(m *txnMeta) {
	k := kmsg.NewTxnMetadataKey()
	k.TransactionalID = m.id
	batch, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]records.Record{{Timestamp: c.opts.Now().UnixMilli(), Key: k.AppendTo(nil)}})
	if err == nil {
		_, err = c.logFor(m.id).Append(batch)
	}
	if err != nil {
		c.log.Warn("expiring transactional id failed", "transactional_id", m.id, "err", err)
		return
	}
	delete(c.txns, m.id)
	if c.byPID[m.pid] == m {
		delete(c.byPID, m.pid)
	}
	c.log.Info("expired idle transactional id", "transactional_id", m.id, "producer_id", m.pid)
}

// AbortTimedOut runs the timeout pass now (tests, admin tools).
func (c *Coordinator) AbortTimedOut() { c.abortTimedOut() }

// Info describes a transaction (DescribeTransactions, ListTransactions).
type Info struct {
	ID         string
	ProducerID int64
	Epoch      int16
	Timeout    time.Duration
	State      State
	Start      time.Time // zero if none ongoing
	Partitions []TopicPartition
}

// Describe returns id's transaction.
func (c *Coordinator) Describe(id string) (Info, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.txns[id]
	if m == nil {
		return Info{}, false
	}
	return m.info(), true
}

// List returns every transaction.
func (c *Coordinator) List() []Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Info, 0, len(c.txns))
	for _, m := range c.txns {
		out = append(out, m.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (m *txnMeta) info() Info {
	in := Info{ID: m.id, ProducerID: m.pid, Epoch: m.epoch, Timeout: m.timeout, State: m.state, Partitions: m.sortedParts()}
	if m.state != kmsg.TransactionStateEmpty && m.state != kmsg.TransactionStateCompleteCommit && m.state != kmsg.TransactionStateCompleteAbort {
		in.Start = m.start
	}
	return in
}

// CheckOffsets reports whether id's producer may commit offsets for the
// __consumer_offsets partition tp (TxnOffsetCommit): the partition must be
// in its ongoing transaction (AddOffsetsToTxn).
func (c *Coordinator) CheckOffsets(id string, pid int64, epoch int16, tp TopicPartition) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.check(id, pid, epoch)
	if err != nil {
		return err
	}
	if m.state != kmsg.TransactionStateOngoing {
		return kerr.InvalidTxnState
	}
	if _, ok := m.parts[tp]; !ok {
		return kerr.InvalidTxnState
	}
	return nil
}

// VerifyPartitions answers KIP-890's verify-only AddPartitionsToTxn: for
// each partition, nil if it is in id's ongoing transaction. err is set
// instead when the producer itself is wrong (mapping, epoch) or the
// transaction is completing.
func (c *Coordinator) VerifyPartitions(id string, pid int64, epoch int16, parts []TopicPartition) (per []error, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.check(id, pid, epoch)
	if err != nil {
		return nil, err
	}
	if m.state == kmsg.TransactionStatePrepareCommit || m.state == kmsg.TransactionStatePrepareAbort {
		return nil, kerr.ConcurrentTransactions
	}
	per = make([]error, len(parts))
	for i, tp := range parts {
		if _, ok := m.parts[tp]; !ok || m.state != kmsg.TransactionStateOngoing {
			per[i] = kerr.InvalidTxnState
		}
	}
	return per, nil
}
