// Package raft is Holdfast's multi-raft: one etcd Raft group per partition
// (and one for the controller) whose Raft log is the partition's
// storage.Log itself. A Host drives every group of a node from a few
// goroutines: one ticker, one Ready loop that persists the output of all
// groups and waits for a single group-commit round, and a TCP transport that
// batches messages per peer. See docs/replication.md.
package raft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"holdfast/internal/clock"
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
	// Identity is what this node tells its peers (its cluster, which must
	// be the same on every node, and its data directory); frames from
	// another cluster are refused. SetIdentity changes it.
	Identity NodeIdentity
	Dir      string            // where the hardstate journal lives
	Listen   string            // address for peer traffic, e.g. ":9093" or "127.0.0.1:0"; "" listens nowhere (a single node)
	Peers    map[uint64]string // peer id -> address (self is ignored)

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
	// ReplicaLagMax is Kafka's replica.lag.time.max.ms: a follower that
	// has not caught up to its leader's log end for this long is out of
	// the in-sync replicas (isr.go). Default DefaultReplicaLagMax (30 s).
	ReplicaLagMax time.Duration

	FS     storage.FS // for the journal; default storage.OSFS()
	Faults *Faults    // fault injection for tests; nil: none
	// Network, if set, carries the Raft traffic in memory instead of TCP
	// (memnetwork.go): in-process clusters of tests and the whole-node
	// simulation. Listen then only names the node; TLS and Faults are
	// unused (the network cuts its own links). nil: TCP.
	Network *MemNetwork
	// TLS, if set, runs the transport over mutual TLS (transport.go).
	TLS    *TransportTLS
	Logger *slog.Logger
	// Clock drives the tick loop, the transport's heartbeats and
	// reconnect backoff, and the waits of Propose and AwaitSuccessor;
	// nil: the wall clock. (The stepped simulation ticks by itself.)
	Clock clock.Clock

	// SoloPath: a group whose only member is this node takes proposed
	// batches without etcd raft's per-entry work, committing each once its
	// store round made it durable (solo.go). The log, the journal and the
	// RawNode's view are what the Ready path would leave; anything else
	// (membership changes, commands, transfers) goes through etcd raft
	// as before.
	SoloPath bool

	// For the deterministic simulation (seams.go, sim_test.go):
	// newTransport, if set, replaces the TCP transport (Listen, TLS and
	// Faults are then unused); stepped starts no goroutine: the caller
	// ticks the host (tickOnce) and runs its Ready cycles (runReady).
	newTransport func(ev transportEvents) (transport, error)
	stepped      bool
	// ackBeforeFsync plants a bug for the simulation to find (it must,
	// or it proves nothing): a follower acknowledges appends before its
	// fsync. Never set outside sim_test.go.
	ackBeforeFsync bool
	// raftPathOnly: a test of the Ready path's own handling of a sole
	// voter's proposals keeps SoloPath off under HOLDFAST_TEST_RAFT_SOLO.
	raftPathOnly bool
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
	if c.ReplicaLagMax <= 0 {
		c.ReplicaLagMax = DefaultReplicaLagMax
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.FS == nil {
		c.FS = storage.OSFS()
	}
	c.Clock = clock.OrReal(c.Clock)
	if testSoloPath && !c.raftPathOnly {
		c.SoloPath = true
	}
}

