package raft

import (
	"bytes"
	"encoding/binary"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/bufref"
)

var (
	quiesceCtx = []byte("hf-quiesce")
	rejoinCtx  = []byte("hf-rejoin:") // + u64 last index
	// wakeCtx: a group on the sending node stopped (failed or removed);
	// quiesced replicas must tick again to elect a leader without it.
	wakeCtx = []byte("hf-wake")
)

// tickLoop ticks every group that is not quiesced: one timer for all.
func (h *Host) tickLoop() {
	defer h.wg.Done()
	t := h.cfg.Clock.NewTicker(h.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-t.C:
		}
		h.tickOnce()
	}
}

// tickGroup is one tick of one group; false if the group failed or was
// removed (it ticks no more until RetryGroup wakes it).
func (h *Host) tickGroup(g *group, electionTimeout time.Duration) bool {
	g.mu.Lock()
	if g.failed != nil || g.removed {
		g.mu.Unlock()
		return false
	}
	g.ticked++
	if !g.quiesced && g.wokeBySilence && h.requiesceLocked(g, electionTimeout) {
		g.mu.Unlock()
		return true
	}
	if g.quiesced {
		h.checkQuiescedLocked(g, electionTimeout)
		if g.quiesced {
			// Nothing moves in a quiesced group but by a message or a
			// proposal, which mark it dirty themselves: no Ready to look
			// for, nothing to publish (a node with 10,000 idle groups
			// spent a fifth of a core here, issue 17).
			g.mu.Unlock()
			return true
		}
	}
	var qmsgs []*pb.Message
	if !g.quiesced {
		// Decide before ticking: a heartbeat from this tick would
		// reach the followers after the quiescing one.
		qmsgs = h.maybeQuiesceLocked(g)
		if !g.quiesced && !h.aloneLocked(g) {
			bs := g.rn.BasicStatus()
			leading := bs.RaftState == raft.StateLeader
			if leading {
				h.stepView = h.leaderViewLocked(g, h.stepView, electionTimeout)
			}
			h.guardLocked(g, func() { g.rn.Tick() })
			if now := g.rn.BasicStatus(); leading && now.RaftState != raft.StateLeader && now.GetTerm() == bs.GetTerm() {
				// Only the quorum check steps a leader down in its own
				// term (a higher term's message steps it down on receipt).
				h.noteStepDownLocked(g, bs.GetTerm(), h.stepView)
			}
		}
	}
	if g.eagerTicks > 0 {
		g.eagerTicks--
		bs := g.rn.BasicStatus()
		switch {
		case bs.Lead != 0 || bs.RaftState == raft.StateLeader || bs.RaftState == raft.StateCandidate:
			g.eagerTicks = 0 // elected, or the pre-vote won: nothing to repeat
		case bs.RaftState == raft.StatePreCandidate && g.eagerTicks%2 == 0:
			// Pre-votes change no term: asking again disturbs nobody.
			h.guardLocked(g, func() { _ = g.rn.Campaign() })
		}
	}
	ready := false
	h.guardLocked(g, func() { ready = g.rn.HasReady() })
	if !ready && len(g.held) > 0 && g.failed == nil {
		// An idle group gives back the buffers of its last proposals
		// (no message of them is left inside the RawNode).
		g.releaseHeldLocked()
	}
	g.publishLocked() // a leader transfer that timed out
	g.mu.Unlock()
	// Sent unlocked: a drop reports back into the group.
	for _, m := range qmsgs {
		h.tr.send(g.id, m)
	}
	if ready {
		h.markDirty(g)
	}
	return true
}

// aloneLocked reports whether g's RawNode has nothing to tick for: this
// node leads a configuration whose only member it is (the sole voter, no
// learners, no joint configuration) and no leadership transfer is under
// way. etcd raft's leader tick then does nothing anyone can observe: a
// heartbeat to nobody, and every election timeout a quorum check that a
// sole voter passes by itself. It still builds and steps both messages:
// at 1,000 busy partitions on one node (which never quiesce while
// records arrive) that was 16% of the objects BenchmarkReadyManyGroups
// allocates and ~2% of the node's CPU (docs/benchmarks.md, h-cycle). A
// membership change makes the group tick again at its next tick; the
// quiescing, the leadership published and an idle group's buffers are
// handled by tickGroup as for every group.
func (h *Host) aloneLocked(g *group) bool {
	if g.eagerTicks > 0 {
		return false
	}
	g.st.mu.RLock()
	cs := g.st.cs
	alone := cs != nil && len(cs.Voters) == 1 && cs.Voters[0] == h.cfg.ID &&
		len(cs.Learners) == 0 && len(cs.VotersOutgoing) == 0 && len(cs.LearnersNext) == 0
	g.st.mu.RUnlock()
	if !alone {
		return false
	}
	bs := g.rn.BasicStatus()
	return bs.RaftState == raft.StateLeader && bs.LeadTransferee == 0
}

