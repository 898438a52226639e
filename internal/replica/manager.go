// Package replica manages this node's partition replicas: it opens each
// replica the metadata assigns here as a Raft group member, removes the
// ones moved or deleted, keeps the ones it cannot open offline and retries
// them, repairs replicas whose storage failed, and runs the background
// work every replica needs: retention and DeleteRecords through a
// replicated log start, and the log cleaner.
//
// The metadata decides (internal/metadata, applied by internal/cluster);
// this package follows. Kafka's names: a replica is offline when its log
// cannot be served here (KAFKA_STORAGE_ERROR).
package replica

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/clock"
	"holdfast/internal/metadata"
	"holdfast/internal/partition"
	"holdfast/internal/raft"
	"holdfast/internal/storage"
	"holdfast/internal/topicconfig"
)

// Config is what the replica manager needs of the node's configuration.
type Config struct {
	NodeID  int32
	DataDir string
	// DirectoryID is this data directory's id; BootstrapMember: this
	// directory formed the cluster (internal/datadir). A replica assigned
	// to another directory of this node (a replaced disk) must catch up
	// before it votes.
	DirectoryID     string
	BootstrapMember bool
	// LogDefaults are the broker-level topic config defaults.
	LogDefaults storage.Config
	// RetentionCheckInterval is log.retention.check.interval.ms (0: 5
	// minutes).
	RetentionCheckInterval time.Duration
	// Cleaner is the log cleaner's config (the zero value: Kafka's
	// defaults).
	Cleaner CleanerConfig
	// ScrubBytesPerSecond is log.scrub.bytes.per.second: the scrubber's
	// read rate (scrub.go); 0 turns it off.
	ScrubBytesPerSecond int64
	// NoReadChecks is log.verify.reads=false: bytes are handed out
	// unchecked (Kafka's behaviour; storage.Options.NoReadChecks).
	NoReadChecks bool
	// ReadCache is the node's read cache of direct-I/O writes
	// (storage.Options.ReadCache).
	ReadCache *storage.ReadCache
	// RemoteStorage is remote.log.storage.system.enable: a topic with
	// remote.storage.enable then gets its retention from tiered storage
	// (internal/tiered), which deletes local segments only once they are
	// in the object store.
	RemoteStorage bool
	FS            storage.FS
	Logger        *slog.Logger
	// Clock drives the background loops (repair, retention, log-start
	// compaction, the cleaner's backoff, the scrubber's pacing); nil:
	// the wall clock.
	Clock clock.Clock
	// StartupOpenSync: with more replicas than this, OpenAll opens them
	// after it returns, in the background (see OpenAll); 0: 1,000;
	// negative: always in the background.
	StartupOpenSync int
	// OnReplicas, when set, is told the replicas open or opening here
	// whenever that number changes; OnHeld, the bytes of a bounded
	// budget allocated and kept from then on (the cleaner's offset map,
	// once made). The node's memory limit follows both (the broker's
	// memlimit.go). Both must be quick and take none of this package's
	// locks.
	OnReplicas func(n int)
	OnHeld     func(bytes int64)
}

// Manager is this node's set of replicas.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	clk   clock.Clock
	meta  *metadata.Store
	host  *raft.Host
	parts *partition.Manager

	// mu is the lifecycle lock: held while the metadata changes and the
	// replicas follow (internal/cluster applies under it), and while a
	// repair reopens a replica, so neither undoes the other. A queued open
	// (opens.go) holds it shared: opens run together, and a metadata
	// change waits only for the opens under way, never for a queue of
	// thousands.
	mu sync.RWMutex

	opens openQueue // replica opens the metadata asked for (opens.go)

	// offline: replicas assigned here that could not be opened, and why
	// (the repair loop retries them).
	offlineMu sync.Mutex
	offline   map[topicPartition]error

	repairs     atomic.Int64 // replicas discarded and reopened after a storage failure
	corruptions atomic.Int64 // corrupt data found by this node's logs (storage.Options.OnCorrupt)
	scrubbed    atomic.Int64 // bytes the scrubber checked (scrub.go)
	// repairsDeferred: repairs of replicas failed for ENOSPC put off for
	// want of free space (repair.go).
	repairsDeferred atomic.Int64

	// compactMu serializes Host.Compact calls (a DeleteRecords reply and
	// the log-start loop may both compact a group, and the anchors they
	// journal must not interleave).
	compactMu sync.Mutex

	cleaner *logCleaner
	stops   []func()

	// dynamic are the dynamic broker configs (the cluster-wide default and
	// this broker's own) as topic defaults; RefreshDynamic keeps them.
	dynamic atomic.Pointer[topicconfig.Dynamic]
}