// testSoloPath turns Config.SoloPath on for every host of this package's
// tests (HOLDFAST_TEST_RAFT_SOLO=1: solo_test.go); false otherwise.
var testSoloPath bool

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
	// BorrowCommitData: OnCommit keeps no part of Committed.Data (nor
	// Command) past its return. A follower then reads the batches it
	// receives into pooled buffers that are reused once applied
	// (recvpool.go); without it they are left to the garbage collector.
	BorrowCommitData bool
	// OnTruncate, if set, is called on the Ready loop when the log loses
	// its suffix from offset on (a follower's uncommitted entries replaced
	// by a new leader's, or the whole log replaced by a snapshot), and when
	// batches this node proposed from offset on may never be stored (it
	// stopped leading first): state derived from those entries is stale.
	// It must not block or call the Host (it may run with the group's
	// lock held).
	OnTruncate func(group uint64, offset int64)
	// OnLeadership, if set, is called with the group's Leadership (what
	// Host.Leadership would answer) each time it changes: on the Ready
	// loop as the group becomes leader, starts proposing, settles, steps
	// down or fails, and once when the group is added. Hot paths read the
	// last one instead of asking the host. It runs with the group's lock
	// held: it must not block or call the Host.
	OnLeadership func(group uint64, l Leadership)
	// AckOnQuorum: WaitCommitted returns as soon as Raft's commit index
	// passes the proposal (and the leader's store holds it) - when the
	// leader steps the MsgAppResp that makes a quorum, or its own after
	// its store round's fsync - instead of
	// when the next Ready delivers the entry (which waits for the
	// leader's fsync in progress, a whole fsync for a quorum of
	// followers). For a group whose waiters need nothing of OnCommit (a
	// partition: its proposer counted the batch already and moves the
	// high watermark itself); OnCommit, CommitOffset and the journal's
	// applied index still follow the Ready loop.
	AckOnQuorum bool
	// LazyCommit: the leader sends no message for a commit index alone;
	// followers learn it with the next entries or a heartbeat round later.
	// For groups whose followers need nothing of the commit index soon: a
	// partition's (its leader answers the producers). A rebuilt replica
	// (Rejoin) learns the commit index it must reach from appends, which
	// still carry it.
	LazyCommit bool
	// Rejoin: the replica's storage was lost (a replaced disk: the
	// metadata assigned the replica to another directory of this node): it
	// grants no votes until it has caught up with a leader, which the
	// journal then records, so that later restarts vote at once. A replica
	// also detects lost storage by itself when a leader's heartbeat shows
	// the leader remembers entries it lacks.
	Rejoin bool
	// AdoptPreRaft: a sole voter with no Raft state for the group whose
	// log holds batches no Raft group wrote (leader epoch 0: a single
	// node's log from before it ran as a one-voter cluster) takes them as
	// its committed history instead of refusing the log. Part of the
	// pre-Raft adoption (internal/preraft), removed with it.
	AdoptPreRaft bool
	// StartOffset: a new group's log begins at this offset instead of 0
	// (a topic restored from the object store continues after the
	// offsets its objects hold). With no Raft state journaled for the
	// group, its anchor is (index 1, StartTerm, StartOffset), as if every
	// replica had installed the same snapshot; the log is emptied to
	// start there. Every replica must be given the same values.
	StartOffset int64
	// StartTerm (at least 1) is that anchor's term: the epochs of the
	// restored records are at most it, so every new leader's epoch is
	// above them (leader epochs only grow along a log).
	StartTerm uint64
}

// Committed is one committed entry. A data entry is the batch Data at
// [BaseOffset, EndOffset); a command has Command set and, like every other
// side entry (empty, membership change), BaseOffset == EndOffset: the
// offset it sits at.
type Committed struct {
	Index, Term           uint64
	BaseOffset, EndOffset int64
	Data                  []byte
	Command               []byte
}

// Proposal identifies a proposed entry: its Raft index and the term (=
// leader epoch) it was proposed in, and for a batch its offsets. It is
// committed only if the entry committed at that index has that term.
type Proposal struct {
	Group                 uint64
	Index, Term           uint64
	BaseOffset, EndOffset int64
}

// Host runs the Raft groups of one node.
type Host struct {
	cfg     Config
	log     *slog.Logger
	rlog    raft.Logger
	journal *journal
	tr      transport

	// recentTotal: the bytes of entries every group's store keeps in
	// memory (store.go, recentMaxTotal); per host, so two hosts in one
	// process (tests, the lab) do not share one budget.
	recentTotal atomic.Int64

	mu     sync.RWMutex
	groups map[uint64]*group

	// subs: the event subscriptions (subscribe.go), copy-on-write so
	// that the Ready loop reads them without a lock; subsMu orders writers.
	subsMu sync.Mutex
	subs   atomic.Pointer[[]*Subscription]
	// adding: groups AddGroup is opening (outside mu, so that many open
	// at once: a node with thousands starts them in parallel).
	adding map[uint64]bool
	// tickBuf: tickOnce's list of the groups, reused (tickLoop's only).
	tickBuf []*group
	// silent: the last tick found a peer not heard from for an election
	// timeout (tickLoop's only); silentTicks counts such ticks (Activity).
	silent      bool
	silentTicks atomic.Uint64
	// requiesced counts groups quiesced again once a silence ended
	// (requiesceLocked; Activity).
	requiesced atomic.Uint64
	// stepDowns counts quorum step-downs by reason (stepdown.go);
	// stepView is tickGroup's buffer for the followers' view before a
	// leader's tick (tickLoop's only).
	stepDowns [numStepDownReasons]atomic.Uint64
	stepView  []followerView
	// active: the groups to tick while every peer is heard from - each
	// group not quiesced, once (group.inActive), and some that quiesced
	// since they were listed (tickOnce drops them). activate adds.
	activeMu sync.Mutex
	active   []*group

	// dirty: the groups with work for the next takeReadys, each once
	// (group.dirty), in the order they were marked - a list, not a map: at
	// 1,000 partitions every produce request marks 1,000 groups, and the
	// Ready loop takes them all each cycle. dirtySpare is the array of the
	// list takeReadys had last, reused.
	dirtyMu    sync.Mutex
	dirty      []*group
	dirtySpare []*group
	kick       chan struct{}

	// The Ready loop's two stages (ready.go): one worker at a time takes
	// Readys (readyMu), one stores the queued appends (appendMu).
	readyMu  sync.Mutex
	appendMu sync.Mutex
	qMu      sync.Mutex
	appendQ  []*appendItem
	jflush   bool // the journal holds records written outside the store stage
	// applyQ: the groups whose sole-voter entries a store round
	// committed, for the Ready stage to apply (solo.go; under qMu).
	applyQ []*group

	// failures counts group failures (Failures).
	failures atomic.Uint64
	// readys counts the RawNode Readys taken; soloProposals the batches
	// the sole-voter path took, soloAcks its rounds handed back to etcd
	// raft as its own append's response (solo.go; tests).
	readys, soloProposals, soloAcks atomic.Uint64
	// heard: for groups this node cannot step (not here, or failed), the
	// leader whose appends or heartbeats reached it last (HeardLeader).
	heardMu sync.Mutex
	heard   map[uint64]heardLeader
	// wanted: SetWantedHook's function, nil: none.
	wanted atomic.Pointer[func(group uint64)]
	// changes moves with every group's changes, and as groups come and go
	// (AllChanges).
	changes atomic.Uint64

	done   chan struct{}
	wg     sync.WaitGroup
	closed sync.Once
}

