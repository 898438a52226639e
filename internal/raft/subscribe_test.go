package raft

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// eventLog drains a subscription into a list a test can look at.
type eventLog struct {
	mu   sync.Mutex
	evs  []Event
	stop chan struct{}
	done chan struct{}
}

func collect(s *Subscription) *eventLog {
	l := &eventLog{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.stop:
				return
			case <-s.Ready():
			}
			evs := s.Take(nil)
			l.mu.Lock()
			l.evs = append(l.evs, evs...)
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *eventLog) close() { close(l.stop); <-l.done }

func (l *eventLog) find(pred func(Event) bool) (Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.evs {
		if pred(e) {
			return e, true
		}
	}
	return Event{}, false
}

// The typed events a subscriber gets from the Ready loop: a transfer's
// new leader publishes its role (StateLeader), term and settling; the old
// leader publishes that it follows the new one; commits carry the index;
// a membership change carries the voters; a removal says so. Every event
// a subscriber gets of a kind it did not ask for is a failure.
func TestSubscriptionEvents(t *testing.T) {
	c := newCluster(t, 3, 1, func(c *cluster) { c.electionTicks = 100 })
	leader, term := c.waitLeader(1)
	target := c.ids[0]
	if target == leader {
		target = c.ids[1]
	}
	onTarget := collect(c.nodes[target].host.Subscribe(EventLeadership | EventConfChange | EventRemoved))
	defer onTarget.close()
	onLeader := collect(c.nodes[leader].host.Subscribe(EventLeadership | EventCommit))
	defer onLeader.close()

	p := c.propose(1, "a")
	waitFor(t, "a commit event on the leader at the proposal's index", func() bool {
		_, ok := onLeader.find(func(e Event) bool { return e.Kind == EventCommit && e.Group == 1 && e.CommitIndex >= p.Index })
		return ok
	})
	if err := c.nodes[leader].host.TransferLeader(1, target); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("node %d's event: settled leader in a later term", target), func() bool {
		_, ok := onTarget.find(func(e Event) bool {
			return e.Kind == EventLeadership && e.Group == 1 && e.State == StateLeader && e.Leadership.Settled &&
				e.Term() > term && e.Leader() == target
		})
		return ok
	})
	waitFor(t, fmt.Sprintf("node %d's event: following %d", leader, target), func() bool {
		_, ok := onLeader.find(func(e Event) bool {
			return e.Kind == EventLeadership && e.State == StateFollower && !e.Leadership.Leading && e.Leader() == target
		})
		return ok
	})
	c.addNode(4)
	ctx := context.Background()
	c.changeConf(1, func(h *Host) error { return h.AddLearner(ctx, 1, 4) })
	waitFor(t, "a conf-change event naming learner 4", func() bool {
		_, ok := onTarget.find(func(e Event) bool {
			return e.Kind == EventConfChange && slices.Contains(e.Learners, 4) && len(e.Voters) == 3
		})
		return ok
	})
	if err := c.nodes[target].host.RemoveGroup(1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a removal event", func() bool {
		_, ok := onTarget.find(func(e Event) bool { return e.Kind == EventRemoved && e.Group == 1 })
		return ok
	})
	if e, ok := onTarget.find(func(e Event) bool { return e.Kind == EventCommit }); ok {
		t.Fatalf("a commit event reached a subscription that did not ask for commits: %+v", e)
	}
	if e, ok := onLeader.find(func(e Event) bool { return e.Kind == EventConfChange || e.Kind == EventRemoved }); ok {
		t.Fatalf("an event of a kind not asked for: %+v", e)
	}
}

// Commit events of one group coalesce while queued; leadership events
// never do.
func TestSubscriptionCoalescesCommits(t *testing.T) {
	h := &Host{}
	s := h.Subscribe(EventCommit | EventLeadership)
	for i := range uint64(5) {
		h.emit(Event{Kind: EventCommit, Group: 7, CommitIndex: i + 1})
		h.emit(Event{Kind: EventLeadership, Group: 7, Leadership: Leadership{Term: i + 1}})
	}
	h.emit(Event{Kind: EventCommit, Group: 8, CommitIndex: 3})
	evs := s.Take(nil)
	if len(evs) != 7 || evs[0].Kind != EventCommit || evs[0].CommitIndex != 5 || evs[6].Group != 8 {
		t.Fatalf("got %+v", evs)
	}
	for i, e := range evs[1:6] {
		if e.Kind != EventLeadership || e.Term() != uint64(i+1) {
			t.Fatalf("leadership event %d: %+v", i, e)
		}
	}
	s.Close()
	h.emit(Event{Kind: EventCommit, Group: 7, CommitIndex: 9})
	if evs := s.Take(nil); len(evs) != 0 {
		t.Fatalf("closed subscription got %+v", evs)
	}
}
