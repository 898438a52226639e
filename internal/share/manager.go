package share

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"holdfast/internal/clock"
	"holdfast/internal/partition"
	"holdfast/internal/records"
)

// DataLog is a partition this node leads, as share fetching reads it
// (*partition.Partition).
type DataLog interface {
	LeaderEpoch() int32
	HighWatermark() int64
	LogStartOffset() int64
	Read(offset int64, maxBytes int, readCommitted bool) (partition.ReadResult, error)
	Notify() <-chan struct{}
}

// Persister reads and writes share-partition state at the group's
// coordinator (the Store, here or on another node).
type Persister interface {
	Read(ctx context.Context, k Key, leaderEpoch int32) (Snapshot, bool, error)
	Write(ctx context.Context, k Key, snap Snapshot) error
}

// GroupSettings are a share group's configs as a partition leader uses
// them.
type GroupSettings struct {
	Settings
	// AutoReset is share.auto.offset.reset: "latest" (default) or
	// "earliest": where a share partition with no state starts.
	AutoReset string
}

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	Persister Persister
	// Settings is a group's settings (group configs over broker defaults).
	Settings func(group string) GroupSettings
	// MaxSessions is group.share.max.share.sessions (2000).
	MaxSessions int
	// SessionIdle is how long an unused share session lives (its member's
	// records are then released).
	SessionIdle time.Duration
	Logger      *slog.Logger
	// Clock drives the expiry loop and tells the acquisition locks' and
	// sessions' time; nil: the wall clock.
	Clock clock.Clock
}

// Manager is this node's share partitions (as partition leader) and share
// sessions.
type Manager struct {
	cfg ManagerConfig
	log *slog.Logger
	clk clock.Clock

	mu       sync.Mutex
	parts    map[Key]*sharePart
	sessions map[SessionKey]*Session
	closed   bool
	stop     chan struct{}
	done     chan struct{}

	// Counters (metrics): records acknowledged by type (gap, accept,
	// release, reject), and offsets whose acquisition lock ran out.
	acks     [4]atomic.Int64
	timeouts atomic.Int64
}

// sharePart is one share partition with its lock and durable identity.
type sharePart struct {
	key Key
	// mu guards p; it is held across a state write, so the in-memory
	// state never runs ahead of what is durable.
	mu          sync.Mutex
	p           *Partition
	leaderEpoch int32
	stateEpoch  int32
	avail       chan struct{} // closed when offsets become available
	// ready is closed once loaded; loadErr is then set if it failed.
	ready   chan struct{}
	loadErr error
}

// NewManager starts a Manager and its lock-expiry loop.
func NewManager(cfg ManagerConfig) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 2000
	}
	if cfg.SessionIdle <= 0 {
		cfg.SessionIdle = 2 * time.Minute
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, clk: clock.OrReal(cfg.Clock), parts: map[Key]*sharePart{}, sessions: map[SessionKey]*Session{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go m.expireLoop()
	return m
}

// Close stops the expiry loop.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	m.mu.Unlock()
	close(m.stop)
	<-m.done
}

// ErrNotLeader: the share partition's data partition changed leader
// while it was used (or its state was reset); the client asks again.
var ErrNotLeader = errors.New("share: partition leadership or state changed")

// get is the share partition k on lg, loaded from its durable state (or
// started by share.auto.offset.reset) in lg's leader epoch. A share
// partition of an older epoch is replaced: another leader may have
// written since.
func (m *Manager) get(ctx context.Context, k Key, lg DataLog) (*sharePart, error) {
	epoch := lg.LeaderEpoch()
	m.mu.Lock()
	sp := m.parts[k]
	if sp == nil || sp.leaderEpoch < epoch {
		sp = &sharePart{key: k, leaderEpoch: epoch, ready: make(chan struct{}), avail: make(chan struct{})}
		m.parts[k] = sp
		m.mu.Unlock()
		sp.loadErr = m.load(ctx, sp, lg)
		close(sp.ready)
		if sp.loadErr != nil {
			m.drop(sp)
		}
		return sp, sp.loadErr
	}
	m.mu.Unlock()
	select {
	case <-sp.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if sp.loadErr != nil {
		return nil, sp.loadErr
	}
	if sp.leaderEpoch > epoch {
		return nil, ErrNotLeader
	}
	return sp, nil
}

func (m *Manager) load(ctx context.Context, sp *sharePart, lg DataLog) error {
	snap, found, err := m.cfg.Persister.Read(ctx, sp.key, sp.leaderEpoch)
	if err != nil {
		return err
	}
	sp.stateEpoch = snap.StateEpoch
	if found {
		sp.p = FromSnapshot(snap)
		return nil
	}
	start := lg.HighWatermark()
	if m.cfg.Settings(sp.key.Group).AutoReset == "earliest" {
		start = lg.LogStartOffset()
	}
	sp.p = NewPartition(start)
	sp.p.dirty = true
	// The start chosen is stored at once, so that it does not move with
	// the log end until the first acknowledgement.
	return m.writeLocked(ctx, sp)
}

// drop forgets sp (fenced, or its load failed): the next use reloads.
func (m *Manager) drop(sp *sharePart) {
	m.mu.Lock()
	if m.parts[sp.key] == sp {
		delete(m.parts, sp.key)
	}
	m.mu.Unlock()
}

// writeLocked writes sp's state if it changed; sp.mu is held (or sp is
// not published yet).
func (m *Manager) writeLocked(ctx context.Context, sp *sharePart) error {
	if !sp.p.Dirty() {
		return nil
	}
	snap := sp.p.Snapshot()
	snap.StateEpoch, snap.LeaderEpoch = sp.stateEpoch, sp.leaderEpoch
	if err := m.cfg.Persister.Write(ctx, sp.key, snap); err != nil {
		sp.p.dirty = true
		if errors.Is(err, ErrFencedLeaderEpoch) || errors.Is(err, ErrFencedStateEpoch) {
			m.drop(sp)
			return ErrNotLeader
		}
		return err
	}
	return nil
}

// current reports whether sp is still the share partition of its key.
func (m *Manager) current(sp *sharePart) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.parts[sp.key] == sp
}

