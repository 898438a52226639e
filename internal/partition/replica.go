package partition

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/bufref"
	"holdfast/internal/raft"
	"holdfast/internal/records"
)

// replica is a partition's Raft group: the log is the group's log. Appends
// on the leader become proposals, the high watermark is the Raft commit
// offset, and the leader epoch is the term. A single node's partition is a
// group with one voter, on exactly the same path.
type replica struct {
	host  *raft.Host
	group uint64
	// sole: this node is the group's only voter at its creation
	// (Replication.Voters).
	sole bool

	// readyTerm is the term in which this node leads and knows its
	// producer and transaction state to be complete (set under appendMu).
	// Every batch of that term is one it proposed and counted itself.
	readyTerm atomic.Uint64

	// lead is the group's leadership as the Raft host last published it
	// (raft.GroupConfig.OnLeadership): what every produce checks, read
	// without asking the host. nil until the first event.
	lead atomic.Pointer[raft.Leadership]
	// startRaised counts, for the partition's manager, the log starts
	// raised by commands (Manager.LogStartRaises); nil for none.
	startRaised *atomic.Uint64

	mu sync.Mutex
	// Proposals by end offset, until their waiters take them: the first
	// in one, more in pending. A map keeps its buckets once made, and a
	// map per partition held ~600 bytes apiece on 100,000 idle partitions
	// each written once (issue 27); the map is made only when two are in
	// flight at once.
	one     raft.Proposal
	oneSet  bool
	pending map[int64]raft.Proposal
}

// maxPending bounds proposals nobody waits for (acks=0).
const maxPending = 4096

// Replication is a partition's Raft group on this node: its id, the voters
// it was created with (the partition's replica set), and whether this
// node's data for it was lost (a replaced disk), so that it catches up
// before it votes.
type Replication struct {
	Host   *raft.Host
	Group  uint64
	Voters []uint64
	Rejoin bool
	// AdoptPreRaft lets a sole voter adopt a log written before the
	// partition had a Raft group (raft.GroupConfig.AdoptPreRaft; the
	// pre-Raft adoption, internal/preraft, removed with it).
	AdoptPreRaft bool
	// StartOffset: a new group's log begins there, not at 0
	// (raft.GroupConfig.StartOffset: a topic restored from the object
	// store).
	StartOffset int64
	// StartTerm is the term of that start: new leaders' epochs are above
	// it (raft.GroupConfig.StartTerm).
	StartTerm uint64
	// CleanShutdown: the log was last closed by a clean shutdown and not
	// opened since (storage.Options.CleanShutdown): the start-up's opens
	// after one, which may run after the node listens (replica.OpenAll).
	CleanShutdown bool
	// DeferSettle: Open does not wait for a one-voter group to settle as
	// its leader; the caller does (Partition.WaitSettled) without holding
	// an open's slot meanwhile (replica.Manager's queued opens: each
	// waited out its group's first two Raft cycles, and the workers' waits
	// were most of a creation's time; issue 27).
	DeferSettle bool

	// startRaised is set by the Manager: it counts the log starts raised
	// by commands.
	startRaised *atomic.Uint64
}

// replicate joins p to its Raft group.
func (p *Partition) replicate(r Replication) error {
	if r.Host == nil || r.Group == 0 || len(r.Voters) == 0 {
		return errors.New("a partition needs its Raft group")
	}
	rep := &replica{host: r.Host, group: r.Group, startRaised: r.startRaised,
		sole: len(r.Voters) == 1 && r.Voters[0] == r.Host.ID()}
	p.rep = rep
	// Consumers see only what Raft committed: start from the log start
	// and let the commit callback raise the watermark.
	p.hw = p.log.StartOffset()
	if err := r.Host.AddGroup(raft.GroupConfig{ID: r.Group, Log: p.log, Voters: r.Voters,
		OnCommit: p.onCommit, OnTruncate: p.onTruncate, OnLeadership: p.onLeadership,
		Rejoin: r.Rejoin, AdoptPreRaft: r.AdoptPreRaft, StartOffset: r.StartOffset, StartTerm: r.StartTerm,
		// A produce waits for the quorum, not for the Ready that delivers
		// the entry: waitReplicated raises the high watermark itself.
		AckOnQuorum: true,
		LazyCommit:  true,
		// onCommit reads a batch's header and markers, keeps none of its
		// bytes: a follower's received batches go back to their pool.
		BorrowCommitData: true}); err != nil {
		return err
	}
	// Log-start commands committed before this start whose compaction may
	// not have happened yet: their start holds at once.
	if cmds, err := r.Host.Commands(r.Group, 0); err == nil {
		for _, c := range cmds {
			if start, ok := ParseLogStartCommand(c.Command); ok {
				p.raiseStart(start)
			}
			p.applyRestoreProducers(c.Command)
		}
	}
	if commit, err := r.Host.CommitOffset(r.Group); err == nil {
		p.advance(commit)
	}
	if !r.DeferSettle {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p.WaitSettled(ctx)
	}
	return nil
}

