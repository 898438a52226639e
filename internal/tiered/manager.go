package tiered

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"holdfast/internal/clock"
	"holdfast/internal/failpoint"
	"holdfast/internal/metadata"
	"holdfast/internal/partition"
	"holdfast/internal/raft"
	"holdfast/internal/replica"
	"holdfast/internal/storage"
	"holdfast/internal/topicconfig"
)

// Manager runs tiered storage on one node: the upload and local-retention
// task for the partitions this node leads, and remote reads for fetches.
type Manager struct {
	cfg      Config
	clk      clock.Clock
	store    ObjectStore
	meta     *metadata.Store
	replicas *replica.Manager
	host     *raft.Host
	defaults storage.Config
	log      *slog.Logger
	cache    *cache

	mu    sync.Mutex
	parts map[uint64]*partState // by Raft group
	// sweepFailing: deleted topics whose last object deletion failed
	// (logged once).
	sweepFailing map[[16]byte]bool

	stats Stats
	stop  chan struct{}
	done  chan struct{}
	// ctx bounds every request to the object store: Close cancels it, so
	// a store that hangs never holds up a shutdown.
	ctx    context.Context
	cancel context.CancelFunc

	// copyThrottle: CopyMaxBytesPerSecond (nil: unlimited).
	copyThrottle *storage.Throttle
}

// Stats are the node's tiered-storage figures (metrics), named after
// Kafka's RemoteLogManager metrics where they exist.
type Stats struct {
	CopyBytes, CopyRequests, CopyErrors    atomic.Int64 // RemoteCopyBytesPerSec, RemoteCopyRequestsPerSec, RemoteCopyErrorsPerSec
	FetchBytes, FetchRequests, FetchErrors atomic.Int64 // RemoteFetchBytesPerSec, ...
	StoreDown                              atomic.Bool  // the last upload attempt failed
	CopyLagBytes, CopyLagSegments          atomic.Int64 // RemoteCopyLagBytes / RemoteCopyLagSegments, summed over led partitions
	RemoteLogSizeBytes, RemoteLogSegments  atomic.Int64 // RemoteLogSizeBytes, summed over led partitions
	Passes                                 atomic.Int64 // passes of the task completed (the figures above are the last one's)
	CopyThrottledNanos                     atomic.Int64 // time uploads waited for remote.log.manager.copy.max.bytes.per.second
}

// partState is what this node knows of one partition's remote log.
type partState struct {
	seen      uint64   // the highest command index looked at
	m         Manifest // the newest committed manifest
	cmdOffset int64    // the offset its command sits at (-1: none)
	// Upload retries: the next attempt waits until retryAt.
	backoff time.Duration
	retryAt time.Time
	// deleteFailing: the last deletion of objects failed (logged once).
	deleteFailing bool
	// The last sweep of objects no manifest names: when, in which term.
	sweptAt   time.Time
	sweptTerm uint64
	// prod is the producer state as of prod.End that this node uploaded
	// last (prodOK), the start of the next segment's.
	prod   partition.ProducerState
	prodOK bool
	// propose serializes the changes of the manifest (change).
	propose sync.Mutex
}

// New builds the manager; Start starts its task.
func New(cfg Config, store ObjectStore, meta *metadata.Store, replicas *replica.Manager, host *raft.Host, defaults storage.Config, log *slog.Logger) (*Manager, error) {
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.Default()
	}
	c, err := newCache(cfg.CacheDir, cfg.CacheBytes)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var throttle *storage.Throttle
	if cfg.CopyMaxBytesPerSecond > 0 {
		throttle = storage.NewThrottle(float64(cfg.CopyMaxBytesPerSecond))
	}
	return &Manager{copyThrottle: throttle, cfg: cfg, clk: clock.OrReal(cfg.Clock), store: store, meta: meta, replicas: replicas, host: host, defaults: defaults,
		log: log.With("component", "tiered"), cache: c, parts: map[uint64]*partState{}, sweepFailing: map[[16]byte]bool{},
		stop: make(chan struct{}), done: make(chan struct{}), ctx: ctx, cancel: cancel}, nil
}

