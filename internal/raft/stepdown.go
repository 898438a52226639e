package raft

import (
	"fmt"
	"strings"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// Quorum step-downs, counted by why. etcd raft's CheckQuorum steps a
// leader down when, over the election timeout since its last check, it
// heard from no quorum of its voters in this group (tracker's
// RecentActive: any message from the follower). Under load at RF=3 on a
// loaded machine leaders did so while every node was up (docs/
// benchmarks.md, round 17, h-isr: 34-36 in a run, cause not known). The
// tick that steps a leader down looks, just before, at each follower
// that failed the check: was its node heard from at all (a transport
// frame of any group, or a node heartbeat), did this leader have appends
// out to it, when did it last answer in this term.

// Why a leader lost its quorum check (StepDowns' index).
const (
	// stepDownNodesSilent: no frame at all came from the nodes of the
	// followers that failed the check within the election timeout - the
	// peers' processes (or their transport writers, or this node's
	// readers) were stalled, or the network was: nothing per group.
	stepDownNodesSilent = iota
	// stepDownAnswersLate: their nodes were heard from, this leader had
	// appends out to them, and no answer of this group came in the
	// window: the answers waited (a follower answers an append after its
	// store round's fsync) or queued behind other traffic.
	stepDownAnswersLate
	// stepDownNothingOut: their nodes were heard from and this leader had
	// nothing in flight to them: it sent only heartbeats (or, lazily,
	// none) and heard no answer.
	stepDownNothingOut
	numStepDownReasons
)

// StepDownReasons names StepDowns' entries (a metrics label).
var StepDownReasons = [numStepDownReasons]string{"peer_nodes_silent", "answers_late", "nothing_in_flight"}

// followerView is one follower of a leader as the tick before a quorum
// check saw it.
type followerView struct {
	id       uint64
	active   bool // RecentActive: heard from in this check's window
	state    tracker.StateType
	inflight int
	heard    bool // its node: a frame within the election timeout
	answered time.Time
}

// leaderViewLocked lists g's voters other than this node as the leader
// sees them now (before a tick that may run the quorum check).
func (h *Host) leaderViewLocked(g *group, buf []followerView, electionTimeout time.Duration) []followerView {
	buf = buf[:0]
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr trackerProgress) {
		if id == h.cfg.ID || pr.IsLearner {
			return
		}
		v := followerView{id: id, active: pr.RecentActive, state: pr.State, heard: h.tr.heardWithin(id, electionTimeout)}
		if pr.Inflights != nil {
			v.inflight = pr.Inflights.Count()
		}
		if c := g.caughtOf(id); c != nil && g.caughtTerm == g.rn.BasicStatus().GetTerm() {
			v.answered = c.answered
		}
		buf = append(buf, v)
	})
	return buf
}

// noteStepDownLocked counts and logs a quorum step-down of g, whose
// followers were as before (leaderViewLocked, just before the tick).
func (h *Host) noteStepDownLocked(g *group, term uint64, before []followerView) {
	reason := stepDownNothingOut
	silent, out := true, false
	var b strings.Builder
	now := h.cfg.Clock.Now()
	for _, v := range before {
		if v.active {
			continue
		}
		silent = silent && !v.heard
		out = out || v.inflight > 0
		ago := "never"
		if !v.answered.IsZero() {
			ago = now.Sub(v.answered).Round(time.Millisecond).String()
		}
		fmt.Fprintf(&b, " %d:{%s inflight=%d node_heard=%v answered=%s}", v.id, v.state, v.inflight, v.heard, ago)
	}
	switch {
	case silent:
		reason = stepDownNodesSilent
	case out:
		reason = stepDownAnswersLate
	}
	h.stepDowns[reason].Add(1)
	h.log.Warn("raft: leader lost its quorum check", "group", g.id, "term", term, "reason", StepDownReasons[reason], "followers", strings.TrimSpace(b.String()))
}

// StepDowns counts this host's quorum step-downs since it started, by
// reason (StepDownReasons).
func (h *Host) StepDowns() [numStepDownReasons]uint64 {
	var out [numStepDownReasons]uint64
	for i := range out {
		out[i] = h.stepDowns[i].Load()
	}
	return out
}
