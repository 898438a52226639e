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

	"holdfast/internal/records"
	"holdfast/internal/storage"
)

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
		h.runReady()
	}
}

type readyItem struct {
	g         *group
	rd        raft.Ready
	err       error
	emptyTerm uint64 // the term of the last empty (new leader) entry stored
	sync      bool
	side      bool // journaled side entries or a truncation: fsync the journal before the log
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
	if len(it.rd.Messages) == 0 {
		return
	}
	if !it.leader {
		if h.cfg.ackBeforeFsync { // the planted bug (Config)
			it.rd.Messages = slices.DeleteFunc(it.rd.Messages, func(m *pb.Message) bool {
				if m.GetType() != pb.MessageType_MsgAppResp {
					return false
				}
				h.tr.send(it.g.id, m)
				return true
			})
		}
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
	for _, it := range items {
		if it.err == nil {
			it.err = h.persist(it)
		}
		if it.err == nil {
			h.sendEarly(it)
		}
	}
	// Committed entries are applied before this Ready's own entries are
	// fsynced, as etcd's server does: committed means stored on a quorum
	// (a sole voter's, and a leader's, own copies were fsynced in an
	// earlier cycle: their commit index moves only at Advance). Waiting
	// would hold every acknowledgement for the next batch's fsync.
	for _, it := range items {
		if it.err == nil {
			h.apply(it)
		}
	}
	// One group-commit round: every log that took entries and the journal.
	// The fsyncs run here, on the Ready loop, which waits for them anyway:
	// going through a goroutine per log and the Syncer's loop cost two
	// hand-offs per cycle, which on a busy machine were a fifth of a single
	// partition's ack latency. Logs sharing a Syncer get one of its cycles
	// (syncfs for many logs on one device).
	var syncs []*readyItem
	for _, it := range items {
		if it.err == nil && it.sync {
			syncs = append(syncs, it)
		}
	}
	jerr := h.journal.flush(false)
	if jerr == nil {
		h.syncLogs(syncs)
	}
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
				continue
			}
		} else {
			g.readyTerm = 0
			// What it proposed and has not stored yet is checked in
			// full if it comes, and may not come.
			g.dropLocalLocked(len(g.local))
		}
		g.noteQuorumLocked() // a sole voter's (or the deciding) own fsync
		g.publishLocked()
		if bs.Lead != g.lastLeader {
			g.lastLeader = bs.Lead
			h.log.Debug("raft: leader changed", "group", g.id, "leader", bs.Lead, "term", bs.GetTerm())
		}
		ready := false
		h.guardLocked(g, func() { ready = g.rn.HasReady() })
		g.mu.Unlock()
		if ready {
			h.markDirty(g)
		}
	}
}

// syncLogs fsyncs the logs of items, setting each one's err.
func (h *Host) syncLogs(items []*readyItem) {
	if len(items) == 1 || h.cfg.stepped {
		// A stepped host (the simulation) fsyncs one log after another,
		// in its sorted order, so that its runs repeat.
		for _, it := range items {
			it.err = it.g.st.log.SyncNow()
		}
		return
	}
	bySyncer := map[*storage.Syncer][]*readyItem{}
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
func (h *Host) persistSide(it *readyItem) error {
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
func (h *Host) persist(it *readyItem) error {
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
			if isDataEntry(e) {
				c.Data = e.Data
			} else {
				c.EndOffset = base
				c.Command, _ = commandOf(e)
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
		g.publishLocked() // before the waiters wake: a settled leader is seen settled
		close(g.commitCh)
		g.commitCh = make(chan struct{})
	}
	if g.rejoin && g.rejoinTarget > 0 && g.commitIndex >= g.rejoinTarget {
		g.rejoin = false
		h.journal.putTrusted(g.id) // fsynced with the next cycle; lost, it just catches up again
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
	g.changes.Add(1)
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
		g.changes.Add(1)
		g.publishLocked()
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
	h.goAsync(func() {
		for _, p := range peers {
			if p != h.cfg.ID {
				h.tr.send(id, &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), To: new(p), From: new(h.cfg.ID), Context: wakeCtx})
			}
		}
	})
}
