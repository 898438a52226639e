package cluster

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"holdfast/internal/raft"
	"holdfast/internal/replica"
)

// Leadership placement: automatic preferred-leader
// balancing (auto.leader.rebalance.enable) and controlled shutdown
// (controlled.shutdown.enable). Both move leadership with Raft transfers,
// which hand over without an election timeout.
//
// Balancing follows Kafka's rule per preferred broker B: B's imbalance is
// the share of the partitions preferring B that B does not lead; when it
// exceeds leader.imbalance.per.broker.percentage, B's partitions go back to
// it. Kafka's controller sees every partition; here each node counts the
// partitions it replicates (all of them when RF = nodes) and transfers only
// those it leads itself, so no node acts on leadership it does not hold.

// StartBalancing starts automatic preferred-leader balancing, if
// configured.
func (n *Node) StartBalancing() {
	if !n.cfg.AutoLeaderRebalance || n.cfg.LeaderImbalanceCheckInterval <= 0 || n.balance != nil {
		return
	}
	stopCh, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		n.balanceLoop(stopCh)
	}()
	n.balance = func() {
		close(stopCh)
		<-done
	}
}

func (n *Node) stopBalancing() {
	if n.balance != nil {
		n.balance()
		n.balance = nil
	}
}

// HandOver stops balancing and, with controlled shutdown on, moves every
// leadership this node holds to a caught-up replica (controlledShutdown).
// The broker calls it first on Close, while its coordinators and the
// metadata loops still run.
func (n *Node) HandOver() {
	n.stopBalancing()
	if n.cfg.ControlledShutdown && n.cfg.ControlledShutdownMaxWait > 0 && n.meta != nil {
		n.controlledShutdown()
	}
}

func (n *Node) balanceLoop(stop <-chan struct{}) {
	tick := n.clk.NewTicker(n.cfg.LeaderImbalanceCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		n.balanceLeaders()
	}
}

// balanceLeaders is one check: it asks for a transfer of every partition
// this node leads whose preferred broker is over the imbalance limit and
// can take over now. The next check sees the result.
func (n *Node) balanceLeaders() {
	h := n.host
	me := uint64(n.cfg.NodeID)
	type lead struct {
		group, preferred uint64
		topic            string
		partition        int32
	}
	preferred := map[uint64]int{} // partitions replicated here, by preferred broker
	notLed := map[uint64]int{}    // of those, the ones another broker (or none) leads
	var mine []lead
	for _, t := range n.meta.Topics() {
		for i := int32(0); i < t.Partitions && int(i) < len(t.Replicas); i++ {
			if len(t.Replicas[i]) == 0 {
				continue
			}
			if p := n.replicas.Get(t.Name, i); p == nil {
				continue
			}
			g := replica.Group(t.ID, i)
			l, err := h.Leadership(g)
			if err != nil {
				continue
			}
			pref := uint64(t.Replicas[i][0])
			preferred[pref]++
			if l.Leader == pref {
				continue
			}
			notLed[pref]++
			if l.Leader == me && l.Proposing {
				mine = append(mine, lead{g, pref, t.Name, i})
			}
		}
	}
	pct := n.cfg.LeaderImbalancePerBrokerPct
	moved := 0
	for _, m := range mine {
		if notLed[m.preferred]*100 <= pct*preferred[m.preferred] {
			continue
		}
		if n.meta.Fenced(int32(m.preferred)) {
			continue // shutting down or out of its session: not a leader to give work to
		}
		st, err := h.Status(m.group)
		if err != nil || st.State != raft.StateLeader || Transferable(st, m.preferred) != nil {
			continue
		}
		n.log.Debug("moving leadership to the preferred replica", "topic", m.topic, "partition", m.partition, "to", m.preferred)
		h.TransferLeader(m.group, m.preferred)
		moved++
	}
	if moved > 0 {
		n.log.Info("leader balancing: transfers to preferred replicas", "partitions", moved)
	}
}

