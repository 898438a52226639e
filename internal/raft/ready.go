package raft

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/bufref"
	"holdfast/internal/invariant"
	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// The Ready loop runs etcd raft with AsyncStorageWrites, in two stages:
//
//   - Taking Readys (takeReadys, one worker at a time: readyMu): each
//     group's messages to its peers leave at once - a leader's MsgApp no
//     longer waits for its own fsync in progress -; its appends
//     (MsgStorageAppend: entries, HardState, snapshot) are written, not
//     fsynced, in Raft's order, and queued; its committed entries are
//     applied (MsgStorageApply: in async mode Raft hands out only entries
//     this node has stored, so they are in the log).
//   - The store round (storeQueued, one worker at a time: appendMu): one
//     group-commit fsync (the journal and each log written by a queued
//     append), then the responses Raft attached to each queued append
//     are delivered: to this node stepped (its own MsgAppResp, which is
//     how a leader's copy counts towards the quorum; MsgStorageAppendResp),
//     to peers sent (a follower's MsgAppResp, votes). Nothing that depends
//     on an append leaves before it is durable.
//
// Two workers share the stages: a worker that finds the store stage free
// runs it itself after taking Readys (no hand-off: an idle single node
// acknowledges as fast as a loop doing both), and while it waits for the
// fsync the other worker takes the next Readys, sends, writes and applies;
// what the fsync in progress does not cover waits in the queue for the
// next round, which starts as soon as the last one ends.
func (h *Host) readyLoop() {
	defer h.wg.Done()
	for {
		select {
		case <-h.done:
			return
		case <-h.kick:
		}
		h.takeReadys()
		h.storeQueued()
	}
}

// appendItem is one group's MsgStorageAppend: written by takeReadys,
// queued for the store round.
type appendItem struct {
	g         *group
	gen       uint64 // the group's RawNode generation when it was taken
	m         *pb.Message
	rd        raft.Ready // the append as a Ready: Entries, HardState, Snapshot
	err       error
	emptyTerm uint64 // the term of the last empty (new leader) entry stored
	sync      bool   // its log must be fsynced
	side      bool   // journaled side entries or a truncation: fsync the journal before the log
	// hs and its fields back rd.HardState: one allocation with the item.
	hs                 pb.HardState
	term, vote, commit uint64
	// syncs: in a store round, the item whose log sync covers this one's
	// group (the first of the group's items that needs one), nil if none.
	syncs *appendItem
	// solo: the sole-voter path's item (solo.go): no message, no Ready;
	// the store round covers the group's entries up to soloLast, written
	// in soloTerm.
	solo               bool
	soloLast, soloTerm uint64
}

// takeReadys takes the Ready of every dirty group: sends, writes and
// queues its append, applies.
func (h *Host) takeReadys() {
	h.readyMu.Lock()
	defer h.readyMu.Unlock()
	gs := h.takeDirty()
	defer h.putDirty(gs)
	h.applySolo() // after takeDirty: see applySolo
	if len(gs) == 0 {
		return
	}
	type taken struct {
		g      *group
		gen    uint64
		rd     raft.Ready
		rejoin bool
		refs   [][]*bufref.Ref // by message: held buffers its entries lie in
	}
	ts := make([]taken, 0, len(gs))
	appends := 0
	for _, g := range gs {
		g.mu.Lock()
		if g.reset && g.inflight == 0 {
			// Not with appends of the old RawNode queued: their responses
			// would be stepped into the new one.
			h.resetLocked(g)
		}
		if !g.removed {
			h.guardLocked(g, func() {
				if g.rn.HasReady() {
					t := taken{g: g, gen: g.gen, rd: g.rn.Ready(), rejoin: g.rejoin}
					h.readys.Add(1)
					t.rd.Messages = mergeAppends(t.rd.Messages, h.cfg.MaxSizePerMsg)
					if len(g.held) > 0 {
						// Every message built from a proposal's bytes is
						// in this Ready or an earlier one: references
						// first, then what nothing reads any more.
						t.refs = g.retainSentLocked(t.rd.Messages)
						g.releaseHeldLocked()
					}
					for _, m := range t.rd.Messages {
						if m.GetTo() == raft.LocalAppendThread {
							g.inflight++
							appends++
						}
					}
					ts = append(ts, t)
				}
			})
		}
		g.mu.Unlock()
	}
	// The items in one array (appends counted above: it never grows, so
	// the pointers into it stay valid until the store round is done).
	all := make([]appendItem, 0, appends)
	items := make([]*appendItem, 0, appends)
	for _, t := range ts {
		var tag []byte
		for mi, m := range t.rd.Messages {
			switch m.GetTo() {
			case raft.LocalAppendThread:
				all = append(all, appendItem{g: t.g, gen: t.gen, m: m, rd: raft.Ready{Entries: m.Entries}})
				it := &all[len(all)-1]
				if m.Term != nil { // a HardState (rawnode.go: newStorageAppendMsg)
					it.term, it.vote, it.commit = m.GetTerm(), m.GetVote(), m.GetCommit()
					it.hs = pb.HardState{Term: &it.term, Vote: &it.vote, Commit: &it.commit}
					it.rd.HardState = &it.hs
				}
				if m.Snapshot != nil {
					it.rd.Snapshot = m.Snapshot
				}
				items = append(items, it)
			case raft.LocalApplyThread:
			default:
				if t.rejoin && m.GetType() == pb.MessageType_MsgHeartbeatResp {
					if tag == nil {
						last, _ := t.g.st.LastIndex()
						tag = binary.BigEndian.AppendUint64(bytes.Clone(rejoinCtx), last)
					}
					m.Context = tag
				}
				if t.refs != nil && t.refs[mi] != nil {
					h.tr.sendHeld(t.g.id, m, t.refs[mi])
				} else {
					h.tr.send(t.g.id, m)
				}
			}
		}
	}
	if len(items) > 0 {
		h.write(items)
	}
	for _, t := range ts {
		for _, m := range t.rd.Messages {
			if m.GetTo() == raft.LocalApplyThread {
				h.applyMsg(t.g, t.gen, m)
			}
		}
	}
}