// freshQuiesceTicks is how long a leader whose term holds nothing but
// its own empty entry stays idle before it quiesces (see
// quiesceAfterLocked).
const freshQuiesceTicks = 2

// quiesceAfterLocked is the number of idle ticks after which g, leading
// term with its log ending at last, quiesces. QuiesceTicks keeps a group
// that carries traffic from quiescing between bursts; a leader whose term
// holds nothing but the empty entry it appended at its election has
// carried no traffic yet: it quiesces after freshQuiesceTicks. At a
// restart of a cluster with 10,000 partitions every group is such a
// leader, and each heartbeat tick of QuiesceTicks (2 s by default) was a
// heartbeat and its answer per follower per group: most of the Raft
// traffic of the restart, on the same cores as the opens.
func (h *Host) quiesceAfterLocked(g *group, term, last uint64) int {
	if h.cfg.QuiesceTicks <= freshQuiesceTicks || last < 2 {
		return h.cfg.QuiesceTicks
	}
	if t, err := g.st.Term(last); err != nil || t != term {
		return h.cfg.QuiesceTicks
	}
	if t, err := g.st.Term(last - 1); err != nil || t == term {
		return h.cfg.QuiesceTicks // proposals in this term: a burst may go on
	}
	return freshQuiesceTicks
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
	if g.idleTicks < h.quiesceAfterLocked(g, bs.GetTerm(), last) {
		return nil
	}
	var msgs []*pb.Message
	for _, id := range followers {
		msgs = append(msgs, &pb.Message{
			Type: pb.MessageType_MsgHeartbeat.Enum(), To: new(id), From: new(h.cfg.ID),
			Term: new(bs.GetTerm()), Commit: new(bs.GetCommit()), Context: quiesceCtx,
		})
	}
	g.quiesceLdr = h.cfg.ID
	g.quiesceFlw = followers
	g.quiesceLocked(bs.GetTerm(), last)
	return msgs
}

// quiesceLocked marks g quiesced in term with its log ending at last.
func (g *group) quiesceLocked(term, last uint64) {
	g.quiesced, g.wokeBySilence = true, false
	g.quiet.Store(true)
	g.quiesceTerm, g.quiesceLast = term, last
	g.trimLocked()
}

// checkQuiescedLocked wakes a quiesced group when a peer it depends on went
// silent: for a follower its leader, for a leader any follower.
func (h *Host) checkQuiescedLocked(g *group, window time.Duration) {
	if !h.heardDependsLocked(g, window) {
		g.unquiesceLocked()
		g.wokeBySilence = true
	}
}

// heardDependsLocked reports whether every peer a quiesced (or
// wokeBySilence) g depends on was heard from within window: for a
// follower its leader, for a leader every follower it quiesced with (not
// WithProgress: that sorts and allocates, for every idle group on every
// tick).
func (h *Host) heardDependsLocked(g *group, window time.Duration) bool {
	if g.quiesceLdr != h.cfg.ID {
		return h.tr.heardWithin(g.quiesceLdr, window)
	}
	for _, id := range g.quiesceFlw {
		if !h.tr.heardWithin(id, window) {
			return false
		}
	}
	return true
}