// SoleVoter reports whether this node was the partition's only voter at
// its creation: the replica WaitSettled waits for.
func (p *Partition) SoleVoter() bool { return p.rep.sole }

// WaitSettled returns once a partition whose only voter is this node
// leads and has committed an entry of its term, or ctx ends (at once for
// a partition with other voters): a single node's partition leads at
// once, and is ready when opened, as a partition of a single node always
// was. Open waits for it unless Replication.DeferSettle.
func (p *Partition) WaitSettled(ctx context.Context) {
	r := p.rep
	if !r.sole {
		return
	}
	if err := r.host.WaitSettled(ctx, r.group); err != nil && !errors.Is(err, raft.ErrUnknownGroup) {
		// Open all the same: the group is added, and failing here
		// would leave it added with no partition (a reopen then fails
		// with "already added"). A failed group is the repair loop's;
		// a slow one serves once it settles (produce answers
		// NOT_LEADER_OR_FOLLOWER meanwhile). (An unknown group: removed
		// since, by a deletion that came after the open.)
		p.logger().Warn("a one-voter partition has not settled as its leader yet", "topic", p.topic, "partition", p.index, "err", err)
	}
}

// RaftGroup is the partition's Raft group id.
func (p *Partition) RaftGroup() uint64 { return p.rep.group }

// onCommit runs on the Raft Ready loop: raise the log start a committed
// log-start command names (before the watermark, so no read sees the
// records it removed), bring the producer and transaction state up to the
// committed batches this node did not propose itself (a follower's, or a
// new leader's from the terms before), then the watermark and the epoch.
func (p *Partition) onCommit(_ uint64, ents []raft.Committed) {
	if len(ents) == 0 {
		return
	}
	for _, e := range ents {
		if start, ok := ParseLogStartCommand(e.Command); ok {
			p.raiseStart(start)
		}
		p.applyRestoreProducers(e.Command)
	}
	last := ents[len(ents)-1]
	for _, e := range ents {
		if p.mustApply(e) {
			p.applyCommitted(ents)
			break
		}
	}
	if t := int32(last.Term); t > p.epoch.Load() {
		p.epoch.Store(t)
	}
	p.advance(last.EndOffset)
}

// applyCommitted applies committed batches past stateEnd to the producer
// and transaction state. On the leader its own proposals are already
// counted; this runs for what it did not propose.
func (p *Partition) applyCommitted(ents []raft.Committed) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	for _, e := range ents {
		if !p.mustApply(e) {
			continue
		}
		h, err := records.ParseHeader(e.Data)
		if err == nil {
			err = p.replayTxn(h, e.Data)
		}
		if err != nil {
			// The rebuild at the next leadership reads the log instead.
			p.logger().Warn("applying a committed batch to the producer state", "offset", e.BaseOffset, "err", err)
			p.stateStale.Store(true)
			continue
		}
		lat := int64(-1)
		if h.LogAppendTime() {
			lat = h.MaxTimestamp
		}
		p.recordProducer(h, lat, h.MaxTimestamp)
		p.stateEnd.Store(e.EndOffset)
	}
}

// mustApply reports whether committed entry e is a batch the state has
// not counted yet: past stateEnd, and not of the term this node leads in
// (it counted those as it proposed them).
func (p *Partition) mustApply(e raft.Committed) bool {
	return e.Data != nil && e.EndOffset > p.stateEnd.Load() && e.Term != p.rep.readyTerm.Load()
}

// onLeadership runs on the Ready loop (with the group's lock held) each
// time the group's leadership changes.
func (p *Partition) onLeadership(_ uint64, l raft.Leadership) {
	prev := p.rep.lead.Swap(&l)
	if prev != nil && prev.Settled && !l.Settled {
		// No longer serving: fetch long-polls waiting for the watermark
		// look again now and answer NOT_LEADER_OR_FOLLOWER with the new
		// leader, instead of at the end of their MaxWaitMillis.
		p.wakeReaders()
	}
}

// leadership is the group's last published leadership; before the first
// event, asked of the host.
func (p *Partition) leadership() (raft.Leadership, error) {
	if l := p.rep.lead.Load(); l != nil {
		return *l, nil
	}
	return p.rep.host.Leadership(p.rep.group)
}

// onTruncate runs on the Ready loop: entries from offset on are gone (a
// follower's uncommitted suffix replaced): if the state counted them, it
// is rebuilt from the log at the next leadership.
func (p *Partition) onTruncate(_ uint64, offset int64) {
	if offset < p.stateEnd.Load() {
		p.stateStale.Store(true)
	}
}