// write writes the appends of one takeReadys (one per group) and queues
// them for the store round.
func (h *Host) write(items []*appendItem) {
	// A snapshot install or a truncation replaces what a store round in
	// progress may be fsyncing: it waits for the round (rare: a follower
	// whose log diverged, or far behind).
	wait := false
	for _, it := range items {
		if !raft.IsEmptySnap(it.rd.Snapshot) {
			wait = true
		} else if len(it.rd.Entries) > 0 {
			if last, _ := it.g.st.LastIndex(); it.rd.Entries[0].GetIndex() <= last {
				wait = true
			}
		}
	}
	if wait {
		h.appendMu.Lock()
	}
	// Side entries and truncations reach the journal, fsynced, before any
	// data entry after them reaches a log (store.go): one fsync for all.
	side := false
	for _, it := range items {
		it.err = h.persistSide(it)
		side = side || it.side && it.err == nil
	}
	if side {
		if err := h.journal.flush(true); err != nil {
			for _, it := range items {
				if it.side && it.err == nil {
					it.err = err
				}
			}
		}
	}
	if wait {
		h.appendMu.Unlock()
	}
	var queue []*appendItem
	for _, it := range items {
		if it.err == nil {
			it.err = h.persist(it)
		}
		if it.err != nil {
			h.failGroup(it.g, it.err)
			h.doneItem(it.g)
			continue
		}
		queue = append(queue, it)
	}
	h.qMu.Lock()
	h.appendQ = append(h.appendQ, queue...)
	h.qMu.Unlock()
}

// applyMsg applies one MsgStorageApply and steps its response back.
func (h *Host) applyMsg(g *group, gen uint64, m *pb.Message) {
	g.mu.Lock()
	ok := g.failed == nil && !g.removed && g.gen == gen
	g.mu.Unlock()
	if !ok {
		return
	}
	journaled := h.apply(g, m.Entries)
	g.mu.Lock()
	ready := false
	if g.failed == nil && !g.removed && g.gen == gen {
		h.guardLocked(g, func() {
			for _, r := range m.Responses {
				_ = g.rn.Step(r)
			}
			ready = g.rn.HasReady()
		})
		g.publishLocked()
	}
	g.mu.Unlock()
	if journaled {
		h.qMu.Lock()
		h.jflush = true // a conf state or a rejoin's end, for the next store round
		h.qMu.Unlock()
	}
	if ready {
		h.markDirty(g)
	}
}