// signal wakes fetches waiting for sp's offsets.
func (sp *sharePart) signal() {
	close(sp.avail)
	sp.avail = make(chan struct{})
}

// AckBatch is one acknowledgement batch of a request.
type AckBatch struct {
	First, Last int64
	Types       []int8
}

// Acknowledge applies member's acknowledgements on share partition k and
// makes them durable before it returns. All or nothing: if a batch is
// invalid or the write fails, the share partition is as before.
func (m *Manager) Acknowledge(ctx context.Context, k Key, lg DataLog, member string, batches []AckBatch) error {
	sp, err := m.get(ctx, k, lg)
	if err != nil {
		return err
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !m.current(sp) {
		return ErrNotLeader
	}
	now := m.clk.Now()
	s := m.cfg.Settings(k.Group).Settings
	saved := sp.p.clone()
	released := false
	for _, b := range batches {
		if err := sp.p.Acknowledge(member, b.First, b.Last, b.Types, s, now); err != nil {
			sp.p = saved
			return err
		}
		for _, t := range b.Types {
			released = released || t == AckRelease
		}
	}
	if err := m.writeLocked(ctx, sp); err != nil {
		sp.p = saved
		return err
	}
	for _, b := range batches {
		for i := b.First; i <= b.Last; i++ {
			t := b.Types[0]
			if len(b.Types) > 1 {
				t = b.Types[i-b.First]
			}
			if t >= AckGap && t <= AckReject {
				m.acks[t].Add(1)
			}
		}
	}
	if released {
		sp.signal()
	}
	return nil
}

// Fetched is one share partition's answer to a ShareFetch.
type Fetched struct {
	Records  []byte  // whole batches covering the acquired offsets
	Acquired []Range // offset ranges acquired for the member
}

// Acquire hands member up to maxRecords offsets of share partition k
// (fewer bytes than maxBytes, except a first batch larger than that), and
// the batches that hold them.
func (m *Manager) Acquire(ctx context.Context, k Key, lg DataLog, member string, maxRecords int, strict bool, maxBytes int) (Fetched, error) {
	var out Fetched
	sp, err := m.get(ctx, k, lg)
	if err != nil {
		return out, err
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !m.current(sp) {
		return out, ErrNotLeader
	}
	s := m.cfg.Settings(k.Group).Settings
	now := m.clk.Now()
	m.timeouts.Add(int64(sp.p.Expire(now, s)))
	if ls := lg.LogStartOffset(); ls > sp.p.Start() {
		sp.p.SetStart(ls) // retention or DeleteRecords went past the SPSO
	}
	hw := lg.HighWatermark()
	if !sp.p.HasAvailable(hw, s) {
		return out, nil
	}
	from := sp.p.FirstAvailable()
	if from >= hw {
		return out, nil
	}
	res, err := lg.Read(from, maxBytes, false)
	if err != nil {
		if errors.Is(err, partition.ErrOffsetOutOfRange) {
			sp.p.SetStart(lg.LogStartOffset())
			return out, nil
		}
		return out, err
	}
	var spans []BatchSpan
	var starts []int // byte offset of each batch in res.Records
	pos := 0
	for rest := res.Records; len(rest) > 0; {
		b, next, err := records.Next(rest)
		if err != nil {
			break
		}
		h, err := records.ParseHeader(b)
		if err != nil {
			break
		}
		spans = append(spans, BatchSpan{First: h.BaseOffset, Last: h.BaseOffset + int64(h.LastOffsetDelta)})
		starts = append(starts, pos)
		pos += len(b)
		rest = next
	}
	if maxRecords <= 0 {
		maxRecords = 500
	}
	out.Acquired = sp.p.Acquire(member, spans, from, hw, maxRecords, strict, s, now)
	if len(out.Acquired) == 0 {
		return out, nil
	}
	// Keep the batches that hold an acquired offset.
	first, last := out.Acquired[0].First, out.Acquired[len(out.Acquired)-1].Last
	lo, hi := -1, 0
	for i, b := range spans {
		if b.Last < first || b.First > last {
			continue
		}
		if lo < 0 {
			lo = starts[i]
		}
		hi = len(res.Records)
		if i+1 < len(starts) {
			hi = starts[i+1]
		}
	}
	if lo >= 0 {
		out.Records = res.Records[lo:hi]
	}
	return out, nil
}

// Available is a channel closed when offsets of share partition k are
// released (nil if k is not loaded here).
func (m *Manager) Available(k Key) <-chan struct{} {
	m.mu.Lock()
	sp := m.parts[k]
	m.mu.Unlock()
	if sp == nil {
		return nil
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.avail
}

// Release releases what member holds on share partition k (its share
// session closed) and stores the result.
func (m *Manager) Release(ctx context.Context, k Key, member string) error {
	m.mu.Lock()
	sp := m.parts[k]
	m.mu.Unlock()
	if sp == nil {
		return nil
	}
	select {
	case <-sp.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	if sp.loadErr != nil {
		return nil
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.p.ReleaseMember(member, m.cfg.Settings(k.Group).Settings) == 0 {
		return nil
	}
	sp.signal()
	return m.writeLocked(ctx, sp)
}

// Forget drops the in-memory share partitions of group (its state was
// deleted or altered): the next fetch reloads them.
func (m *Manager) Forget(group string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.parts {
		if k.Group == group {
			delete(m.parts, k)
		}
	}
}

// LockDuration is share.record.lock.duration.ms of group.
func (m *Manager) LockDuration(group string) time.Duration {
	return m.cfg.Settings(group).LockDuration
}

const expireEvery = 100 * time.Millisecond

// expireLoop releases expired acquisition locks and stores the result,
// and ends idle share sessions.
func (m *Manager) expireLoop() {
	defer close(m.done)
	tick := m.clk.NewTicker(expireEvery)
	defer tick.Stop()
	busy := map[Key]bool{}
	var busyMu sync.Mutex
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		now := m.clk.Now()
		m.mu.Lock()
		var due []*sharePart
		for _, sp := range m.parts {
			due = append(due, sp)
		}
		m.mu.Unlock()
		for _, sp := range due {
			select {
			case <-sp.ready:
			default:
				continue
			}
			if sp.loadErr != nil || !sp.mu.TryLock() {
				continue
			}
			d := sp.p.NextDeadline()
			n := 0
			if !d.IsZero() && !now.Before(d) {
				n = sp.p.Expire(now, m.cfg.Settings(sp.key.Group).Settings)
				m.timeouts.Add(int64(n))
			}
			expired := n > 0
			if expired {
				sp.signal()
			}
			sp.mu.Unlock()
			if !expired {
				continue
			}
			busyMu.Lock()
			if busy[sp.key] {
				busyMu.Unlock()
				continue
			}
			busy[sp.key] = true
			busyMu.Unlock()
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				sp.mu.Lock()
				if err := m.writeLocked(ctx, sp); err != nil {
					m.log.Debug("storing expired share locks", "group", sp.key.Group, "partition", sp.key.Partition, "err", err)
				}
				sp.mu.Unlock()
				busyMu.Lock()
				delete(busy, sp.key)
				busyMu.Unlock()
			}()
		}
		m.expireSessions(now)
	}
}

// clone is a copy of p (to restore on a failed write).
func (p *Partition) clone() *Partition {
	c := *p
	c.recs = append([]rec(nil), p.recs...)
	return &c
}

// Stats are the Manager's figures (metrics).
type Stats struct {
	Partitions, Sessions, Acquired int
	// Acks are records acknowledged, by type (gap, accept, release,
	// reject); LockTimeouts records whose acquisition lock ran out.
	Acks         [4]int64
	LockTimeouts int64
}

// Stats reports the share partitions, sessions and locked offsets here.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	parts := make([]*sharePart, 0, len(m.parts))
	for _, sp := range m.parts {
		parts = append(parts, sp)
	}
	st := Stats{Partitions: len(m.parts), Sessions: len(m.sessions), LockTimeouts: m.timeouts.Load()}
	for i := range m.acks {
		st.Acks[i] = m.acks[i].Load()
	}
	m.mu.Unlock()
	for _, sp := range parts {
		select {
		case <-sp.ready: // loaded: sp.p is set (or loadErr)
		default:
			continue
		}
		if sp.loadErr == nil && sp.mu.TryLock() {
			st.Acquired += sp.p.Acquired()
			sp.mu.Unlock()
		}
	}
	return st
}
