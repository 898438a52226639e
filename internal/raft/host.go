// Package raft is Holdfast's multi-raft: one etcd Raft group per partition
// (and one for the controller) whose Raft log is the partition's
// storage.Log itself. A Host drives every group of a node from a few
// goroutines: one ticker, one Ready loop that persists the output of all
// groups and waits for a single group-commit round, and a TCP transport that
// batches messages per peer. See docs/replication.md.
package raft

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// Errors returned by Host.
var (
	ErrNotLeader       = errors.New("raft: not the leader")
	ErrProposalLost    = errors.New("raft: proposal lost: another entry was committed at its offsets")
	ErrProposalDropped = errors.New("raft: proposal dropped")
	ErrUnknownGroup    = errors.New("raft: unknown group")
	ErrClosed          = errors.New("raft: host closed")
	ErrGroupFailed     = errors.New("raft: group failed")
)

// NotLeaderError is ErrNotLeader with the leader hint (0 if unknown).
type NotLeaderError struct {
	Group, Leader, Term uint64
}

func (e *NotLeaderError) Error() string {
	return fmt.Sprintf("raft: group %d: not the leader (leader %d, term %d)", e.Group, e.Leader, e.Term)
}

// Is makes errors.Is(err, ErrNotLeader) true.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

// Config configures a Host; zero values get defaults.
type Config struct {
	ID uint64 // this node's id, > 0
	// ClusterID must be the same on every node of a cluster; frames from
	// another cluster are refused.
	ClusterID uint64
	Dir       string            // where the hardstate journal lives
	Listen    string            // address for peer traffic, e.g. ":9093" or "127.0.0.1:0"
	Peers     map[uint64]string // peer id -> address (self is ignored)

	TickInterval   time.Duration // default 100ms
	ElectionTicks  int           // default 10
	HeartbeatTicks int           // default 1
	// QuiesceTicks: a leader whose followers are all caught up for this
	// many ticks with nothing to do stops ticking the group (and tells the
	// followers to). Default 2*ElectionTicks; negative disables quiescence.
	QuiesceTicks        int
	MaxSizePerMsg       uint64 // default 1 MiB
	MaxInflightMsgs     int    // default 256
	MaxUncommittedBytes uint64 // per group; default 64 MiB
	QueueLen            int    // per-peer outbound queue, default 8192

	FS     storage.FS // for the journal; default storage.OSFS()
	Faults *Faults    // fault injection for tests; nil: none
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.TickInterval == 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = 1
	}
	if c.QuiesceTicks == 0 {
		c.QuiesceTicks = 2 * c.ElectionTicks
	}
	if c.MaxSizePerMsg == 0 {
		c.MaxSizePerMsg = 1 << 20
	}
	if c.MaxInflightMsgs == 0 {
		c.MaxInflightMsgs = 256
	}
	if c.MaxUncommittedBytes == 0 {
		c.MaxUncommittedBytes = 64 << 20
	}
	if c.QueueLen == 0 {
		c.QueueLen = 8192
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.FS == nil {
		c.FS = storage.OSFS()
	}
}

// GroupConfig describes one Raft group on this node.
type GroupConfig struct {
	ID  uint64
	Log *storage.Log // the group's log; the caller opens and closes it
	// Voters is the initial membership, used when the node has no
	// persisted ConfState for the group (the metadata knows the replicas).
	Voters []uint64
	// OnCommit, if set, is called on the Ready loop with newly committed
	// entries, in order. It must not block.
	OnCommit func(group uint64, ents []Committed)
	// Rejoin: the replica's storage was lost (the metadata says it had
	// data, the log is empty): it grants no votes until it has caught up.
	// A replica also detects this by itself when a leader's heartbeat shows
	// the leader remembers entries it lacks.
	Rejoin bool
}

// Committed is one committed entry: a batch at [BaseOffset, EndOffset).
// Data is the batch, or nil for a Raft-internal control batch.
type Committed struct {
	Index, Term           uint64
	BaseOffset, EndOffset int64
	Data                  []byte
}

// Proposal identifies a proposed batch: its offsets and the term (= leader
// epoch) it was proposed in. It is committed only if the entry committed at
// those offsets has that term.
type Proposal struct {
	Group                 uint64
	BaseOffset, EndOffset int64
	Term                  uint64
}

// Host runs the Raft groups of one node.
type Host struct {
	cfg     Config
	log     *slog.Logger
	rlog    raft.Logger
	journal *journal
	tr      *transport

	mu     sync.RWMutex
	groups map[uint64]*group

	dirtyMu sync.Mutex
	dirty   map[*group]struct{}
	kick    chan struct{}

	done   chan struct{}
	wg     sync.WaitGroup
	closed sync.Once
}

type group struct {
	id  uint64
	cfg GroupConfig
	st  *store

	mu          sync.Mutex
	rn          *raft.RawNode
	readyTerm   uint64 // the term in which this node leads and its empty entry is stored
	nextOffset  int64  // leader: offset of the next proposal, counting unstable entries
	commitIndex uint64
	commitEnd   int64
	commitCh    chan struct{} // closed and replaced when the commit advances
	storedCh    chan struct{} // closed and replaced after a cycle stored entries
	failed      error
	removed     bool
	lastLeader  uint64

	quiesced   bool
	quiesceLdr uint64 // follower: the leader that quiesced us

	// rejoin: this replica lost its storage (wiped disk) while the others
	// remember what it had acknowledged. Until it has caught up with a
	// leader's commit index it grants no votes (it cannot vouch for
	// committed entries) and tells the leader, whose stale progress for it
	// must be reset.
	rejoin       bool
	rejoinTarget uint64
	reset        bool // leader: recreate the RawNode (fresh progress for every peer)
	idleTicks    int
}

var (
	quiesceCtx = []byte("hf-quiesce")
	rejoinCtx  = []byte("hf-rejoin:") // + u64 last index
	// wakeCtx: a group on the sending node stopped (failed or removed);
	// quiesced replicas must tick again to elect a leader without it.
	wakeCtx = []byte("hf-wake")
)