// storeQueued runs the store round for what is queued, unless another
// worker runs it already (it takes what was queued meanwhile when its
// round ends).
func (h *Host) storeQueued() {
	for {
		if !h.appendMu.TryLock() {
			return
		}
		h.qMu.Lock()
		items, jflush := h.appendQ, h.jflush
		h.appendQ, h.jflush = nil, false
		h.qMu.Unlock()
		if len(items) > 0 || jflush {
			h.storeItems(items)
		}
		h.appendMu.Unlock()
		// Queued while this round held appendMu: the worker that queued
		// it found the stage taken and left it to this one.
		h.qMu.Lock()
		more := len(h.appendQ) > 0 || h.jflush
		h.qMu.Unlock()
		if !more {
			return
		}
	}
}

// storeItems is one store round: the group-commit fsync of what items
// wrote, then their responses.
func (h *Host) storeItems(items []*appendItem) {
	for _, it := range items {
		if it.solo {
			it.g.mu.Lock()
			it.soloTakeLocked()
			it.g.mu.Unlock()
		}
	}
	if h.cfg.ackBeforeFsync { // the planted bug (Config)
		for _, it := range items {
			if it.solo {
				continue
			}
			it.m.Responses = deleteFunc(it.m.Responses, func(r *pb.Message) bool {
				if r.GetType() != pb.MessageType_MsgAppResp || r.GetTo() == h.cfg.ID {
					return false
				}
				h.tr.send(it.g.id, r)
				return true
			})
		}
	}
	// One group-commit round: the journal and every log that took entries
	// (once each, however many of its group's appends are queued). Logs
	// sharing a Syncer get one of its cycles (syncfs for many logs on one
	// device).
	// The first item of each group that needs a sync stands for all of its
	// group's (group.storeSync, used by this stage only: appendMu).
	var syncs []*appendItem
	for _, it := range items {
		if it.sync && it.g.storeSync == nil {
			it.g.storeSync = it
			syncs = append(syncs, it)
		}
	}
	for _, it := range items {
		it.syncs = it.g.storeSync
	}
	for _, it := range syncs {
		it.g.storeSync = nil
	}
	jerr := h.journal.flush(false)
	if jerr == nil {
		h.syncLogs(syncs)
	}
	for _, it := range items {
		err := jerr
		if s := it.syncs; err == nil && s != nil {
			err = s.err
		}
		if err != nil {
			h.failGroup(it.g, err)
			h.doneItem(it.g)
			continue
		}
		h.delivered(it)
	}
}

// doneItem counts an append out of the store stage.
func (h *Host) doneItem(g *group) {
	g.mu.Lock()
	g.inflight--
	reset := g.reset && g.inflight == 0
	g.mu.Unlock()
	if reset {
		h.markDirty(g)
	}
}

// delivered: it is durable; its responses go where they belong.
func (h *Host) delivered(it *appendItem) {
	if it.solo {
		h.soloDelivered(it)
		return
	}
	g := it.g
	var out []*pb.Message
	g.mu.Lock()
	g.inflight--
	if len(it.rd.Entries) > 0 || !raft.IsEmptySnap(it.rd.Snapshot) {
		g.wakeStoredLocked()
	}
	if h.staleItemUnlock(g, it) {
		return
	}
	if !h.guardLocked(g, func() {
		for _, r := range it.m.Responses {
			if r.GetTo() == h.cfg.ID {
				_ = g.rn.Step(r)
			} else {
				out = append(out, r)
			}
		}
	}) {
		g.mu.Unlock()
		return
	}
	bs := g.rn.BasicStatus()
	if bs.RaftState == raft.StateLeader {
		if g.readyTerm != bs.GetTerm() && it.emptyTerm == bs.GetTerm() {
			// Our empty entry of this term is stored and nothing was
			// proposed since: the log end is where proposals start.
			g.st.mu.RLock()
			g.nextOffset, g.nextIndex = g.st.end, g.st.lastLocked()+1
			g.termStart = g.st.lastLocked()
			g.st.mu.RUnlock()
			g.readyTerm = bs.GetTerm()
			g.lastSide = 0
		}
		if last, _ := g.st.LastIndex(); g.readyTerm == bs.GetTerm() && last >= g.nextIndex {
			// Proposals are matched to their entries by index: an entry
			// nobody proposed would acknowledge the wrong one.
			h.failLocked(g, fmt.Errorf("raft: leader stored entry %d, beyond the next proposal's index %d", last, g.nextIndex))
			g.mu.Unlock()
			return
		}
	} else {
		g.readyTerm = 0
		// What it proposed and has not stored yet is checked in
		// full if it comes, and may not come.
		g.dropLocalLocked(len(g.local))
	}
	g.noteQuorumLocked() // a sole voter's (or the deciding) own fsync
	g.publishLocked()
	if invariant.Enabled && bs.Lead != 0 {
		// One leader per term, and terms only rise.
		term := bs.GetTerm()
		invariant.Check(term >= g.seenTerm, "raft: group %d: term %d after term %d", g.id, term, g.seenTerm)
		invariant.Check(term != g.seenTerm || bs.Lead == g.seenLeader,
			"raft: group %d: term %d has two leaders, %d and %d", g.id, term, g.seenLeader, bs.Lead)
		g.seenTerm, g.seenLeader = term, bs.Lead
	}
	if bs.Lead != g.lastLeader {
		g.lastLeader = bs.Lead
		h.log.Debug("raft: leader changed", "group", g.id, "leader", bs.Lead, "term", bs.GetTerm())
	}
	ready := g.reset && g.inflight == 0
	h.guardLocked(g, func() { ready = ready || g.rn.HasReady() })
	g.mu.Unlock()
	for _, m := range out {
		h.tr.send(g.id, m)
	}
	if ready {
		h.markDirty(g)
	}
}