// Start runs the upload and local-retention task every TaskInterval.
func (m *Manager) Start() {
	go func() {
		defer close(m.done)
		tick := m.clk.NewTicker(m.cfg.TaskInterval)
		defer tick.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-tick.C:
			}
			m.runOnce()
		}
	}()
}

// Close stops the task and waits for it.
func (m *Manager) Close() error {
	close(m.stop)
	m.cancel()
	<-m.done
	m.cache.close()
	return nil
}

// Stats returns the manager's figures.
func (m *Manager) Stats() *Stats { return &m.stats }

// topicFor returns p's topic if remote storage is enabled for it.
func (m *Manager) topicFor(p *partition.Partition) (metadata.Topic, bool) {
	t, ok := m.meta.Topic(p.Topic())
	if !ok || t.ID != p.TopicID() {
		return metadata.Topic{}, false
	}
	return t, m.Enabled(t)
}

// Enabled reports whether topic t has remote storage on this node: the
// broker's system switch and the topic's remote.storage.enable.
func (m *Manager) Enabled(t metadata.Topic) bool {
	return m != nil && m.cfg.Enabled && m.value(t, "remote.storage.enable") == "true"
}

func (m *Manager) value(t metadata.Topic, name string) string {
	return topicconfig.Value(m.defaults, m.replicas.Dynamic().Under(t.Configs), name)
}

// runOnce is one pass of the task over the partitions this node leads.
func (m *Manager) runOnce() {
	var lagBytes, lagSegs, size, segs int64
	for _, p := range m.replicas.Partitions() {
		select {
		case <-m.stop:
			return
		default:
		}
		t, ok := m.topicFor(p)
		if !ok {
			continue
		}
		l, err := m.host.Leadership(p.RaftGroup())
		if err != nil || !l.Proposing || !l.Settled {
			continue
		}
		st, err := m.refresh(p)
		if err != nil {
			m.log.Warn("reading the remote log manifest", "topic", p.Topic(), "partition", p.Index(), "err", err)
			continue
		}
		if !m.restore(p, t, st) {
			continue // the restored manifest comes first
		}
		m.upload(p, t, st, int32(l.Term))
		m.retention(p, t, st)
		m.deleteDropped(p, t, st)
		m.sweepOrphans(p, t, st, l.Term)
		lb, ls := m.lag(p, st)
		lagBytes, lagSegs = lagBytes+lb, lagSegs+ls
		m.mu.Lock()
		size, segs = size+st.m.Size(), segs+int64(len(st.m.Segments))
		m.mu.Unlock()
	}
	m.sweepDeleted()
	m.stats.CopyLagBytes.Store(lagBytes)
	m.stats.CopyLagSegments.Store(lagSegs)
	m.stats.RemoteLogSizeBytes.Store(size)
	m.stats.RemoteLogSegments.Store(segs)
	m.stats.Passes.Add(1)
}

// state returns p's state, creating it.
func (m *Manager) state(p *partition.Partition) *partState {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.parts[p.RaftGroup()]
	if st == nil {
		st = &partState{cmdOffset: -1}
		m.parts[p.RaftGroup()] = st
	}
	return st
}

// refresh brings p's manifest up to the newest committed one.
func (m *Manager) refresh(p *partition.Partition) (*partState, error) {
	st := m.state(p)
	m.mu.Lock()
	seen := st.seen
	m.mu.Unlock()
	cmds, err := m.host.Commands(p.RaftGroup(), seen)
	if err != nil {
		return st, err
	}
	mf, at, found, derr := latestManifest(cmds)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(cmds) > 0 {
		st.seen = max(st.seen, cmds[len(cmds)-1].Index)
	}
	if found && at.Index > 0 {
		st.m, st.cmdOffset = mf, at.EndOffset
	}
	return st, derr
}

