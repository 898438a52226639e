package group

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	iclock "holdfast/internal/clock"
)

// State is a classic group's state, named as Kafka names it on the wire.
type State string

const (
	Empty               State = "Empty"
	PreparingRebalance  State = "PreparingRebalance"
	CompletingRebalance State = "CompletingRebalance"
	Stable              State = "Stable"
	Dead                State = "Dead"
)

type member struct {
	id         string
	instanceID *string
	clientID   string
	clientHost string

	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	protocolType     string
	protocols        []kmsg.JoinGroupRequestProtocol
	assignment       []byte

	// expires is when the session ends without a heartbeat; members waiting
	// on a join or sync are kept alive by that request instead.
	expires time.Time
	join    chan kmsg.Response // waiting JoinGroup reply, if any
	sync    chan kmsg.Response // waiting SyncGroup reply, if any
	isNew   bool               // joined during the current rebalance
	synced  bool               // sent SyncGroup in the current generation
}

func (m *member) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

func (m *member) sameProtocols(ps []kmsg.JoinGroupRequestProtocol) bool {
	if len(ps) != len(m.protocols) {
		return false
	}
	for i := range ps {
		if ps[i].Name != m.protocols[i].Name || string(ps[i].Metadata) != string(m.protocols[i].Metadata) {
			return false
		}
	}
	return true
}

type offset struct {
	offset      int64
	leaderEpoch int32
	metadata    string
	commitTime  time.Time
}

type topicPartition struct {
	topic     string
	partition int32
}

type group struct {
	name         string
	state        State
	stateSince   time.Time
	generation   int32
	protocolType string
	protocol     string
	leader       string

	members map[string]*member
	static  map[string]string    // instance id -> member id
	pending map[string]time.Time // KIP-394 member ids handed out, not yet joined -> expiry

	offsets map[topicPartition]offset

	// Rebalance bookkeeping.
	joinDeadline   time.Time // PreparingRebalance: complete the join by then
	initialDelay   bool      // the join deadline is group.initial.rebalance.delay
	initialLeft    time.Duration
	newMemberAdded bool
	syncDeadline   time.Time // CompletingRebalance: members that have not synced by then are removed

	timer   *iclock.Timer
	timerAt time.Time

	// consumer is the KIP-848 state of a consumer group (consumer.go);
	// nil for a classic group.
	consumer *consumerGroup
}

func newGroup(name string, now time.Time) *group {
	return &group{
		name:       name,
		state:      Empty,
		stateSince: now,
		members:    map[string]*member{},
		static:     map[string]string{},
		pending:    map[string]time.Time{},
		offsets:    map[topicPartition]offset{},
	}
}

func (g *group) setState(s State, now time.Time) {
	g.state = s
	g.stateSince = now
}

// fenced reports whether instanceID belongs to a different member id
// (KIP-345): a newer incarnation of the static member has replaced this one.
func (g *group) fenced(instanceID *string, memberID string) bool {
	if instanceID == nil {
		return false
	}
	id, ok := g.static[*instanceID]
	return ok && id != memberID
}