// staleItemUnlock reports whether a stored item no longer concerns g's
// RawNode: g was reset (a newer generation), failed or removed. Then it
// releases g's lock, which the caller holds, and marks g dirty if a reset
// waited for this last item in flight.
func (h *Host) staleItemUnlock(g *group, it *appendItem) bool {
	if g.gen == it.gen && g.failed == nil && !g.removed {
		return false
	}
	ready := g.reset && g.inflight == 0
	g.mu.Unlock()
	if ready {
		h.markDirty(g)
	}
	return true
}

func deleteFunc(s []*pb.Message, del func(*pb.Message) bool) []*pb.Message {
	out := s[:0:0]
	for _, m := range s {
		if !del(m) {
			out = append(out, m)
		}
	}
	return out
}

// syncLogs fsyncs the logs of items, setting each one's err.
func (h *Host) syncLogs(items []*appendItem) {
	if len(items) == 1 || h.cfg.stepped {
		// A stepped host (the simulation) fsyncs one log after another,
		// in its sorted order, so that its runs repeat.
		for _, it := range items {
			it.err = it.g.st.log.SyncNow()
		}
		return
	}
	bySyncer := map[*storage.Syncer][]*appendItem{}
	for _, it := range items {
		s := it.g.st.log.Syncer()
		bySyncer[s] = append(bySyncer[s], it)
	}
	var wg sync.WaitGroup
	for s, its := range bySyncer {
		run := func() {
			logs := make([]*storage.Log, len(its))
			for i, it := range its {
				logs[i] = it.g.st.log
			}
			for i, err := range s.SyncNow(logs) {
				its[i].err = err
			}
		}
		if len(bySyncer) == 1 {
			run()
			return
		}
		wg.Go(run)
	}
	wg.Wait()
}

