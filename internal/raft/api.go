package raft

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"holdfast/internal/bufref"
	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// Propose appends batch to the group's Raft log on the leader and returns
// its index and offsets. The batch is checked and copied (the caller's is
// left as it is); the copy gets the next offset and the term as leader
// epoch. It does not wait: use WaitCommitted.
func (h *Host) Propose(ctx context.Context, groupID uint64, batch []byte) (Proposal, error) {
	g := h.group(groupID)
	if g == nil {
		return Proposal{}, fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
	}
	v, err := records.Check(bytes.Clone(batch), g.st.log.Config().MaxMessageBytes)
	if err != nil {
		return Proposal{}, err
	}
	return h.ProposeValidated(ctx, groupID, &v)
}

// ProposeValidated is Propose for a batch the caller checked
// (records.Check): nothing is parsed, checksummed or copied again here. The
// batch is stamped in place with its base offset and the term as leader
// epoch (v's header follows), as a local append would. Raft's entry shares
// v's bytes (third_party/etcd-raft/PATCHES.md: no clone), and the Ready
// loop writes it to the log under v's facts (records.Validated.Rebind):
// the bytes are Raft's from now on, and the caller must never modify or
// reuse them (a buffer that would be reused goes through ProposeOwned).
func (h *Host) ProposeValidated(ctx context.Context, groupID uint64, v *records.Validated) (Proposal, error) {
	return h.ProposeOwned(ctx, groupID, v, nil)
}