// supports reports whether a joining member's protocols fit the group: the
// same protocol type and at least one protocol every member supports.
func (g *group) supports(protocolType string, ps []kmsg.JoinGroupRequestProtocol) bool {
	if len(g.members) == 0 {
		return protocolType != "" && len(ps) > 0
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, name := range g.candidates(nil) {
		for _, p := range ps {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

// candidates are the protocols every member (except skip) supports, in the
// first member's order.
func (g *group) candidates(skip *member) []string {
	var out []string
	first := true
	for _, m := range g.members {
		if m == skip {
			continue
		}
		if first {
			for _, p := range m.protocols {
				out = append(out, p.Name)
			}
			first = false
			continue
		}
		kept := out[:0]
		for _, name := range out {
			if hasProtocol(m, name) {
				kept = append(kept, name)
			}
		}
		out = kept
	}
	return out
}

func hasProtocol(m *member, name string) bool {
	for _, p := range m.protocols {
		if p.Name == name {
			return true
		}
	}
	return false
}

// selectProtocol picks, among the protocols all members support, the one most
// members prefer (each votes for its first supported candidate), as Kafka does.
func (g *group) selectProtocol() string {
	cands := g.candidates(nil)
	if len(cands) == 0 {
		return ""
	}
	votes := map[string]int{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if contains(cands, p.Name) {
				votes[p.Name]++
				break
			}
		}
	}
	best := cands[0]
	for _, name := range cands {
		if votes[name] > votes[best] {
			best = name
		}
	}
	return best
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func (g *group) size() int { return len(g.members) + len(g.pending) }

func (g *group) allJoined() bool {
	if len(g.pending) > 0 {
		return false
	}
	for _, m := range g.members {
		if m.join == nil {
			return false
		}
	}
	return true
}

func (g *group) maxRebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

func (g *group) addMember(m *member) {
	if len(g.members) == 0 {
		g.protocolType = m.protocolType
	}
	g.members[m.id] = m
	if m.instanceID != nil {
		g.static[*m.instanceID] = m.id
	}
	if g.leader == "" {
		g.leader = m.id
	}
}

func (g *group) removeMember(id string) {
	m := g.members[id]
	if m == nil {
		return
	}
	delete(g.members, id)
	if m.instanceID != nil && g.static[*m.instanceID] == id {
		delete(g.static, *m.instanceID)
	}
	if g.leader == id {
		g.leader = ""
		for other := range g.members {
			g.leader = other
			break
		}
	}
}

// failWaiters answers every waiting join and sync with code (at shutdown,
// or NOT_COORDINATOR when this node stops leading the group's partition).
func (g *group) failWaiters(code int16) {
	for _, m := range g.members {
		if m.join != nil {
			r := kmsg.NewPtrJoinGroupResponse()
			r.ErrorCode = code
			r.MemberID = m.id
			m.join <- r
			m.join = nil
		}
		if m.sync != nil {
			r := kmsg.NewPtrSyncGroupResponse()
			r.ErrorCode = code
			m.sync <- r
			m.sync = nil
		}
	}
}

// prepareRebalance moves the group to PreparingRebalance: a sync in flight
// is answered REBALANCE_IN_PROGRESS and the join deadline is set.
func (c *Coordinator) prepareRebalance(g *group, now time.Time, reason string) {
	if g.state == CompletingRebalance {
		for _, m := range g.members {
			m.assignment = nil
			if m.sync != nil {
				r := kmsg.NewPtrSyncGroupResponse()
				r.ErrorCode = kerr.RebalanceInProgress.Code
				m.sync <- r
				m.sync = nil
			}
		}
	}
	wasEmpty := g.state == Empty
	g.setState(PreparingRebalance, now)
	g.syncDeadline = time.Time{}
	rt := g.maxRebalanceTimeout()
	if wasEmpty && c.cfg.InitialRebalanceDelay > 0 {
		// KIP-134: wait for more members before the first generation.
		d := min(c.cfg.InitialRebalanceDelay, rt)
		g.initialDelay = true
		g.initialLeft = max(rt-c.cfg.InitialRebalanceDelay, 0)
		g.newMemberAdded = false
		g.joinDeadline = now.Add(d)
	} else {
		g.initialDelay = false
		g.joinDeadline = now.Add(rt)
	}
	c.log.Info("preparing rebalance", "group", g.name, "generation", g.generation, "members", len(g.members), "reason", reason)
}

// maybeCompleteJoin completes the join phase once every member has rejoined
// (never early during the initial delay).
func (c *Coordinator) maybeCompleteJoin(g *group, now time.Time) {
	if g.state == PreparingRebalance && !g.initialDelay && g.allJoined() {
		c.completeJoin(g, now)
	}
}

// completeJoin ends the join phase: members that did not rejoin are removed,
// the generation advances and every waiting member gets its JoinGroup
// response (the leader with everyone's metadata).
func (c *Coordinator) completeJoin(g *group, now time.Time) {
	for id, m := range g.members {
		if m.join == nil {
			c.log.Info("removing member that did not rejoin", "group", g.name, "member", id)
			g.removeMember(id)
		}
	}
	g.joinDeadline = time.Time{}
	g.initialDelay = false
	g.generation++
	if len(g.members) == 0 {
		g.protocol = ""
		g.leader = ""
		g.setState(Empty, now)
		c.log.Info("group is empty", "group", g.name, "generation", g.generation)
		// Kafka persists the empty generation too; a failed write only
		// loses the generation number, never an offset.
		c.persistGroup(g, now)
		return
	}
	g.protocol = g.selectProtocol()
	if g.leader == "" || g.members[g.leader] == nil {
		for id := range g.members {
			g.leader = id
			break
		}
	}
	g.setState(CompletingRebalance, now)
	g.syncDeadline = now.Add(g.maxRebalanceTimeout())
	var all []kmsg.JoinGroupResponseMember
	for _, m := range g.members {
		all = append(all, kmsg.JoinGroupResponseMember{MemberID: m.id, InstanceID: m.instanceID, ProtocolMetadata: m.metadata(g.protocol)})
	}
	for _, m := range g.members {
		m.isNew = false
		m.synced = false
		m.expires = now.Add(m.sessionTimeout)
		r := c.joinResponse(g, m)
		if m.id == g.leader {
			r.Members = all
		}
		m.join <- r
		m.join = nil
	}
	c.log.Info("rebalance joined", "group", g.name, "generation", g.generation, "protocol", g.protocol, "leader", g.leader, "members", len(g.members))
}

func (c *Coordinator) joinResponse(g *group, m *member) *kmsg.JoinGroupResponse {
	r := kmsg.NewPtrJoinGroupResponse()
	r.Generation = g.generation
	pt, p := g.protocolType, g.protocol
	r.ProtocolType = &pt
	r.Protocol = &p
	r.LeaderID = g.leader
	r.MemberID = m.id
	return r
}

// completeSync makes the group Stable and hands every waiting member its
// assignment.
func (c *Coordinator) completeSync(g *group, now time.Time) {
	g.setState(Stable, now)
	g.syncDeadline = time.Time{}
	for _, m := range g.members {
		if m.sync != nil {
			r := c.syncResponse(g, m)
			m.sync <- r
			m.sync = nil
		}
	}
	c.log.Info("group stable", "group", g.name, "generation", g.generation, "members", len(g.members))
}

func (c *Coordinator) syncResponse(g *group, m *member) *kmsg.SyncGroupResponse {
	r := kmsg.NewPtrSyncGroupResponse()
	pt, p := g.protocolType, g.protocol
	r.ProtocolType = &pt
	r.Protocol = &p
	r.MemberAssignment = m.assignment
	if r.MemberAssignment == nil {
		r.MemberAssignment = []byte{}
	}
	return r
}

// memberLeft removes a member (left, expired or fenced) and starts the
// rebalance that redistributes its partitions.
func (c *Coordinator) memberLeft(g *group, id string, now time.Time, reason string) {
	m := g.members[id]
	if m == nil {
		return
	}
	if m.join != nil {
		r := kmsg.NewPtrJoinGroupResponse()
		r.ErrorCode = kerr.UnknownMemberID.Code
		r.MemberID = id
		m.join <- r
		m.join = nil
	}
	if m.sync != nil {
		r := kmsg.NewPtrSyncGroupResponse()
		r.ErrorCode = kerr.UnknownMemberID.Code
		m.sync <- r
		m.sync = nil
	}
	g.removeMember(id)
	c.log.Info("member removed", "group", g.name, "member", id, "reason", reason)
	switch g.state {
	case Stable, CompletingRebalance:
		c.prepareRebalance(g, now, reason)
		c.maybeCompleteJoin(g, now) // the last member left: straight to Empty
	case PreparingRebalance:
		c.maybeCompleteJoin(g, now)
	}
}

// arm points the group's timer at its next deadline.
func (c *Coordinator) arm(g *group) {
	if c.closed {
		return
	}
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	consider(g.joinDeadline)
	consider(g.syncDeadline)
	for _, t := range g.pending {
		consider(t)
	}
	for _, m := range g.members {
		if m.join == nil && m.sync == nil {
			consider(m.expires)
		}
	}
	if g.consumer != nil {
		g.consumer.deadlines(consider)
	}
	if next.IsZero() {
		if g.timer != nil {
			g.timer.Stop()
		}
		g.timerAt = time.Time{}
		return
	}
	if next.Equal(g.timerAt) && g.timer != nil {
		return
	}
	g.timerAt = next
	d := next.Sub(c.opts.Now())
	if g.timer == nil {
		g.timer = c.opts.Clock.AfterFunc(d, func() { c.onTimer(g) })
	} else {
		g.timer.Reset(d)
	}
}

func (c *Coordinator) onTimer(g *group) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.groups[g.name] != g {
		return
	}
	g.timerAt = time.Time{}
	c.expire(g, c.opts.Now())
	c.arm(g)
}

// expire runs every deadline that has passed.
func (c *Coordinator) expire(g *group, now time.Time) {
	if g.consumer != nil {
		c.expireConsumer(g, now)
		return
	}
	for id, t := range g.pending {
		if !now.Before(t) {
			delete(g.pending, id)
			if g.state == PreparingRebalance {
				c.maybeCompleteJoin(g, now)
			}
		}
	}
	for id, m := range g.members {
		if m.join == nil && m.sync == nil && !m.expires.IsZero() && !now.Before(m.expires) {
			c.memberLeft(g, id, now, "session timeout")
		}
	}
	if g.state == PreparingRebalance && !g.joinDeadline.IsZero() && !now.Before(g.joinDeadline) {
		if g.initialDelay && g.newMemberAdded && g.initialLeft > 0 {
			d := min(c.cfg.InitialRebalanceDelay, g.initialLeft)
			g.initialLeft = max(g.initialLeft-c.cfg.InitialRebalanceDelay, 0)
			g.newMemberAdded = false
			g.joinDeadline = now.Add(d)
		} else {
			c.completeJoin(g, now)
		}
	}
	if g.state == CompletingRebalance && !g.syncDeadline.IsZero() && !now.Before(g.syncDeadline) {
		// A member that never sends SyncGroup (a leader that never assigns)
		// must not hold the group forever: drop it and rebalance.
		for id, m := range g.members {
			if !m.synced {
				c.memberLeft(g, id, now, "no SyncGroup within the rebalance timeout")
				if g.state != CompletingRebalance {
					break
				}
			}
		}
	}
}