type topicPartition struct {
	topic     string
	partition int32
}

// New makes the manager of the replicas in cfg.DataDir, whose Raft groups
// run on host. Nothing is opened until OpenAll; no background work runs
// until Start.
func New(cfg Config, meta *metadata.Store, host *raft.Host, syncer *storage.Syncer) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.FS == nil {
		cfg.FS = storage.OSFS()
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, clk: clock.OrReal(cfg.Clock), meta: meta, host: host}
	m.parts = partition.NewManager(cfg.DataDir, storage.Options{FS: cfg.FS, Syncer: syncer, Logger: cfg.Logger,
		OnCorrupt: func() { m.corruptions.Add(1) }, NoReadChecks: cfg.NoReadChecks, ReadCache: cfg.ReadCache})
	m.dynamic.Store(m.readDynamic())
	if cfg.OnReplicas != nil {
		m.parts.SetOnCount(cfg.OnReplicas)
	}
	if host != nil {
		host.SetWantedHook(m.PromoteGroup)
	}
	return m
}

func (m *Manager) readDynamic() *topicconfig.Dynamic {
	d := topicconfig.NewDynamic(m.meta.BrokerConfigs(""), m.meta.BrokerConfigs(strconv.Itoa(int(m.cfg.NodeID))))
	return &d
}

// Dynamic are the dynamic broker configs that stand in for a topic's
// missing overrides.
func (m *Manager) Dynamic() topicconfig.Dynamic { return *m.dynamic.Load() }

// RefreshDynamic rereads the dynamic broker configs after the metadata
// changed them and pushes every topic's new effective config to its open
// replicas.
func (m *Manager) RefreshDynamic() {
	m.dynamic.Store(m.readDynamic())
	for _, t := range m.meta.Topics() {
		m.ApplyConfigs(t)
	}
}

// OpenAll finishes the deletions a crash interrupted, so that no deleted
// data is ever served again (an error here stops the start), then opens
// every replica assigned here. A replica that cannot be opened stays
// offline, logged, and the repair loop retries it: the node serves the
// others, as Kafka does with a failed log directory.
//
// Up to Config.StartupOpenSync replicas (syncOpenDefault: 1,000) are open
// when OpenAll returns, as in Kafka, whose broker recovers every log
// before it serves. Above that the opens are queued (the open queue of
// the metadata apply, opens.go) and OpenAll returns at once, so the node
// listens while they run: at 100,000 partitions the opens took 419 s on a
// 2-core machine before the node answered anything. A replica not yet
// open answers NOT_LEADER_OR_FOLLOWER (Lookup), which clients retry, and
// the first request for it moves its open ahead of the others (Promote).
//
// After a clean shutdown (the marker Close leaves) the logs skip the fsync
// of what their recovery keeps: the marker is removed, durably, before any
// log opens, so a crash from here on always takes the full recovery. A
// log opened later from the queue has not been written since the clean
// stop either (nothing writes a log that is not open), so the marker's
// word still holds for it.
func (m *Manager) OpenAll() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	clean, err := m.takeCleanShutdown()
	if err != nil {
		return err
	}
	if clean {
		m.log.Info("clean shutdown marker found: the logs were fsynced at the last stop")
	}
	for _, d := range m.meta.Deleting() {
		if err := m.FinishPendingDelete(d.Name); err != nil {
			return err
		}
	}
	topics := m.meta.Topics()
	perTopic := make([][]openJob, len(topics))
	var jobs []openJob
	for k, t := range topics {
		for _, j := range m.openJobs(t, 0) {
			j.clean = clean
			perTopic[k] = append(perTopic[k], j)
		}
		jobs = append(jobs, perTopic[k]...)
	}
	limit := m.cfg.StartupOpenSync
	if limit == 0 {
		limit = syncOpenDefault
	}
	if limit < 0 || len(jobs) > limit {
		m.log.Info("opening the replicas in the background", "replicas", len(jobs))
		// The coordinators' topics first: every consumer group and
		// transaction waits for them.
		for pass := range 2 {
			for k, t := range topics {
				if metadata.IsInternalTopic(t.Name) == (pass == 0) {
					m.queueOpens(t, perTopic[k])
				}
			}
		}
		return nil
	}
	errs := m.runOpens(jobs)
	byTopic := map[string][]error{}
	var names []string
	for k, err := range errs {
		if err == nil {
			continue
		}
		name := jobs[k].t.Name
		if byTopic[name] == nil {
			names = append(names, name)
		}
		byTopic[name] = append(byTopic[name], err)
	}
	for _, name := range names {
		m.log.Error("replicas offline: their storage could not be opened; retrying", "topic", name, "err", errors.Join(byTopic[name]...))
	}
	return nil
}