// Manifest is p's newest committed manifest as this node knows it.
func (m *Manager) Manifest(p *partition.Partition) (Manifest, bool) {
	if _, ok := m.topicFor(p); !ok {
		return Manifest{}, false
	}
	st, err := m.refresh(p)
	if err != nil {
		return Manifest{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return st.m, len(st.m.Segments) > 0
}

// PartitionRemote is one partition's remote log and upload lag as this
// node sees them: the committed manifest (the same on every replica) and
// this node's closed segments beyond it. Kafka's per-partition
// RemoteLogManager figures: RemoteLogSizeBytes, RemoteCopyLagBytes,
// RemoteCopyLagSegments.
type PartitionRemote struct {
	SizeBytes, Segments   int64 // in the remote log
	LagBytes, LagSegments int64 // closed locally, not uploaded yet
	LogStart, TieredEnd   int64 // the remote log start; the offset after its last segment (0: none)
}

// Remote returns p's figures, ok=false when p's topic is not tiered here
// or its manifest cannot be read.
func (m *Manager) Remote(p *partition.Partition) (PartitionRemote, bool) {
	if _, ok := m.topicFor(p); !ok {
		return PartitionRemote{}, false
	}
	st, err := m.refresh(p)
	if err != nil {
		return PartitionRemote{}, false
	}
	lb, ls := m.lag(p, st)
	m.mu.Lock()
	defer m.mu.Unlock()
	return PartitionRemote{SizeBytes: st.m.Size(), Segments: int64(len(st.m.Segments)), LagBytes: lb, LagSegments: ls,
		LogStart: st.m.Start, TieredEnd: st.m.End()}, true
}

// change commits the manifest edit returns for p's current one (ok=false:
// no change), one change at a time per partition on this node (the task
// and DeleteRecords both change it), so that no change is built on a
// manifest another one replaced.
func (m *Manager) change(ctx context.Context, p *partition.Partition, st *partState, edit func(cur Manifest) (Manifest, bool)) error {
	st.propose.Lock()
	defer st.propose.Unlock()
	if _, err := m.refresh(p); err != nil {
		return err
	}
	m.mu.Lock()
	cur := st.m
	m.mu.Unlock()
	next, ok := edit(cur)
	if !ok {
		return nil
	}
	return m.commit(ctx, p, next)
}

// commitCommand proposes cmd in p's Raft group and waits for its commit.
func (m *Manager) commitCommand(ctx context.Context, p *partition.Partition, cmd []byte) error {
	prop, err := m.host.ProposeCommand(ctx, p.RaftGroup(), cmd)
	if err != nil {
		return err
	}
	return m.host.WaitCommitted(ctx, prop)
}

// commit proposes mf as p's manifest and waits until it is committed.
func (m *Manager) commit(ctx context.Context, p *partition.Partition, mf Manifest) error {
	cmd, err := encodeManifest(mf)
	if err != nil {
		return err
	}
	prop, err := m.host.ProposeCommand(ctx, p.RaftGroup(), cmd)
	if err != nil {
		return err
	}
	if err := m.host.WaitCommitted(ctx, prop); err != nil {
		return err
	}
	// Committed: it is the newest manifest (only the leader proposes
	// them, one at a time), although the host's list of committed
	// commands may not show it yet.
	st := m.state(p)
	m.mu.Lock()
	defer m.mu.Unlock()
	if prop.Index >= st.seen {
		st.m, st.cmdOffset, st.seen = mf, prop.EndOffset, prop.Index
	}
	return nil
}

// upload copies p's closed, committed segments that are not remote yet,
// oldest first, each committed before the next starts. A failure (the
// object store down) backs off; produce never waits for any of it.
func (m *Manager) upload(p *partition.Partition, t metadata.Topic, st *partState, epoch int32) {
	m.mu.Lock()
	if m.clk.Now().Before(st.retryAt) {
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	segs, err := p.Log().SealedSegments()
	if err != nil {
		return
	}
	// Below the last stable offset (Kafka's rule): every transaction with
	// records in the segment is decided, so its aborted ones are known.
	stable := p.LastStableOffset()
	for _, s := range segs {
		m.mu.Lock()
		mf := st.m
		m.mu.Unlock()
		end := mf.End()
		if s.Next <= end || s.Next > stable {
			continue
		}
		if len(mf.Segments)+len(mf.Deleting) >= maxManifestSegments {
			// Deleting counts: a store that refuses deletions holds them.
			m.log.Warn("remote log manifest is full: uploads wait", "topic", t.Name, "partition", p.Index(), "segments", len(mf.Segments), "deleting", len(mf.Deleting))
			return
		}
		from := max(s.Base, end)
		ctx, cancel := context.WithTimeout(m.ctx, 5*time.Minute)
		seg, err := m.copySegment(ctx, p, t, st, from, s.Next, epoch)
		if err == nil {
			// Fault tests stop the leader here: uploaded, not remote.
			err = failpoint.Hit(ctx, "tiered.upload.before-commit", m.log)
		}
		committed := false
		if err == nil {
			err = m.change(ctx, p, st, func(cur Manifest) (Manifest, bool) {
				if cur.End() != end {
					return cur, false // changed meanwhile (DeleteRecords): the next pass looks again
				}
				committed = true
				if len(cur.Segments) == 0 || from > end {
					// The first segment, or a gap: the local log lost
					// offsets that were never uploaded (DeleteRecords, or
					// retention before remote storage was enabled). They
					// exist nowhere: the remote log starts after them, and
					// the segments below the gap are deleted.
					return Manifest{Start: max(from, cur.Start), Segments: []Segment{seg},
						Deleting: append(slices.Clip(cur.Deleting), cur.Segments...)}, true
				}
				return Manifest{Start: cur.Start, Segments: append(slices.Clip(cur.Segments), seg), Deleting: cur.Deleting}, true
			})
		}
		cancel()
		var lost *raft.NotLeaderError
		if errors.As(err, &lost) || (err == nil && !committed) {
			// Not the store's fault, and nothing is remote: leadership
			// moved during the upload (the new leader uploads the segment
			// under its own epoch), or the remote log changed meanwhile
			// (DeleteRecords, a new leader's upload). The object just
			// stored is nobody's.
			m.log.Info("tiered storage: segment uploaded but not committed; the remote log moved on", "topic", t.Name, "partition", p.Index(),
				"base_offset", from, "epoch", epoch, "err", err)
			return
		}
		if err != nil {
			m.stats.CopyErrors.Add(1)
			m.stats.StoreDown.Store(true)
			m.mu.Lock()
			st.backoff = min(max(2*st.backoff, 500*time.Millisecond), m.cfg.RetryBackoffMax)
			st.retryAt = m.clk.Now().Add(st.backoff)
			back := st.backoff
			m.mu.Unlock()
			m.log.Warn("tiered storage: segment upload failed; local disk keeps the backlog, retrying",
				"topic", t.Name, "partition", p.Index(), "base_offset", from, "retry_in", back, "err", err)
			return
		}
		m.stats.StoreDown.Store(false)
		m.stats.CopyRequests.Add(1)
		m.stats.CopyBytes.Add(seg.Size)
		m.mu.Lock()
		st.backoff, st.retryAt = 0, time.Time{}
		m.mu.Unlock()
		m.log.Info("segment uploaded", "topic", t.Name, "partition", p.Index(), "base_offset", seg.Base, "next_offset", seg.Next, "bytes", seg.Size)
		// Fault tests stop the leader here: remote, still on the local disk.
		failpoint.Hit(m.ctx, "tiered.upload.after-commit", m.log)
	}
}

// lag is what p has closed and committed but not uploaded.
func (m *Manager) lag(p *partition.Partition, st *partState) (bytes, segments int64) {
	segs, err := p.Log().SealedSegments()
	if err != nil {
		return 0, 0
	}
	m.mu.Lock()
	end := st.m.End()
	m.mu.Unlock()
	for _, s := range segs {
		if s.Next > end {
			bytes += s.Size
			segments++
		}
	}
	return bytes, segments
}

// retention applies local.retention.* (the local tier) and retention.*
// (the whole log) to p on its leader.
//
// Local: a segment may leave the local disk only once it is remote (its
// offsets below the committed manifest's end) and past local.retention.ms
// or beyond local.retention.bytes (-2: retention.*). The leader replicates
// the new local log start with the log-start command retention uses, so
// every replica deletes the same offsets; the cut stays below the offset of
// the newest manifest's command (the commit rule in manifest.go).
//
// Total: remote segments past retention.ms, or beyond retention.bytes
// counted over the remote and the local log, leave the manifest (the
// remote log start rises); their objects are deleted once that manifest
// is committed.
func (m *Manager) retention(p *partition.Partition, t metadata.Topic, st *partState) {
	localMs := parseLong(m.value(t, "local.retention.ms"), -2)
	localBytes := parseLong(m.value(t, "local.retention.bytes"), -2)
	totalMs := parseLong(m.value(t, "retention.ms"), -1)
	totalBytes := parseLong(m.value(t, "retention.bytes"), -1)
	if localMs == -2 {
		localMs = totalMs
	}
	if localBytes == -2 {
		localBytes = totalBytes
	}
	now := m.clk.Now().UnixMilli()
	segs, err := p.Log().SealedSegments()
	if err != nil {
		return
	}
	m.mu.Lock()
	mf, cmdOffset := st.m, st.cmdOffset
	m.mu.Unlock()
	remoteEnd := mf.End()
	localSize := p.Log().Size()
	total := localSize
	for _, s := range segs {
		if s.Next <= remoteEnd {
			total -= s.Size // counted in the remote size below
		}
	}
	total += mf.Size()

	// Total retention over the remote segments.
	keep := 0
	for keep < len(mf.Segments) {
		s := mf.Segments[keep]
		expired := (totalBytes >= 0 && total-s.Size >= totalBytes) ||
			(totalMs >= 0 && s.MaxTimestamp >= 0 && s.MaxTimestamp < now-totalMs)
		if !expired {
			break
		}
		total -= s.Size
		keep++
	}
	if keep > 0 {
		ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
		err := m.dropBelow(ctx, p, t, st, mf.Segments[keep-1].Next, mf)
		cancel()
		if err != nil {
			m.log.Warn("remote retention", "topic", t.Name, "partition", p.Index(), "err", err)
			return
		}
		m.mu.Lock()
		mf, cmdOffset = st.m, st.cmdOffset
		m.mu.Unlock()
		m.log.Info("remote retention moved the remote log start", "topic", t.Name, "partition", p.Index(), "remote_log_start_offset", mf.Start)
	}

	// Local retention.
	point := p.LogStartOffset()
	size := localSize
	for _, s := range segs {
		if s.Next > remoteEnd {
			break
		}
		expired := (localBytes >= 0 && size-s.Size >= localBytes) ||
			(localMs >= 0 && s.MaxTimestamp >= 0 && s.MaxTimestamp < now-localMs)
		// Total retention may have expired it even if the local tier
		// would keep it.
		expired = expired || s.Next <= mf.Start
		if !expired {
			break
		}
		size -= s.Size
		point = max(point, s.Next)
	}
	if point <= p.LogStartOffset() {
		return
	}
	if point >= cmdOffset {
		// The newest manifest's entry sits at or below the cut: commit it
		// again above (the next pass cuts).
		if p.LogEndOffset() > point {
			ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
			err := m.change(ctx, p, st, func(cur Manifest) (Manifest, bool) {
				return cur, cur.Start == mf.Start && cur.End() == mf.End()
			})
			if err != nil {
				m.log.Warn("re-committing the remote log manifest", "topic", t.Name, "partition", p.Index(), "err", err)
			}
			cancel()
		}
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	if err := m.replicas.ReplicateLogStart(ctx, p, p.RaftGroup(), point); err != nil {
		m.log.Warn("local retention", "topic", t.Name, "partition", p.Index(), "offset", point, "err", err)
		return
	}
	m.log.Info("local retention moved the local log start", "topic", t.Name, "partition", p.Index(), "local_log_start_offset", point)
}

// deleteDropped carries out the deletions the committed manifest records
// (Manifest.Deleting): each segment's objects are deleted, then a manifest
// without the segments deleted is committed. A failure (the store down)
// leaves them to the next pass; a crash, to the next leader or the next
// start, which read the same list from the partition's log.
func (m *Manager) deleteDropped(p *partition.Partition, t metadata.Topic, st *partState) {
	m.mu.Lock()
	pending := st.m.Deleting
	m.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 2*time.Minute)
	defer cancel()
	var done []Segment
	var err error
	for _, s := range pending {
		k := m.key(t, p.Index(), s)
		for _, suffix := range []string{".log", ".index", producersSuffix} {
			if err = m.store.Delete(ctx, k+suffix); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
		done = append(done, s)
	}
	if len(done) > 0 {
		gone := func(s Segment) bool { return slices.ContainsFunc(done, s.sameObjects) }
		cerr := m.change(ctx, p, st, func(cur Manifest) (Manifest, bool) {
			if !slices.ContainsFunc(cur.Deleting, gone) {
				return cur, false
			}
			next := cur
			next.Deleting = slices.DeleteFunc(slices.Clone(cur.Deleting), gone)
			return next, true
		})
		if cerr == nil {
			m.log.Info("deleted the objects of segments that left the remote log", "topic", t.Name, "partition", p.Index(), "segments", len(done))
		}
		err = cmp.Or(err, cerr)
	}
	m.mu.Lock()
	was := st.deleteFailing
	st.deleteFailing = err != nil
	m.mu.Unlock()
	if err != nil && !was {
		m.log.Warn("tiered storage: deleting objects failed; the deletion is recorded in the log and retried", "topic", t.Name, "partition", p.Index(), "pending", len(pending)-len(done), "err", err)
	}
}

// sweepOrphans deletes the objects under p's own key directory that no
// committed manifest names, once per leadership term and every
// OrphanSweepInterval: the uploads whose manifest never committed (a
// leader killed or deposed between the upload and the commit, a commit
// that failed). Only objects whose base offset is below the committed
// manifest's end are candidates: every upload still to be committed, by
// this leader or a later one, lies at or above it, and those below it are
// either named (a segment, or a deletion pending) or garbage. Runs on the
// task's goroutine, so no upload of this node is under way.
func (m *Manager) sweepOrphans(p *partition.Partition, t metadata.Topic, st *partState, term uint64) {
	m.mu.Lock()
	due := st.sweptTerm != term || m.clk.Now().Sub(st.sweptAt) >= m.cfg.OrphanSweepInterval
	mf, committed := st.m, st.cmdOffset >= 0
	m.mu.Unlock()
	if !due || !committed {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 2*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("%s%s-%s/%d/", m.cfg.Prefix, t.Name, t.IDString(), p.Index())
	keys, err := m.store.List(ctx, prefix)
	if err != nil {
		return // the next pass tries again
	}
	named := map[string]bool{}
	for _, s := range append(slices.Clip(mf.Segments), mf.Deleting...) {
		k := m.key(t, p.Index(), s)
		named[k+".log"], named[k+".index"], named[k+producersSuffix] = true, true, true
	}
	end := mf.End()
	var deleted []string
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok || named[k] {
			continue
		}
		name, _, _ := strings.Cut(rest, ".")
		bs, _, ok := strings.Cut(name, "-")
		base, err := strconv.ParseInt(bs, 10, 64)
		if !ok || err != nil || base >= end {
			continue // not a segment's key, or an upload that may yet commit
		}
		if err := m.store.Delete(ctx, k); err != nil {
			return // the next pass tries again
		}
		deleted = append(deleted, k)
	}
	m.mu.Lock()
	st.sweptTerm, st.sweptAt = term, m.clk.Now()
	m.mu.Unlock()
	if len(deleted) > 0 {
		m.log.Info("deleted objects no remote log manifest names (uploads whose commit never happened)", "topic", t.Name, "partition", p.Index(), "objects", len(deleted))
	}
}

// key names a segment's objects (without the suffix):
// <prefix><topic>-<topic id>/<partition>/<base offset>-<leader epoch>.
// The leader epoch of the uploader makes two leaders' keys differ.
// A restored segment keeps the key its first topic gave it (s.Dir).
func (m *Manager) key(t metadata.Topic, part int32, s Segment) string {
	dir := s.Dir
	if dir == "" {
		dir = t.Name + "-" + t.IDString()
	}
	return fmt.Sprintf("%s%s/%d/%020d-%d", m.cfg.Prefix, dir, part, s.Base, s.Epoch)
}

func parseLong(v string, def int64) int64 {
	var n int64
	if _, err := fmt.Sscan(v, &n); err != nil {
		return def
	}
	return n
}

var errNotRemote = errors.New("tiered: offset is not in the remote log")

var _ = filepath.Join

// DeleteRecords moves p's remote log start to off (DeleteRecords, on the
// leader): a manifest without the segments wholly below off, committed
// before the local log start moves, so that nothing deleted is read from
// the object store; their objects are deleted after.
func (m *Manager) DeleteRecords(ctx context.Context, p *partition.Partition, off int64) error {
	t, ok := m.topicFor(p)
	if !ok {
		return nil
	}
	return m.dropBelow(ctx, p, t, m.state(p), off, Manifest{})
}

// dropBelow commits a manifest whose remote log start is off, without the
// segments wholly below it, which it lists as Deleting: their objects are
// deleted after (deleteDropped). With a non-empty want it changes nothing
// unless the manifest is still want.
func (m *Manager) dropBelow(ctx context.Context, p *partition.Partition, t metadata.Topic, st *partState, off int64, want Manifest) error {
	return m.change(ctx, p, st, func(cur Manifest) (Manifest, bool) {
		if len(cur.Segments) == 0 || off <= cur.Start {
			return cur, false
		}
		if len(want.Segments) > 0 && (cur.Start != want.Start || cur.End() != want.End()) {
			return cur, false // changed since the caller looked
		}
		next := Manifest{Start: off, Deleting: slices.Clip(cur.Deleting)}
		for _, s := range cur.Segments {
			if s.Next <= off {
				next.Deleting = append(next.Deleting, s)
			} else {
				next.Segments = append(next.Segments, s)
			}
		}
		return next, true
	})
}

// sweepDeleted deletes the objects of deleted tiered topics: the metadata
// store's RemoteDeleting, where the topic's deletion put them (in the
// metadata log, before anything is deleted). Every node does it, and
// drops a topic from its list (node-local, durably) only once a listing
// after the deletions finds nothing, so that a crash, a store that is
// down or an upload that raced the deletion leaves it to the next pass or
// the next start. Kafka deletes a topic's remote data with it.
func (m *Manager) sweepDeleted() {
	for _, t := range m.meta.RemoteDeleting() {
		prefix := fmt.Sprintf("%s%s-%s/", m.cfg.Prefix, t.Name, t.IDString())
		ctx, cancel := context.WithTimeout(m.ctx, 10*time.Minute)
		deleted, err := m.deletePrefix(ctx, prefix)
		if err == nil {
			var left []string
			if left, err = m.store.List(ctx, prefix); err == nil && len(left) > 0 {
				err = fmt.Errorf("%d objects appeared meanwhile", len(left))
			}
		}
		cancel()
		if err == nil {
			err = m.meta.FinishRemoteDelete(t.ID)
		}
		m.mu.Lock()
		was := m.sweepFailing[t.ID]
		if err != nil {
			m.sweepFailing[t.ID] = true
		} else {
			delete(m.sweepFailing, t.ID)
		}
		m.mu.Unlock()
		switch {
		case err != nil && !was:
			m.log.Warn("tiered storage: deleting a deleted topic's objects failed; the deletion is recorded and retried", "topic", t.Name, "deleted", deleted, "err", err)
		case err == nil:
			m.log.Info("deleted a deleted topic's objects", "topic", t.Name, "objects", deleted)
		}
	}
}

// deletePrefix deletes every object under prefix.
func (m *Manager) deletePrefix(ctx context.Context, prefix string) (int, error) {
	keys, err := m.store.List(ctx, prefix)
	if err != nil {
		return 0, err
	}
	for i, k := range keys {
		if err := m.store.Delete(ctx, k); err != nil {
			return i, err
		}
	}
	return len(keys), nil
}
