// Package group is the consumer group coordinator for Kafka's classic group
// protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) and the committed
// offsets of every group.
//
// State lives in memory and is persisted, in Kafka's own record formats, to
// the partitions of __consumer_offsets: a group is owned by partition
// abs(javaHashCode(group)) % N. At start-up each partition is replayed to
// rebuild the groups it owns; until then requests for those groups get
// COORDINATOR_LOAD_IN_PROGRESS.
//
// Handlers are split the way the wire package wants: the method called on
// the connection's reader goroutine does the ordered part (state transition,
// append to the log) and returns a Reply that does the waiting (for the
// rebalance to complete, for the leader's assignment, for the fsync).
package group

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	iclock "holdfast/internal/clock"
	"holdfast/internal/records"
)

// Reply produces a response; it may block until ctx is done. It has the
// shape of wire.Reply so the broker can return it as is.
type Reply = func(ctx context.Context) kmsg.Response

// Log is one partition of __consumer_offsets as the coordinator uses it.
type Log interface {
	// Append writes one record batch (the ordered part, no fsync wait) and
	// returns the offset after it.
	Append(batch []byte) (end int64, err error)
	// WaitCommitted returns when every offset below end is committed
	// (fsynced under flush=sync).
	WaitCommitted(ctx context.Context, end int64) error
	// Scan calls fn for every batch from the start of the log.
	Scan(fn func(batch []byte) error) error
}

// Config holds the coordinator's settings; Kafka's broker config names are in
// the comments.
type Config struct {
	InitialRebalanceDelay  time.Duration // group.initial.rebalance.delay.ms
	MinSessionTimeout      time.Duration // group.min.session.timeout.ms
	MaxSessionTimeout      time.Duration // group.max.session.timeout.ms
	MaxSize                int           // group.max.size
	OffsetRetention        time.Duration // offsets.retention.minutes
	RetentionCheckInterval time.Duration // offsets.retention.check.interval.ms
	MaxMetadataBytes       int           // offset.metadata.max.bytes

	// KIP-848 consumer groups (ConsumerGroupHeartbeat).
	ConsumerSessionTimeout    time.Duration // group.consumer.session.timeout.ms
	ConsumerHeartbeatInterval time.Duration // group.consumer.heartbeat.interval.ms
	ConsumerMaxSize           int           // group.consumer.max.size
	// ConsumerAssignors are the server-side assignors members may ask
	// for; the first is the default (group.consumer.assignors).
	ConsumerAssignors []string
	// ConsumerMigrationPolicy says which online conversions between
	// classic and consumer groups with members happen
	// (group.consumer.migration.policy: bidirectional, upgrade,
	// downgrade, disabled; mixed.go).
	ConsumerMigrationPolicy string
}

// Assignors are the server-side assignors Holdfast implements.
var Assignors = []string{"uniform", "range"}

// DefaultConfig is Kafka's defaults.
func DefaultConfig() Config {
	return Config{
		InitialRebalanceDelay:  3 * time.Second,
		MinSessionTimeout:      6 * time.Second,
		MaxSessionTimeout:      30 * time.Minute,
		MaxSize:                math.MaxInt32,
		OffsetRetention:        7 * 24 * time.Hour,
		RetentionCheckInterval: 10 * time.Minute,
		MaxMetadataBytes:       4096,

		ConsumerSessionTimeout:    45 * time.Second,
		ConsumerHeartbeatInterval: 5 * time.Second,
		ConsumerMaxSize:           math.MaxInt32,
		ConsumerAssignors:         []string{"uniform", "range"},
		ConsumerMigrationPolicy:   MigrationBidirectional,
	}
}