// syncOpenDefault is Config.StartupOpenSync's default.
const syncOpenDefault = 1000

// Start runs the background work: repairs, retention, replicated log
// starts and the log cleaner.
func (m *Manager) Start() error {
	m.goLoop(m.repairLoop)
	m.goLoop(m.retentionLoop)
	m.goLoop(m.compactLoop)
	if m.cfg.ScrubBytesPerSecond > 0 {
		m.goLoop(m.scrubLoop)
	}
	return m.startCleaner()
}

// StopBackground stops the background work (repairs, retention, log
// starts, the cleaner); idempotent. The broker calls it, then stops the
// Raft host, then Close: a log must not close under a group that still
// runs (every replica that got a message in between failed with "storage:
// log closed", logged at ERROR, and the stop took tens of seconds with
// 10,000 partitions).
func (m *Manager) StopBackground() {
	m.stopOpens()
	for i := len(m.stops) - 1; i >= 0; i-- {
		m.stops[i]()
	}
	m.stops = nil
}

// Close stops the background work and closes every replica's log. The
// Raft groups belong to the host, which must be closed first (see
// StopBackground).
//
// If every replica assigned here was open, and every log closed (each
// Close fsyncs its log) without a storage failure before or at the close,
// it leaves the clean shutdown marker for the next OpenAll.
func (m *Manager) Close() error {
	m.StopBackground()
	open := m.parts.Partitions("")
	if err := m.parts.Close(); err != nil {
		return err
	}
	m.offlineMu.Lock()
	offline := len(m.offline)
	m.offlineMu.Unlock()
	if offline > 0 || m.opensAbandoned() {
		return nil // logs not opened in this run: recovered next time
	}
	for _, p := range open {
		// The log's own failure (a write or fsync that failed), not its
		// Raft group's.
		if p.Log().Failed() != nil {
			return nil
		}
	}
	if _, err := storage.WriteFileAtomic(m.cfg.FS, m.cleanShutdownPath(), m.cleanShutdownContent()); err != nil {
		m.log.Warn("writing the clean shutdown marker (the next start recovers every log in full)", "err", err)
	}
	return nil
}

// CleanShutdownFile is the marker Close leaves in the data directory after
// a clean shutdown (Kafka's .kafka_cleanshutdown).
const CleanShutdownFile = ".holdfast_cleanshutdown"

func (m *Manager) cleanShutdownPath() string {
	return filepath.Join(m.cfg.DataDir, CleanShutdownFile)
}

// cleanShutdownContent is what the marker says: its format, and the data
// directory it was written for. A marker that does not say exactly that
// (torn, damaged, another directory's) is no clean shutdown.
func (m *Manager) cleanShutdownContent() []byte {
	return fmt.Appendf(nil, "holdfast clean shutdown v1\ndirectory.id=%s\n", m.cfg.DirectoryID)
}

// legacyCleanShutdown is the marker written before it named its directory
// (same meaning: every log closed and fsynced).
const legacyCleanShutdown = "holdfast: every log was closed and fsynced\n"

// takeCleanShutdown reports whether the last stop was clean and removes
// the marker (durably) if there is one, whatever it says.
func (m *Manager) takeCleanShutdown() (bool, error) {
	b, err := storage.ReadFile(m.cfg.FS, m.cleanShutdownPath(), 4096)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		// Unreadable (or too long): not trusted, and removed below.
		m.log.Warn("unreadable clean shutdown marker: recovering every log in full", "err", err)
		b = nil
	}
	clean := bytes.Equal(b, m.cleanShutdownContent()) || string(b) == legacyCleanShutdown
	if !clean && err == nil {
		m.log.Warn("clean shutdown marker of another directory, or damaged: recovering every log in full", "content", string(b))
	}
	if err := m.cfg.FS.Remove(m.cleanShutdownPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("removing the clean shutdown marker: %w", err)
	}
	if err := m.cfg.FS.SyncDir(m.cfg.DataDir); err != nil {
		return false, fmt.Errorf("removing the clean shutdown marker: %w", err)
	}
	return clean, nil
}