// NewHost opens the journal, starts the transport and the loops.
func NewHost(cfg Config) (*Host, error) {
	cfg.defaults()
	if cfg.ID == 0 {
		return nil, errors.New("raft: node id must be > 0")
	}
	logger := cfg.Logger.With("node", cfg.ID)
	j, err := openJournal(cfg.FS, cfg.Dir, logger)
	if err != nil {
		return nil, err
	}
	h := &Host{
		cfg: cfg, log: logger, rlog: &raftLogger{logger}, journal: j,
		groups: map[uint64]*group{}, dirty: map[*group]struct{}{},
		kick: make(chan struct{}, 1), done: make(chan struct{}),
	}
	h.tr, err = newTransport(cfg.ID, cfg.ClusterID, cfg.Listen, h, cfg.Faults, logger, cfg.QueueLen, cfg.TickInterval*time.Duration(cfg.HeartbeatTicks))
	if err != nil {
		j.close()
		return nil, err
	}
	for id, addr := range cfg.Peers {
		h.tr.addPeer(id, addr)
	}
	h.wg.Add(2)
	go h.tickLoop()
	go h.readyLoop()
	return h, nil
}

// Addr is the address the transport listens on.
func (h *Host) Addr() string { return h.tr.addr() }

// ID is this node's id.
func (h *Host) ID() uint64 { return h.cfg.ID }

// SetPeer adds or re-addresses a peer.
func (h *Host) SetPeer(id uint64, addr string) { h.tr.addPeer(id, addr) }

// TransportStats returns the transport counters.
func (h *Host) TransportStats() TransportStats { return h.tr.stats() }