type group struct {
	id  uint64
	cfg GroupConfig
	st  *store
	h   *Host // for activate; nil in some unit tests

	mu          sync.Mutex
	rn          *raft.RawNode
	gen         uint64 // counts RawNodes: responses of an older one are not stepped
	inflight    int    // its appends queued or in the store stage
	readyTerm   uint64 // the term in which this node leads and its empty entry is stored
	nextOffset  int64  // leader: offset of the next proposal, counting unstable entries
	nextIndex   uint64 // leader: Raft index of the next proposal
	termStart   uint64 // leader: index of its empty entry of readyTerm
	commitIndex uint64
	commitEnd   int64
	// quorumIndex: AckOnQuorum: Raft's commit index as last seen on the
	// leader, ahead of commitIndex until the Ready loop delivers it.
	quorumIndex uint64
	// commitCh is closed when the commit advances, storedCh after a cycle
	// stored entries; each is made when a waiter first asks for it
	// (commitChLocked, storedChLocked), so a group nobody waits on (most,
	// for storedCh) makes and closes no channel per cycle.
	commitCh   chan struct{}
	storedCh   chan struct{}
	failed     error
	lastLeader uint64
	// seenTerm, seenLeader: the highest term this node has seen a
	// leader of in this group, and that leader (the invariants build's
	// one-leader-per-term check, ready.go).
	seenTerm, seenLeader uint64
	// storeSync: during a store round's setup, the group's first queued
	// append that needs its log synced (storeItems; appendMu, not mu).
	storeSync *appendItem
	// changes moves whenever the group's Raft state may have changed:
	// every call into its RawNode (guardLocked), a reset, a failure
	// (Host.Changes).
	changes atomic.Uint64

	quiesceLdr uint64 // follower: the leader that quiesced us
	// quiesceFlw: leader: the followers when it quiesced (a membership
	// change is a proposal, which wakes the group first).
	quiesceFlw []uint64
	// quiesceTerm, quiesceLast: the term it quiesced in and where its log
	// ended then. wokeBySilence (below): a tick woke it only because a
	// peer it depends on had gone silent (checkQuiescedLocked), and nothing
	// has happened to it since; once that peer is heard again it quiesces
	// again if it is as it was (requiesceLocked).
	quiesceTerm, quiesceLast uint64
	// ticked counts tickGroup's looks at the group: a quiesced group's
	// does not move (what tests check).
	ticked uint64

	// rejoin (below): this replica lost its storage (wiped disk) while the others
	// remember what it had acknowledged. Until it has caught up with a
	// leader's commit index it grants no votes (it cannot vouch for
	// committed entries) but to a candidate whose log holds what the
	// newest leader it heard from showed it (rejoinMayVote), and it tells
	// the leader, whose stale progress for it must be reset.
	rejoinTarget uint64 // the highest commit index a leader sent it
	// rejoinTerm, rejoinLast: the newest term a leader sent it entries or
	// a snapshot in, and the highest log index that leader showed it
	// (an append's previous entry or last entry, a snapshot's index).
	rejoinTerm, rejoinLast uint64
	// caught: leader: when each follower last caught up to its log end,
	// in term caughtTerm (isr.go).
	caught     []caughtUp
	caughtTerm uint64
	// held: references to the buffers of proposals Raft may still read,
	// in index order (ProposeOwned, releaseHeldLocked).
	held      []heldRef
	idleTicks int
	// eagerTicks: the first replica campaigned at once (new group, restart), but a
	// peer that had not created the group yet dropped its pre-vote (no
	// state to answer from). For this many ticks it asks again every
	// other tick while still a pre-candidate, instead of waiting a whole
	// election timeout (a new topic sometimes had no leader for 1.3 s).
	eagerTicks int

	// local: the batches this node proposed and Raft has not handed to
	// the Ready loop yet, in index order (api.go).
	local []localBatch
	// lastSide: leader: index of the last side entry (command, conf
	// change) it proposed in readyTerm; no batch after it is written ahead
	// until it is stored (preWriteLocked).
	lastSide uint64

	// published is the Leadership last given to cfg.OnLeadership.
	published Leadership

	// The sole-voter path (solo.go): soloPend, its entries written and not
	// yet committed, in index order (soloBytes their data); soloApply,
	// those committed and not yet applied (OnCommit, commitIndex), queued
	// on Host.applyQ (soloApplyQueued); soloQueued: an item of the group
	// waits for the next store round.
	soloPend, soloApply         []Committed
	soloBytes                   int64
	soloQueued, soloApplyQueued bool

	// The flags, together: each alone took a word of padding (a group per
	// partition, issue 27).
	quiet         atomic.Bool // = quiesced, read by tickOnce without mu
	inActive      bool        // on Host.active (under Host.activeMu)
	removed       bool
	dirty         bool // in Host.dirty (under Host.dirtyMu, not mu)
	quiesced      bool
	wokeBySilence bool // see quiesceTerm
	rejoin        bool // see rejoinTarget
	reset         bool // leader: recreate the RawNode (fresh progress for every peer)
}