// RaftStatus is the partition's Raft status on this node.
func (p *Partition) RaftStatus() (raft.Status, error) {
	return p.rep.host.Status(p.rep.group)
}

// IsLeader reports whether this node may serve the partition: always on a
// single node; in a cluster when it is the Raft leader and has committed an
// entry of its term, so that its watermark and log start are current (a
// new leader learns what its predecessor committed only then).
func (p *Partition) IsLeader() bool {
	l, err := p.leadership()
	return err == nil && l.Settled
}

var errNotLeader = fmt.Errorf("not the partition leader: %w", kerr.NotLeaderForPartition)

// leaderCheckLocked refuses appends on a follower, and on a new leader
// until everything earlier terms left in its log is committed: only then
// does the producer state (kept up to date from committed entries) cover
// the whole log, so a retry of a batch written under the old leader is
// found as a duplicate. A state that counted entries a truncation took
// back is rebuilt from the log here. Called with appendMu held.
func (p *Partition) leaderCheckLocked() error {
	rep := p.rep
	l, err := p.leadership()
	if err != nil {
		return fmt.Errorf("%w: %v", errNotLeader, err)
	}
	if !l.Leading {
		return errNotLeader
	}
	if rep.readyTerm.Load() == l.Term {
		return nil
	}
	commit, err := rep.host.CommitOffset(rep.group)
	if err != nil {
		return fmt.Errorf("%w: %v", errNotLeader, err)
	}
	end := p.log.EndOffset()
	if commit < end {
		return fmt.Errorf("new leader still committing earlier entries: %w", kerr.NotLeaderForPartition)
	}
	if p.stateStale.Load() || p.stateEnd.Load() < end {
		if err := p.rebuildLocked(); err != nil {
			return p.fail(err)
		}
	}
	rep.readyTerm.Store(l.Term)
	p.lg.Debug("leading partition", "topic", p.topic, "partition", p.index, "epoch", l.Term, "log_end_offset", end)
	return nil
}

// rebuildLocked recomputes producer and transaction state from the whole
// log: only after a truncation took back entries the state had counted.
func (p *Partition) rebuildLocked() error {
	start := time.Now()
	p.producers = nil
	p.txnMu.Lock()
	p.txn = txnState{}
	p.txnMu.Unlock()
	if r := p.restored; r != nil {
		p.installLocked(*r)
	}
	end := p.log.EndOffset()
	n := 0
	err := p.log.Scan(p.log.StartOffset(), func(h records.Header, batch []byte) error {
		n++
		if err := p.replayTxn(h, batch); err != nil {
			return err
		}
		lat := int64(-1)
		if h.LogAppendTime() {
			lat = h.MaxTimestamp
		}
		p.recordProducer(h, lat, h.MaxTimestamp)
		return nil
	})
	if err == nil {
		p.stateEnd.Store(end)
		p.stateStale.Store(false)
	}
	p.logger().Info("rebuilt producer state after a truncation", "batches", n, "producers", len(p.producers), "took", time.Since(start))
	return err
}

// proposeLocked proposes a checked batch through the partition's Raft
// group (on the leader; leaderCheckLocked came first) and returns its base
// offset. The batch is stamped in place with its offsets and epoch.
func (p *Partition) proposeLocked(v *records.Validated, owner *bufref.Ref) (int64, error) {
	rep := p.rep
	prop, err := rep.host.ProposeOwned(context.Background(), rep.group, v, owner)
	if err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return 0, errNotLeader
		}
		if errors.Is(err, raft.ErrProposalDropped) {
			return 0, fmt.Errorf("%v: %w", err, kerr.NotEnoughReplicas)
		}
		if verr := validationError(err); verr != err {
			return 0, verr
		}
		return 0, fmt.Errorf("%w: %w", kerr.NotLeaderForPartition, err)
	}
	// The caller counts it in the producer state before it releases
	// appendMu.
	p.stateEnd.Store(max(p.stateEnd.Load(), prop.EndOffset))
	rep.mu.Lock()
	if rep.putPendingLocked(prop) > maxPending {
		rep.prunePendingLocked(p.HighWatermark())
	}
	rep.mu.Unlock()
	return prop.BaseOffset, nil
}

// putPendingLocked adds a proposal for its waiter and returns how many
// are pending (rep.mu held).
func (rep *replica) putPendingLocked(prop raft.Proposal) int {
	if !rep.oneSet || rep.one.EndOffset == prop.EndOffset {
		// As a map put would: the newest proposal of an end offset (one
		// after a truncation) replaces an older one.
		rep.one, rep.oneSet = prop, true
		delete(rep.pending, prop.EndOffset)
	} else {
		if rep.pending == nil {
			rep.pending = map[int64]raft.Proposal{}
		}
		rep.pending[prop.EndOffset] = prop
	}
	return 1 + len(rep.pending)
}