// Options are the coordinator's collaborators.
type Options struct {
	Logger *slog.Logger
	// Partitions reports how many partitions a topic has, or -1 if the topic
	// does not exist (for UNKNOWN_TOPIC_OR_PARTITION on commit).
	Partitions func(topic string) int32
	// Clock runs the timers: each group's deadlines (joins, syncs,
	// sessions, rebalance timeouts) and the offset expiry every
	// offsets.retention.check.interval.ms; nil: the wall clock.
	Clock iclock.Clock
	// Now is the time (Clock's if nil). Deadlines are set and checked on
	// it; a timer waits their distance from it on Clock (a test that
	// moves Now alone sees them pass when that timer fires).
	Now func() time.Time
	// Unowned starts every partition as led elsewhere, as the coordinator
	// host always does (its partitions load as this node comes to lead
	// them): its groups answer NOT_COORDINATOR until LoadPartition. False
	// in tests over logs this coordinator owns outright.
	Unowned bool
	// Leading reports whether this node leads offsets partition p now
	// (its Raft leader). A partition not loaded yet that this node leads
	// is about to load: its groups answer COORDINATOR_LOAD_IN_PROGRESS,
	// as Kafka's do between the election and the load, not
	// NOT_COORDINATOR, which would send the client to look again for the
	// node it just found. Nil: only LoadPartition makes p ours.
	Leading func(p int32) bool
	// Topic and Topics describe the topics for consumer groups'
	// server-side assignment (KIP-848): by name, and all of them (for
	// regular-expression subscriptions).
	Topic  func(name string) (TopicInfo, bool)
	Topics func() []TopicInfo
}

// Coordinator runs every consumer group of this node.
type Coordinator struct {
	cfg  Config
	opts Options
	log  *slog.Logger
	logs []Log

	loaded  []atomic.Bool   // per offsets partition: replay finished
	unowned []atomic.Bool   // per offsets partition: another node leads it
	gens    []atomic.Uint64 // per offsets partition: bumped by Load/UnloadPartition

	// mu guards every group. One lock keeps the state machine simple; the
	// slow parts (fsync waits, long joins) run outside it in Replies.
	mu     sync.Mutex
	groups map[string]*group
	closed bool
	txn    pendingTxn // transactional offsets awaiting their marker (txn.go)
	// deletedWhileLoading: per offsets partition, the topics deleted
	// while it was led here but not loaded; its replay drops their
	// offsets (deleted.go).
	deletedWhileLoading [][]string

	expiry *iclock.Timer
	wg     sync.WaitGroup

	// Totals of what replays restored, for Load's one summary line.
	replayedRecords, replayedGroups atomic.Int64
}