func (g *group) commitChLocked() chan struct{} {
	if g.commitCh == nil {
		g.commitCh = make(chan struct{})
	}
	return g.commitCh
}

func (g *group) storedChLocked() chan struct{} {
	if g.storedCh == nil {
		g.storedCh = make(chan struct{})
	}
	return g.storedCh
}

// wakeCommitLocked wakes the commit's waiters, if any.
func (g *group) wakeCommitLocked() {
	if g.commitCh != nil {
		close(g.commitCh)
		g.commitCh = nil
	}
}

// wakeStoredLocked wakes the waiters for a stored cycle, if any.
func (g *group) wakeStoredLocked() {
	if g.storedCh != nil {
		close(g.storedCh)
		g.storedCh = nil
	}
}

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
		groups: map[uint64]*group{},
		kick:   make(chan struct{}, 1), done: make(chan struct{}),
	}
	switch {
	case cfg.newTransport != nil:
		h.tr, err = cfg.newTransport(h)
	case cfg.Network != nil:
		h.tr = newMemNetTransport(cfg.Network, cfg, h)
	default:
		h.tr, err = newTransport(cfg.ID, cfg.Identity, cfg.Listen, h, cfg.Faults, logger, cfg.QueueLen, cfg.TickInterval*time.Duration(cfg.HeartbeatTicks), cfg.TLS)
	}
	if err != nil {
		j.close()
		return nil, err
	}
	if tt, ok := h.tr.(*tcpTransport); ok {
		tt.clk = cfg.Clock // before addPeer starts a sender
	}
	for id, addr := range cfg.Peers {
		h.tr.addPeer(id, addr)
	}
	if cfg.stepped {
		return h, nil
	}
	h.wg.Add(3)
	go h.tickLoop()
	go h.readyLoop() // two workers: one stores while the other takes Readys
	go h.readyLoop()
	return h, nil
}

// Addr is the address the transport listens on.
func (h *Host) Addr() string { return h.tr.addr() }

// ID is this node's id.
func (h *Host) ID() uint64 { return h.cfg.ID }

// SetPeer adds or re-addresses a peer.
func (h *Host) SetPeer(id uint64, addr string) { h.tr.addPeer(id, addr) }

// PeerAddr is the Raft address this host sends peer id's messages to, if
// it knows one.
func (h *Host) PeerAddr(id uint64) (string, bool) { return h.tr.peerAddr(id) }

// SetIdentity changes the identity this node sends its peers (a node that
// has just formed or joined a cluster).
func (h *Host) SetIdentity(id NodeIdentity) { h.tr.setIdentity(id) }

// PeerIdentities returns what each peer last said of itself, also peers of
// no cluster yet (they exchange identities only).
func (h *Host) PeerIdentities() map[uint64]PeerIdentity { return h.tr.identities() }

// TransportStats returns the transport counters.
func (h *Host) TransportStats() TransportStats { return h.tr.stats() }

