package raft

import (
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/bufref"
	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// The sole-voter path (Config.SoloPath; docs/replication.md, "one node").
//
// A group whose only member is this node commits an entry as soon as it is
// durable here: consensus has nothing to decide. etcd raft still did its
// whole per-entry work for it - Propose, a Ready to hand the entry to the
// store, the Step of the leader's own MsgAppResp after the store round, a
// second Ready to hand out the committed entry, the Step of the apply's
// response - and at 1,000 partitions on one node, with about two records
// per partition per store round, that was a quarter of the broker's CPU
// (docs/benchmarks.md, rounds 13 and 16). On this path a batch proposed to
// such a group does none of it:
//
//   - proposeSoloLocked gives it the index and term etcd raft would
//     (g.nextIndex, the leader's term), writes it to the log at once (as
//     preWriteLocked does), records it in the store, and tells the RawNode
//     that its log now ends there (RawNode.SoleAppended, a Holdfast patch of
//     etcd raft: third_party/etcd-raft/PATCHES.md, 3). The group's first
//     solo proposal of a store round queues one appendItem (solo) for it.
//   - the store round fsyncs the log with every other (one group commit);
//     at the start of the round the item takes the last index written so
//     far (soloLast), which that fsync covers.
//   - soloDelivered then moves the RawNode's own progress, commit and
//     applied index to soloLast (RawNode.SoleCommitted, the same patch),
//     journals the hard state as the Ready path would, hands the entries to
//     OnCommit and wakes WaitCommitted.
//
// The RawNode's view is kept exact, not rebuilt: its log is the store
// (which holds the solo entries from the moment they are written, as it
// holds an entry the Ready loop wrote and has not fsynced yet), its
// unstable log starts after them, and its own progress and commit lag
// exactly as they would while the leader's append is being fsynced. So
// anything the path does not do - a conf change, a command, a leadership
// transfer, a campaign, a message from a peer, a reset - goes to the
// RawNode at any moment, with no hand-back step: it appends after the solo
// entries, and its Ready path carries on from there. Rebuilding a RawNode
// instead would make the node a follower and cost an election (a new
// leader epoch) for every such call.
//
// Where a store round finds the RawNode no longer a sole leader with
// nothing of its own to apply (a conf change or command went the Raft way
// meanwhile, a peer's message moved its term), soloDelivered steps the
// leader's own MsgAppResp for soloLast instead, which is what the Ready path
// does with the response of its own append: etcd raft then commits and
// hands the entries out to apply like any other (read back from the log),
// and no solo entry is applied twice (SoleCommitted moves the applied index
// with what this path applies itself).
//
// The bytes on disk are those of the Ready path: the same batches at the
// same offsets and indexes, the same hard state records. A restart reads the
// log back through etcd raft as always.

// soloEligibleLocked reports whether a batch proposed now may take the
// sole-voter path: the path is on, this node is the leader of its term and
// ready to propose, the RawNode is a sole leader with nothing unstable
// (nothing of the Ready path in flight ahead of the batch), every entry
// proposed so far is in the store, and the log ends where the next batch
// begins.
func (h *Host) soloEligibleLocked(g *group) bool {
	if !h.cfg.SoloPath || g.failed != nil || g.removed || len(g.local) > 0 {
		return false
	}
	if g.readyTerm == 0 || !g.rn.SoleLeader(g.readyTerm) {
		return false
	}
	g.st.mu.RLock()
	ok := g.st.lastLocked()+1 == g.nextIndex && g.st.end == g.nextOffset
	g.st.mu.RUnlock()
	return ok && g.st.log.EndOffset() == g.nextOffset
}

// proposeSoloLocked is ProposeOwned on the sole-voter path (the caller
// checked soloEligibleLocked).
func (h *Host) proposeSoloLocked(g *group, v *records.Validated, owner *bufref.Ref) (Proposal, error) {
	hdr := v.Header()
	size := int64(hdr.Size())
	if max := int64(h.cfg.MaxUncommittedBytes); g.soloBytes > 0 && g.soloBytes+size > max {
		// etcd raft's MaxUncommittedEntriesSize, as Propose would drop it.
		return Proposal{}, fmt.Errorf("%w: group %d", ErrProposalDropped, g.id)
	}
	g.pruneSoloLocked()
	term := g.readyTerm
	p := Proposal{Group: g.id, Index: g.nextIndex, Term: term, BaseOffset: g.nextOffset}
	v.SetBaseOffset(p.BaseOffset)
	v.SetLeaderEpoch(int32(term))
	p.EndOffset = p.BaseOffset + int64(hdr.LastOffsetDelta) + 1
	g.unquiesceLocked()
	if _, err := g.st.log.AppendValidated(*v); err != nil {
		// As the Ready loop's failed write: the log's state past its
		// durable end is unknown.
		h.failLocked(g, err)
		return Proposal{}, g.failed
	}
	if err := g.st.appendSolo(p.Index, term, p.BaseOffset, p.EndOffset); err != nil {
		h.failLocked(g, err)
		return Proposal{}, g.failed
	}
	appended := false
	if !h.guardLocked(g, func() { appended = g.rn.SoleAppended(p.Index) }) {
		return Proposal{}, g.failed
	}
	if !appended {
		h.failLocked(g, fmt.Errorf("raft: sole leader refused entry %d appended outside it", p.Index))
		return Proposal{}, g.failed
	}
	g.nextIndex++
	g.nextOffset = p.EndOffset
	g.soloBytes += size
	g.soloPend = append(g.soloPend, Committed{Index: p.Index, Term: term, BaseOffset: p.BaseOffset, EndOffset: p.EndOffset, Data: v.Bytes()})
	if owner != nil {
		owner.Retain() // the apply reads the bytes: released once applied (releaseHeldLocked)
		g.held = append(g.held, heldRef{index: p.Index, ref: owner})
	}
	h.soloProposals.Add(1)
	if !g.soloQueued {
		g.soloQueued = true
		g.inflight++
		h.qMu.Lock()
		h.appendQ = append(h.appendQ, &appendItem{g: g, gen: g.gen, solo: true})
		h.qMu.Unlock()
		select { // a worker runs the store round (readyLoop)
		case h.kick <- struct{}{}:
		default:
		}
	}
	return p, nil
}

// soloTakeLocked fixes, at the start of a store round, what its solo item
// covers: every entry the path wrote so far (the round's fsync starts
// after). A later proposal queues the next item.
func (it *appendItem) soloTakeLocked() {
	g := it.g
	g.soloQueued = false
	if n := len(g.soloPend); n > 0 { // the last entry the path wrote
		it.soloLast, it.soloTerm = g.soloPend[n-1].Index, g.soloPend[n-1].Term
	}
	it.sync = g.st.log.Config().Flush.Mode == storage.FlushSync
}

// soloDelivered: the store round made a solo item's entries durable. They
// are committed and applied here, or, where the RawNode is no longer a sole
// leader with everything applied, acknowledged to it as its own append's
// response would be (see the top of this file).
func (h *Host) soloDelivered(it *appendItem) {
	g := it.g
	g.mu.Lock()
	g.inflight--
	g.wakeStoredLocked()
	if h.staleItemUnlock(g, it) {
		return
	}
	g.pruneSoloLocked()
	last, base := it.soloLast, g.commitIndex
	if k := len(g.soloApply); k > 0 {
		base = g.soloApply[k-1].Index // committed, applied next by the Ready stage
	}
	if last <= base {
		g.mu.Unlock()
		return
	}
	ents := g.soloPend
	n := int(last - base)
	committed := false
	if n <= len(ents) && ents[0].Index == base+1 && ents[n-1].Index == last {
		h.guardLocked(g, func() { committed = g.rn.SoleCommitted(last) })
	}
	if !committed {
		h.soloAckLocked(g, it)
		return
	}
	out := ents[:n:n]
	for _, c := range out {
		g.soloBytes -= int64(len(c.Data))
	}
	g.soloApply = append(g.soloApply, out...)
	clear(out) // keeps no batch's bytes alive
	g.soloPend = ents[n:]
	if len(g.soloPend) == 0 {
		g.soloPend = ents[:0] // the array again for the next round's entries
	}
	g.st.mu.RLock()
	t, v := g.st.hs.GetTerm(), g.st.hs.GetVote() // what the leader's election persisted
	g.st.mu.RUnlock()
	hs := pb.HardState{Term: &t, Vote: &v, Commit: &last}
	h.journal.putHardState(g.id, &hs, last)
	g.st.setHardState(&hs)
	if g.cfg.AckOnQuorum {
		g.quorumIndex = last // as noteQuorumLocked: the waiters need nothing of OnCommit
		g.wakeCommitLocked()
	}
	// The apply - OnCommit, the commit offset - is the Ready stage's, as
	// for the Ready path's committed entries: the store stage goes on to
	// its next round meanwhile.
	queue := !g.soloApplyQueued
	g.soloApplyQueued = true
	g.mu.Unlock()
	if queue {
		h.qMu.Lock()
		h.applyQ = append(h.applyQ, g)
		h.qMu.Unlock()
		select { // a worker takes it (readyLoop: takeReadys)
		case h.kick <- struct{}{}:
		default:
		}
	}
}

// applySolo applies what the store rounds committed on the sole-voter
// path since the last call, group by group: OnCommit, then the commit
// offset and its waiters, as apply does for the Ready path. The Ready
// stage calls it (takeReadys, under readyMu) after taking its dirty list
// and before that list's Readys: a Ready that hands out entries after a
// group's solo entries was marked dirty after they were queued here.
func (h *Host) applySolo() {
	h.qMu.Lock()
	gs := h.applyQ
	h.applyQ = nil
	h.qMu.Unlock()
	for _, g := range gs {
		g.mu.Lock()
		out := g.soloApply
		g.soloApply, g.soloApplyQueued = nil, false
		ok := g.failed == nil && !g.removed && len(out) > 0
		g.mu.Unlock()
		if !ok {
			continue
		}
		if g.cfg.OnCommit != nil {
			g.cfg.OnCommit(g.id, out)
		}
		last := out[len(out)-1]
		g.mu.Lock()
		if last.Index > g.commitIndex {
			g.commitIndex, g.commitEnd = last.Index, last.EndOffset
			g.publishLocked()
			g.wakeCommitLocked()
			if h.wants(EventCommit) {
				h.emit(Event{Kind: EventCommit, Group: g.id, CommitIndex: last.Index})
			}
		}
		if len(g.held) > 0 && g.failed == nil && g.rn.SoleLeader(g.readyTerm) {
			// A sole leader sends no message: nothing of the RawNode's
			// reads a proposal's bytes once it is applied.
			g.releaseHeldLocked()
		}
		g.mu.Unlock()
	}
}

// soloAckLocked steps the leader's own MsgAppResp for the entries a solo
// item made durable, as the Ready path's store round does for its own
// appends; etcd raft commits and hands them out to apply. It unlocks g.
func (h *Host) soloAckLocked(g *group, it *appendItem) {
	resp := &pb.Message{
		Type: pb.MessageType_MsgAppResp.Enum(), From: new(h.cfg.ID), To: new(h.cfg.ID),
		Term: new(it.soloTerm), Index: new(it.soloLast),
	}
	h.soloAcks.Add(1)
	ready := false
	h.guardLocked(g, func() {
		_ = g.rn.Step(resp)
		ready = g.rn.HasReady()
	})
	g.noteQuorumLocked()
	g.publishLocked()
	g.mu.Unlock()
	if ready {
		h.markDirty(g)
	}
}

// pruneSoloLocked drops the solo entries the Ready path applied (after a
// soloAckLocked) or that are no longer this leader's to apply (it stopped
// leading their term: whatever the next leader keeps, the Ready path
// applies).
func (g *group) pruneSoloLocked() {
	n := 0
	for n < len(g.soloPend) {
		c := g.soloPend[n]
		if c.Index > g.commitIndex && c.Term == g.readyTerm {
			break
		}
		g.soloBytes -= int64(len(c.Data))
		n++
	}
	if n > 0 {
		clear(g.soloPend[:n])
		g.soloPend = g.soloPend[n:]
	}
	if len(g.soloPend) == 0 {
		g.soloBytes = 0
	}
}

// dropSoloLocked forgets the sole-voter path's entries not yet applied:
// the RawNode was rebuilt from storage (a reset, RetryGroup), and from its
// applied index on it hands out to apply whatever the log holds.
func (g *group) dropSoloLocked() {
	clear(g.soloPend)
	clear(g.soloApply)
	g.soloPend, g.soloApply, g.soloBytes = nil, nil, 0
}

// appendSolo records the batch the sole-voter path wrote at the log end
// as entry index of term, at [base, end) (not kept in recent: only this
// node's apply reads it, from the proposer's bytes).
func (s *store) appendSolo(index, term uint64, base, end int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index != s.lastLocked()+1 || base != s.end || term == 0 || term >= sideBit {
		return fmt.Errorf("raft: solo entry %d term %d at offset %d after entry %d ending at %d", index, term, base, s.lastLocked(), s.end)
	}
	s.bases = append(s.bases, base)
	s.terms = append(s.terms, uint32(term))
	s.end = end
	return nil
}