// AddGroup opens a group over its log: the index is rebuilt from the log,
// HardState and ConfState come from the journal (or Voters if none).
func (h *Host) AddGroup(gc GroupConfig) error {
	if gc.ID == 0 || gc.Log == nil {
		return errors.New("raft: group needs an id > 0 and a log")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.groups[gc.ID]; ok {
		return fmt.Errorf("raft: group %d already added", gc.ID)
	}
	js := h.journal.snapshot(gc.ID)
	if js.ancPending {
		// A snapshot install was interrupted: finish it.
		if err := gc.Log.TruncateFullyAndStartAt(js.anc.Offset); err != nil {
			return err
		}
		h.journal.putAnchor(gc.ID, js.anc, true)
	}
	cs := js.cs
	if cs == nil {
		// Not fsynced: until a conf change it is re-derived from Voters.
		cs = &pb.ConfState{Voters: append([]uint64(nil), gc.Voters...)}
		if err := h.journal.putConfState(gc.ID, cs, 0, false); err != nil {
			return err
		}
	}
	if err := h.journal.flush(false); err != nil {
		return err
	}
	st, err := openStore(gc.Log, js.anc, js.hs, cs)
	if err != nil {
		return err
	}
	// Raft redelivers committed entries above applied: the journal's applied
	// index lags a cycle, so a few are redelivered (OnCommit sees them
	// again), and a conf change applied but not yet journaled is applied
	// again rather than lost.
	applied := st.anc.Index
	if st.hs != nil {
		applied = max(st.anc.Index, min(st.hs.GetCommit(), max(js.applied, js.csIndex)))
	}
	rn, err := h.newRawNode(st, applied)
	if err != nil {
		return fmt.Errorf("raft: group %d: %w", gc.ID, err)
	}
	end, _ := st.endOf(applied)
	g := &group{id: gc.ID, cfg: gc, st: st, rn: rn, commitIndex: applied, commitEnd: end, commitCh: make(chan struct{}), storedCh: make(chan struct{}), rejoin: gc.Rejoin}
	h.groups[gc.ID] = g
	h.markDirty(g)
	return nil
}

func (h *Host) newRawNode(st *store, applied uint64) (*raft.RawNode, error) {
	return raft.NewRawNode(&raft.Config{
		ID:                        h.cfg.ID,
		ElectionTick:              h.cfg.ElectionTicks,
		HeartbeatTick:             h.cfg.HeartbeatTicks,
		Storage:                   st,
		Applied:                   applied,
		MaxSizePerMsg:             h.cfg.MaxSizePerMsg,
		MaxInflightMsgs:           h.cfg.MaxInflightMsgs,
		MaxUncommittedEntriesSize: h.cfg.MaxUncommittedBytes,
		CheckQuorum:               true,
		PreVote:                   true,
		StepDownOnRemoval:         true,
		Logger:                    h.rlog,
	})
}

// resetLocked recreates the group's RawNode from what is stored: the node
// becomes a follower in its persisted term, with fresh progress for every
// peer. Only between cycles (no Ready outstanding); unstable proposals are
// dropped (their waiters see ErrProposalLost or time out).
func (h *Host) resetLocked(g *group) {
	g.reset = false
	rn, err := h.newRawNode(g.st, g.commitIndex)
	if err != nil {
		h.log.Error("raft: reset group", "group", g.id, "err", err)
		return
	}
	g.rn, g.readyTerm = rn, 0
}

// RemoveGroup stops driving a group and forgets its journal state (the
// caller deletes or keeps the log).
func (h *Host) RemoveGroup(id uint64) error {
	h.mu.Lock()
	g := h.groups[id]
	delete(h.groups, id)
	h.mu.Unlock()
	if g == nil {
		return ErrUnknownGroup
	}
	g.mu.Lock()
	g.removed = true
	h.wakePeersLocked(g)
	close(g.commitCh)
	g.commitCh = make(chan struct{})
	close(g.storedCh)
	g.storedCh = make(chan struct{})
	g.mu.Unlock()
	h.journal.remove(id)
	return h.journal.flush(false)
}

func (h *Host) group(id uint64) *group {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.groups[id]
}

func (h *Host) markDirty(g *group) {
	h.dirtyMu.Lock()
	h.dirty[g] = struct{}{}
	h.dirtyMu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Propose appends batch to the group's Raft log on the leader and returns
// its offsets. The batch is validated and copied; the copy gets the next
// offset and the term as leader epoch. It does not wait: use WaitCommitted.
func (h *Host) Propose(ctx context.Context, groupID uint64, batch []byte) (Proposal, error) {
	g := h.group(groupID)
	if g == nil {
		return Proposal{}, fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
	}
	hdr, err := records.Validate(batch, g.st.log.Config().MaxMessageBytes)
	if err != nil {
		return Proposal{}, err
	}
	if hdr.NumRecords == 0 {
		return Proposal{}, fmt.Errorf("raft: propose: batch without records: %w", records.ErrCorrupt)
	}
	if hdr.IsControl() && isRaftControl(controlType(hdr, batch)) {
		return Proposal{}, ErrRaftControl
	}
	if err := ctx.Err(); err != nil {
		return Proposal{}, err
	}
	data := bytes.Clone(batch)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed != nil {
		return Proposal{}, g.failed
	}
	if g.removed {
		return Proposal{}, fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
	}
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader || g.readyTerm != bs.GetTerm() || bs.LeadTransferee != 0 {
		return Proposal{}, &NotLeaderError{Group: groupID, Leader: bs.Lead, Term: bs.GetTerm()}
	}
	base := g.nextOffset
	records.SetBaseOffset(data, base)
	records.SetLeaderEpoch(data, int32(bs.GetTerm()))
	g.unquiesceLocked()
	err = nil
	if !h.guardLocked(g, func() { err = g.rn.Propose(data) }) {
		return Proposal{}, g.failed
	}
	if err != nil {
		if errors.Is(err, raft.ErrProposalDropped) {
			return Proposal{}, fmt.Errorf("%w: group %d", ErrProposalDropped, groupID)
		}
		return Proposal{}, err
	}
	g.nextOffset = base + int64(hdr.LastOffsetDelta) + 1
	h.markDirty(g)
	return Proposal{Group: groupID, BaseOffset: base, EndOffset: g.nextOffset, Term: bs.GetTerm()}, nil
}

// WaitCommitted returns nil once p is committed; ErrProposalLost if a
// different entry was committed at its offsets (a new leader overwrote it).
func (h *Host) WaitCommitted(ctx context.Context, p Proposal) error {
	g := h.group(p.Group)
	if g == nil {
		return fmt.Errorf("%w: %d", ErrUnknownGroup, p.Group)
	}
	for {
		g.mu.Lock()
		failed, removed, end, ch := g.failed, g.removed, g.commitEnd, g.commitCh
		g.mu.Unlock()
		if failed != nil {
			return failed
		}
		if removed {
			return fmt.Errorf("%w: %d", ErrUnknownGroup, p.Group)
		}
		if end >= p.EndOffset {
			_, term, base, e, ok := g.st.entryAt(p.EndOffset - 1)
			if ok && term == p.Term && base == p.BaseOffset && e == p.EndOffset {
				return nil
			}
			return fmt.Errorf("%w: group %d offsets [%d, %d) term %d", ErrProposalLost, p.Group, p.BaseOffset, p.EndOffset, p.Term)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-h.done:
			return ErrClosed
		}
	}
}

// WaitLocal returns nil once p is stored on this node: fsynced under
// flush=sync, written otherwise (acks=1: the leader's disk only; the batch
// can still be lost in a leader change, as Kafka's acks=1 can).
// ErrProposalLost if another entry took its offsets here.
func (h *Host) WaitLocal(ctx context.Context, p Proposal) error {
	g := h.group(p.Group)
	if g == nil {
		return fmt.Errorf("%w: %d", ErrUnknownGroup, p.Group)
	}
	for {
		g.mu.Lock()
		failed, removed, ch := g.failed, g.removed, g.storedCh
		g.mu.Unlock()
		if failed != nil {
			return failed
		}
		if removed {
			return fmt.Errorf("%w: %d", ErrUnknownGroup, p.Group)
		}
		if _, term, base, end, ok := g.st.entryAt(p.EndOffset - 1); ok {
			if term != p.Term || base != p.BaseOffset || end != p.EndOffset {
				return fmt.Errorf("%w: group %d offsets [%d, %d) term %d", ErrProposalLost, p.Group, p.BaseOffset, p.EndOffset, p.Term)
			}
			l := g.st.log
			if l.Config().Flush.Mode != storage.FlushSync || l.DurableOffset() >= p.EndOffset {
				return nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-h.done:
			return ErrClosed
		}
	}
}

// WaitCommitOffset returns once every offset below offset is committed
// (whatever entries those are).
func (h *Host) WaitCommitOffset(ctx context.Context, groupID uint64, offset int64) error {
	g := h.group(groupID)
	if g == nil {
		return fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
	}
	for {
		g.mu.Lock()
		failed, end, ch := g.failed, g.commitEnd, g.commitCh
		g.mu.Unlock()
		if failed != nil {
			return failed
		}
		if end >= offset {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-h.done:
			return ErrClosed
		}
	}
}

// CommitNotify returns a channel closed when the group's commit offset
// next advances (or the group fails or is removed): for long polls on the
// high watermark.
func (h *Host) CommitNotify(groupID uint64) (<-chan struct{}, error) {
	g := h.group(groupID)
	if g == nil {
		return nil, fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.commitCh, nil
}

// CommitOffset is the group's commit offset on this node (the high
// watermark on the leader; possibly behind on a follower).
func (h *Host) CommitOffset(groupID uint64) (int64, error) {
	g := h.group(groupID)
	if g == nil {
		return 0, fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.commitEnd, nil
}

// AddLearner adds node as a non-voting replica (it receives the log but
// counts for nothing); promote it with AddVoter once it has caught up.
// Set the node's address with SetPeer first. Waits until the change is
// committed.
func (h *Host) AddLearner(ctx context.Context, groupID, node uint64) error {
	return h.changeConf(ctx, groupID, pb.ConfChangeType_ConfChangeAddLearnerNode, node)
}

// AddVoter adds node as a voter, or promotes a learner. One voter change at
// a time (no joint consensus yet): adding a voter that has not caught up
// raises the quorum before it can help; add it as a learner first.
func (h *Host) AddVoter(ctx context.Context, groupID, node uint64) error {
	return h.changeConf(ctx, groupID, pb.ConfChangeType_ConfChangeAddNode, node)
}

// RemoveReplica removes a voter or learner. A leader that removes itself
// steps down once the change is applied.
func (h *Host) RemoveReplica(ctx context.Context, groupID, node uint64) error {
	return h.changeConf(ctx, groupID, pb.ConfChangeType_ConfChangeRemoveNode, node)
}

// ErrConfChangeInProgress: Raft allows one pending membership change.
var ErrConfChangeInProgress = errors.New("raft: another membership change is in progress")

func (h *Host) changeConf(ctx context.Context, groupID uint64, typ pb.ConfChangeType, node uint64) error {
	g := h.group(groupID)
	if g == nil {
		return fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
	}
	if node == 0 {
		return errors.New("raft: node id must be > 0")
	}
	cc := &pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: typ.Enum(), NodeId: new(node)}}}
	g.mu.Lock()
	if g.failed != nil {
		g.mu.Unlock()
		return g.failed
	}
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader || g.readyTerm != bs.GetTerm() || bs.LeadTransferee != 0 {
		g.mu.Unlock()
		return &NotLeaderError{Group: groupID, Leader: bs.Lead, Term: bs.GetTerm()}
	}
	base := g.nextOffset
	var err error
	g.unquiesceLocked()
	if !h.guardLocked(g, func() { err = g.rn.ProposeConfChange(cc) }) {
		err = g.failed
	}
	if err != nil {
		g.mu.Unlock()
		return err
	}
	// Stored as a one-record control batch. If a change is already pending,
	// Raft stores an empty entry instead: it takes the same offset.
	g.nextOffset = base + 1
	p := Proposal{Group: groupID, BaseOffset: base, EndOffset: base + 1, Term: bs.GetTerm()}
	g.mu.Unlock()
	h.markDirty(g)
	if err := h.WaitCommitted(ctx, p); err != nil {
		return err
	}
	sl, err := g.st.log.Read(base, base+1, 1)
	if err != nil {
		return err
	}
	b, err := sl.Bytes()
	sl.Release()
	if err != nil {
		return err
	}
	hdr, err := records.ParseHeader(b)
	if err != nil {
		return err
	}
	if controlType(hdr, b) != ctrlConfChangeV2 {
		return ErrConfChangeInProgress
	}
	return nil
}

// Campaign makes this node start an election for the group.
func (h *Host) Campaign(groupID uint64) error {
	g := h.group(groupID)
	if g == nil {
		return ErrUnknownGroup
	}
	g.mu.Lock()
	g.unquiesceLocked()
	var err error
	if !h.guardLocked(g, func() { err = g.rn.Campaign() }) {
		err = g.failed
	}
	g.mu.Unlock()
	h.markDirty(g)
	return err
}

// TransferLeader asks the leader to hand leadership to target.
func (h *Host) TransferLeader(groupID, target uint64) error {
	g := h.group(groupID)
	if g == nil {
		return ErrUnknownGroup
	}
	g.mu.Lock()
	g.unquiesceLocked()
	h.guardLocked(g, func() { g.rn.TransferLeader(target) })
	g.mu.Unlock()
	h.markDirty(g)
	return nil
}

// Compact drops the log below offset (retention, DeleteRecords), which must
// be committed. The Raft anchor moves to the entry before the batch holding
// offset and is journaled first; a follower that needs entries below it gets
// a log-start snapshot. Front deletion of a Raft log must go through here.
func (h *Host) Compact(groupID uint64, offset int64) error {
	g := h.group(groupID)
	if g == nil {
		return ErrUnknownGroup
	}
	g.mu.Lock()
	commitEnd, commitIndex := g.commitEnd, g.commitIndex
	g.mu.Unlock()
	if offset > commitEnd {
		return fmt.Errorf("raft: compact group %d to %d beyond commit %d: %w", groupID, offset, commitEnd, storage.ErrOffsetOutOfRange)
	}
	idx, _, base, _, ok := g.st.entryAt(offset)
	if !ok { // offset == end of the log: everything goes
		idx = commitIndex + 1
		base = commitEnd
	}
	prev := idx - 1
	term, err := g.st.Term(prev)
	if err != nil {
		if errors.Is(err, raft.ErrCompacted) {
			return g.st.log.DeleteBefore(offset)
		}
		return err
	}
	a := anchor{Index: prev, Term: term, Offset: base}
	h.journal.putAnchor(groupID, a, true)
	if err := h.journal.flush(true); err != nil {
		return err
	}
	if err := g.st.compactTo(a); err != nil {
		return err
	}
	return g.st.log.DeleteBefore(offset)
}

// Status of a group as this node sees it.
type Status struct {
	Group, Node, Leader, Term uint64
	State                     string
	CommitIndex, LastIndex    uint64
	FirstIndex                uint64
	CommitOffset              int64 // high watermark: offsets below are committed
	StartOffset, EndOffset    int64
	DurableOffset             int64 // fsynced locally
	Quiesced                  bool
	Failed                    string          // why the group stopped (storage failure), "" if running
	Voters, Learners          []uint64        // the applied membership
	Replicas                  []ReplicaStatus // on the leader only
}

// ReplicaStatus is the leader's view of one replica: MatchOffset is the end
// of what the replica acknowledged, i.e. fsynced (followers ack after fsync).
type ReplicaStatus struct {
	ID          uint64
	MatchIndex  uint64
	MatchOffset int64
	State       string // Probe, Replicate, Snapshot
	// Active: heard from within the last election timeout (the leader
	// itself always). For min.insync.replicas: count replicas that are
	// Active and matched close to the commit offset.
	Active  bool
	Learner bool
}

// Status reports a group's state.
func (h *Host) Status(groupID uint64) (Status, error) {
	g := h.group(groupID)
	if g == nil {
		return Status{}, ErrUnknownGroup
	}
	g.mu.Lock()
	bs := g.rn.BasicStatus()
	s := Status{
		Group: groupID, Node: h.cfg.ID, Leader: bs.Lead, Term: bs.GetTerm(), State: bs.RaftState.String(),
		CommitIndex: g.commitIndex, CommitOffset: g.commitEnd, Quiesced: g.quiesced,
	}
	if g.failed != nil {
		s.Failed = g.failed.Error()
	}
	if bs.RaftState == raft.StateLeader {
		g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr trackerProgress) {
			off, _ := g.st.endOf(pr.Match)
			s.Replicas = append(s.Replicas, ReplicaStatus{
				ID: id, MatchIndex: pr.Match, MatchOffset: off, State: pr.State.String(),
				Active: pr.RecentActive || id == h.cfg.ID, Learner: pr.IsLearner,
			})
		})
	}
	g.mu.Unlock()
	s.LastIndex, _ = g.st.LastIndex()
	s.FirstIndex, _ = g.st.FirstIndex()
	g.st.mu.RLock()
	if g.st.cs != nil {
		s.Voters = append([]uint64(nil), g.st.cs.Voters...)
		s.Learners = append([]uint64(nil), g.st.cs.Learners...)
	}
	g.st.mu.RUnlock()
	s.StartOffset, s.EndOffset, s.DurableOffset = g.st.log.StartOffset(), g.st.log.EndOffset(), g.st.log.DurableOffset()
	return s, nil
}

