package coordinator

import "time"

// A watcher looks at the leadership of an internal topic's partitions when
// any replica's leadership changes on this node (the Raft host's events),
// and every leadershipRecheck besides: a safety net, and how a changed
// partition count is noticed.
const leadershipRecheck = time.Second

// watch calls load when this node becomes the leader of a partition of
// topic, and unload when it stops leading it, until Close.
func (h *Host) watch(topic string, n int32, load, unload func(int32)) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		h.watchLeadership(topic, n, load, unload, stop)
	}()
	h.stops = append(h.stops, func() {
		close(stop)
		<-done
	})
}

// watchLeadership loads a partition per term: leading again in a later
// term reloads it, since another leader may have written in between.
func (h *Host) watchLeadership(topic string, n int32, load, unload func(int32), stop <-chan struct{}) {
	owned := make([]uint64, n) // the term in which partition i was loaded, 0 if not ours
	tick := time.NewTicker(leadershipRecheck)
	defer tick.Stop()
	warned := false
	var sum changeSummary
	for {
		// Taken before looking, so that a change while looking wakes the
		// next round.
		changed := h.replicas.LeadershipChanged()
		if !h.checkLeadership(topic, n, owned, load, unload, &warned, &sum) {
			sum.log(h, topic, owned)
		}
		select {
		case <-stop:
			return
		case <-changed:
		case <-tick.C:
		}
	}
}

// changeSummary counts the partitions loaded and unloaded since the last
// summary line. Partitions change leader one Raft election at a time, so
// the line is written on the first look that finds nothing new: one line
// per change of the node's role, not one per partition (50 by default).
type changeSummary struct{ loaded, unloaded int }

func (s *changeSummary) log(h *Host, topic string, owned []uint64) {
	if s.loaded+s.unloaded == 0 {
		return
	}
	coordinating := 0
	for _, term := range owned {
		if term != 0 {
			coordinating++
		}
	}
	h.log.Info("coordinator partitions changed", "topic", topic, "loading", s.loaded, "unloaded", s.unloaded,
		"coordinating", coordinating, "partitions", len(owned))
	*s = changeSummary{}
}

// checkLeadership is one look at topic's partitions: load what this node
// now leads, unload what it stopped leading. It reports whether anything
// changed.
func (h *Host) checkLeadership(topic string, n int32, owned []uint64, load, unload func(int32), warned *bool, sum *changeSummary) bool {
	if t, ok := h.meta.Topic(topic); ok && t.Partitions != n {
		if !*warned {
			h.log.Error("internal topic's partition count differs from the coordinator's; restart to pick it up", "topic", topic, "partitions", t.Partitions, "coordinator_partitions", n)
			*warned = true
		}
		return false
	}
	var loaded, unloaded []int
	for i := range owned {
		term := h.readyLeaderTerm(topic, int32(i), owned[i])
		switch {
		case term == owned[i]:
		case term == 0:
			h.log.Debug("no longer coordinating partition", "topic", topic, "partition", i, "epoch", owned[i])
			unload(int32(i))
			owned[i] = 0
			unloaded = append(unloaded, i)
		default:
			h.log.Debug("coordinating partition", "topic", topic, "partition", i, "epoch", term)
			load(int32(i))
			owned[i] = term
			loaded = append(loaded, i)
		}
	}
	sum.loaded += len(loaded)
	sum.unloaded += len(unloaded)
	return len(loaded)+len(unloaded) > 0
}

// readyLeaderTerm is the Raft term in which this node leads partition i of
// topic, or 0 if it does not lead it. A new leader counts only once it has
// settled (an entry of its term committed, and with it every entry of the
// earlier terms), so a replay sees every write of the earlier terms. cur
// is the term already loaded.
func (h *Host) readyLeaderTerm(topic string, i int32, cur uint64) uint64 {
	p := h.replicas.Get(topic, i)
	if p == nil {
		return 0
	}
	l, err := h.node.Host().Leadership(p.RaftGroup())
	if err != nil || !l.Proposing {
		return 0
	}
	if l.Term == cur || !l.Settled {
		// Not settled: no entry of its term is committed yet, so entries
		// of earlier terms may not be either; keep what we have until then
		// (settling is itself a leadership event).
		return cur
	}
	return l.Term
}

// leading is the coordinators' Leading hook for topic: whether this node
// is the Raft leader of its partition p now. Between the election and the
// watcher's load (which waits for the leader to settle) the coordinator
// answers COORDINATOR_LOAD_IN_PROGRESS, as Kafka's does while it loads,
// not NOT_COORDINATOR: FindCoordinator names this node as soon as it
// leads, and NOT_COORDINATOR sends the client back to look again.
func (h *Host) leading(topic string) func(int32) bool {
	return func(i int32) bool {
		p := h.replicas.Get(topic, i)
		if p == nil {
			return false
		}
		l, err := h.node.Host().Leadership(p.RaftGroup())
		return err == nil && l.Leading
	}
}