// ProposeOwned is ProposeValidated for a batch that lies in a counted
// buffer (a produce request's frame): the host holds a reference to owner
// for as long as anything of Raft's may read the batch's bytes, and the
// buffer is reused only after the last holder let go (group.held). With
// owner nil it is ProposeValidated.
func (h *Host) ProposeOwned(ctx context.Context, groupID uint64, v *records.Validated, owner *bufref.Ref) (Proposal, error) {
	g := h.group(groupID)
	if g == nil {
		return Proposal{}, fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
	}
	hdr := v.Header()
	if hdr.NumRecords == 0 {
		return Proposal{}, fmt.Errorf("raft: propose: batch without records: %w", records.ErrCorrupt)
	}
	if max := g.st.log.Config().MaxMessageBytes; max > 0 && hdr.Size() > max {
		return Proposal{}, fmt.Errorf("raft: propose: batch of %d bytes exceeds %d: %w", hdr.Size(), max, records.ErrTooLarge)
	}
	if err := ctx.Err(); err != nil {
		return Proposal{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if h.soloEligibleLocked(g) {
		return h.proposeSoloLocked(g, v, owner) // solo.go: no etcd raft per proposal
	}
	proposed := false
	p, err := h.proposeLocked(g, func(base int64, term uint64) int64 {
		v.SetBaseOffset(base)
		v.SetLeaderEpoch(int32(term))
		return base + int64(hdr.LastOffsetDelta) + 1
	}, func() error {
		if owner != nil {
			// Before Raft takes the bytes: a failed group may keep them
			// in its RawNode, and then keeps this reference too.
			owner.Retain()
		}
		proposed = true
		return g.rn.Propose(v.Bytes())
	})
	if owner != nil && proposed {
		switch {
		case err == nil:
			g.held = append(g.held, heldRef{index: p.Index, ref: owner})
		case g.failed == nil && errors.Is(err, ErrProposalDropped):
			owner.Release() // Raft refused it: it keeps nothing
		}
	}
	if err == nil {
		g.local = append(g.local, localBatch{index: p.Index, term: p.Term, v: *v, written: h.preWriteLocked(g, v)})
	}
	return p, err
}

// heldRef is a reference the group holds to the buffer its proposal at
// index lies in (ProposeOwned), or the buffer of a received MsgApp whose
// entries first..index lie in it (holdReceivedLocked; first is 0 for a
// proposal).
type heldRef struct {
	first, index uint64
	ref          *bufref.Ref
}

// Who reads a proposal's bytes after ProposeOwned, and when each stops
// (the group holds the buffer's reference until all have):
//
//   - Raft's unstable log, its entries handed to the store (persist: the
//     log write, records.Validated.Rebind) and g.local: until the entry is
//     stored and Raft has been told so. In async mode Raft applies only
//     stored entries, so applied (commitIndex >= index) implies this.
//   - The store's recent entries, which serve Raft's reads (Entries) of
//     committed entries to apply and of entries to send: until recent
//     drops the entry (storeRecentHolds).
//   - The apply (OnCommit gets Data): synchronous, before commitIndex
//     moves past the entry.
//   - Messages to peers (MsgApp) whose entries come from the unstable log
//     or from recent: each takes its own reference when its Ready is
//     taken (retainSentLocked), released by the transport once the
//     message is written or dropped (outMsg.refs). A message Raft built
//     but has not handed out in a Ready yet has no reference: so a
//     reference is given back only right after a Ready was taken, or when
//     the RawNode has no Ready (releaseHeldLocked's caller), once the
//     first two holders are done - Raft builds no later message from the
//     proposal's bytes: its reads then come from the log.
//
// A reference kept too long (a failed or reset group, a proposal another
// leader's entry replaced and nothing committed past yet) only costs the
// pool the buffer; the garbage collector takes it.

// retainSentLocked takes a reference, for each message of msgs to a peer,
// to every held buffer its entries lie in, and returns them by message
// (nil if none): the transport releases them (sendHeld).
func (g *group) retainSentLocked(msgs []*pb.Message) (refs [][]*bufref.Ref) {
	if len(g.held) == 0 {
		return nil
	}
	for i, m := range msgs {
		if len(m.Entries) == 0 || m.GetTo() == raft.LocalAppendThread || m.GetTo() == raft.LocalApplyThread {
			continue
		}
		for _, e := range m.Entries {
			if len(e.Data) == 0 {
				continue
			}
			for _, hr := range g.held {
				if hr.ref.Holds(e.Data) {
					if refs == nil {
						refs = make([][]*bufref.Ref, len(msgs))
					}
					if !slices.Contains(refs[i], hr.ref) {
						hr.ref.Retain()
						refs[i] = append(refs[i], hr.ref)
					}
					break
				}
			}
		}
	}
	return refs
}

// releaseHeldLocked gives back the references of proposals nothing of
// Raft's reads any more: applied, and out of the store's recent entries.
// The caller has just taken the group's Ready, or found it has none (no
// message built from the bytes is still inside the RawNode).
func (g *group) releaseHeldLocked() {
	n := 0
	for n < len(g.held) {
		hr := g.held[n]
		if hr.index > g.commitIndex || g.st.recentHolds(cmp.Or(hr.first, hr.index), hr.index, hr.ref) {
			break
		}
		hr.ref.Release()
		n++
	}
	if n > 0 {
		clear(g.held[:n])
		g.held = g.held[n:]
	}
}

// trimLocked lets go of what a quiesced group kept for the next cycles:
// the entries recent held (a read of them goes to the log, as past
// recent's budget), the buffers they pinned, and the emptied slices'
// arrays. At rest with 100,000 partitions each group held its last entry
// and the buffer it lay in (issue 27).
func (g *group) trimLocked() {
	g.st.forgetRecent()
	g.releaseHeldLocked()
	if len(g.held) == 0 {
		g.held = nil
	}
	if len(g.local) == 0 {
		g.local = nil
	}
	if len(g.soloPend) == 0 {
		g.soloPend = nil
	}
}

// preWriteLocked writes a batch the leader just proposed to its log at
// once, on the proposer's goroutine, and reports whether it did. The Ready
// loop then only records it (store.appendEntry): the write does not wait
// for a Ready, but runs while the fsync in progress
// does, as a single node's append did before every partition was a Raft
// group; the group commit that follows covers it as before, and the batch
// counts as Raft's only once a Ready has stored it.
//
// Only where the log holds every entry before it: the batch must sit at the
// log end, and no side entry this leader proposed may be unstored - a side
// entry takes no offset, so a crash would leave the batch at the side
// entry's index when the log is read back. Otherwise the Ready loop writes
// it, as for a follower. A failed write is left to the Ready loop too,
// which tries again and fails the group if the log failed.
func (h *Host) preWriteLocked(g *group, v *records.Validated) bool {
	if last, _ := g.st.LastIndex(); last < g.lastSide {
		return false
	}
	l := g.st.log
	if l.EndOffset() != v.Header().BaseOffset {
		return false
	}
	_, err := l.AppendValidated(*v)
	return err == nil
}

// localBatch is a batch this node proposed, checked by its proposer: when
// the Ready loop stores the entry at index in term, whose data is the
// proposed batch's bytes (Raft shares them), it writes it under these facts (Validated.Rebind)
// instead of checking it again, or only records it if the proposer wrote it
// already (written). Anything else - entries from another leader - is
// checked in full.
type localBatch struct {
	index, term uint64
	v           records.Validated
	written     bool // in the log already (preWriteLocked)
}

// takeLocalLocked returns the checked facts of the entry at (index, term)
// if this node proposed it, dropping those of earlier indexes (stored, or
// replaced by another leader's entries).
func (g *group) takeLocalLocked(index, term uint64) (localBatch, bool) {
	n := 0
	for n < len(g.local) && g.local[n].index < index {
		n++
	}
	g.dropLocalLocked(n)
	if len(g.local) == 0 || g.local[0].index != index {
		return localBatch{}, false
	}
	lb := g.local[0]
	g.local = g.local[1:]
	return lb, lb.term == term
}

// dropLocalLocked forgets the first n proposals of g.local, which Raft
// will not store here as proposed: replaced by another leader's entries, or
// left behind as this node stopped leading (it may still store them, or
// not). Their proposer counted them already (the partition's producer
// state), so OnTruncate says the state from the first one on may be stale,
// as for a truncated suffix: a wrong "may be" costs a rebuild, a missed one
// a retry answered from a batch that is not in the log.
func (g *group) dropLocalLocked(n int) {
	if n == 0 {
		return
	}
	first := g.local[0].v.Header().BaseOffset
	g.local = g.local[n:]
	if g.cfg.OnTruncate != nil {
		g.cfg.OnTruncate(g.id, first)
	}
}

// ProposeCommand appends an application command to the group's Raft log:
// a side entry that takes no Kafka offset and is delivered, once committed,
// as Committed.Command (and by Commands). For what all replicas must do at
// one point of the log (move the log start).
func (h *Host) ProposeCommand(ctx context.Context, groupID uint64, cmd []byte) (Proposal, error) {
	g := h.group(groupID)
	if g == nil {
		return Proposal{}, fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
	}
	if err := ctx.Err(); err != nil {
		return Proposal{}, err
	}
	data := append(bytes.Clone(cmdPrefix), cmd...)
	g.mu.Lock()
	defer g.mu.Unlock()
	return h.proposeLocked(g, nil, func() error { return g.rn.Propose(data) })
}

// proposeLocked proposes one entry on the leader with propose. stamp, for
// a batch, stamps its base offset and term and returns its end offset; nil
// for a side entry. Every successful proposal appends exactly one entry
// (a conf change refused by Raft becomes an empty entry), which is how the
// index is known.
func (h *Host) proposeLocked(g *group, stamp func(base int64, term uint64) int64, propose func() error) (Proposal, error) {
	if g.failed != nil {
		return Proposal{}, g.failed
	}
	if g.removed {
		return Proposal{}, fmt.Errorf("%w: %d", ErrUnknownGroup, g.id)
	}
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader || g.readyTerm != bs.GetTerm() || bs.LeadTransferee != 0 {
		return Proposal{}, &NotLeaderError{Group: g.id, Leader: bs.Lead, Term: bs.GetTerm()}
	}
	p := Proposal{Group: g.id, Index: g.nextIndex, Term: bs.GetTerm(), BaseOffset: g.nextOffset, EndOffset: g.nextOffset}
	if stamp != nil {
		p.EndOffset = stamp(p.BaseOffset, p.Term)
	}
	g.unquiesceLocked()
	var err error
	if !h.guardLocked(g, func() { err = propose() }) {
		return Proposal{}, g.failed
	}
	if err != nil {
		if errors.Is(err, raft.ErrProposalDropped) {
			return Proposal{}, fmt.Errorf("%w: group %d", ErrProposalDropped, g.id)
		}
		return Proposal{}, err
	}
	g.nextIndex++
	g.nextOffset = p.EndOffset
	if stamp == nil {
		g.lastSide = p.Index
	}
	h.markDirty(g)
	return p, nil
}

// WaitCommitted returns nil once p is committed; ErrProposalLost if a
// different entry was committed at its index (a new leader overwrote it);
// a *NotLeaderError (naming the new leader if known) as soon as this node
// no longer leads p's term with p not known committed: whether p commits
// is up to the next leader now, and a retry there is deduplicated (an
// idempotent producer's) where it did. Waiting on cost a failover the
// waiter's whole deadline (issue 26). A node that stepped down before it
// heard of its successor (a vote request, CheckQuorum, a leadership
// transfer) waits up to two election timeouts for it, so that the answer
// can name it (KIP-951) and the client need not ask Metadata first.
func (h *Host) WaitCommitted(ctx context.Context, p Proposal) error {
	g := h.group(p.Group)
	if g == nil {
		return fmt.Errorf("%w: %d", ErrUnknownGroup, p.Group)
	}
	var unknown <-chan time.Time // the wait for a successor's name
	for {
		g.mu.Lock()
		// The channel only for a wait: a group's last waiter made one that
		// lived on unused until the next commit (2.5 MB at 20,000 idle
		// replicas after a write to each).
		failed, removed, idx := g.failed, g.removed, g.ackIndexLocked()
		var ch chan struct{}
		var lost *NotLeaderError
		if failed == nil && !removed && idx < p.Index {
			ch = g.commitChLocked()
			if bs := g.rn.BasicStatus(); bs.RaftState != raft.StateLeader || bs.GetTerm() != p.Term {
				lost = &NotLeaderError{Group: g.id, Leader: bs.Lead, Term: bs.GetTerm()}
			}
		}
		g.mu.Unlock()
		if failed != nil {
			return failed
		}
		if removed {
			return fmt.Errorf("%w: %d", ErrUnknownGroup, p.Group)
		}
		if lost != nil {
			if lost.Leader != 0 && lost.Leader != h.cfg.ID {
				return lost
			}
			if unknown == nil {
				t := h.cfg.Clock.NewTimer(2 * h.cfg.TickInterval * time.Duration(h.cfg.ElectionTicks))
				defer t.Stop()
				unknown = t.C
			}
			select {
			case <-ch:
				continue
			case <-unknown:
				return lost
			case <-ctx.Done():
				return lost // answered as lost: it is not the deadline's fault
			case <-h.done:
				return ErrClosed
			}
		}
		if idx >= p.Index {
			if g.st.holds(p) {
				return nil
			}
			return fmt.Errorf("%w: group %d index %d term %d (offsets [%d, %d))", ErrProposalLost, p.Group, p.Index, p.Term, p.BaseOffset, p.EndOffset)
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
// ErrProposalLost if another entry took its index here.
func (h *Host) WaitLocal(ctx context.Context, p Proposal) error {
	g := h.group(p.Group)
	if g == nil {
		return fmt.Errorf("%w: %d", ErrUnknownGroup, p.Group)
	}
	for {
		g.mu.Lock()
		failed, removed, ch := g.failed, g.removed, g.storedChLocked()
		g.mu.Unlock()
		if failed != nil {
			return failed
		}
		if removed {
			return fmt.Errorf("%w: %d", ErrUnknownGroup, p.Group)
		}
		if last, _ := g.st.LastIndex(); last >= p.Index {
			if !g.st.holds(p) {
				return fmt.Errorf("%w: group %d index %d term %d", ErrProposalLost, p.Group, p.Index, p.Term)
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
		failed, end := g.failed, g.commitEnd
		var ch chan struct{}
		if failed == nil && end < offset {
			ch = g.commitChLocked() // only for a wait (WaitCommitted)
		}
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
	p, err := h.proposeLocked(g, nil, func() error { return g.rn.ProposeConfChange(cc) })
	g.mu.Unlock()
	if err != nil {
		return err
	}
	if err := h.WaitCommitted(ctx, p); err != nil {
		return err
	}
	// If a change was already pending, Raft stored an empty entry instead.
	if e, ok := g.st.sideEntry(p.Index); !ok || e.Type != pb.EntryType_EntryConfChangeV2 {
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
	g.publishLocked()
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
	g.publishLocked()
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
	g.st.mu.RLock()
	below := offset <= g.st.anc.Offset
	g.st.mu.RUnlock()
	if below {
		// Data below the anchor (a log adopted with its history, or the
		// rest of a batch cut mid-way): Raft's indexes are not involved.
		return g.st.log.DeleteBefore(offset)
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
	// Durable before any file goes, fsynced without holding up the store
	// round (putAnchorSynced).
	if err := h.journal.putAnchorSynced(groupID, a); err != nil {
		return err
	}
	if err := g.st.compactTo(a); err != nil {
		return err
	}
	return g.st.log.DeleteBefore(offset)
}

// Commands returns the committed command entries of a group with index
// above after that this node still holds (those above the log anchor),
// in order. After a restart every held command is returned again: applying
// one must be idempotent.
func (h *Host) Commands(groupID, after uint64) ([]Committed, error) {
	g := h.group(groupID)
	if g == nil {
		return nil, fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
	}
	g.mu.Lock()
	commit := g.commitIndex
	g.mu.Unlock()
	return g.st.commands(after, commit), nil
}

// Status of a group as this node sees it.
type Status struct {
	Group, Node, Leader, Term uint64
	State                     State
	CommitIndex, LastIndex    uint64
	FirstIndex                uint64
	CommitOffset              int64 // high watermark: offsets below are committed
	StartOffset, EndOffset    int64
	DurableOffset             int64 // fsynced locally
	Quiesced                  bool
	// QuorumSilent: this node leads, and no quorum of the voters' nodes
	// (itself counted) was heard from within an election timeout: the
	// others may have elected a leader in a later term that this node
	// has not heard of (isr.go, quorumSilentLocked).
	QuorumSilent bool
	// Rejoining: this replica lost its storage and has not yet caught up
	// with a leader's commit index (it grants no votes until then).
	Rejoining        bool
	Failed           string          // why the group stopped (storage failure), "" if running
	Voters, Learners []uint64        // the applied membership
	Replicas         []ReplicaStatus // on the leader only
}

// ReplicaStatus is the leader's view of one replica: MatchOffset is the end
// of what the replica acknowledged, i.e. fsynced (followers ack after fsync).
type ReplicaStatus struct {
	ID          uint64
	MatchIndex  uint64
	MatchOffset int64
	State       ProgressState
	// Active: heard from within the last election timeout (the leader
	// itself always): etcd raft's RecentActive, what its quorum check
	// counts.
	Active  bool
	Learner bool
	// InSync: a voter caught up to the leader's log end within
	// ReplicaLagMax (Kafka's replica.lag.time.max.ms; isr.go), or the
	// leader itself: the ISR, what min.insync.replicas counts.
	InSync bool
}

// Leadership is the cheap part of Status, for hot paths (every produce):
// the leader this node knows of (0 if none), the term, and whether this
// node is the leader and accepting proposals.
type Leadership struct {
	Leader, Term uint64
	Leading      bool // this node is the Raft leader (it may not accept proposals yet)
	Proposing    bool
	// Settled: leading, and an entry of its own term is committed, so its
	// commit covers every entry it has (Raft's rule for serving reads): what
	// the committed entries did (a moved log start) is applied here.
	Settled bool
	// Failed: the group stopped on this node (GroupFailed says why).
	Failed bool
}

// Leadership returns the group's leadership as this node sees it. The
// group's OnLeadership gets the same answer each time it changes.
func (h *Host) Leadership(groupID uint64) (Leadership, error) {
	g := h.group(groupID)
	if g == nil {
		return Leadership{}, fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.leadershipLocked(), nil
}

func (g *group) leadershipLocked() Leadership {
	bs := g.rn.BasicStatus()
	leading := g.failed == nil && bs.RaftState == raft.StateLeader
	ready := leading && g.readyTerm == bs.GetTerm()
	return Leadership{
		Leader: bs.Lead, Term: bs.GetTerm(), Leading: leading,
		Proposing: ready && bs.LeadTransferee == 0,
		Settled:   ready && g.commitIndex >= g.termStart,
		Failed:    g.failed != nil,
	}
}

// publishLocked gives OnLeadership the group's Leadership if it changed.
// Called wherever what it is made of may change: the Ready loop's store
// rounds and apply (role, readyTerm, commit), a failure, a reset, a tick, a
// campaign or a transfer. A change that Raft makes while stepping a
// message shows at the next cycle, which that change always causes (a new
// role is a Ready): until then the hot path may act on the previous
// answer, and proposeLocked, which checks under the lock, refuses.
//
// A leader that stops leading its term wakes the commit's waiters
// (WaitCommitted): their proposals may never commit, and they answer at
// once instead of waiting out their deadline.
func (g *group) publishLocked() {
	l := g.leadershipLocked()
	if l == g.published {
		return
	}
	if g.published.Leading && (!l.Leading || l.Term != g.published.Term) ||
		!l.Leading && l.Leader != g.published.Leader {
		// Also when a former leader learns its successor: its waiters
		// name it.
		g.wakeCommitLocked()
	}
	g.published = l
	if g.cfg.OnLeadership != nil {
		g.cfg.OnLeadership(g.id, l)
	}
	g.emitLeadershipLocked(l)
}

// WaitSettled returns once this node leads the group and has committed an
// entry of its term (Leadership.Settled): for a group whose only voter is
// this node, which leads as soon as it is added.
func (h *Host) WaitSettled(ctx context.Context, groupID uint64) error {
	// The leadership and the channels that announce its next change are
	// read under one lock: read apart, a commit between the two closed the
	// channel read after it, and an idle group (a single node starting)
	// waited for a commit that never came. The tick covers a change that
	// closes no channel.
	tick := h.cfg.Clock.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		g := h.group(groupID)
		if g == nil {
			return fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
		}
		g.mu.Lock()
		l := g.leadershipLocked()
		failed, ch, stored := g.failed, g.commitChLocked(), g.storedChLocked()
		g.mu.Unlock()
		switch {
		case failed != nil:
			return failed
		case l.Settled:
			return nil
		}
		select {
		case <-ch:
		case <-stored:
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-h.done:
			return ErrClosed
		}
	}
}

// AwaitSuccessor returns once this node, not leading the group, knows
// who does, or leads it and takes proposals again (a transfer that gave
// up, or none), or the group failed; at the latest after two election
// timeouts or when ctx ends. An answer NOT_LEADER_OR_FOLLOWER given
// meanwhile (during a leadership transfer, or an election) could not name
// the new leader (KIP-951), and the client asked Metadata first.
func (h *Host) AwaitSuccessor(ctx context.Context, groupID uint64) {
	limit := h.cfg.Clock.NewTimer(2 * h.cfg.TickInterval * time.Duration(h.cfg.ElectionTicks))
	defer limit.Stop()
	tick := h.cfg.Clock.NewTicker(20 * time.Millisecond) // a change that closes no channel
	defer tick.Stop()
	for {
		g := h.group(groupID)
		if g == nil {
			return
		}
		g.mu.Lock()
		l := g.leadershipLocked()
		ch := g.commitChLocked()
		g.mu.Unlock()
		if l.Failed || l.Proposing || !l.Leading && l.Leader != 0 && l.Leader != h.cfg.ID {
			return
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-limit.C:
			return
		case <-ctx.Done():
			return
		case <-h.done:
			return
		}
	}
}

// GroupFailed returns why the group stopped on this node (a storage
// failure, a panic), nil while it runs.
func (h *Host) GroupFailed(groupID uint64) error {
	g := h.group(groupID)
	if g == nil {
		return fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failed
}

// FailCorrupt stops a group whose replica's log is corrupt
// (storage.ErrCorrupt), as FailGroup, but a leader first hands its
// leadership to an in-sync follower (waiting up to corruptHandover): a
// replica that only stopped would take its vote with it, and where
// another replica cannot vote yet (a replaced disk catching up) the
// others could not elect anyone. It returns at once.
func (h *Host) FailCorrupt(groupID uint64, err error) error {
	g := h.group(groupID)
	if g == nil {
		return fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
	}
	if g.st.corrupt.CompareAndSwap(false, true) { // one handover per replica
		go h.corruptLog(g, err)
	}
	return nil
}

// corruptHandover bounds how long a leader with a corrupt log waits for
// its leadership to move before it stops.
const corruptHandover = 3 * time.Second

// corruptLog is FailCorrupt's work.
func (h *Host) corruptLog(g *group, err error) {
	deadline := time.Now().Add(corruptHandover)
	for moved := false; time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		g.mu.Lock()
		if g.failed != nil || g.removed {
			g.mu.Unlock()
			return
		}
		st := g.rn.BasicStatus()
		if st.RaftState != raft.StateLeader {
			g.mu.Unlock()
			break
		}
		if !moved && st.LeadTransferee == 0 {
			var target, match uint64
			g.rn.WithProgress(func(id uint64, typ raft.ProgressType, pr trackerProgress) {
				if id != h.cfg.ID && typ == raft.ProgressTypePeer && !pr.IsLearner && pr.RecentActive && pr.State == tracker.StateReplicate && pr.Match >= match {
					target, match = id, pr.Match
				}
			})
			if target != 0 {
				h.log.Warn("raft: this replica's log is corrupt: handing the leadership over before it stops", "group", g.id, "to", target)
				h.guardLocked(g, func() { g.rn.TransferLeader(target) })
				h.markDirty(g)
				moved = true
			}
		}
		g.mu.Unlock()
	}
	h.failGroup(g, err)
}

// FailGroup stops a group on this node for a reason found outside Raft
// (its log's data is corrupt: storage.ErrCorrupt): as a storage failure,
// it sends and acknowledges nothing from now on, so a leader's peers elect
// another, and the replica's owner repairs it (GroupFailed says why).
func (h *Host) FailGroup(groupID uint64, err error) error {
	g := h.group(groupID)
	if g == nil {
		return fmt.Errorf("%w: %d", ErrUnknownGroup, groupID)
	}
	h.failGroup(g, err)
	return nil
}

// Failures counts the group failures on this host so far: a repair loop
// that saw every group well need not look at them again until it moves.
func (h *Host) Failures() uint64 { return h.failures.Load() }

// InSyncVoters is InSync's set: on the leader (not failed) it appends to
// buf the voters in sync (isr.go: caught up to its log end within
// ReplicaLagMax), and this node, and returns them and true; elsewhere buf
// and false. For the stats loop, which asks it of every led partition each
// second: nothing is copied when buf has room.
func (h *Host) InSyncVoters(groupID uint64, buf []uint64) ([]uint64, bool) {
	g := h.group(groupID)
	if g == nil {
		return buf, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed != nil || g.rn.BasicStatus().RaftState != raft.StateLeader {
		return buf, false
	}
	last, _ := g.st.LastIndex()
	now := h.cfg.Clock.Now()
	g.rn.WithProgress(func(id uint64, typ raft.ProgressType, pr trackerProgress) {
		if typ == raft.ProgressTypePeer && h.inSyncLocked(g, id, pr, last, now) {
			buf = append(buf, id)
		}
	})
	return buf, true
}

// AllChanges is a count that moves whenever any group's Changes does, and
// as groups are added or removed: a poller of every group that saw the
// same count last time can skip its whole pass.
func (h *Host) AllChanges() uint64 { return h.changes.Load() }

// Changes is a count that moves whenever the group's Raft state (role,
// term, progress of the replicas, failure) may have changed, 0 for an
// unknown group: a poller that saw the same count last time can keep what
// it read then. A quiesced group's does not move.
func (h *Host) Changes(groupID uint64) uint64 {
	if g := h.group(groupID); g != nil {
		return g.changes.Load()
	}
	return 0
}

// InSync counts, on the leader, the voters in sync (isr.go: caught up to
// its log end within ReplicaLagMax), itself included; 0 on a follower.
// Cheaper than Status: for every acks=all produce (min.insync.replicas).
func (h *Host) InSync(groupID uint64) int {
	g := h.group(groupID)
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed != nil || g.rn.BasicStatus().RaftState != raft.StateLeader {
		return 0
	}
	last, _ := g.st.LastIndex()
	now := h.cfg.Clock.Now()
	n := 0
	g.rn.WithProgress(func(id uint64, typ raft.ProgressType, pr trackerProgress) {
		if typ == raft.ProgressTypePeer && h.inSyncLocked(g, id, pr, last, now) {
			n++
		}
	})
	return n
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
		Group: groupID, Node: h.cfg.ID, Leader: bs.Lead, Term: bs.GetTerm(), State: stateOf(bs.RaftState),
		CommitIndex: g.commitIndex, CommitOffset: g.commitEnd, Quiesced: g.quiesced, Rejoining: g.rejoin,
	}
	if g.failed != nil {
		s.Failed = g.failed.Error()
	}
	if bs.RaftState == raft.StateLeader {
		s.QuorumSilent = h.quorumSilentLocked(g)
		last, _ := g.st.LastIndex()
		now := h.cfg.Clock.Now()
		g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr trackerProgress) {
			off, _ := g.st.endOf(pr.Match)
			s.Replicas = append(s.Replicas, ReplicaStatus{
				ID: id, MatchIndex: pr.Match, MatchOffset: off, State: progressOf(pr.State),
				Active: pr.RecentActive || id == h.cfg.ID, Learner: pr.IsLearner,
				InSync: h.inSyncLocked(g, id, pr, last, now),
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

// Members returns the group's applied membership: its voters and learners
// (copies). Cheaper than Status, for a question asked per request (is node
// N in the controller quorum?). ErrUnknownGroup if the group is not here.
func (h *Host) Members(groupID uint64) (voters, learners []uint64, err error) {
	g := h.group(groupID)
	if g == nil {
		return nil, nil, ErrUnknownGroup
	}
	g.st.mu.RLock()
	defer g.st.mu.RUnlock()
	if g.st.cs != nil {
		voters = append([]uint64(nil), g.st.cs.Voters...)
		learners = append([]uint64(nil), g.st.cs.Learners...)
	}
	return voters, learners, nil
}