// prunePendingLocked drops the pending proposals committed already
// (nobody waits for them: acks=0).
func (rep *replica) prunePendingLocked(commit int64) {
	for end := range rep.pending {
		if end <= commit {
			delete(rep.pending, end)
		}
	}
	if rep.oneSet && rep.one.EndOffset <= commit {
		rep.oneSet = false
	}
}

// takePendingLocked takes the proposal ending at end out of those
// pending (rep.mu held).
func (rep *replica) takePendingLocked(end int64) (raft.Proposal, bool) {
	if rep.oneSet && rep.one.EndOffset == end {
		rep.oneSet = false
		return rep.one, true
	}
	prop, ok := rep.pending[end]
	delete(rep.pending, end)
	return prop, ok
}

// waitReplicated waits until the batch ending at end is committed by the
// group (a majority, each fsynced under flush=sync).
func (p *Partition) waitReplicated(ctx context.Context, end int64) error {
	rep := p.rep
	rep.mu.Lock()
	prop, ok := rep.takePendingLocked(end)
	rep.mu.Unlock()
	var err error
	if ok {
		err = rep.host.WaitCommitted(ctx, prop)
	} else {
		// A deduplicated retry: its original is in the log.
		err = rep.host.WaitCommitOffset(ctx, rep.group, end)
	}
	switch {
	case err == nil:
		p.advance(end)
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, raft.ErrProposalLost), errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrUnknownGroup), errors.Is(err, raft.ErrClosed):
		return fmt.Errorf("%v: %w", err, kerr.NotLeaderForPartition)
	}
	return p.fail(err)
}

// WaitLocal waits until every offset below end is on this node's disk
// (acks=1: the leader's own durability only; under flush policies other
// than sync, its page cache). It waits for the Raft host to store the
// proposal (an event, not a poll); a retry whose original is already in
// the log waits for the log's durable offset.
func (p *Partition) WaitLocal(ctx context.Context, end int64) error {
	rep := p.rep
	rep.mu.Lock()
	prop, ok := rep.takePendingLocked(end)
	rep.mu.Unlock()
	var err error
	if ok {
		err = rep.host.WaitLocal(ctx, prop)
	} else {
		err = p.log.WaitDurable(ctx, end)
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("%v: %w", err, kerr.NotLeaderForPartition)
}

// A log-start command moves the start of every replica's log to one
// offset (retention, DeleteRecords): u8 kind 1 | i64 start, big endian. It
// is a Raft command (a side entry), so it takes no Kafka offset. Each
// replica's log start holds from the moment the command is committed
// there; the segments below it are deleted after (the broker's compaction
// loop).
const cmdLogStart = 1

// LogStartCommand is the command naming start.
func LogStartCommand(start int64) []byte {
	return binary.BigEndian.AppendUint64([]byte{cmdLogStart}, uint64(start))
}

// ParseLogStartCommand returns the start a command names, ok=false if cmd
// is not a log-start command.
func ParseLogStartCommand(cmd []byte) (int64, bool) {
	if len(cmd) != 9 || cmd[0] != cmdLogStart {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(cmd[1:])), true
}

// raiseStart moves the partition's log start to start (no lower).
func (p *Partition) raiseStart(start int64) {
	for {
		cur := p.minStart.Load()
		if start <= cur {
			return
		}
		if p.minStart.CompareAndSwap(cur, start) {
			if p.rep != nil && p.rep.startRaised != nil {
				p.rep.startRaised.Add(1)
			}
			return
		}
	}
}

// CleanLimits bounds a log cleaning pass on p (storage.CleanOptions):
// committed is the high watermark (only committed batches change; a Raft
// log's uncommitted suffix may still be truncated); tombstones and
// transaction markers may be removed below removeBelow only. On a Raft
// leader that is the least offset every replica has stored: a replica
// still missing a tombstone may hold an older value of its key, and must
// get the tombstone before it can be gone anywhere (a replica caught up
// from the leader later gets neither). A follower removes none: it cannot
// know what the others have.
func (p *Partition) CleanLimits() (committed, removeBelow int64) {
	committed = p.HighWatermark()
	rep := p.rep
	st, err := rep.host.Status(rep.group)
	if err != nil || st.State != raft.StateLeader {
		return committed, 0
	}
	matched := map[uint64]int64{}
	for _, r := range st.Replicas {
		matched[r.ID] = r.MatchOffset
	}
	if st.Node != 0 {
		matched[st.Node] = min(st.DurableOffset, committed)
	}
	removeBelow = committed
	for _, ids := range [][]uint64{st.Voters, st.Learners} {
		for _, id := range ids {
			m, ok := matched[id]
			if !ok {
				return committed, 0
			}
			removeBelow = min(removeBelow, m)
		}
	}
	return committed, removeBelow
}