// Groups lists the ids of the groups on this host.
func (h *Host) Groups() []uint64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]uint64, 0, len(h.groups))
	for id := range h.groups {
		out = append(out, id)
	}
	return out
}

// Close stops the host. Logs stay open (their owner closes them).
func (h *Host) Close() error {
	var err error
	h.closed.Do(func() {
		close(h.done)
		h.tr.close()
		h.wg.Wait()
		err = h.journal.close()
	})
	return err
}

func (h *Host) snapshotGroups() []*group {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]*group, 0, len(h.groups))
	for _, g := range h.groups {
		out = append(out, g)
	}
	return out
}

// tickLoop ticks every group that is not quiesced: one timer for all.
func (h *Host) tickLoop() {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.TickInterval)
	defer t.Stop()
	electionTimeout := h.cfg.TickInterval * time.Duration(h.cfg.ElectionTicks)
	for {
		select {
		case <-h.done:
			return
		case <-t.C:
		}
		for _, g := range h.snapshotGroups() {
			g.mu.Lock()
			if g.failed != nil || g.removed {
				g.mu.Unlock()
				continue
			}
			if g.quiesced {
				h.checkQuiescedLocked(g, electionTimeout)
			}
			var qmsgs []*pb.Message
			if !g.quiesced {
				// Decide before ticking: a heartbeat from this tick would
				// reach the followers after the quiescing one.
				qmsgs = h.maybeQuiesceLocked(g)
				if !g.quiesced {
					h.guardLocked(g, func() { g.rn.Tick() })
				}
			}
			ready := false
			h.guardLocked(g, func() { ready = g.rn.HasReady() })
			g.mu.Unlock()
			// Sent unlocked: a drop reports back into the group.
			for _, m := range qmsgs {
				h.tr.send(g.id, m)
			}
			if ready {
				h.markDirty(g)
			}
		}
	}
}