// requiesceLocked quiesces g again, sending nothing, when a tick woke it
// only because a peer it depends on went silent (wokeBySilence), that peer
// is heard from again, and nothing moved in g meanwhile: the same term,
// its log ending where it did and all of it committed, a follower still
// following the leader that quiesced it, a leader still leading with every
// follower holding the whole log and no transfer under way. It then is
// exactly as it quiesced, and so are its peers as far as it is concerned:
// a follower's leader is quiesced or was woken the same way (anything it
// did but heartbeat would have been activity here); a follower that really
// restarted meanwhile campaigns as a fresh replica, which wakes the leader.
// What it reports is whether g is quiesced again; a g that moved is left
// to tick as any other (wokeBySilence cleared).
//
// Without it a follower woken by a second of its leader's node's silence
// (a starved process, a transport reader busy stepping a large frame)
// ticked to its election timeout, pre-voted and so woke its leader, whose
// group heartbeat QuiesceTicks before it quiesced again; every silence
// woke every group depending on the silent node: at 20,000 partitions RF=3
// on 3 nodes the idle nodes never settled (docs/benchmarks.md, round 17,
// h-rest).
func (h *Host) requiesceLocked(g *group, window time.Duration) bool {
	bs := g.rn.BasicStatus()
	last, _ := g.st.LastIndex()
	same := g.eagerTicks == 0 && bs.GetTerm() == g.quiesceTerm && last == g.quiesceLast && bs.GetCommit() == last
	if same && g.quiesceLdr == h.cfg.ID {
		same = bs.RaftState == raft.StateLeader && bs.LeadTransferee == 0 && g.readyTerm == bs.GetTerm()
		if same {
			g.rn.WithProgress(func(_ uint64, _ raft.ProgressType, pr trackerProgress) {
				if pr.Match != last {
					same = false
				}
			})
		}
	} else if same {
		same = bs.RaftState == raft.StateFollower && bs.Lead == g.quiesceLdr
	}
	if !same {
		g.wokeBySilence = false
		return false
	}
	if !h.heardDependsLocked(g, window) {
		return false // still silent: it ticks, as it woke to
	}
	h.requiesced.Add(1)
	g.quiesceLocked(g.quiesceTerm, last)
	return true
}

func (g *group) unquiesceLocked() {
	if g.quiesced && g.h != nil && g.quiesceLdr == g.h.cfg.ID {
		g.h.quietEndedLocked(g)
	}
	g.quiesced, g.wokeBySilence = false, false
	g.quiet.Store(false)
	g.idleTicks = 0
	if g.h != nil {
		g.h.activate(g)
	}
}

// activate puts g on the tick list (tickOnce), once. After g.quiet is
// cleared: tickOnce, putting back what it ticked, reads quiet under
// activeMu, so a group woken meanwhile is listed by one or the other.
func (h *Host) activate(g *group) {
	h.activeMu.Lock()
	if !g.inActive {
		g.inActive = true
		h.active = append(h.active, g)
	}
	h.activeMu.Unlock()
}