// Lock and Unlock take the lifecycle lock (see Manager.mu).
func (m *Manager) Lock()   { m.mu.Lock() }
func (m *Manager) Unlock() { m.mu.Unlock() }

// goLoop runs loop in its own goroutine until Close.
func (m *Manager) goLoop(loop func(stop <-chan struct{})) {
	stopCh, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		loop(stopCh)
	}()
	m.stops = append(m.stops, func() {
		close(stopCh)
		<-done
	})
}

// Group is the Raft group id of partition index of the topic with id
// topicID: hashed, with the top bit set so it never collides with the
// metadata group's small id.
func Group(topicID [16]byte, index int32) uint64 {
	h := fnv.New64a()
	h.Write(topicID[:])
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(index))
	h.Write(b[:])
	return h.Sum64() | 1<<63
}

// Get returns this node's open replica of partition i of topic, or nil.
func (m *Manager) Get(topic string, i int32) *partition.Partition { return m.parts.Get(topic, i) }

// Partitions returns every replica open on this node.
func (m *Manager) Partitions() []*partition.Partition { return m.parts.Partitions("") }

// Lookup returns this node's replica of partition i of topic, or the code
// Kafka's replica manager answers without one: the partition does not
// exist, it is assigned here but offline (its storage could not be opened:
// KAFKA_STORAGE_ERROR), or it lives on other brokers.
func (m *Manager) Lookup(topic string, i int32) (*partition.Partition, int16) {
	if p := m.parts.Get(topic, i); p != nil {
		return p, 0
	}
	t, ok := m.meta.Topic(topic)
	switch {
	case !ok || i < 0 || i >= t.Partitions:
		return nil, kerr.UnknownTopicOrPartition.Code
	case m.isOffline(topicPartition{topic, i}):
		return nil, kerr.KafkaStorageError.Code
	default:
		// Not open yet (a creation's or a start-up's open is queued):
		// retriable, and this one opens next.
		m.Promote(topic, i)
		return nil, kerr.NotLeaderForPartition.Code
	}
}

// AllOpen reports whether every partition of t assigned here is open.
func (m *Manager) AllOpen(t metadata.Topic) bool {
	for i := int32(0); i < t.Partitions; i++ {
		if m.assignedHere(t, i) && m.parts.Get(t.Name, i) == nil {
			return false
		}
	}
	return true
}

func (m *Manager) assignedHere(t metadata.Topic, i int32) bool {
	return int(i) < len(t.Replicas) && slices.Contains(t.Replicas[i], m.cfg.NodeID)
}

// OpenTopic opens this node's replicas of partitions from.. of t, each as
// a Raft group bootstrapped with the partition's initial voters, and
// returns when they are open. Called with the lifecycle lock held (or
// before Start). The metadata apply queues its opens instead
// (QueueOpenTopic).
func (m *Manager) OpenTopic(t metadata.Topic, from int32) error {
	return errors.Join(m.runOpens(m.openJobs(t, from))...)
}

// openParallelism bounds the replicas opened at once (start-up, a topic's
// creation). An open mostly waits, for fsyncs (and, outside the queue,
// for a one-voter group's first Raft cycles: it settles as its leader
// before Open returns), so many more than the cores: one after another,
// 10,000 took minutes. The new partitions' directories and files are
// made durable by one syncfs shared by the opens waiting for it
// (partition.Manager.settleNew): with the queue's settle apart (opens.go)
// that was 68% of the 32 workers' time at 20,000 partitions, the rest the
// Raft journal's flush (round 17), so the opens sharing each syncfs set
// the pace.
const openParallelism = 128

// openJob is one replica to open: partition i of t, and drop it after
// (a replica moved away whose removal a crash interrupted).
type openJob struct {
	t    metadata.Topic
	i    int32
	drop bool
	// clean: the log was last closed by a clean shutdown and not opened
	// since (the start-up's opens after one; see OpenAll).
	clean bool
}