// maybeQuiesceLocked: a leader with every voter caught up, everything
// committed and nothing in flight for QuiesceTicks ticks sends its followers
// a quiescing heartbeat and stops ticking the group. Node-level heartbeats
// of the transport then stand in for the group's: a follower that stops
// hearing from the leader's node wakes up and can elect a new leader.
func (h *Host) maybeQuiesceLocked(g *group) []*pb.Message {
	if h.cfg.QuiesceTicks < 0 {
		return nil
	}
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader || g.readyTerm != bs.GetTerm() || bs.LeadTransferee != 0 {
		g.idleTicks = 0
		return nil
	}
	last, _ := g.st.LastIndex()
	idle := bs.GetCommit() == last
	var followers []uint64
	g.rn.WithProgress(func(id uint64, typ raft.ProgressType, pr trackerProgress) {
		if pr.Match != last {
			idle = false
		}
		if id != h.cfg.ID {
			followers = append(followers, id)
		}
	})
	if !idle {
		g.idleTicks = 0
		return nil
	}
	g.idleTicks++
	if g.idleTicks < h.cfg.QuiesceTicks {
		return nil
	}
	var msgs []*pb.Message
	for _, id := range followers {
		msgs = append(msgs, &pb.Message{
			Type: pb.MessageType_MsgHeartbeat.Enum(), To: new(id), From: new(h.cfg.ID),
			Term: new(bs.GetTerm()), Commit: new(bs.GetCommit()), Context: quiesceCtx,
		})
	}
	g.quiesced = true
	g.quiesceLdr = h.cfg.ID
	return msgs
}

// checkQuiescedLocked wakes a quiesced group when a peer it depends on went
// silent: for a follower its leader, for a leader any follower.
func (h *Host) checkQuiescedLocked(g *group, window time.Duration) {
	if g.quiesceLdr != h.cfg.ID {
		if !h.tr.heardWithin(g.quiesceLdr, window) {
			g.unquiesceLocked()
		}
		return
	}
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, _ trackerProgress) {
		if id != h.cfg.ID && !h.tr.heardWithin(id, window) {
			g.unquiesceLocked()
		}
	})
}

func (g *group) unquiesceLocked() {
	g.quiesced = false
	g.idleTicks = 0
}