// New returns a coordinator over the partitions of __consumer_offsets. Call
// Load to replay them; until a partition is loaded its groups answer
// COORDINATOR_LOAD_IN_PROGRESS.
func New(cfg Config, logs []Log, opts Options) *Coordinator {
	def := DefaultConfig()
	if cfg.MinSessionTimeout <= 0 {
		cfg.MinSessionTimeout = def.MinSessionTimeout
	}
	if cfg.MaxSessionTimeout <= 0 {
		cfg.MaxSessionTimeout = def.MaxSessionTimeout
	}
	if cfg.MaxSize <= 0 {
		cfg.MaxSize = def.MaxSize
	}
	if cfg.OffsetRetention <= 0 {
		cfg.OffsetRetention = def.OffsetRetention
	}
	if cfg.RetentionCheckInterval <= 0 {
		cfg.RetentionCheckInterval = def.RetentionCheckInterval
	}
	if cfg.MaxMetadataBytes <= 0 {
		cfg.MaxMetadataBytes = def.MaxMetadataBytes
	}
	if cfg.ConsumerSessionTimeout <= 0 {
		cfg.ConsumerSessionTimeout = def.ConsumerSessionTimeout
	}
	if cfg.ConsumerHeartbeatInterval <= 0 {
		cfg.ConsumerHeartbeatInterval = def.ConsumerHeartbeatInterval
	}
	if cfg.ConsumerMaxSize <= 0 {
		cfg.ConsumerMaxSize = def.ConsumerMaxSize
	}
	if !slices.Contains(MigrationPolicies, cfg.ConsumerMigrationPolicy) {
		cfg.ConsumerMigrationPolicy = def.ConsumerMigrationPolicy
	}
	var known []string
	for _, a := range cfg.ConsumerAssignors {
		if slices.Contains(Assignors, a) && !slices.Contains(known, a) {
			known = append(known, a)
		}
	}
	if len(known) == 0 {
		known = def.ConsumerAssignors
	}
	cfg.ConsumerAssignors = known
	if cfg.InitialRebalanceDelay < 0 {
		cfg.InitialRebalanceDelay = 0
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Clock = iclock.OrReal(opts.Clock)
	if opts.Now == nil {
		opts.Now = opts.Clock.Now
	}
	if opts.Partitions == nil {
		opts.Partitions = func(string) int32 { return -1 }
	}
	if opts.Topic == nil {
		opts.Topic = func(string) (TopicInfo, bool) { return TopicInfo{}, false }
	}
	if opts.Topics == nil {
		opts.Topics = func() []TopicInfo { return nil }
	}
	if len(logs) == 0 {
		panic("group: no __consumer_offsets partitions")
	}
	c := &Coordinator{
		cfg:     cfg,
		opts:    opts,
		log:     opts.Logger,
		logs:    logs,
		loaded:  make([]atomic.Bool, len(logs)),
		unowned: make([]atomic.Bool, len(logs)),
		gens:    make([]atomic.Uint64, len(logs)),
		groups:  map[string]*group{},

		deletedWhileLoading: make([][]string, len(logs)),
	}
	if opts.Unowned {
		for i := range c.unowned {
			c.unowned[i].Store(true)
		}
	}
	return c
}

// Load replays every partition (in the background when async is set) and
// starts the offset-expiry timer.
func (c *Coordinator) Load(async bool) error {
	var first error
	var mu sync.Mutex
	var all sync.WaitGroup
	start := time.Now()
	for i := range c.logs {
		run := func() {
			if err := c.replay(int32(i), c.gens[i].Load()); err != nil {
				c.log.Error("replaying __consumer_offsets failed", "partition", i, "err", err)
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}
		all.Add(1)
		if async {
			c.wg.Add(1)
			go func() { defer c.wg.Done(); defer all.Done(); run() }()
		} else {
			run()
			all.Done()
		}
	}
	summary := func() {
		all.Wait()
		c.log.Info("loaded __consumer_offsets", "partitions", len(c.logs), "records", c.replayedRecords.Load(), "groups", c.replayedGroups.Load(), "took", time.Since(start).Round(time.Millisecond))
	}
	if async {
		c.wg.Add(1)
		go func() { defer c.wg.Done(); summary() }()
	} else {
		summary()
	}
	c.mu.Lock()
	if !c.closed {
		c.expiry = c.opts.Clock.AfterFunc(c.cfg.RetentionCheckInterval, c.expireLoop)
	}
	c.mu.Unlock()
	return first
}

// Close stops the timers. Waiting Replies end with their connections.
func (c *Coordinator) Close() error {
	c.mu.Lock()
	c.closed = true
	if c.expiry != nil {
		c.expiry.Stop()
	}
	for _, g := range c.groups {
		if g.timer != nil {
			g.timer.Stop()
		}
		g.failWaiters(kerr.CoordinatorNotAvailable.Code)
	}
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

// PartitionFor is the __consumer_offsets partition that owns group: Kafka's
// Utils.abs(groupId.hashCode()) % partitions, so the placement matches.
func PartitionFor(group string, partitions int) int32 {
	h := javaStringHash(group)
	if h == math.MinInt32 {
		h = 0
	} else if h < 0 {
		h = -h
	}
	return h % int32(partitions)
}

// javaStringHash is Java's String.hashCode: over UTF-16 code units.
func javaStringHash(s string) int32 {
	var h int32
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			h = 31*h + int32(0xD800+(r>>10))
			h = 31*h + int32(0xDC00+(r&0x3FF))
			continue
		}
		h = 31*h + int32(r)
	}
	return h
}

func (c *Coordinator) partition(group string) int32 { return PartitionFor(group, len(c.logs)) }

// Loading reports whether the partition that owns group is still replaying.
func (c *Coordinator) Loading(group string) bool { return !c.loaded[c.partition(group)].Load() }

// Unavailable is the error code for a request about group on this node:
// NOT_COORDINATOR if another node leads its partition,
// COORDINATOR_LOAD_IN_PROGRESS while it replays or is about to (Leading),
// else 0.
func (c *Coordinator) Unavailable(group string) int16 {
	p := c.partition(group)
	switch {
	case c.loading(p):
		return kerr.CoordinatorLoadInProgress.Code
	case c.unowned[p].Load():
		return kerr.NotCoordinator.Code
	}
	return 0
}

// loading reports whether this node coordinates partition p and has not
// loaded it yet: replaying, or led here and about to be loaded.
func (c *Coordinator) loading(p int32) bool {
	if c.unowned[p].Load() {
		return c.leading(p)
	}
	return !c.loaded[p].Load()
}

func (c *Coordinator) leading(p int32) bool { return c.opts.Leading != nil && c.opts.Leading(p) }

// admit is the first check of every request about one group: a valid
// name whose partition this node coordinates and has loaded.
func (c *Coordinator) admit(group string) int16 {
	if group == "" {
		return kerr.InvalidGroupID.Code
	}
	return c.Unavailable(group)
}

// Owns reports whether this node coordinates the groups of partition p
// (loaded or loading).
func (c *Coordinator) Owns(p int32) bool { return !c.unowned[p].Load() }

// LoadPartition makes this node the coordinator of partition p's groups
// (it became the partition's leader): they answer
// COORDINATOR_LOAD_IN_PROGRESS while p is replayed in the background. The
// caller makes sure the log holds everything committed before.
func (c *Coordinator) LoadPartition(p int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.dropLocked(p, kerr.NotCoordinator.Code)
	gen := c.gens[p].Add(1)
	c.loaded[p].Store(false)
	c.unowned[p].Store(false)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := c.replay(p, gen); err != nil {
			// Stays loading: the next leadership change retries.
			c.log.Error("replaying __consumer_offsets failed", "partition", p, "err", err)
		}
	}()
}