// openJobs lists what OpenTopic(t, from) opens.
func (m *Manager) openJobs(t metadata.Topic, from int32) []openJob {
	var jobs []openJob
	var onDisk []string // read once, only for topics that were ever reassigned
	for i := from; i < t.Partitions; i++ {
		if int(i) >= len(t.Replicas) {
			continue
		}
		if !m.assignedHere(t, i) {
			if t.Initial == nil || m.parts.Get(t.Name, i) != nil {
				continue
			}
			if onDisk == nil {
				onDisk, _ = m.cfg.FS.ReadDir(m.cfg.DataDir)
			}
			if slices.Contains(onDisk, filepath.Base(m.parts.Dir(t.Name, i))) {
				// Open it (so its Raft journal state is found) and drop it.
				jobs = append(jobs, openJob{t: t, i: i, drop: true})
			}
			continue
		}
		jobs = append(jobs, openJob{t: t, i: i})
	}
	return jobs
}

// runOpens opens the jobs' replicas, openParallelism at a time; errs[k]
// is job k's error.
func (m *Manager) runOpens(jobs []openJob) (errs []error) {
	errs = make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(openParallelism, len(jobs)) {
		wg.Go(func() {
			for k := range next {
				j := jobs[k]
				errs[k] = m.open(j.t, j.i, false, j.clean)
				if j.drop {
					errs[k] = errors.Join(errs[k], m.Drop(j.t, j.i))
				}
			}
		})
	}
	for k := range jobs {
		next <- k
	}
	close(next)
	wg.Wait()
	return errs
}

// open opens partition i of t and its Raft group. rejoin: its data here
// was discarded (repair.go); otherwise the metadata decides. clean: see
// openJob.
func (m *Manager) open(t metadata.Topic, i int32, rejoin, clean bool) error {
	_, err := m.openReplica(t, i, rejoin, clean, false)
	return err
}

// openReplica is open, returning the partition; deferSettle: a one-voter
// group's first election and commit are the caller's to wait for
// (partition.Replication.DeferSettle).
func (m *Manager) openReplica(t metadata.Topic, i int32, rejoin, clean, deferSettle bool) (*partition.Partition, error) {
	// The bootstrap voters, not the current replicas: a replica opened by
	// a reassignment replays the membership changes from the log (or gets
	// them in a snapshot) as every other replica did.
	initial := t.InitialReplicas(i)
	voters := make([]uint64, len(initial))
	for j, r := range initial {
		voters[j] = uint64(r)
	}
	tp := topicPartition{t.Name, i}
	err := m.pendingDelete(t.Name)
	var p *partition.Partition
	if err == nil {
		p, err = m.parts.Open(t.Name, t.ID, i, m.logConfig(t), partition.Replication{
			Host: m.host, Group: Group(t.ID, i), Voters: voters,
			Rejoin: rejoin || m.rejoins(t, i), AdoptPreRaft: t.PreRaft,
			StartOffset:   topicconfig.RestoreStartOf(t.Configs, i).Offset,
			StartTerm:     uint64(topicconfig.RestoreStartOf(t.Configs, i).Epoch),
			CleanShutdown: clean, DeferSettle: deferSettle})
	}
	m.offlineMu.Lock()
	defer m.offlineMu.Unlock()
	if err != nil {
		if m.offline == nil {
			m.offline = map[topicPartition]error{}
		}
		m.offline[tp] = err
		return nil, fmt.Errorf("opening %s-%d: %w", t.Name, i, err)
	}
	delete(m.offline, tp)
	p.SetLogAppendTime(m.logAppendTime(t))
	return p, nil
}

// rejoins reports whether this node's replica of partition p of t must
// catch up before it votes: the partition was assigned to another
// directory of this node (a replaced disk) or, with no record, this
// directory did not form the cluster.
func (m *Manager) rejoins(t metadata.Topic, p int32) bool {
	rec := t.ReplicaDir(p, m.cfg.NodeID)
	if rec == "" {
		return !m.cfg.BootstrapMember
	}
	return rec != m.cfg.DirectoryID
}

// Drop closes this node's replica of partition i of t and deletes its
// data: the Raft group (and its journal state) first, so a crash in
// between leaves only data, which start-up removes.
func (m *Manager) Drop(t metadata.Topic, i int32) error {
	p := m.parts.Get(t.Name, i)
	if p == nil {
		return nil
	}
	if err := m.host.RemoveGroup(p.RaftGroup()); err != nil && !errors.Is(err, raft.ErrUnknownGroup) {
		return err
	}
	m.log.Info("removed a replica moved to other brokers", "topic", t.Name, "partition", i)
	return m.parts.Remove(t.Name, i)
}

