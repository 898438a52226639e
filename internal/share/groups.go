package share

import (
	"errors"
	"hash/fnv"
	"slices"
	"sort"
	"sync"
	"time"
)

// Share-group membership (ShareGroupHeartbeat) on the group coordinator.
// The assignment is computed by the coordinator at once on every change
// of membership, subscriptions or subscribed topics' partition counts
// (the group epoch goes up); a member whose assignment changed gets the
// group epoch as its member epoch and its new assignment in the next
// heartbeat answer. Share groups have no revocation step: a partition may
// be given to several members at once (more members than partitions), and
// handing one over needs no wait, since records are locked one by one.
//
// Membership is kept in memory on the coordinator, not in the log: after
// a coordinator failover members heartbeating the new coordinator get
// UNKNOWN_MEMBER_ID and join again at epoch 0. Nothing durable is in it:
// what each record's state is lives in the share-partition state (Store).

// Membership errors (Kafka's codes of the same names).
var (
	ErrUnknownMember      = errors.New("share: UNKNOWN_MEMBER_ID")
	ErrFencedMemberEpoch  = errors.New("share: FENCED_MEMBER_EPOCH")
	ErrGroupMaxSize       = errors.New("share: GROUP_MAX_SIZE_REACHED")
	ErrInvalidHeartbeat   = errors.New("share: INVALID_REQUEST")
	ErrGroupNotFound      = errors.New("share: GROUP_ID_NOT_FOUND")
	ErrNonEmptyShareGroup = errors.New("share: NON_EMPTY_GROUP")
)

// TopicInfo is a topic as the assignor sees it.
type TopicInfo struct {
	Name       string
	ID         [16]byte
	Partitions int32
}

// GroupsConfig configures share-group membership.
type GroupsConfig struct {
	SessionTimeout    time.Duration // group.share.session.timeout.ms (45 s)
	HeartbeatInterval time.Duration // group.share.heartbeat.interval.ms (5 s)
	MaxSize           int           // group.share.max.size (200)
	// Topic looks a topic up in the metadata.
	Topic func(name string) (TopicInfo, bool)
	// Partition is group's __consumer_offsets partition.
	Partition func(group string) int32
	Now       func() time.Time
}

// Member is one share-group member.
type Member struct {
	ID, ClientID, ClientHost string
	Rack                     *string
	Epoch                    int32
	Subscribed               []string
	Assignment               map[[16]byte][]int32
	lastSeen                 time.Time
	// known is the epoch the member was last told: a reassignment moves
	// Epoch at once, and the member's next heartbeat still carries known
	// (as in Kafka, where the member's epoch moves in its own heartbeat).
	known int32
}

// Group is one share group's membership.
type Group struct {
	ID              string
	Epoch           int32 // group epoch
	AssignmentEpoch int32
	Members         map[string]*Member
	topicsHash      uint64
}

// State is the group's state as ListGroups and ShareGroupDescribe show
// it: Empty or Stable (the assignment is computed at once).
func (g *Group) State() string {
	if len(g.Members) == 0 {
		return "Empty"
	}
	return "Stable"
}

// Groups is the share groups this coordinator node knows.
type Groups struct {
	cfg    GroupsConfig
	mu     sync.Mutex
	groups map[string]*Group
}

// NewGroups is an empty set of share groups.
func NewGroups(cfg GroupsConfig) *Groups {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 45 * time.Second
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 5 * time.Second
	}
	if cfg.MaxSize <= 0 {
		cfg.MaxSize = 200
	}
	return &Groups{cfg: cfg, groups: map[string]*Group{}}
}

// HeartbeatInterval is what members are told.
func (gs *Groups) HeartbeatInterval() time.Duration { return gs.cfg.HeartbeatInterval }

// Heartbeat is one ShareGroupHeartbeat.
type Heartbeat struct {
	Group, Member        string
	Epoch                int32
	Rack                 *string
	Subscribed           []string // nil: unchanged
	ClientID, ClientHost string
}