// UnloadPartition drops partition p's groups (this node no longer leads
// it): waiting joins and syncs answer NOT_COORDINATOR, later requests too,
// and the clients find the new coordinator.
func (c *Coordinator) UnloadPartition(p int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gens[p].Add(1)
	c.unowned[p].Store(true)
	c.loaded[p].Store(false)
	c.deletedWhileLoading[p] = nil
	c.dropLocked(p, kerr.NotCoordinator.Code)
	c.log.Debug("unloaded __consumer_offsets partition", "partition", p)
}

// dropLocked forgets the groups of partition p and their pending
// transactional offsets.
func (c *Coordinator) dropLocked(p int32, code int16) {
	for name, g := range c.groups {
		if c.partition(name) != p {
			continue
		}
		if g.timer != nil {
			g.timer.Stop()
		}
		g.failWaiters(code)
		delete(c.groups, name)
	}
	for pid, groups := range c.txn {
		for name := range groups {
			if c.partition(name) == p {
				delete(groups, name)
			}
		}
		if len(groups) == 0 {
			delete(c.txn, pid)
		}
	}
}

func newMemberID(prefix string) string {
	var b [16]byte
	rand.Read(b[:])
	var u [36]byte
	hex.Encode(u[0:8], b[0:4])
	u[8] = '-'
	hex.Encode(u[9:13], b[4:6])
	u[13] = '-'
	hex.Encode(u[14:18], b[6:8])
	u[18] = '-'
	hex.Encode(u[19:23], b[8:10])
	u[23] = '-'
	hex.Encode(u[24:], b[10:])
	return prefix + "-" + string(u[:])
}

// buildBatch encodes key/value pairs as one batch for __consumer_offsets; a
// nil value is a tombstone.
func buildBatch(now time.Time, kvs []kv) ([]byte, error) {
	recs := make([]records.Record, len(kvs))
	ts := now.UnixMilli()
	for i, p := range kvs {
		recs[i] = records.Record{Timestamp: ts, Key: p.key, Value: p.value}
	}
	return records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
}

type kv struct{ key, value []byte }

// NumPartitions is the number of __consumer_offsets partitions the
// coordinator places groups over.
func (c *Coordinator) NumPartitions() int { return len(c.logs) }