// DropMoved drops this node's replicas of t that the metadata no longer
// lists here (after a completed reassignment).
func (m *Manager) DropMoved(t metadata.Topic) error {
	var errs []error
	for i := int32(0); i < t.Partitions && int(i) < len(t.Replicas); i++ {
		if !m.assignedHere(t, i) {
			errs = append(errs, m.Drop(t, i))
		}
	}
	return errors.Join(errs...)
}

// RemoveTopic follows the deletion of t: its Raft groups go, then its
// data (FinishPendingDelete; if that fails, the repair loop and the next
// start-up finish it before a topic of the same name opens).
func (m *Manager) RemoveTopic(t metadata.Topic) error {
	m.offlineMu.Lock()
	for i := int32(0); i < t.Partitions; i++ {
		m.host.RemoveGroup(Group(t.ID, i))
		delete(m.offline, topicPartition{t.Name, i})
	}
	m.offlineMu.Unlock()
	return m.FinishPendingDelete(t.Name)
}

// FinishPendingDelete removes the data of a deleted topic named name whose
// removal was interrupted, so a new topic of that name starts empty.
// Called with the lifecycle lock held (or during start-up).
func (m *Manager) FinishPendingDelete(name string) error {
	for _, d := range m.meta.Deleting() {
		if d.Name != name {
			continue
		}
		if err := m.parts.DeleteTopic(d.Name); err != nil {
			return fmt.Errorf("%w: removing the data of deleted topic %s: %w", kerr.KafkaStorageError, d.Name, err)
		}
		if err := m.meta.FinishDelete(d.ID); err != nil {
			return err
		}
	}
	return nil
}

// pendingDelete reports data of a deleted topic named name that is still
// to be removed: no replica of a new topic of that name opens over it.
func (m *Manager) pendingDelete(name string) error {
	for _, d := range m.meta.Deleting() {
		if d.Name == name {
			return fmt.Errorf("%w: the data of deleted topic %s (id %x) is not removed yet", partition.ErrForeignData, name, d.ID)
		}
	}
	return nil
}

// ApplyConfigs pushes t's effective config to its open replicas.
func (m *Manager) ApplyConfigs(t metadata.Topic) {
	cfg := m.logConfig(t)
	lat := m.logAppendTime(t)
	for i := int32(0); i < t.Partitions; i++ {
		if p := m.parts.Get(t.Name, i); p != nil {
			p.Log().SetConfig(cfg)
			p.SetLogAppendTime(lat)
		}
	}
	if cfg.Compact {
		m.KickCleaner() // a compaction config changed: look now, not after the backoff
	}
}

func (m *Manager) logConfig(t metadata.Topic) storage.Config {
	return topicconfig.LogConfig(m.cfg.LogDefaults, m.Dynamic().Under(t.Configs), func(name, value string, err error) {
		m.log.Warn("ignoring bad topic config", "topic", t.Name, "config", name, "value", value, "err", err)
	})
}

func (m *Manager) logAppendTime(t metadata.Topic) bool {
	return topicconfig.LogAppendTime(m.cfg.LogDefaults, m.Dynamic().Under(t.Configs))
}

func (m *Manager) anyOffline() bool {
	m.offlineMu.Lock()
	defer m.offlineMu.Unlock()
	return len(m.offline) > 0
}

func (m *Manager) isOffline(tp topicPartition) bool {
	m.offlineMu.Lock()
	defer m.offlineMu.Unlock()
	_, ok := m.offline[tp]
	return ok
}

// Repairs counts replicas discarded and reopened after a storage failure.
func (m *Manager) Repairs() int64 { return m.repairs.Load() }

// RepairsDeferred counts repairs put off until a full disk has room.
func (m *Manager) RepairsDeferred() int64 { return m.repairsDeferred.Load() }

// Corruptions counts the corrupt data this node's logs found (a bad
// batch read, scrubbed or met at open); each one's replica is rebuilt.
func (m *Manager) Corruptions() int64 { return m.corruptions.Load() }

// ScrubbedBytes counts the bytes the scrubber has checked (scrub.go).
func (m *Manager) ScrubbedBytes() int64 { return m.scrubbed.Load() }

// SetVerifier installs the transaction coordinator's check for
// transactional appends (partition.Verifier) on every replica.
func (m *Manager) SetVerifier(v partition.Verifier) { m.parts.SetVerifier(v) }