// HeartbeatResult is the answer: the member's epoch and, if it changed
// (or the member joined or sent its full state), its assignment.
type HeartbeatResult struct {
	Epoch      int32
	Assignment map[[16]byte][]int32 // nil: not sent
}

// Heartbeat handles one heartbeat.
func (gs *Groups) Heartbeat(h Heartbeat) (HeartbeatResult, error) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	now := gs.cfg.Now()
	gs.expireLocked(now)
	g := gs.groups[h.Group]
	if h.Member == "" {
		return HeartbeatResult{}, ErrInvalidHeartbeat
	}
	if h.Epoch == -1 {
		if g == nil || g.Members[h.Member] == nil {
			return HeartbeatResult{Epoch: -1}, nil
		}
		delete(g.Members, h.Member)
		gs.reassign(g)
		return HeartbeatResult{Epoch: -1}, nil
	}
	if h.Epoch == 0 && h.Subscribed == nil {
		return HeartbeatResult{}, ErrInvalidHeartbeat
	}
	if g == nil {
		if h.Epoch != 0 {
			return HeartbeatResult{}, ErrUnknownMember
		}
		g = &Group{ID: h.Group, Members: map[string]*Member{}}
		gs.groups[h.Group] = g
	}
	m := g.Members[h.Member]
	full := h.Subscribed != nil
	switch {
	case h.Epoch == 0 && m == nil:
		if len(g.Members) >= gs.cfg.MaxSize {
			return HeartbeatResult{}, ErrGroupMaxSize
		}
		m = &Member{ID: h.Member}
		g.Members[h.Member] = m
	case h.Epoch == 0:
		// The member rejoins (it lost its state): it gets its assignment again.
		full = true
	case m == nil:
		return HeartbeatResult{}, ErrUnknownMember
	case h.Epoch != m.Epoch && h.Epoch != m.known:
		return HeartbeatResult{}, ErrFencedMemberEpoch
	}
	m.lastSeen = now
	m.ClientID, m.ClientHost = h.ClientID, h.ClientHost
	if h.Rack != nil {
		m.Rack = h.Rack
	}
	changed := false
	if h.Subscribed != nil {
		subs := slices.Clone(h.Subscribed)
		sort.Strings(subs)
		subs = slices.Compact(subs)
		if !slices.Equal(subs, m.Subscribed) || h.Epoch == 0 && m.Epoch == 0 {
			m.Subscribed = subs
			changed = true
		}
	}
	if hash := gs.topicsHash(g); changed || hash != g.topicsHash {
		gs.reassign(g)
	}
	res := HeartbeatResult{Epoch: m.Epoch}
	if full || m.Epoch != h.Epoch {
		res.Assignment = m.Assignment
		if res.Assignment == nil {
			res.Assignment = map[[16]byte][]int32{}
		}
	}
	m.known = m.Epoch
	return res, nil
}