// receive implements transportEvents: step every message into its group.
func (h *Host) receive(from uint64, msgs []outMsg) {
	for _, om := range msgs {
		g := h.group(om.group)
		m := om.m
		if g == nil {
			h.noteHeard(om.group, from, m)
			h.noteWanted(om.group, m)
			continue // not (yet) created here; Raft retransmits
		}
		typ := m.GetType()
		quiesce := bytes.Equal(m.Context, quiesceCtx) &&
			(typ == pb.MessageType_MsgHeartbeat || typ == pb.MessageType_MsgHeartbeatResp)
		g.mu.Lock()
		if g.failed != nil || g.removed {
			g.mu.Unlock()
			h.noteHeard(om.group, from, m)
			continue
		}
		// Anything but a heartbeat response, or a plain heartbeat from the
		// leader that quiesced us in its term, means activity: those carry
		// nothing new (a late one from before quiescing is common; a
		// leader woken by a silence, as this replica may have been,
		// heartbeats until it quiesces again).
		if !quiesce && typ != pb.MessageType_MsgHeartbeatResp &&
			(typ != pb.MessageType_MsgHeartbeat || !(g.quiesced || g.wokeBySilence) || from != g.quiesceLdr || m.GetTerm() != g.rn.BasicStatus().GetTerm()) {
			g.unquiesceLocked()
		}
		if bytes.Equal(m.Context, wakeCtx) {
			h.noteStoppedLocked(g, from)
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
		ref := receivedRef(om)
		if ref != nil && m.GetTerm() < g.rn.BasicStatus().GetTerm() {
			// A stale leader's: Raft keeps nothing of it. Held, its
			// indexes (perhaps far beyond the log's) would hold up the
			// release of every buffer after it (releaseHeldLocked).
			ref = nil
		}
		if ref != nil {
			// Before Raft takes the entries: a group that fails in Step
			// may keep them in its RawNode, and then keeps this too.
			ref.Retain()
		}
		if h.guardLocked(g, func() { _ = g.rn.Step(m) }) && ref != nil { // errors: stale or foreign messages, nothing to do
			g.holdReceivedLocked(m, ref)
		}
		if typ == pb.MessageType_MsgAppResp {
			g.noteQuorumLocked()
		}
		h.noteAnsweredLocked(g, from, m)
		if quiesce && typ == pb.MessageType_MsgHeartbeat {
			bs := g.rn.BasicStatus()
			last, _ := g.st.LastIndex()
			if bs.RaftState == raft.StateFollower && bs.Lead == from && bs.GetCommit() == last && m.GetCommit() == last {
				g.quiesceLdr = from
				g.quiesceLocked(bs.GetTerm(), last)
			}
		}
		g.mu.Unlock()
		h.markDirty(g)
	}
}

type heardLeader struct{ leader, term uint64 }

// SetWantedHook sets fn, called with the id of a group this node does not
// run (not open yet) when a peer sends it what only a running replica can
// answer: an append, a heartbeat, a snapshot, a vote or pre-vote, a
// leadership handover. The replica manager opens such a replica ahead of
// its queue: a node restarting with many replicas opens them after it
// listens, in its own order, and a group whose other replicas are open
// and electing or leading waited for it - at 10,000 partitions on 3
// nodes the first acknowledgement after a restart came when the whole
// queue had opened (docs/benchmarks.md, round 16, h-rf3big). fn runs on
// the transport's receiving goroutine: it must not block.
func (h *Host) SetWantedHook(fn func(group uint64)) {
	if fn == nil {
		h.wanted.Store(nil)
		return
	}
	h.wanted.Store(&fn)
}

// noteWanted calls the SetWantedHook function for m, sent to group, a
// group not running here.
func (h *Host) noteWanted(group uint64, m *pb.Message) {
	switch m.GetType() {
	case pb.MessageType_MsgApp, pb.MessageType_MsgHeartbeat, pb.MessageType_MsgSnap,
		pb.MessageType_MsgVote, pb.MessageType_MsgPreVote, pb.MessageType_MsgTimeoutNow:
	default:
		return
	}
	if fn := h.wanted.Load(); fn != nil {
		(*fn)(group)
	}
}

// maxHeard bounds Host.heard: a node hears from the leaders of the groups
// it is a replica of, but a peer may still send for a group deleted here.
const maxHeard = 1 << 16

// noteHeard records the sender of a message only a leader sends (appends,
// heartbeats, snapshots) to a group this node does not step: a replica
// that failed (or could not be opened) still learns who leads, and says
// so in Metadata (HeardLeader).
func (h *Host) noteHeard(group, from uint64, m *pb.Message) {
	switch m.GetType() {
	case pb.MessageType_MsgApp, pb.MessageType_MsgHeartbeat, pb.MessageType_MsgSnap:
	default:
		return
	}
	h.heardMu.Lock()
	defer h.heardMu.Unlock()
	old, ok := h.heard[group]
	switch {
	case ok && old.term > m.GetTerm():
		return
	case !ok && len(h.heard) >= maxHeard:
		return
	case h.heard == nil:
		h.heard = map[uint64]heardLeader{}
	}
	h.heard[group] = heardLeader{leader: from, term: m.GetTerm()}
}

// HeardLeader is the leader of a group this node does not step (absent
// here, or failed) as its messages last said, and its term; 0, 0 if none
// was heard. A running group's own Status knows better.
func (h *Host) HeardLeader(group uint64) (leader, term uint64) {
	h.heardMu.Lock()
	defer h.heardMu.Unlock()
	l := h.heard[group]
	return l.leader, l.term
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
		if g.rejoin && !g.rejoinMayVote(m) {
			return false // no vote until caught up
		}
	case pb.MessageType_MsgApp:
		if g.rejoin {
			g.rejoinTarget = max(g.rejoinTarget, m.GetCommit())
			shown := m.GetIndex() + uint64(len(m.Entries))
			g.noteRejoinLeader(m.GetTerm(), shown)
		}
	case pb.MessageType_MsgSnap:
		if g.rejoin {
			idx := m.GetSnapshot().GetMetadata().GetIndex()
			g.rejoinTarget = max(g.rejoinTarget, idx)
			g.noteRejoinLeader(m.GetTerm(), idx)
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

// noteRejoinLeader records, for a rejoining replica, that a leader of
// term showed it a log reaching index.
func (g *group) noteRejoinLeader(term, index uint64) {
	switch {
	case term > g.rejoinTerm:
		g.rejoinTerm, g.rejoinLast = term, index
	case term == g.rejoinTerm:
		g.rejoinLast = max(g.rejoinLast, index)
	}
}

// rejoinMayVote: a rejoining replica (it lost its log, so it cannot vouch
// for what it acknowledged) grants the (pre-)vote m only to a candidate
// whose log holds everything the newest leader it heard from since had
// committed: the candidate's last entry is of a later term than that
// leader's (whose leader had every entry committed before), or of that
// leader's term - its log is then that leader's up to its last index - and
// at least at the highest index that leader showed this replica and the
// highest commit index it was sent. And only in a later term than that
// leader's: what it voted for before its loss is lost too.
//
// Without this, a rebuilt replica waits to catch up with a commit index
// that only its leader knew: if that leader's storage fails before it
// has caught up (a second rebuilt replica), the one intact replica, which
// holds everything, can never get a vote, and the group stays without a
// leader (TestRejoiningReplicaVotesForCompleteLog). A replica that has
// heard from no leader since its loss still votes for nobody.
func (g *group) rejoinMayVote(m *pb.Message) bool {
	if g.rejoinTerm == 0 || m.GetTerm() <= g.rejoinTerm {
		return false
	}
	lastTerm, last := m.GetLogTerm(), m.GetIndex() // the candidate's last entry
	return lastTerm > g.rejoinTerm || lastTerm == g.rejoinTerm && last >= max(g.rejoinLast, g.rejoinTarget)
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

// ackIndexLocked is the index up to which WaitCommitted acknowledges.
func (g *group) ackIndexLocked() uint64 { return max(g.commitIndex, g.quorumIndex) }

// noteQuorumLocked wakes an AckOnQuorum group's commit waiters as soon as
// Raft's commit index moved on this leader (a quorum holds the entries,
// each fsynced: followers answer MsgApp after their fsync, and the
// leader's own copy counts from the response of its store round). Only up
// to what the store holds: with async storage writes a quorum of followers
// can commit an entry before the leader's own store round has recorded it,
// and until then its proposer's batch (localBatch) is still read - a
// waiter that returned would let the caller reuse those bytes.
// commitIndex, OnCommit and the journal's applied index still move only
// when the Ready loop applies the entries.
func (g *group) noteQuorumLocked() {
	if !g.cfg.AckOnQuorum || g.failed != nil {
		return
	}
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader {
		return
	}
	last, _ := g.st.LastIndex()
	if c := min(bs.GetCommit(), last); c > max(g.quorumIndex, g.commitIndex) {
		g.quorumIndex = c
		g.wakeCommitLocked()
	}
}

// receivedRef is the counted buffer a received MsgApp's batches lie in
// (transport.go's receivedRefs), nil if none.
func receivedRef(om outMsg) *bufref.Ref {
	if len(om.refs) != 1 || om.m.GetType() != pb.MessageType_MsgApp || len(om.m.Entries) == 0 {
		return nil
	}
	return om.refs[0]
}

// holdReceivedLocked keeps ref, which the caller took for the group
// before stepping m (a MsgApp whose batches lie in ref's buffer), for as
// long as anything of the group's may read m's entries. The holders are
// those of a proposal's bytes (api.go, above heldRef): Raft's unstable
// log and the log write (until stored: implied by applied), the store's
// recent entries, the apply, and messages to peers built from them (a
// follower that becomes leader sends what it holds: retainSentLocked).
// The group holds it as one heldRef over the message's indexes, given
// back by releaseHeldLocked once every one of them is applied and out of
// recent. A group whose OnCommit may keep Committed.Data past the call
// (GroupConfig.BorrowCommitData false) never gives it back: the buffer is
// then the garbage collector's, as every received buffer was before.
func (g *group) holdReceivedLocked(m *pb.Message, ref *bufref.Ref) {
	if !g.cfg.BorrowCommitData {
		return
	}
	ents := m.Entries
	g.held = append(g.held, heldRef{first: ents[0].GetIndex(), index: ents[len(ents)-1].GetIndex(), ref: ref})
}