// controlledShutdown moves the leadership of every group this node leads
// (partitions and the metadata group) to a caught-up voter - a partition's
// preferred replica when it is one - and waits until none is led here or
// ControlledShutdownMaxWait passes. Without it, every such group is
// leaderless for an election timeout once this node stops.
func (n *Node) controlledShutdown() {
	h := n.host
	me := uint64(n.cfg.NodeID)
	if n.cfg.PlantFencedLeader && n.meta.Fenced(n.cfg.NodeID) {
		n.log.Warn("controlled shutdown: planted bug: this fenced broker keeps its leaderships")
		return
	}
	prefs := n.preferredReplicas()
	asked := map[uint64]time.Time{} // groups still led here: when a transfer was last asked for
	for _, g := range h.Groups() {
		// A group with no other voter (a single node's) has nowhere to go.
		if st, err := h.Status(g); err == nil && st.Leader == me && len(st.Voters)+len(st.Learners) > 1 {
			asked[g] = time.Time{}
		}
	}
	if len(asked) == 0 {
		return
	}
	// A transfer that completes is a leadership event: the wait wakes at
	// once. The poll remains for what is no event (a replica catching up
	// enough to take over, TransferRetry passing).
	sub := h.Subscribe(raft.EventLeadership)
	defer sub.Close()
	start := n.clk.Now()
	total := len(asked)
	n.log.Info("controlled shutdown: moving leadership", "groups", total, "max_wait", n.cfg.ControlledShutdownMaxWait)
	deadline := start.Add(n.cfg.ControlledShutdownMaxWait)
	hope := false
	for {
		// A group with a transfer under way, or one that can start now;
		// without any (the last node of a quorum, or every other replica
		// fenced: stopping too) waiting is pointless.
		hope = false
		for g, at := range asked {
			st, err := h.Status(g)
			if err != nil || st.State != raft.StateLeader {
				delete(asked, g)
				continue
			}
			if n.clk.Now().Sub(at) < TransferRetry {
				hope = true
				continue
			}
			if to := transferTarget(st, prefs[g], n.fencedReplica); to != 0 {
				h.TransferLeader(g, to)
				asked[g] = n.clk.Now()
				hope = true
			}
		}
		if len(asked) == 0 || !hope || n.clk.Now().After(deadline) {
			break
		}
		select {
		case <-sub.Ready():
			sub.Take(nil)
		case <-n.clk.After(transferPoll):
		}
	}
	if len(asked) > 0 && !hope {
		// Nobody to hand them to: every other replica is down, behind or
		// fenced (stopping too, as when a whole cluster stops).
		n.log.Info("controlled shutdown: no replica can take over the rest; those groups elect after a timeout", "moved", total-len(asked), "remaining", len(asked), "elapsed", n.clk.Now().Sub(start).Round(time.Millisecond))
		return
	}
	if len(asked) > 0 {
		n.log.Warn("controlled shutdown: leadership not moved in time; those groups elect after a timeout", "moved", total-len(asked), "remaining", len(asked), "elapsed", n.clk.Now().Sub(start).Round(time.Millisecond))
		return
	}
	n.log.Info("controlled shutdown: leadership moved", "groups", total, "elapsed", n.clk.Now().Sub(start).Round(time.Millisecond))
}

// preferredReplicas maps each partition's Raft group to its preferred
// replica (the first of its assignment).
func (n *Node) preferredReplicas() map[uint64]uint64 {
	prefs := map[uint64]uint64{}
	for _, t := range n.meta.Topics() {
		for i := int32(0); i < t.Partitions && int(i) < len(t.Replicas); i++ {
			if len(t.Replicas[i]) > 0 {
				prefs[replica.Group(t.ID, i)] = uint64(t.Replicas[i][0])
			}
		}
	}
	return prefs
}