// topicsHash is a hash of the group's subscribed topics' ids and
// partition counts: a topic created, deleted or grown changes it.
func (gs *Groups) topicsHash(g *Group) uint64 {
	names := map[string]bool{}
	for _, m := range g.Members {
		for _, t := range m.Subscribed {
			names[t] = true
		}
	}
	h := fnv.New64a()
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for n := range names {
			if !yield(n) {
				return
			}
		}
	}) {
		t, ok := gs.cfg.Topic(n)
		h.Write([]byte(n))
		if ok {
			h.Write(t.ID[:])
			h.Write([]byte{byte(t.Partitions >> 24), byte(t.Partitions >> 16), byte(t.Partitions >> 8), byte(t.Partitions)})
		}
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// reassign bumps the group epoch and computes every member's assignment:
// per subscribed topic, its partitions are spread evenly over the members
// subscribed to it (round robin, starting at a different member for each
// topic); with more members than partitions, each member gets one
// partition and a partition several members. Members whose assignment
// changed move to the new epoch.
func (gs *Groups) reassign(g *Group) {
	g.Epoch++
	g.topicsHash = gs.topicsHash(g)
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range g.Members {
			if !yield(id) {
				return
			}
		}
	})
	next := map[string]map[[16]byte][]int32{}
	for _, id := range ids {
		next[id] = map[[16]byte][]int32{}
	}
	topics := map[string][]string{} // topic -> subscribed members
	for _, id := range ids {
		for _, t := range g.Members[id].Subscribed {
			topics[t] = append(topics[t], id)
		}
	}
	rot := 0
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range topics {
			if !yield(n) {
				return
			}
		}
	}) {
		t, ok := gs.cfg.Topic(name)
		if !ok || t.Partitions <= 0 {
			continue
		}
		ms := topics[name]
		n := int(t.Partitions)
		if len(ms) <= n {
			for p := 0; p < n; p++ {
				id := ms[(p+rot)%len(ms)]
				next[id][t.ID] = append(next[id][t.ID], int32(p))
			}
		} else {
			for i, id := range ms {
				p := (i + rot) % n
				next[id][t.ID] = append(next[id][t.ID], int32(p))
			}
		}
		rot++
	}
	for _, id := range ids {
		m := g.Members[id]
		for tid, ps := range next[id] {
			slices.Sort(ps)
			next[id][tid] = ps
		}
		if !sameAssignment(m.Assignment, next[id]) || m.Epoch == 0 {
			m.Assignment = next[id]
			m.Epoch = g.Epoch
		}
	}
	g.AssignmentEpoch = g.Epoch
}

func sameAssignment(a, b map[[16]byte][]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// expireLocked removes members silent for the session timeout.
func (gs *Groups) expireLocked(now time.Time) {
	for _, g := range gs.groups {
		gone := false
		for id, m := range g.Members {
			if now.Sub(m.lastSeen) > gs.cfg.SessionTimeout {
				delete(g.Members, id)
				gone = true
			}
		}
		if gone {
			gs.reassign(g)
		}
	}
}

// Describe is a copy of group g (ok false if unknown here).
func (gs *Groups) Describe(name string) (Group, bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.expireLocked(gs.cfg.Now())
	g := gs.groups[name]
	if g == nil {
		return Group{}, false
	}
	c := *g
	c.Members = map[string]*Member{}
	for id, m := range g.Members {
		mc := *m
		c.Members[id] = &mc
	}
	return c, true
}

// List is every share group known here, sorted by id.
func (gs *Groups) List() []Group {
	gs.mu.Lock()
	names := make([]string, 0, len(gs.groups))
	for n := range gs.groups {
		names = append(names, n)
	}
	gs.mu.Unlock()
	sort.Strings(names)
	var out []Group
	for _, n := range names {
		if g, ok := gs.Describe(n); ok {
			out = append(out, g)
		}
	}
	return out
}

// Delete forgets group name if it has no members.
func (gs *Groups) Delete(name string) error {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.expireLocked(gs.cfg.Now())
	g := gs.groups[name]
	if g != nil && len(g.Members) > 0 {
		return ErrNonEmptyShareGroup
	}
	delete(gs.groups, name)
	return nil
}

// Mark records an empty share group (its share state was created by an
// admin, or replayed), so it is listed.
func (gs *Groups) Mark(name string) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.groups[name] == nil {
		gs.groups[name] = &Group{ID: name, Members: map[string]*Member{}}
	}
}

// Exists reports whether name is a share group here.
func (gs *Groups) Exists(name string) bool {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return gs.groups[name] != nil
}

// UnloadPartition forgets the groups of __consumer_offsets partition p
// (this node no longer coordinates them).
func (gs *Groups) UnloadPartition(p int32) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for name := range gs.groups {
		if gs.cfg.Partition(name) == p {
			delete(gs.groups, name)
		}
	}
}
