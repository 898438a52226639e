package raft

import (
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
)

// The in-sync replicas of a group, as Kafka's replica.lag.time.max.ms
// defines them: on the leader, a follower is in sync while it caught up
// to the leader's log end within the last ReplicaLagMax - not, as before,
// while etcd raft's RecentActive held (a message from it within the last
// election timeout, 1 s, cleared by every quorum check) and its progress
// was in StateReplicate (left for StateProbe on a single rejected or
// dropped append). At 1,000 partitions on a loaded machine those flapped
// with every late answer and every full send queue, and a restarted
// follower never showed back in all 1,000 ISRs (docs/benchmarks.md,
// round 16, h-rf3big).
//
// Caught up is Kafka's rule (Replica.updateFetchState): a follower's
// answer that covers the leader's log end as it is now makes it caught up
// now; one that covers the log end as it was at an earlier mark makes it
// caught up at that mark. Kafka takes the mark at the follower's previous
// fetch, of which there is one at a time; Raft pipelines appends, so each
// answer covers a log end from a round trip back, and a mark renewed at
// every answer would never be covered under steady writes. Here the mark
// is renewed when it is covered: one mark in flight per follower, as one
// fetch. A quiesced group's followers answer nothing: one whose match is
// the leader's log end is in sync while its node is heard from (the
// transport's node heartbeats) within an election timeout - a silent
// node's follower of an idle partition leaves the ISR then, not after
// ReplicaLagMax (the transport keeps no time of the last frame to count
// the lag from).
//
// The ISR is what Kafka clients see (Metadata, DescribeTopicPartitions)
// and what acks=all counts against min.insync.replicas before appending;
// an acknowledgement still waits for the Raft commit (a majority, each
// fsynced). The record is the leader's only, kept per term: a new leader
// has none, so its followers are in sync from their first answer that
// covers its log end (its empty entry), as before from their first answer.

// caughtUp is the leader's record of one follower (group.caught).
type caughtUp struct {
	id    uint64
	at    time.Time // last caught up; zero: not yet in this term
	match uint64    // the highest index it acknowledged in this term
	// answered: its last answer (an append's or a heartbeat's) in this
	// term, for the log of a quorum step-down (stepdown.go).
	answered time.Time
	mark     uint64 // the leader's last index at markAt, to be covered
	markAt   time.Time
	marked   bool
	// stopped: its replica told this leader it stopped (failed or
	// removed: wakeCtx) and has not answered since.
	stopped bool
}

// DefaultReplicaLagMax is Kafka's replica.lag.time.max.ms default.
const DefaultReplicaLagMax = 30 * time.Second

// noteAnsweredLocked records a follower's answer to the leader (after Raft
// stepped it): an accepted append's index is what it holds; a heartbeat's
// answer says it is alive with what it acknowledged before.
func (h *Host) noteAnsweredLocked(g *group, from uint64, m *pb.Message) {
	typ := m.GetType()
	if typ == pb.MessageType_MsgAppResp && m.GetReject() || typ != pb.MessageType_MsgAppResp && typ != pb.MessageType_MsgHeartbeatResp {
		return
	}
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader || m.GetTerm() != bs.GetTerm() {
		return
	}
	if g.caughtTerm != bs.GetTerm() {
		g.caughtTerm = bs.GetTerm()
		g.caught = g.caught[:0]
	}
	c := g.caughtOf(from)
	if c == nil {
		g.caught = append(g.caught, caughtUp{id: from})
		c = &g.caught[len(g.caught)-1]
	}
	if typ == pb.MessageType_MsgAppResp {
		c.match = max(c.match, m.GetIndex())
	}
	c.stopped = false
	last, _ := g.st.LastIndex()
	now := h.cfg.Clock.Now()
	c.answered = now
	c.observe(last, now)
}

// observe is one answer of a follower that holds c.match, when the
// leader's log ends at last.
func (c *caughtUp) observe(last uint64, now time.Time) {
	switch {
	case c.match >= last:
		c.at = now
		c.marked = false
	case c.marked && c.match >= c.mark:
		c.at = c.markAt
		c.mark, c.markAt = last, now
	case !c.marked:
		c.mark, c.markAt, c.marked = last, now, true
	}
}

