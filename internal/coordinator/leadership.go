package coordinator

import (
	"time"

	"holdfast/internal/raft"
	"holdfast/internal/replica"
)

// A watcher follows the leadership of an internal topic's partitions on
// this node through the Raft host's typed events (raft.Subscription): an
// event for one of the topic's Raft groups makes it look at that
// partition alone. It looks at every partition only at its start and when
// the topic itself appears or is replaced. No timer looks on its own, but
// one: a partition whose group leads here before the replica manager
// lists it (the group's first event comes from AddGroup, inside the
// replica's open) is looked at again after pendingRetry until it is
// listed.
const pendingRetry = 20 * time.Millisecond

// summaryQuiet: the summary line of loads and unloads is written once no
// partition changed for this long (no event may come after the last
// change to make a quiet look).
const summaryQuiet = 200 * time.Millisecond

// watch calls load when this node becomes the leader of a partition of
// topic, and unload when it stops leading it, until Close.
func (h *Host) watch(topic string, n int32, load, unload func(int32)) {
	sub := h.node.Host().Subscribe(raft.EventLeadership | raft.EventRemoved)
	stop, done := make(chan struct{}), make(chan struct{})
	w := &watcher{h: h, topic: topic, n: n, load: load, unload: unload,
		owned: make([]uint64, n), pending: map[int32]bool{}}
	go func() {
		defer close(done)
		w.run(sub, stop)
	}()
	h.stops = append(h.stops, func() {
		close(stop)
		<-done
		sub.Close()
	})
}

// watcher is one internal topic's: it loads a partition per term: leading
// again in a later term reloads it, since another leader may have written
// in between.
type watcher struct {
	h            *Host
	topic        string
	n            int32
	load, unload func(int32)

	owned   []uint64 // the term in which partition i was loaded, 0 if not ours
	id      [16]byte // the topic id the groups below belong to
	groups  map[uint64]int32
	pending map[int32]bool // leading here, but the replica not listed yet
	warned  bool
	sum     changeSummary
}

func (w *watcher) run(sub *raft.Subscription, stop <-chan struct{}) {
	// Subscribed before this first look: a change during it is an event.
	w.refresh(true)
	var evs []raft.Event
	var retry, quiet <-chan time.Time
	changed := w.sum.loaded+w.sum.unloaded > 0
	for {
		if len(w.pending) > 0 && retry == nil {
			retry = w.h.clk.After(pendingRetry)
		}
		if changed {
			quiet = w.h.clk.After(summaryQuiet) // from the last change
		}
		changed = false
		select {
		case <-stop:
			return
		case <-sub.Ready():
			evs = sub.Take(evs[:0])
			changed = w.refresh(false)
			for _, e := range evs {
				if i, ok := w.groups[e.Group]; ok {
					changed = w.check(i) || changed
				}
			}
		case <-retry:
			retry = nil
			for i := range w.pending {
				changed = w.check(i) || changed
			}
		case <-quiet:
			quiet = nil
			w.sum.log(w.h, w.topic, w.owned)
		}
	}
}

// refresh maps the topic's Raft groups to its partitions when the topic
// appeared or was replaced (a new id), and then looks at every partition
// (also when all is set). It reports whether anything was loaded or
// unloaded.
func (w *watcher) refresh(all bool) bool {
	t, ok := w.h.meta.Topic(w.topic)
	if ok && t.Partitions != w.n {
		if !w.warned {
			w.h.log.Error("internal topic's partition count differs from the coordinator's; restart to pick it up", "topic", w.topic, "partitions", t.Partitions, "coordinator_partitions", w.n)
			w.warned = true
		}
		return false
	}
	if !ok && w.groups == nil && !all {
		return false
	}
	if ok && t.ID == w.id && w.groups != nil && !all {
		return false
	}
	w.groups = nil
	if ok {
		w.id = t.ID
		w.groups = make(map[uint64]int32, t.Partitions)
		for i := range t.Partitions {
			w.groups[replica.Group(t.ID, i)] = i
		}
	}
	changed := false
	for i := range w.n {
		changed = w.check(i) || changed
	}
	return changed
}

// check is one look at partition i: load it if this node now leads it in
// a new term, unload it if it stopped leading. It reports whether it did
// either.
func (w *watcher) check(i int32) bool {
	h := w.h
	term, listed := h.readyLeaderTerm(w.topic, i, w.owned[i])
	if listed {
		delete(w.pending, i)
	} else {
		w.pending[i] = true
	}
	switch {
	case term == w.owned[i]:
		return false
	case term == 0 && h.cfg.PlantStaleLoad:
		return false // the planted bug: it stays loaded, and says so (noteLoads not called)
	case term == 0:
		h.log.Debug("no longer coordinating partition", "topic", w.topic, "partition", i, "epoch", w.owned[i])
		w.unload(i)
		w.owned[i] = 0
		w.sum.unloaded++
	default:
		h.log.Debug("coordinating partition", "topic", w.topic, "partition", i, "epoch", term)
		w.load(i)
		w.owned[i] = term
		w.sum.loaded++
	}
	h.noteLoads(w.topic, i, term)
	return true
}

// changeSummary counts the partitions loaded and unloaded since the last
// summary line. Partitions change leader one Raft election at a time, so
// the line is written once none changed for summaryQuiet: one line per
// change of the node's role, not one per partition (50 by default).
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

// readyLeaderTerm is the Raft term in which this node leads partition i of
// topic, or 0 if it does not lead it. A new leader counts only once it has
// settled (an entry of its term committed, and with it every entry of the
// earlier terms), so a replay sees every write of the earlier terms. cur
// is the term already loaded. listed is false when the partition's group
// runs here but the replica manager does not list it yet (its open is
// not over): then there is no answer yet, and cur comes back.
func (h *Host) readyLeaderTerm(topic string, i int32, cur uint64) (term uint64, listed bool) {
	p := h.replicas.Get(topic, i)
	if p == nil {
		if t, ok := h.meta.Topic(topic); ok {
			if _, err := h.node.Host().Leadership(replica.Group(t.ID, i)); err == nil {
				return cur, false
			}
		}
		return 0, true
	}
	l, err := h.node.Host().Leadership(p.RaftGroup())
	if err != nil || !l.Proposing {
		return 0, true
	}
	if l.Term == cur || !l.Settled {
		// Not settled: no entry of its term is committed yet, so entries
		// of earlier terms may not be either; keep what we have until then
		// (settling is itself a leadership event).
		return cur, true
	}
	return l.Term, true
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
