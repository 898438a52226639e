package raft

import (
	"slices"
	"sync"
)

// Typed events: what the Ready loop publishes about its groups, for those
// above the host who act on a change (the coordinators load a partition
// when this node comes to lead it) instead of being woken by a broadcast
// and looking at everything, or looking on a timer.
//
// An event is queued on every subscription that asked for its kind, under
// the group's lock, without blocking: the subscription's queue grows, and
// its Ready channel (capacity one) says there is something to take. Commit
// events of one group coalesce while queued (the latest index stands for
// the earlier ones); leadership and membership events never do: a
// subscriber sees every published change, in order per group.

// EventKind is what happened to a group. The kinds are bits, so a
// subscription asks for several at once.
type EventKind uint8

const (
	// EventLeadership: the group's Leadership changed (the one
	// GroupConfig.OnLeadership gets): this node became leader, started
	// proposing, settled, stepped down, learned of another leader, or the
	// group failed; and once when the group is added.
	EventLeadership EventKind = 1 << iota
	// EventCommit: the group's commit index moved (entries applied).
	EventCommit
	// EventConfChange: a membership change was applied.
	EventConfChange
	// EventRemoved: the group was removed from the host (RemoveGroup,
	// DiscardGroup): no more events come for it until it is added again.
	EventRemoved
)

func (k EventKind) String() string {
	switch k {
	case EventLeadership:
		return "leadership"
	case EventCommit:
		return "commit"
	case EventConfChange:
		return "conf-change"
	case EventRemoved:
		return "removed"
	}
	return "mixed"
}

// Event is one change of one group on this node.
type Event struct {
	Kind  EventKind
	Group uint64
	// Leadership (EventLeadership): the published leadership; State is
	// this node's Raft role when it was published, Term and Leader are
	// Leadership's.
	Leadership Leadership
	State      State
	// CommitIndex (EventCommit): the Raft index committed and applied.
	CommitIndex uint64
	// Voters and Learners (EventConfChange): the membership applied.
	Voters, Learners []uint64
}

// Term is the event's term (leadership events).
func (e Event) Term() uint64 { return e.Leadership.Term }

// Leader is the leader the event names, 0 if none is known.
func (e Event) Leader() uint64 { return e.Leadership.Leader }

// Subscription receives the events of the kinds it asked for, from
// Subscribe until Close.
type Subscription struct {
	h     *Host
	kinds EventKind
	ready chan struct{}

	mu       sync.Mutex
	q        []Event
	commitAt map[uint64]int // group -> index in q of its queued commit event
	closed   bool
}

// Subscribe returns a subscription to the events of the given kinds (an
// OR of EventKind bits) of every group of the host, added now or later.
func (h *Host) Subscribe(kinds EventKind) *Subscription {
	s := &Subscription{h: h, kinds: kinds, ready: make(chan struct{}, 1)}
	h.subsMu.Lock()
	defer h.subsMu.Unlock()
	subs := slices.Clone(h.subsList())
	subs = append(subs, s)
	h.subs.Store(&subs)
	return s
}

func (h *Host) subsList() []*Subscription {
	if p := h.subs.Load(); p != nil {
		return *p
	}
	return nil
}

// Ready has a value when events wait to be taken (Take).
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Take returns the queued events, oldest first, appended to buf, and
// empties the queue.
func (s *Subscription) Take(buf []Event) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	buf = append(buf, s.q...)
	clear(s.q)
	s.q = s.q[:0]
	clear(s.commitAt)
	return buf
}

// Close ends the subscription: no event is queued on it any more.
func (s *Subscription) Close() {
	h := s.h
	h.subsMu.Lock()
	subs := slices.DeleteFunc(slices.Clone(h.subsList()), func(o *Subscription) bool { return o == s })
	h.subs.Store(&subs)
	h.subsMu.Unlock()
	s.mu.Lock()
	s.closed = true
	s.q = nil
	s.mu.Unlock()
}

func (s *Subscription) push(e Event) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if e.Kind == EventCommit {
		if i, ok := s.commitAt[e.Group]; ok {
			s.q[i] = e
			s.mu.Unlock()
			return
		}
		if s.commitAt == nil {
			s.commitAt = map[uint64]int{}
		}
		s.commitAt[e.Group] = len(s.q)
	}
	s.q = append(s.q, e)
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// wants reports whether any subscription asks for kind: the event is
// built only then (the commit path runs for every entry of every group).
func (h *Host) wants(kind EventKind) bool {
	for _, s := range h.subsList() {
		if s.kinds&kind != 0 {
			return true
		}
	}
	return false
}

// emit queues e on every subscription that asked for its kind. It never
// blocks; it may run with the group's lock held.
func (h *Host) emit(e Event) {
	for _, s := range h.subsList() {
		if s.kinds&e.Kind != 0 {
			s.push(e)
		}
	}
}

// emitLeadershipLocked publishes l for g (publishLocked). g.mu held.
func (g *group) emitLeadershipLocked(l Leadership) {
	h := g.h
	if h == nil || !h.wants(EventLeadership) {
		return
	}
	st := StateFollower
	if g.rn != nil {
		st = stateOf(g.rn.BasicStatus().RaftState)
	}
	h.emit(Event{Kind: EventLeadership, Group: g.id, Leadership: l, State: st})
}