// AddGroup opens a group over its log: the index is rebuilt from the log,
// HardState and ConfState come from the journal (or Voters if none).
func (h *Host) AddGroup(gc GroupConfig) error {
	if gc.ID == 0 || gc.Log == nil {
		return errors.New("raft: group needs an id > 0 and a log")
	}
	// Only the check and the insert hold mu: the rest reads the journal
	// (whose lock a Ready cycle's fsync holds) and the log, and many
	// groups are added at once at start-up. The caller does not add or
	// remove the same group concurrently (a second add is refused).
	h.mu.Lock()
	if _, ok := h.groups[gc.ID]; ok || h.adding[gc.ID] {
		h.mu.Unlock()
		return fmt.Errorf("raft: group %d already added", gc.ID)
	}
	if h.adding == nil {
		h.adding = map[uint64]bool{}
	}
	h.adding[gc.ID] = true
	h.mu.Unlock()
	g, err := h.openGroup(gc)
	h.mu.Lock()
	delete(h.adding, gc.ID)
	if err == nil {
		h.groups[gc.ID] = g
	}
	h.mu.Unlock()
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.publishLocked()
	g.mu.Unlock()
	h.activate(g)
	h.changes.Add(1)
	h.markDirty(g)
	return nil
}

// openGroup is AddGroup's work: the group over gc.Log with its journaled
// state, not yet in the host's set.
func (h *Host) openGroup(gc GroupConfig) (*group, error) {
	js := h.journal.snapshot(gc.ID)
	if adopted, err := h.adoptLog(gc, js); err != nil {
		return nil, err
	} else if adopted {
		js = h.journal.snapshot(gc.ID)
	}
	if started, err := h.startAt(gc, js); err != nil {
		return nil, err
	} else if started {
		js = h.journal.snapshot(gc.ID)
	}
	if js.ancPending {
		// A snapshot install was interrupted: finish it.
		if err := gc.Log.TruncateFullyAndStartAt(js.anc.Offset); err != nil {
			return nil, err
		}
		h.journal.putAnchor(gc.ID, js.anc, true)
		if err := h.journal.flush(false); err != nil {
			return nil, err
		}
	}
	cs := js.cs
	if cs == nil {
		// Not fsynced: until a conf change it is re-derived from Voters.
		// Not flushed here either: the next store round's flush writes
		// it ahead of the group's own records. Flushing here waited for
		// the round's journal fsync (the flush's lock), once per new
		// group: 13-23% of the open workers' time while partitions were
		// created (issue 27). A power cut before that flush loses the
		// record with the group's first ones; the conf state is derived
		// from the voters again (TestNewPartitionCrashAtEveryStep).
		cs = &pb.ConfState{Voters: append([]uint64(nil), gc.Voters...)}
		if err := h.journal.putConfStateOwned(gc.ID, cs, 0, false); err != nil {
			return nil, err
		}
	}
	st, dropped, err := openStore(gc.Log, js.anc, js.hs, cs, js.side, &h.recentTotal)
	if err != nil {
		return nil, err
	}
	if dropped > 0 {
		// Side entries beyond what the log holds (their data was not
		// written before a crash): forget them for good.
		h.log.Info("raft: dropping side entries past the log's end", "group", gc.ID, "from_index", dropped)
		h.journal.putTruncate(gc.ID, dropped)
		if err := h.journal.flush(false); err != nil {
			return nil, err
		}
	}
	// Raft redelivers committed entries above applied: the journal's applied
	// index lags a cycle, so a few are redelivered (OnCommit sees them
	// again), and a conf change applied but not yet journaled is applied
	// again rather than lost.
	applied := st.anc.Index
	if st.hs != nil {
		applied = max(st.anc.Index, min(st.hs.GetCommit(), max(js.applied, js.csIndex)))
	}
	rn, err := h.newRawNode(st, applied, gc.LazyCommit)
	if err != nil {
		return nil, fmt.Errorf("raft: group %d: %w", gc.ID, err)
	}
	end, _ := st.endOf(applied)
	g := &group{id: gc.ID, cfg: gc, st: st, h: h, rn: rn, commitIndex: applied, commitEnd: end, rejoin: gc.Rejoin && !js.trusted || js.rejoin}
	st.onCorrupt = func(err error) { go h.corruptLog(g, err) }
	sole := h.soleVoter(cs)
	if sole {
		// Nobody else holds this group's log: there is nothing to catch
		// up from, and no one to wait for. It leads at once rather than
		// after an election timeout (a single node starts in well under
		// a second).
		g.rejoin = false
		h.guardLocked(g, func() { _ = g.rn.Campaign() })
	}
	if !sole && !g.rejoin && len(gc.Voters) > 1 && gc.Voters[0] == h.cfg.ID && slices.Contains(cs.Voters, h.cfg.ID) {
		// The first replica, the preferred leader (Kafka makes it the
		// leader of a new partition, and balancing moves leadership back
		// to it), campaigns at once instead of everyone waiting an
		// election timeout (1-2 s by default): for a new group (the first
		// produce to a new topic waited that long) and at a restart (a
		// whole cluster restarted with 10,000 partitions waited that long
		// after its last open). The others wait their timeout as before,
		// so at most one replica per group asks early. It cannot churn
		// terms: a pre-vote changes no term, and a peer that still hears
		// from a leader (CheckQuorum's lease, also while quiesced) ignores
		// it; only where no leader is left does it win, as it would after
		// the timeout.
		h.guardLocked(g, func() { _ = g.rn.Campaign() })
		g.eagerTicks = h.cfg.ElectionTicks
	}
	if g.rejoin {
		h.log.Info("raft: replica opens without a vote until it has caught up (new data directory)", "group", gc.ID)
	}
	return g, nil
}