// receive implements transportEvents: step every message into its group.
func (h *Host) receive(from uint64, msgs []outMsg) {
	for _, om := range msgs {
		g := h.group(om.group)
		if g == nil {
			continue // not (yet) created here; Raft retransmits
		}
		m := om.m
		typ := m.GetType()
		quiesce := bytes.Equal(m.Context, quiesceCtx) &&
			(typ == pb.MessageType_MsgHeartbeat || typ == pb.MessageType_MsgHeartbeatResp)
		g.mu.Lock()
		if g.failed != nil || g.removed {
			g.mu.Unlock()
			continue
		}
		// Anything but a heartbeat response, or a plain heartbeat from the
		// leader that quiesced us in its term, means activity: those carry
		// nothing new (a late one from before quiescing is common).
		if !quiesce && typ != pb.MessageType_MsgHeartbeatResp &&
			(typ != pb.MessageType_MsgHeartbeat || !g.quiesced || from != g.quiesceLdr || m.GetTerm() != g.rn.BasicStatus().GetTerm()) {
			g.unquiesceLocked()
		}
		if bytes.Equal(m.Context, wakeCtx) {
			g.mu.Unlock() // not a Raft message: waking was all it was for
			continue
		}
		if !h.checkLostStorageLocked(g, from, m) {
			g.mu.Unlock()
			continue
		}
		if quiesce && typ == pb.MessageType_MsgHeartbeatResp {
			m.Context = nil // raft reads a response's context as a ReadIndex position
		}
		h.guardLocked(g, func() { _ = g.rn.Step(m) }) // errors: stale or foreign messages, nothing to do
		if quiesce && typ == pb.MessageType_MsgHeartbeat {
			bs := g.rn.BasicStatus()
			last, _ := g.st.LastIndex()
			if bs.RaftState == raft.StateFollower && bs.Lead == from && bs.GetCommit() == last && m.GetCommit() == last {
				g.quiesced, g.quiesceLdr = true, from
			}
		}
		g.mu.Unlock()
		h.markDirty(g)
	}
}

// checkLostStorageLocked handles a replica that lost its log: it returns
// false if m must not be stepped. A heartbeat's commit is min(match, commit)
// on the leader, so one above our last index means the leader remembers
// entries we no longer have.
func (h *Host) checkLostStorageLocked(g *group, from uint64, m *pb.Message) bool {
	last, _ := g.st.LastIndex()
	switch m.GetType() {
	case pb.MessageType_MsgHeartbeat:
		if m.GetCommit() > last {
			if !g.rejoin {
				h.log.Warn("raft: leader remembers entries this replica lacks: storage was lost, rejoining without voting",
					"group", g.id, "leader", from, "leader_commit", m.GetCommit(), "last_index", last)
				g.rejoin = true
			}
			m.Commit = new(last) // raft would panic: commit beyond the log
		}
	case pb.MessageType_MsgVote, pb.MessageType_MsgPreVote:
		if g.rejoin {
			return false // no vote until caught up
		}
	case pb.MessageType_MsgApp:
		if g.rejoin {
			g.rejoinTarget = max(g.rejoinTarget, m.GetCommit())
		}
	case pb.MessageType_MsgSnap:
		if g.rejoin {
			g.rejoinTarget = max(g.rejoinTarget, m.GetSnapshot().GetMetadata().GetIndex())
		}
	case pb.MessageType_MsgHeartbeatResp:
		if !bytes.HasPrefix(m.Context, rejoinCtx) || len(m.Context) != len(rejoinCtx)+8 {
			return true
		}
		theirLast := binary.BigEndian.Uint64(m.Context[len(rejoinCtx):])
		m.Context = nil
		if g.rn.BasicStatus().RaftState != raft.StateLeader || g.reset {
			return true
		}
		g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr trackerProgress) {
			if id == from && pr.Match > theirLast {
				// Raft never lowers a Match, so the leader would wait forever
				// for acks of entries the replica no longer has. A fresh
				// RawNode has fresh progress for everyone (it costs an election).
				h.log.Warn("raft: replica lost its log, resetting the group's progress",
					"group", g.id, "replica", from, "match", pr.Match, "replica_last", theirLast)
				g.reset = true
			}
		})
		if g.reset {
			h.markDirty(g)
		}
	}
	return true
}

func (h *Host) unreachable(peer uint64, groups []uint64) {
	for _, id := range groups {
		if g := h.group(id); g != nil {
			g.mu.Lock()
			h.guardLocked(g, func() { g.rn.ReportUnreachable(peer) })
			g.mu.Unlock()
		}
	}
}

func (h *Host) snapshotSent(peer, groupID uint64, ok bool) {
	g := h.group(groupID)
	if g == nil {
		return
	}
	st := raft.SnapshotFinish
	if !ok {
		st = raft.SnapshotFailure
	}
	g.mu.Lock()
	h.guardLocked(g, func() { g.rn.ReportSnapshot(peer, st) })
	g.mu.Unlock()
	h.markDirty(g)
}

// readyLoop runs cycles: collect Ready from every group with work, persist
// all of it, one group-commit round, then send, apply and advance.
func (h *Host) readyLoop() {
	defer h.wg.Done()
	for {
		select {
		case <-h.done:
			return
		case <-h.kick:
		}
		h.dirtyMu.Lock()
		gs := make([]*group, 0, len(h.dirty))
		for g := range h.dirty {
			gs = append(gs, g)
		}
		clear(h.dirty)
		h.dirtyMu.Unlock()
		h.cycle(gs)
	}
}

type readyItem struct {
	g         *group
	rd        raft.Ready
	err       error
	emptyTerm uint64 // the term of the last empty (new leader) entry stored
	sync      bool
	rejoin    bool
	leader    bool          // leader when the Ready was taken
	prevHS    *pb.HardState // persisted before this Ready
}

// sendEarly sends a leader's appends and heartbeats before its own fsync
// (Raft thesis §10.2.1): followers write and fsync in parallel with the
// leader, and the leader's own vote for its entries still only counts after
// its fsync (RawNode steps it at Advance), so "committed" still means a
// durable majority. Only when term and vote did not change in this Ready:
// those must be durable before anything that depends on them leaves.
func (h *Host) sendEarly(it *readyItem) {
	if !it.leader || len(it.rd.Messages) == 0 {
		return
	}
	if hs := it.rd.HardState; !raft.IsEmptyHardState(hs) &&
		(it.prevHS == nil || hs.GetTerm() != it.prevHS.GetTerm() || hs.GetVote() != it.prevHS.GetVote()) {
		return
	}
	late := it.rd.Messages[:0:0]
	for _, m := range it.rd.Messages {
		switch m.GetType() {
		case pb.MessageType_MsgApp, pb.MessageType_MsgHeartbeat, pb.MessageType_MsgSnap:
			h.tr.send(it.g.id, m)
		default:
			late = append(late, m)
		}
	}
	it.rd.Messages = late
}