// handOffWhileFenced runs after each of the liveness loop's beats. A
// broker fenced while it runs (its heartbeats do not reach the controller
// while its Raft links work) would keep leading groups whose partitions
// answer LEADER_NOT_AVAILABLE, since Metadata names no fenced leader;
// Kafka's controller elects other leaders then. Once this node has been
// fenced for a whole session (a starting broker is fenced for a beat or
// two, and keeps what it leads), it asks a caught-up unfenced voter of
// each partition it leads to take over, as controlled shutdown does, and
// asks again every TransferRetry while it stays fenced. Leader balancing
// brings the preferred leaderships back once it is unfenced.
func (n *Node) handOffWhileFenced(fenced, shutdown bool) {
	lv := n.live
	now := n.clk.Now()
	if !fenced || shutdown {
		lv.fencedAt = time.Time{}
		return
	}
	if lv.fencedAt.IsZero() {
		lv.fencedAt = now
		return
	}
	if now.Sub(lv.fencedAt) < lv.session || now.Sub(lv.handedOff) < TransferRetry {
		return
	}
	lv.handedOff = now
	h := n.host
	prefs := n.preferredReplicas()
	moved, stuck := 0, 0
	for _, g := range h.Groups() {
		if g == MetadataGroup {
			continue // its leader is the controller, which is never fenced
		}
		st, err := h.Status(g)
		if err != nil || st.State != raft.StateLeader || len(st.Voters) < 2 {
			continue
		}
		if to := transferTarget(st, prefs[g], n.fencedReplica); to != 0 {
			h.TransferLeader(g, to)
			moved++
		} else {
			stuck++
		}
	}
	if moved > 0 { // nothing to say while no replica can take over: asked again next time
		n.log.Warn("this broker is fenced (its heartbeats do not reach the controller): moving its leaderships to unfenced replicas",
			"fenced_for", now.Sub(lv.fencedAt).Round(time.Millisecond), "asked", moved, "no_replica_can_take_over", stuck)
	}
}

// transferTarget picks who takes over a group from this leader: the
// preferred replica if it can, else the caught-up voter furthest along; 0
// if none can now. A fenced broker is never picked: it is shutting down
// too (or out of its session), and handing it leadership would only move
// the group again - as Kafka's controller leaves brokers in controlled
// shutdown out of leader election.
func transferTarget(st raft.Status, preferred uint64, fenced func(uint64) bool) uint64 {
	if preferred != 0 && preferred != st.Node && !fenced(preferred) && Transferable(st, preferred) == nil {
		return preferred
	}
	var best uint64
	var bestOff int64 = -1
	for _, r := range st.Replicas {
		if r.ID != st.Node && !fenced(r.ID) && Transferable(st, r.ID) == nil && r.MatchOffset > bestOff {
			best, bestOff = r.ID, r.MatchOffset
		}
	}
	return best
}

// fencedReplica reports whether the broker behind Raft node id is fenced
// in the committed metadata (node ids are broker ids).
func (n *Node) fencedReplica(id uint64) bool { return n.meta.Fenced(int32(id)) }

// ErrBehind: the replica is up but has not acknowledged the commit point.
var ErrBehind = errors.New("not caught up")

// TransferRetry is how long a leadership transfer may take before it is
// asked for again: etcd raft abandons one after an election timeout.
const TransferRetry = time.Second

// transferPoll is how often a wait for transfers looks at leadership.
const transferPoll = 20 * time.Millisecond

// Transferable reports, from the leader's status, whether target can take
// over leadership now: a voter the leader hears from that has
// acknowledged everything committed.
func Transferable(st raft.Status, target uint64) error {
	if !slices.Contains(st.Voters, target) {
		return fmt.Errorf("replica %d is not a voter of the group", target)
	}
	for _, r := range st.Replicas {
		if r.ID != target {
			continue
		}
		switch {
		case !r.Active:
			return fmt.Errorf("replica %d is down", target)
		case r.State != raft.ProgressReplicate || r.MatchOffset < st.CommitOffset:
			return fmt.Errorf("replica %d is %w (acknowledged %d of %d)", target, ErrBehind, r.MatchOffset, st.CommitOffset)
		}
		return nil
	}
	return fmt.Errorf("replica %d is unknown to the leader", target)
}