// adoptLog makes a log written before its group existed - a single node's
// partition from before a single node was a one-voter cluster, whose
// batches carry no Raft term - the committed history of a new one-voter
// group: the anchor goes to its end (index 1, term 1), so Raft neither
// reads nor rewrites what is below it, and consumers read it as before.
// Only with no state in the journal, and only for a group whose sole voter
// is this node: in a cluster such a log could hold data nobody else has
// agreed to.
func (h *Host) adoptLog(gc GroupConfig, js groupState) (bool, error) {
	l := gc.Log
	if !gc.AdoptPreRaft || js.hs != nil || js.cs != nil || js.anc != (anchor{}) || len(js.side) > 0 ||
		len(gc.Voters) != 1 || gc.Voters[0] != h.cfg.ID || l.EndOffset() <= l.StartOffset() {
		return false, nil
	}
	epoch := int32(-1)
	err := l.ScanHeaders(l.StartOffset(), func(hd records.Header) error {
		epoch = hd.PartitionLeaderEpoch
		return errStopAdopt
	})
	if err != nil && !errors.Is(err, errStopAdopt) {
		return false, err
	}
	if epoch >= 1 {
		return false, nil // written by Raft
	}
	a := anchor{Index: 1, Term: 1, Offset: l.EndOffset()}
	h.journal.putAnchor(gc.ID, a, true)
	h.journal.putHardState(gc.ID, &pb.HardState{Term: new(uint64(1)), Vote: new(h.cfg.ID), Commit: new(uint64(1))}, 1)
	if err := h.journal.flush(true); err != nil {
		return false, err
	}
	h.log.Info("raft: adopted a log written before its group existed", "group", gc.ID, "dir", l.Dir(), "end_offset", a.Offset)
	return true, nil
}

var errStopAdopt = errors.New("stop")

// startAt gives a new group whose log must begin at gc.StartOffset (> 0)
// the anchor (index 1, StartTerm, StartOffset), journaled before the group
// opens, and empties its log to start there. Only with no Raft state for
// the group: a replica that opened it before keeps what it journaled.
// Every replica starts from the same anchor, so index 1 is the same
// "snapshot" everywhere and the first leader's entries follow it.
func (h *Host) startAt(gc GroupConfig, js groupState) (bool, error) {
	l := gc.Log
	if gc.StartOffset <= 0 || js.hs != nil || js.cs != nil || js.anc != (anchor{}) || len(js.side) > 0 {
		return false, nil
	}
	if l.EndOffset() > l.StartOffset() {
		return false, fmt.Errorf("raft: group %d must start at offset %d but its log already holds [%d, %d)", gc.ID, gc.StartOffset, l.StartOffset(), l.EndOffset())
	}
	if err := l.TruncateFullyAndStartAt(gc.StartOffset); err != nil {
		return false, err
	}
	a := anchor{Index: 1, Term: max(gc.StartTerm, 1), Offset: gc.StartOffset}
	h.journal.putAnchor(gc.ID, a, true)
	h.journal.putHardState(gc.ID, &pb.HardState{Term: new(a.Term), Commit: new(uint64(1))}, 1)
	if err := h.journal.flush(true); err != nil {
		return false, err
	}
	h.log.Info("raft: new group starts at an offset above 0", "group", gc.ID, "dir", l.Dir(), "start_offset", a.Offset)
	return true, nil
}

// soleVoter reports whether this node is the group's only member.
func (h *Host) soleVoter(cs *pb.ConfState) bool {
	return len(cs.Voters) == 1 && cs.Voters[0] == h.cfg.ID && len(cs.Learners) == 0 &&
		len(cs.VotersOutgoing) == 0 && len(cs.LearnersNext) == 0
}