func (h *Host) cycle(gs []*group) {
	items := make([]*readyItem, 0, len(gs))
	for _, g := range gs {
		g.mu.Lock()
		if g.reset {
			h.resetLocked(g)
		}
		if !g.removed {
			h.guardLocked(g, func() {
				if g.rn.HasReady() {
					it := &readyItem{g: g, rd: g.rn.Ready(), rejoin: g.rejoin}
					it.leader = g.rn.BasicStatus().RaftState == raft.StateLeader
					g.st.mu.RLock()
					it.prevHS = g.st.hs
					g.st.mu.RUnlock()
					items = append(items, it)
				}
			})
		}
		g.mu.Unlock()
	}
	if len(items) == 0 {
		return
	}
	for _, it := range items {
		it.err = h.persist(it)
		if it.err == nil {
			h.sendEarly(it)
		}
	}
	// One group-commit round: every log that took entries and the journal,
	// fsynced concurrently (the Syncer merges the logs into one cycle).
	var wg sync.WaitGroup
	for _, it := range items {
		if it.err == nil && it.sync {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := it.g.st.log
				it.err = l.WaitDurable(context.Background(), l.EndOffset())
			}()
		}
	}
	jerr := h.journal.flush(false)
	wg.Wait()
	for _, it := range items {
		if jerr != nil && it.err == nil {
			it.err = jerr
		}
		if it.err != nil {
			h.failGroup(it.g, it.err)
			continue
		}
		if len(it.rd.Entries) > 0 || !raft.IsEmptySnap(it.rd.Snapshot) {
			g := it.g
			g.mu.Lock()
			close(g.storedCh)
			g.storedCh = make(chan struct{})
			g.mu.Unlock()
		}
		var tag []byte
		if it.rejoin {
			last, _ := it.g.st.LastIndex()
			tag = binary.BigEndian.AppendUint64(bytes.Clone(rejoinCtx), last)
		}
		for _, m := range it.rd.Messages {
			if tag != nil && m.GetType() == pb.MessageType_MsgHeartbeatResp {
				m.Context = tag
			}
			h.tr.send(it.g.id, m)
		}
	}
	for _, it := range items {
		if it.err == nil {
			h.apply(it)
		}
	}
	for _, it := range items {
		if it.err != nil {
			continue
		}
		g := it.g
		g.mu.Lock()
		if !h.guardLocked(g, func() { g.rn.Advance(it.rd) }) {
			g.mu.Unlock()
			continue
		}
		bs := g.rn.BasicStatus()
		if bs.RaftState == raft.StateLeader {
			if g.readyTerm != bs.GetTerm() && it.emptyTerm == bs.GetTerm() {
				// Our empty entry of this term is stored and nothing was
				// proposed since: the log end is where proposals start.
				g.st.mu.RLock()
				g.nextOffset = g.st.end
				g.st.mu.RUnlock()
				g.readyTerm = bs.GetTerm()
			}
		} else {
			g.readyTerm = 0
		}
		if bs.Lead != g.lastLeader {
			g.lastLeader = bs.Lead
			h.log.Info("raft: leader changed", "group", g.id, "leader", bs.Lead, "term", bs.GetTerm())
		}
		ready := false
		h.guardLocked(g, func() { ready = g.rn.HasReady() })
		g.mu.Unlock()
		if ready {
			h.markDirty(g)
		}
	}
}

// persist stores one Ready's snapshot, entries and hardstate (no fsync).
func (h *Host) persist(it *readyItem) error {
	g, rd := it.g, it.rd
	if !raft.IsEmptySnap(rd.Snapshot) {
		md := rd.Snapshot.GetMetadata()
		off, err := parseSnapshotData(rd.Snapshot.GetData())
		if err != nil {
			return err
		}
		a := anchor{Index: md.GetIndex(), Term: md.GetTerm(), Offset: off}
		h.journal.putAnchor(g.id, a, false)
		if err := h.journal.flush(true); err != nil {
			return err
		}
		if err := g.st.reset(a); err != nil {
			return err
		}
		h.journal.putAnchor(g.id, a, true)
		if cs := md.GetConfState(); cs != nil {
			if err := h.journal.putConfState(g.id, cs, a.Index, true); err != nil {
				return err
			}
			g.st.setConfState(cs)
		}
		h.log.Info("raft: installed log-start snapshot", "group", g.id, "index", a.Index, "offset", a.Offset)
		g.mu.Lock()
		g.commitIndex, g.commitEnd = a.Index, a.Offset
		g.mu.Unlock()
		it.sync = true
	}
	if len(rd.Entries) > 0 {
		first := rd.Entries[0].GetIndex()
		if last, _ := g.st.LastIndex(); first <= last {
			if err := g.st.truncate(first); err != nil {
				return err
			}
		}
		for _, e := range rd.Entries {
			if err := g.st.appendEntry(e); err != nil {
				return err
			}
			if e.GetType() == pb.EntryType_EntryNormal && len(e.Data) == 0 {
				it.emptyTerm = e.GetTerm()
			}
		}
		it.sync = g.st.log.Config().Flush.Mode == storage.FlushSync
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		g.mu.Lock()
		applied := g.commitIndex
		g.mu.Unlock()
		h.journal.putHardState(g.id, rd.HardState, applied)
		g.st.setHardState(rd.HardState)
	}
	return nil
}