// persistSide does the part of a Ready that must be durable before its
// data entries are written: a snapshot install, the truncation of a
// conflicting suffix (Log.Truncate syncs), and the journal records of the
// side entries, each with the offset it will sit at.
func (h *Host) persistSide(it *appendItem) error {
	g, rd := it.g, it.rd
	if !raft.IsEmptySnap(rd.Snapshot) {
		md := rd.Snapshot.GetMetadata()
		off, err := parseSnapshotData(rd.Snapshot.GetData())
		if err != nil {
			return err
		}
		a := anchor{Index: md.GetIndex(), Term: md.GetTerm(), Offset: off}
		h.journal.putTruncate(g.id, a.Index+1) // the whole log goes
		h.journal.putAnchor(g.id, a, false)
		if err := h.journal.flush(true); err != nil {
			return err
		}
		if err := g.st.reset(a); err != nil {
			return err
		}
		if g.cfg.OnTruncate != nil {
			g.cfg.OnTruncate(g.id, 0) // everything: the log was replaced
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
		g.publishLocked()
		g.mu.Unlock()
		it.sync = true
		it.side = true
	}
	if len(rd.Entries) == 0 {
		return nil
	}
	first := rd.Entries[0].GetIndex()
	if last, _ := g.st.LastIndex(); first <= last {
		off, _ := g.st.offsetOf(first)
		if err := g.st.truncate(first); err != nil {
			return err
		}
		if g.cfg.OnTruncate != nil {
			g.cfg.OnTruncate(g.id, off)
		}
		h.journal.putTruncate(g.id, first)
		it.side = true
	}
	end := g.st.endOffset()
	for _, e := range rd.Entries {
		if isDataEntry(e) {
			hd, err := records.ParseHeader(e.Data)
			if err != nil {
				return fmt.Errorf("raft: entry %d: %w", e.GetIndex(), err)
			}
			end = hd.LastOffset() + 1
			continue
		}
		h.journal.putEntry(g.id, sideEntry{Index: e.GetIndex(), Term: e.GetTerm(), Offset: end, Type: e.GetType(), Data: e.Data})
		it.side = true
	}
	return nil
}

// persist stores one Ready's entries and hardstate (no fsync).
func (h *Host) persist(it *appendItem) error {
	g, rd := it.g, it.rd
	if len(rd.Entries) > 0 {
		// The batches this node proposed were checked by its proposer;
		// their facts are taken under the group's lock once, not per entry.
		var local []localBatch
		g.mu.Lock()
		for _, e := range rd.Entries {
			if isDataEntry(e) {
				if lb, ok := g.takeLocalLocked(e.GetIndex(), e.GetTerm()); ok {
					if local == nil {
						local = make([]localBatch, len(rd.Entries))
					}
					local[e.GetIndex()-rd.Entries[0].GetIndex()] = lb
				}
			}
		}
		g.mu.Unlock()
		for i, e := range rd.Entries {
			var lb *localBatch
			if local != nil && local[i].v.Bytes() != nil {
				lb = &local[i]
			}
			cut, err := g.st.appendEntry(e, lb)
			if cut >= 0 && g.cfg.OnTruncate != nil {
				g.cfg.OnTruncate(g.id, cut)
			}
			if err != nil {
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

// apply delivers committed entries and advances the commit offset. In
// async mode Raft hands out only entries this node has stored, so each is
// in the store. journaled: it buffered journal records (a conf state, a
// rejoin's end) that the next store round writes.
func (h *Host) apply(g *group, ents []*pb.Entry) (journaled bool) {
	n := len(ents)
	if n == 0 {
		return false
	}
	var out []Committed
	for _, e := range ents {
		switch e.GetType() {
		case pb.EntryType_EntryConfChange, pb.EntryType_EntryConfChangeV2:
			h.applyConfChange(g, e)
			journaled = true
		}
		if g.cfg.OnCommit != nil {
			base, _ := g.st.offsetOf(e.GetIndex())
			end, _ := g.st.endOf(e.GetIndex())
			c := Committed{Index: e.GetIndex(), Term: e.GetTerm(), BaseOffset: base, EndOffset: end}
			if isDataEntry(e) {
				c.Data = e.Data
			} else {
				c.EndOffset = base
				c.Command, _ = commandOf(e)
			}
			out = append(out, c)
		}
	}
	last := ents[n-1].GetIndex()
	end, ok := g.st.endOf(last)
	if !ok {
		// A broken invariant of this replica's log: stop the group (its
		// waiters wake with the failure, the repair loop rebuilds the
		// replica) rather than leave them waiting for a commit that never
		// comes.
		h.failGroup(g, fmt.Errorf("committed entry %d not in the log", last))
		return journaled
	}
	if g.cfg.OnCommit != nil {
		g.cfg.OnCommit(g.id, out)
	}
	g.mu.Lock()
	if last > g.commitIndex {
		g.commitIndex, g.commitEnd = last, end
		g.publishLocked() // before the waiters wake: a settled leader is seen settled
		g.wakeCommitLocked()
		if h.wants(EventCommit) {
			h.emit(Event{Kind: EventCommit, Group: g.id, CommitIndex: last})
		}
	}
	if g.rejoin && g.rejoinTarget > 0 && g.commitIndex >= g.rejoinTarget {
		g.rejoin = false
		h.journal.putTrusted(g.id) // fsynced with the next store round; lost, it just catches up again
		h.log.Info("raft: replica caught up after losing its storage, voting again", "group", g.id, "index", g.commitIndex)
		journaled = true
	}
	g.mu.Unlock()
	return journaled
}

func (h *Host) applyConfChange(g *group, e *pb.Entry) {
	var cc pb.ConfChangeI
	if e.GetType() == pb.EntryType_EntryConfChange {
		c := &pb.ConfChange{}
		if err := proto.Unmarshal(e.Data, c); err != nil {
			// Committed, so every replica has it: skipping it would leave
			// this one with another membership than the rest.
			h.failGroup(g, fmt.Errorf("undecodable conf change at index %d: %w", e.GetIndex(), err))
			return
		}
		cc = c
	} else {
		c := &pb.ConfChangeV2{}
		if err := proto.Unmarshal(e.Data, c); err != nil {
			h.failGroup(g, fmt.Errorf("undecodable conf change at index %d: %w", e.GetIndex(), err))
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
	if h.wants(EventConfChange) {
		h.emit(Event{Kind: EventConfChange, Group: g.id, Voters: slices.Clone(cs.Voters), Learners: slices.Clone(cs.Learners)})
	}
	// Journaled before the next cycle's applied index: a crash in between
	// makes Raft redeliver (and us reapply) the change.
	if err := h.journal.putConfState(g.id, cs, e.GetIndex(), true); err != nil {
		h.failGroup(g, fmt.Errorf("journaling conf state: %w", err))
	}
}

// guardLocked runs fn on the group's RawNode, turning a panic into a
// failed group. etcd raft panics when its Storage returns an I/O error (and
// on broken invariants): that must cost this group, not the node.
func (h *Host) guardLocked(g *group, fn func()) (ok bool) {
	if g.failed != nil {
		return false
	}
	g.changes.Add(1)
	h.changes.Add(1)
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
		h.failures.Add(1)
		g.changes.Add(1)
		h.changes.Add(1)
		g.publishLocked()
		h.log.Error("raft: group failed", "group", g.id, "err", err)
		g.wakeCommitLocked()
		g.wakeStoredLocked()
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
	h.goAsync(func() {
		for _, p := range peers {
			if p != h.cfg.ID {
				h.tr.send(id, &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), To: new(p), From: new(h.cfg.ID), Context: wakeCtx})
			}
		}
	})
}

// mergeAppends makes the appends a leader sends one follower in one Ready
// one message: etcd raft sends a MsgApp per proposal, and under load a
// group's Ready holds several for each follower (at 1,000 partitions
// about two proposals per group per store round), each then encoded,
// decoded, stepped and answered on its own. An append that continues the
// previous one to the same follower (same term, its previous entry the
// other's last, no other message to that follower between them) joins it,
// up to maxBytes of entries; the merged message carries the later commit
// index. The follower appends the same entries and answers once, for the
// last index, which acknowledges both to the leader's progress (its
// in-flight window frees every append up to an acknowledged index). The
// entries slice is new: the messages' own may be Raft's log.
func mergeAppends(msgs []*pb.Message, maxBytes uint64) []*pb.Message {
	if len(msgs) < 2 {
		return msgs
	}
	type tail struct {
		at    int    // index in out of the follower's last message
		owned bool   // its Entries slice was made here
		bytes uint64 // its entries' data
	}
	var last map[uint64]*tail
	out := msgs[:0]
	for _, m := range msgs {
		to := m.GetTo()
		if tl := last[to]; tl != nil && continues(out[tl.at], m) && tl.bytes+entriesBytes(m.Entries) <= maxBytes {
			p := out[tl.at]
			if !tl.owned && len(m.Entries) > 0 {
				p.Entries = append(make([]*pb.Entry, 0, len(p.Entries)+len(m.Entries)), p.Entries...)
				tl.owned = true
			}
			p.Entries = append(p.Entries, m.Entries...)
			p.Commit = new(max(p.GetCommit(), m.GetCommit()))
			tl.bytes += entriesBytes(m.Entries)
			continue
		}
		if last == nil {
			last = map[uint64]*tail{}
		}
		last[to] = &tail{at: len(out), bytes: entriesBytes(m.Entries)}
		out = append(out, m)
	}
	return out
}

// continues: m is an append of p's term whose previous entry is p's last.
func continues(p, m *pb.Message) bool {
	if p.GetType() != pb.MessageType_MsgApp || m.GetType() != pb.MessageType_MsgApp || p.GetTerm() != m.GetTerm() {
		return false
	}
	lastTerm := p.GetLogTerm()
	if n := len(p.Entries); n > 0 {
		lastTerm = p.Entries[n-1].GetTerm()
	}
	return m.GetIndex() == p.GetIndex()+uint64(len(p.Entries)) && m.GetLogTerm() == lastTerm
}

func entriesBytes(es []*pb.Entry) uint64 {
	var n uint64
	for _, e := range es {
		n += uint64(len(e.Data))
	}
	return n
}