func (h *Host) newRawNode(st *store, applied uint64, lazyCommit bool) (*raft.RawNode, error) {
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
		LazyCommit:                lazyCommit,
		Logger:                    h.rlog,
		// The Ready loop's stages (ready.go): a leader's MsgApp leaves
		// while its own append is being fsynced, and the next append's
		// fsync starts as soon as the last one ends.
		AsyncStorageWrites: true,
	})
}

// resetLocked recreates the group's RawNode from what is stored: the node
// becomes a follower in its persisted term, with fresh progress for every
// peer. Only with none of its appends queued or being stored (inflight);
// unstable proposals are
// dropped (their waiters see ErrProposalLost or time out).
func (h *Host) resetLocked(g *group) {
	g.reset = false
	rn, err := h.newRawNode(g.st, g.commitIndex, g.cfg.LazyCommit)
	if err != nil {
		h.log.Error("raft: reset group", "group", g.id, "err", err)
		return
	}
	g.rn, g.readyTerm = rn, 0
	g.dropSoloLocked()
	g.changes.Add(1)
	h.changes.Add(1)
	g.gen++
	g.publishLocked()
	// The fresh RawNode is a follower that must tick to elect a leader;
	// left quiesced (a reset leader of an idle group usually is), it never
	// would, and with the other replicas quiesced too the group would stay
	// leaderless while every node names the old leader.
	g.unquiesceLocked()
}

// DiscardGroup stops driving a group whose replica's data is about to be
// discarded, and records durably, before returning, that the replica lost
// its data: opened again (AddGroup), it grants no votes until it has caught
// up, also across restarts. Delete the log only after it returns.
func (h *Host) DiscardGroup(id uint64) error {
	if err := h.removeGroup(id, false); err != nil {
		return err
	}
	h.journal.putRejoin(id)
	return h.journal.flush(true)
}

// DiscardStopped is DiscardGroup for a group not running on this node (its
// replica's log could not be opened: corrupt data): its journal state is
// forgotten and the replica marked as one that lost its data, durably,
// before the caller deletes the log.
func (h *Host) DiscardStopped(id uint64) error {
	if h.group(id) != nil {
		return fmt.Errorf("raft: group %d is running: DiscardGroup", id)
	}
	h.journal.remove(id)
	h.journal.putRejoin(id)
	return h.journal.flush(true)
}

// RetryGroup brings back a group that failed for a reason other than its
// log (an I/O error reading it, a broken invariant that made etcd raft
// panic): its store and RawNode are rebuilt from the log and the journal,
// as at a restart. A group whose log failed (a failed fsync leaves what
// was written after it unknown) is not retried here: its owner discards
// and reopens the replica (DiscardGroup).
func (h *Host) RetryGroup(id uint64) error {
	g := h.group(id)
	if g == nil {
		return ErrUnknownGroup
	}
	if err := g.cfg.Log.Failed(); err != nil {
		return fmt.Errorf("raft: group %d: its log failed (%w): the replica must be reopened", id, err)
	}
	// Not while a Ready taken before it failed may still be written to its
	// log, or a store round fsync it: the store is rebuilt from the log.
	// (Lock order: readyMu, appendMu, the group's.)
	h.readyMu.Lock()
	defer h.readyMu.Unlock()
	h.appendMu.Lock()
	defer h.appendMu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed == nil || g.removed {
		return nil
	}
	js := h.journal.snapshot(id)
	cs := js.cs
	if cs == nil {
		cs = &pb.ConfState{Voters: append([]uint64(nil), g.cfg.Voters...)}
	}
	st, dropped, err := openStore(g.cfg.Log, js.anc, js.hs, cs, js.side, &h.recentTotal)
	if err != nil {
		return err
	}
	if dropped > 0 {
		h.journal.putTruncate(id, dropped)
	}
	applied := st.anc.Index
	if st.hs != nil {
		applied = max(st.anc.Index, min(st.hs.GetCommit(), max(js.applied, js.csIndex)))
	}
	g.st.adopt(st)
	rn, err := h.newRawNode(g.st, applied, g.cfg.LazyCommit)
	if err != nil {
		return err
	}
	end, _ := g.st.endOf(applied)
	g.rn, g.readyTerm, g.failed = rn, 0, nil
	g.dropSoloLocked()
	g.changes.Add(1)
	h.changes.Add(1)
	g.gen++
	g.commitIndex, g.commitEnd = applied, end
	g.publishLocked()
	g.unquiesceLocked()
	h.log.Warn("raft: group restarted after a failure", "group", id)
	h.markDirty(g)
	return nil
}

// RemoveGroup stops driving a group and forgets its journal state (the
// caller deletes or keeps the log).
func (h *Host) RemoveGroup(id uint64) error { return h.removeGroup(id, true) }