// apply delivers committed entries and advances the commit offset.
func (h *Host) apply(it *readyItem) {
	g := it.g
	n := len(it.rd.CommittedEntries)
	if n == 0 {
		return
	}
	var out []Committed
	for _, e := range it.rd.CommittedEntries {
		switch e.GetType() {
		case pb.EntryType_EntryConfChange, pb.EntryType_EntryConfChangeV2:
			h.applyConfChange(g, e)
		}
		if g.cfg.OnCommit != nil {
			base, _ := g.st.offsetOf(e.GetIndex())
			end, _ := g.st.endOf(e.GetIndex())
			c := Committed{Index: e.GetIndex(), Term: e.GetTerm(), BaseOffset: base, EndOffset: end}
			if e.GetType() == pb.EntryType_EntryNormal && len(e.Data) > 0 {
				c.Data = e.Data
			}
			out = append(out, c)
		}
	}
	last := it.rd.CommittedEntries[n-1].GetIndex()
	end, ok := g.st.endOf(last)
	if !ok {
		h.log.Error("raft: committed entry not in the log", "group", g.id, "index", last)
		return
	}
	if g.cfg.OnCommit != nil {
		g.cfg.OnCommit(g.id, out)
	}
	g.mu.Lock()
	if last > g.commitIndex {
		g.commitIndex, g.commitEnd = last, end
		close(g.commitCh)
		g.commitCh = make(chan struct{})
	}
	if g.rejoin && g.rejoinTarget > 0 && g.commitIndex >= g.rejoinTarget {
		g.rejoin = false
		h.log.Info("raft: replica caught up after losing its storage, voting again", "group", g.id, "index", g.commitIndex)
	}
	g.mu.Unlock()
}

func (h *Host) applyConfChange(g *group, e *pb.Entry) {
	var cc pb.ConfChangeI
	if e.GetType() == pb.EntryType_EntryConfChange {
		c := &pb.ConfChange{}
		if err := proto.Unmarshal(e.Data, c); err != nil {
			h.log.Error("raft: bad conf change", "group", g.id, "index", e.GetIndex(), "err", err)
			return
		}
		cc = c
	} else {
		c := &pb.ConfChangeV2{}
		if err := proto.Unmarshal(e.Data, c); err != nil {
			h.log.Error("raft: bad conf change", "group", g.id, "index", e.GetIndex(), "err", err)
			return
		}
		cc = c
	}
	var cs *pb.ConfState
	g.mu.Lock()
	h.guardLocked(g, func() { cs = g.rn.ApplyConfChange(cc) })
	g.mu.Unlock()
	if cs == nil {
		return
	}
	g.st.setConfState(cs)
	// Journaled before the next cycle's applied index: a crash in between
	// makes Raft redeliver (and us reapply) the change.
	if err := h.journal.putConfState(g.id, cs, e.GetIndex(), true); err != nil {
		h.log.Error("raft: journal conf state", "group", g.id, "err", err)
	}
}

// guardLocked runs fn on the group's RawNode, turning a panic into a
// failed group. etcd raft panics when its Storage returns an I/O error (and
// on broken invariants): that must cost this group, not the node.
func (h *Host) guardLocked(g *group, fn func()) (ok bool) {
	if g.failed != nil {
		return false
	}
	defer func() {
		if r := recover(); r != nil {
			h.failLocked(g, fmt.Errorf("raft panicked: %v", r))
			h.log.Error("raft: group stopped after a panic", "group", g.id, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			ok = false
		}
	}()
	fn()
	return true
}

// failGroup stops a group whose storage failed: it sends nothing and
// acknowledges nothing until the host is restarted (the other replicas carry
// on without it).
func (h *Host) failGroup(g *group, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h.failLocked(g, err)
}

func (h *Host) failLocked(g *group, err error) {
	if g.failed == nil {
		g.failed = fmt.Errorf("%w: group %d: %w", ErrGroupFailed, g.id, err)
		h.log.Error("raft: group failed", "group", g.id, "err", err)
		close(g.commitCh)
		g.commitCh = make(chan struct{})
		close(g.storedCh)
		g.storedCh = make(chan struct{})
		h.wakePeersLocked(g)
	}
}

// wakePeersLocked tells the other replicas that this one stopped: quiesced
// replicas would otherwise wait for it forever (its node still answers
// node heartbeats). Sent from a goroutine: a send that fails reports back
// into the group, whose lock is held here.
func (h *Host) wakePeersLocked(g *group) {
	var peers []uint64
	g.st.mu.RLock()
	if g.st.cs != nil {
		peers = append(append(peers, g.st.cs.Voters...), g.st.cs.Learners...)
	}
	g.st.mu.RUnlock()
	id := g.id
	go func() {
		for _, p := range peers {
			if p != h.cfg.ID {
				h.tr.send(id, &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), To: new(p), From: new(h.cfg.ID), Context: wakeCtx})
			}
		}
	}()
}

// raftLogger sends etcd raft's logs to slog (its Info is our Debug: it is
// chatty about every election).
type raftLogger struct{ l *slog.Logger }

func (r *raftLogger) Debug(v ...any)              { r.l.Debug(fmt.Sprint(v...)) }
func (r *raftLogger) Debugf(f string, v ...any)   { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r *raftLogger) Info(v ...any)               { r.l.Debug(fmt.Sprint(v...)) }
func (r *raftLogger) Infof(f string, v ...any)    { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r *raftLogger) Warning(v ...any)            { r.l.Warn(fmt.Sprint(v...)) }
func (r *raftLogger) Warningf(f string, v ...any) { r.l.Warn(fmt.Sprintf(f, v...)) }
func (r *raftLogger) Error(v ...any)              { r.l.Error(fmt.Sprint(v...)) }
func (r *raftLogger) Errorf(f string, v ...any)   { r.l.Error(fmt.Sprintf(f, v...)) }
func (r *raftLogger) Fatal(v ...any)              { panic(fmt.Sprint(v...)) }
func (r *raftLogger) Fatalf(f string, v ...any)   { panic(fmt.Sprintf(f, v...)) }
func (r *raftLogger) Panic(v ...any)              { panic(fmt.Sprint(v...)) }
func (r *raftLogger) Panicf(f string, v ...any)   { panic(fmt.Sprintf(f, v...)) }

type trackerProgress = tracker.Progress