// noteStoppedLocked: follower from's replica of g stopped (failed or
// removed; its node sent wakeCtx). It is out of the ISR until it answers
// again: its node's heartbeats no longer speak for it.
func (h *Host) noteStoppedLocked(g *group, from uint64) {
	if g.caughtTerm != g.rn.BasicStatus().GetTerm() {
		return // no record: not in sync before its first answer anyway
	}
	if c := g.caughtOf(from); c != nil {
		c.at, c.marked, c.stopped = time.Time{}, false, true
	}
}

// quietEndedLocked: g, which this node leads, wakes from quiescence. Its
// followers answered nothing while it was quiet, and those that held the
// whole log had nothing to catch up on: they were caught up until now -
// if their node is still heard from (quietHeard). One that went silent
// (the wake may be for it: checkQuiescedLocked) keeps its last time.
func (h *Host) quietEndedLocked(g *group) {
	if g.caughtTerm != g.rn.BasicStatus().GetTerm() {
		return
	}
	last, _ := g.st.LastIndex()
	now := h.cfg.Clock.Now()
	for i := range g.caught {
		if c := &g.caught[i]; c.match >= last && !c.stopped && h.tr.heardWithin(c.id, h.quietHeard()) {
			c.at, c.marked = now, false
		}
	}
}

// quietHeard is how recently a quiesced group's follower's node must have
// been heard from to count as in sync: an election timeout, the silence
// after which the group wakes (checkQuiescedLocked). Not ReplicaLagMax: a
// leader re-quiesces with a dead follower that holds the whole log, and
// each wake would have counted it in sync again.
func (h *Host) quietHeard() time.Duration {
	return h.cfg.TickInterval * time.Duration(h.cfg.ElectionTicks)
}

// caughtOf is the record of follower id in this term, nil if none.
func (g *group) caughtOf(id uint64) *caughtUp {
	for i := range g.caught {
		if g.caught[i].id == id {
			return &g.caught[i]
		}
	}
	return nil
}

// inSyncLocked reports whether replica id, whose progress on this leader
// is pr, is in sync: the leader itself; a voter caught up within
// ReplicaLagMax of now; or, while the group is quiesced, a voter that
// holds the whole log (last), whose replica did not say it stopped and
// whose node was heard from within an election timeout (quietHeard).
func (h *Host) inSyncLocked(g *group, id uint64, pr trackerProgress, last uint64, now time.Time) bool {
	if id == h.cfg.ID {
		return true
	}
	if pr.IsLearner {
		return false
	}
	lag := h.cfg.ReplicaLagMax
	var c *caughtUp
	if g.caughtTerm == g.rn.BasicStatus().GetTerm() {
		c = g.caughtOf(id)
	}
	if c != nil && !c.at.IsZero() && now.Sub(c.at) <= lag {
		return true
	}
	return g.quiesced && pr.Match >= last && (c == nil || !c.stopped) && h.tr.heardWithin(id, h.quietHeard())
}

// quorumSilentLocked reports whether g, which this node leads, heard from
// no quorum of its voters' nodes (this one counted) within an election
// timeout - of every configuration, while a membership change is joint.
// Such a leader may have been replaced: the other replicas elect once
// their own election timeouts ran out without a word from it, and etcd
// raft's quorum check steps it down only at the end of the election
// timeout in which it last heard nothing - up to two election timeouts
// after its isolation began. Meanwhile it still names itself leader; a
// lab run read that from the isolated node after the others had elected
// (docs/benchmarks.md, round 18, h-elect). The node's frames of any group
// and its node heartbeats count (heardWithin), as for the ISR of a
// quiesced group.
func (h *Host) quorumSilentLocked(g *group) bool {
	window := h.quietHeard()
	g.st.mu.RLock()
	defer g.st.mu.RUnlock()
	if g.st.cs == nil {
		return false
	}
	silent := func(voters []uint64) bool {
		heard := 0
		for _, id := range voters {
			if id == h.cfg.ID || h.tr.heardWithin(id, window) {
				heard++
			}
		}
		return len(voters) > 0 && heard <= len(voters)/2
	}
	return silent(g.st.cs.Voters) || silent(g.st.cs.VotersOutgoing)
}