func (h *Host) removeGroup(id uint64, flush bool) error {
	h.mu.Lock()
	g := h.groups[id]
	delete(h.groups, id)
	h.mu.Unlock()
	if g == nil {
		return ErrUnknownGroup
	}
	h.changes.Add(1)
	g.mu.Lock()
	g.removed = true
	h.wakePeersLocked(g)
	g.wakeCommitLocked()
	g.wakeStoredLocked()
	h.emit(Event{Kind: EventRemoved, Group: id})
	g.mu.Unlock()
	h.journal.remove(id)
	if !flush {
		return nil
	}
	return h.journal.flush(false)
}

func (h *Host) group(id uint64) *group {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.groups[id]
}

// markDirty queues g for the next takeReadys. Only the mark that finds
// the list empty kicks a worker: while the list is not empty, the kick of
// its first mark is pending, or was taken by a worker that has yet to take
// the list (the kick is sent after the mark, the list taken after the kick).
func (h *Host) markDirty(g *group) {
	h.dirtyMu.Lock()
	if g.dirty {
		h.dirtyMu.Unlock()
		return
	}
	g.dirty = true
	h.dirty = append(h.dirty, g)
	first := len(h.dirty) == 1
	h.dirtyMu.Unlock()
	if !first {
		return
	}
	select {
	case h.kick <- struct{}{}:
	default:
	}
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

// Activity counts this host's groups by whether they tick: an idle node's
// groups should all be quiesced (issue 17: 10,000 idle partitions within 5%
// of a core). Failed and removed groups are in neither count.
type Activity struct {
	Quiesced int // quiesced: not ticked, no Raft traffic of their own
	// Ticking groups, by role: a leader not quiesced heartbeats its
	// followers every tick.
	Leaders, Followers, Electing int
	// SilentTicks counts the ticks since the host started that found a
	// peer not heard from for an election timeout: each walks every group
	// and wakes the quiesced ones that depend on that peer.
	SilentTicks uint64
	// Requiesced counts the groups woken by a peer's silence that
	// quiesced again, unchanged, once it was heard from again (no
	// election, no heartbeats for QuiesceTicks).
	Requiesced uint64
}

// Activity reports how many groups are quiesced and how many tick.
func (h *Host) Activity() Activity {
	a := Activity{SilentTicks: h.silentTicks.Load(), Requiesced: h.requiesced.Load()}
	for _, g := range h.snapshotGroupsInto(nil) {
		g.mu.Lock()
		switch {
		case g.failed != nil || g.removed:
		case g.quiesced:
			a.Quiesced++
		default:
			switch g.rn.BasicStatus().RaftState {
			case raft.StateLeader:
				a.Leaders++
			case raft.StateFollower:
				a.Followers++
			default:
				a.Electing++
			}
		}
		g.mu.Unlock()
	}
	return a
}

// snapshotGroupsInto appends every group to out.
func (h *Host) snapshotGroupsInto(out []*group) []*group {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, g := range h.groups {
		out = append(out, g)
	}
	return out
}

// raftLogger sends etcd raft's logs to slog (its Info is our Debug: it is
// chatty about every election).
type raftLogger struct{ l *slog.Logger }

// debug formats only when debug logs are on: etcd raft logs every
// election at Info (our Debug), and 1,000 groups electing at start-up
// formatted 1,000s of strings nobody read.
func (r *raftLogger) debug(msg func() string) {
	if r.l.Enabled(context.Background(), slog.LevelDebug) {
		r.l.Debug(msg())
	}
}

func (r *raftLogger) Debug(v ...any) { r.debug(func() string { return fmt.Sprint(v...) }) }

func (r *raftLogger) Debugf(f string, v ...any) {
	r.debug(func() string { return fmt.Sprintf(f, v...) })
}

func (r *raftLogger) Info(v ...any) { r.debug(func() string { return fmt.Sprint(v...) }) }

func (r *raftLogger) Infof(f string, v ...any) {
	r.debug(func() string { return fmt.Sprintf(f, v...) })
}

func (r *raftLogger) Warning(v ...any) { r.l.Warn(fmt.Sprint(v...)) }

func (r *raftLogger) Warningf(f string, v ...any) { r.l.Warn(fmt.Sprintf(f, v...)) }

func (r *raftLogger) Error(v ...any) { r.l.Error(fmt.Sprint(v...)) }

func (r *raftLogger) Errorf(f string, v ...any) { r.l.Error(fmt.Sprintf(f, v...)) }

func (r *raftLogger) Fatal(v ...any) { panic(fmt.Sprint(v...)) }

func (r *raftLogger) Fatalf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }

func (r *raftLogger) Panic(v ...any) { panic(fmt.Sprint(v...)) }

func (r *raftLogger) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }

type trackerProgress = tracker.Progress
