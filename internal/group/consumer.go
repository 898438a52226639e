package group

// KIP-848 consumer groups: the server-side assignment protocol
// (ConsumerGroupHeartbeat). A consumer group lives in the same map as the
// classic groups (one group id, one group, as in Kafka) with its offsets in
// group.offsets; its protocol state is in group.consumer.
//
// The model is Kafka's (GroupMetadataManager, CurrentAssignmentBuilder):
//   - the group epoch is bumped by every change of membership, subscription
//     or subscribed-topic metadata; the target assignment is recomputed at
//     once (the assignors are cheap), so the assignment epoch follows it;
//   - each member converges on its target one heartbeat at a time:
//     partitions leaving it are revoked first (the member's epoch stays
//     until it confirms by no longer reporting them), partitions still
//     owned by another member are held back (unreleased) until that member
//     has revoked them, so a partition never has two owners;
//   - everything is written to __consumer_offsets in Kafka's record types
//     (ConsumerGroupMetadata, ConsumerGroupMemberMetadata,
//     ConsumerGroupTargetAssignmentMember/Metadata,
//     ConsumerGroupCurrentMemberAssignment) before the member hears of it.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/records"
)

// Consumer group states, as Kafka names them on the wire (Empty, Stable and
// Dead are shared with classic groups).
const (
	Assigning   State = "Assigning"
	Reconciling State = "Reconciling"
)

// Member states (Kafka's MemberState, stored in the current-assignment
// record).
const (
	memberStable     int8 = 1 // has its target (or all of it not held by others)
	memberUnrevoked  int8 = 2 // must revoke partitions before getting more
	memberUnreleased int8 = 3 // waits for partitions other members still own
)

// Member epochs with a meaning in requests.
const (
	leaveEpoch       = -1 // the member leaves
	staticLeaveEpoch = -2 // a static member leaves for now, its partitions kept
)

// regexRefresh is how often a group's regular expressions are matched
// against the topics again (Kafka refreshes them at most every 10s too).
const regexRefresh = 10 * time.Second

// TopicInfo is what the coordinator needs to know about a topic.
type TopicInfo struct {
	Name       string
	ID         [16]byte
	Partitions int32
}

type tpKey struct {
	id [16]byte
	p  int32
}

// assignment is a set of partitions by topic id, partitions sorted.
type assignment map[[16]byte][]int32

func (a assignment) clone() assignment {
	out := make(assignment, len(a))
	for id, ps := range a {
		out[id] = slices.Clone(ps)
	}
	return out
}

func (a assignment) count() int {
	n := 0
	for _, ps := range a {
		n += len(ps)
	}
	return n
}

func (a assignment) has(id [16]byte, p int32) bool {
	_, ok := slices.BinarySearch(a[id], p)
	return ok
}

func (a assignment) add(id [16]byte, p int32) {
	ps := a[id]
	i, ok := slices.BinarySearch(ps, p)
	if !ok {
		a[id] = slices.Insert(ps, i, p)
	}
}

func (a assignment) equal(b assignment) bool {
	if len(a) != len(b) {
		return false
	}
	for id, ps := range a {
		if !slices.Equal(ps, b[id]) {
			return false
		}
	}
	return true
}

func (a assignment) each(fn func(id [16]byte, p int32)) {
	for id, ps := range a {
		for _, p := range ps {
			fn(id, p)
		}
	}
}

// fromOwned reads a heartbeat's owned partitions; nil stays nil (not sent).
func fromOwned(ts []kmsg.ConsumerGroupHeartbeatRequestTopic) assignment {
	if ts == nil {
		return nil
	}
	a := assignment{}
	for _, t := range ts {
		for _, p := range t.Partitions {
			a.add(t.TopicID, p)
		}
	}
	return a
}

type cmember struct {
	id         string
	instanceID *string
	rackID     *string
	clientID   string
	clientHost string

	topics           []string // SubscribedTopicNames, sorted
	regex            *string  // SubscribedTopicRegex
	assignor         *string  // ServerAssignor
	rebalanceTimeout time.Duration

	epoch, prevEpoch int32
	state            int8
	assigned         assignment      // what the member has been given
	assignedAt       map[tpKey]int32 // epoch at which each assigned partition was given (KIP-1251)
	revoking         assignment      // what it must give up
	target           assignment      // where it converges

	expires  time.Time // session end without a heartbeat
	revokeBy time.Time // rebalance timeout while revoking (zero: not revoking)

	classic *classicMeta // a member speaking the classic protocol (mixed.go); nil otherwise
}

func (m *cmember) left() bool { return m.epoch == staticLeaveEpoch }

type consumerGroup struct {
	epoch           int32 // group epoch
	assignmentEpoch int32 // epoch of the target assignment
	metaHash        uint64
	members         map[string]*cmember
	static          map[string]string   // instance id -> member id
	owner           map[tpKey]string    // partition -> member holding it (assigned or revoking)
	regexTopics     map[string][]string // regex -> matching topics at regexAt
	regexAt         time.Time
}

func newConsumerGroup() *consumerGroup {
	return &consumerGroup{members: map[string]*cmember{}, static: map[string]string{}, owner: map[tpKey]string{}, regexTopics: map[string][]string{}}
}

// assignorName is the assignor the group uses: the one most members ask
// for (Kafka's rule), else the first configured.
func (c *Coordinator) assignorName(cg *consumerGroup) string {
	votes := map[string]int{}
	for _, m := range cg.members {
		if m.assignor != nil && !m.left() {
			votes[*m.assignor]++
		}
	}
	best := c.cfg.ConsumerAssignors[0]
	for _, name := range c.cfg.ConsumerAssignors {
		if votes[name] > votes[best] {
			best = name
		}
	}
	return best
}

func (c *Coordinator) assignorKnown(name string) bool {
	return slices.Contains(c.cfg.ConsumerAssignors, name)
}

// setOwner records which member holds m's partitions now.
func (cg *consumerGroup) release(m *cmember) {
	drop := func(id [16]byte, p int32) {
		k := tpKey{id, p}
		if cg.owner[k] == m.id {
			delete(cg.owner, k)
		}
	}
	m.assigned.each(drop)
	m.revoking.each(drop)
}

func (cg *consumerGroup) hold(m *cmember) {
	set := func(id [16]byte, p int32) { cg.owner[tpKey{id, p}] = m.id }
	m.assigned.each(set)
	m.revoking.each(set)
}

// updateState derives the group's state as Kafka does.
func (cg *consumerGroup) updateState(g *group, now time.Time) {
	s := Stable
	active := 0
	for _, m := range cg.members {
		if m.left() {
			continue
		}
		active++
		if m.epoch != cg.assignmentEpoch || m.state != memberStable {
			s = Reconciling
		}
	}
	switch {
	case len(cg.members) == 0:
		s = Empty
	case cg.epoch > cg.assignmentEpoch:
		s = Assigning
	case active == 0:
		s = Stable
	}
	if g.state != s {
		g.setState(s, now)
	}
}

// ownsAny reports whether the member still holds one of revoking; an
// unknown owned set (a heartbeat that did not send it) counts as yes.
func ownsAny(revoking, owned assignment) bool {
	if len(revoking) == 0 {
		return false
	}
	if owned == nil {
		return true
	}
	found := false
	revoking.each(func(id [16]byte, p int32) {
		if owned.has(id, p) {
			found = true
		}
	})
	return found
}

// reconcile moves m one step towards its target (Kafka's
// CurrentAssignmentBuilder); it reports whether the member's current
// assignment (assigned, revoking, epoch or state) changed.
func (c *Coordinator) reconcile(cg *consumerGroup, m *cmember, owned assignment, now time.Time) bool {
	switch m.state {
	case memberStable:
		if m.epoch == cg.assignmentEpoch {
			return false
		}
	case memberUnrevoked:
		if ownsAny(m.revoking, owned) {
			return false
		}
	}
	before := struct {
		epoch int32
		state int8
		a, r  assignment
	}{m.epoch, m.state, m.assigned, m.revoking}

	keep, revoke, add := assignment{}, assignment{}, assignment{}
	unreleased := false
	m.assigned.each(func(id [16]byte, p int32) {
		if m.target.has(id, p) {
			keep.add(id, p)
		} else {
			revoke.add(id, p)
		}
	})
	m.target.each(func(id [16]byte, p int32) {
		if m.assigned.has(id, p) {
			return
		}
		if o, ok := cg.owner[tpKey{id, p}]; ok && o != m.id {
			unreleased = true
			return
		}
		add.add(id, p)
	})

	cg.release(m)
	switch {
	case len(revoke) > 0 && ownsAny(revoke, owned):
		// Revoke first; the epoch stays until the member confirms.
		m.state = memberUnrevoked
		m.assigned, m.revoking = keep, revoke
		m.revokeBy = now.Add(m.rebalanceTimeout)
	default:
		m.prevEpoch, m.epoch = m.epoch, cg.assignmentEpoch
		for id, ps := range add {
			for _, p := range ps {
				keep.add(id, p)
			}
		}
		m.assigned, m.revoking = keep, assignment{}
		m.revokeBy = time.Time{}
		m.state = memberStable
		if unreleased {
			m.state = memberUnreleased
		}
	}
	cg.hold(m)
	// Assignment epochs: kept partitions keep theirs, new ones get this epoch.
	at := make(map[tpKey]int32, m.assigned.count())
	m.assigned.each(func(id [16]byte, p int32) {
		k := tpKey{id, p}
		if e, ok := m.assignedAt[k]; ok && before.a.has(id, p) {
			at[k] = e
		} else {
			at[k] = m.epoch
		}
	})
	m.assignedAt = at
	return before.epoch != m.epoch || before.state != m.state || !before.a.equal(m.assigned) || !before.r.equal(m.revoking)
}

// subscriptions resolves every active member's subscription against the
// topics: per member the subscribed topics that exist, and the union.
func (c *Coordinator) subscriptions(cg *consumerGroup, now time.Time) (map[string]map[string]bool, map[string]TopicInfo) {
	var all []TopicInfo
	needAll := false
	for _, m := range cg.members {
		if m.regex != nil {
			needAll = true
		}
	}
	if needAll {
		refresh := now.Sub(cg.regexAt) >= regexRefresh
		for _, m := range cg.members {
			if m.regex != nil {
				if _, ok := cg.regexTopics[*m.regex]; !ok {
					refresh = true
				}
			}
		}
		if refresh {
			all = c.opts.Topics()
			cg.regexTopics = map[string][]string{}
			for _, m := range cg.members {
				if m.regex == nil {
					continue
				}
				if _, done := cg.regexTopics[*m.regex]; done {
					continue
				}
				re, err := compileRegex(*m.regex)
				var match []string
				if err == nil {
					for _, t := range all {
						if re.MatchString(t.Name) {
							match = append(match, t.Name)
						}
					}
				}
				sort.Strings(match)
				cg.regexTopics[*m.regex] = match
			}
			cg.regexAt = now
		}
	}
	per := map[string]map[string]bool{}
	topics := map[string]TopicInfo{}
	lookup := func(name string) bool {
		if _, ok := topics[name]; ok {
			return true
		}
		t, ok := c.opts.Topic(name)
		if ok && t.Partitions > 0 {
			topics[name] = t
		}
		return ok && t.Partitions > 0
	}
	for id, m := range cg.members {
		if m.left() {
			continue
		}
		subs := map[string]bool{}
		for _, t := range m.topics {
			if lookup(t) {
				subs[t] = true
			}
		}
		if m.regex != nil {
			for _, t := range cg.regexTopics[*m.regex] {
				if lookup(t) {
					subs[t] = true
				}
			}
		}
		per[id] = subs
	}
	return per, topics
}

// compileRegex compiles a SubscribedTopicRegex. Kafka uses RE2/J; Go's
// regexp is RE2 too, and the whole topic name must match.
func compileRegex(s string) (*regexp.Regexp, error) {
	return regexp.Compile("^(?:" + s + ")$")
}

func metadataHash(topics map[string]TopicInfo) uint64 {
	names := make([]string, 0, len(topics))
	for n := range topics {
		names = append(names, n)
	}
	sort.Strings(names)
	h := fnv.New64a()
	for _, n := range names {
		t := topics[n]
		fmt.Fprintf(h, "%s/%x/%d;", n, t.ID, t.Partitions)
	}
	return h.Sum64()
}

// bump starts a new group epoch and computes its target assignment at once,
// adding the records to kvs.
func (c *Coordinator) bump(g *group, now time.Time, kvs *[]kv, reason string) {
	cg := g.consumer
	per, topics := c.subscriptions(cg, now)
	cg.epoch++
	cg.metaHash = metadataHash(topics)
	*kvs = append(*kvs, kv{cgMetadataKey(g.name), cgMetadataValue(cg)})
	name := c.assignorName(cg)
	targets := assign(name, cg, per, topics)
	for id, m := range cg.members {
		if m.left() {
			continue // keeps its target until it returns or expires
		}
		t := targets[id]
		if t == nil {
			t = assignment{}
		}
		if !t.equal(m.target) {
			m.target = t
			*kvs = append(*kvs, kv{cgTargetMemberKey(g.name, id), cgTargetMemberValue(t)})
		}
	}
	cg.assignmentEpoch = cg.epoch
	*kvs = append(*kvs, kv{cgTargetMetaKey(g.name), cgTargetMetaValue(cg.assignmentEpoch)})
	c.log.Info("consumer group epoch", "group", g.name, "epoch", cg.epoch, "assignor", name, "members", len(cg.members), "topics", len(topics), "reason", reason)
}

// maybeMetadataChanged bumps the epoch when the subscribed topics changed
// (created, deleted, grown, or a regex now matches others).
func (c *Coordinator) maybeMetadataChanged(g *group, now time.Time, kvs *[]kv) {
	_, topics := c.subscriptions(g.consumer, now)
	if metadataHash(topics) != g.consumer.metaHash {
		c.bump(g, now, kvs, "subscribed topic metadata changed")
	}
}

func newConsumerMemberID() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func heartbeatInvalid(req *kmsg.ConsumerGroupHeartbeatRequest) string {
	switch {
	case req.Group == "":
		return "GroupId can't be empty."
	case req.Version >= 1 && req.MemberID == "":
		return "MemberId can't be empty."
	case req.InstanceID != nil && *req.InstanceID == "":
		return "InstanceId can't be empty."
	case req.RackID != nil && *req.RackID == "":
		return "RackId can't be empty."
	case req.MemberEpoch < staticLeaveEpoch:
		return "MemberEpoch is invalid."
	case req.MemberEpoch < 0 && req.MemberID == "":
		return "MemberId can't be empty."
	case req.MemberEpoch == staticLeaveEpoch && req.InstanceID == nil && req.Version == 0:
		return "InstanceId can't be null."
	case req.MemberEpoch == 0 && req.RebalanceTimeoutMillis == -1:
		return "RebalanceTimeoutMs must be provided in first request."
	case req.MemberEpoch == 0 && (req.Topics == nil || len(req.Topics) > 0):
		return "TopicPartitions must be empty when (re-)joining."
	case req.MemberEpoch == 0 && req.SubscribedTopicNames == nil && req.SubscribedTopicRegex == nil:
		return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
	case req.SubscribedTopicNames != nil && req.SubscribedTopicRegex != nil:
		return "SubscribedTopicNames and SubscribedTopicRegex cannot both be set."
	}
	return ""
}

// ConsumerGroupHeartbeat handles a ConsumerGroupHeartbeat request: join
// (epoch 0), heartbeat, or leave (-1, static -2). The Reply answers once the
// records it wrote are committed.
func (c *Coordinator) ConsumerGroupHeartbeat(req *kmsg.ConsumerGroupHeartbeatRequest, clientID, clientHost string) Reply {
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	resp.HeartbeatIntervalMillis = int32(c.cfg.ConsumerHeartbeatInterval / time.Millisecond)
	fail := func(code int16, msg string) Reply {
		resp.ErrorCode = code
		if msg != "" {
			resp.ErrorMessage = &msg
		}
		resp.MemberEpoch = 0
		return respond(resp)
	}
	if req.SubscribedTopicRegex != nil && *req.SubscribedTopicRegex == "" {
		// librdkafka sends an empty regex beside its topic names; Kafka
		// takes an empty regex as none.
		req.SubscribedTopicRegex = nil
	}
	if msg := heartbeatInvalid(req); msg != "" {
		return fail(kerr.InvalidRequest.Code, msg)
	}
	if req.SubscribedTopicRegex != nil {
		if _, err := compileRegex(*req.SubscribedTopicRegex); err != nil {
			return fail(kerr.InvalidRegularExpression.Code, err.Error())
		}
	}
	if req.ServerAssignor != nil && !c.assignorKnown(*req.ServerAssignor) {
		return fail(kerr.UnsupportedAssignor.Code, "ServerAssignor "+*req.ServerAssignor+" is not supported. Supported assignors: "+strings.Join(c.cfg.ConsumerAssignors, ", ")+".")
	}
	if code := c.admit(req.Group); code != 0 {
		return fail(code, "")
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fail(kerr.CoordinatorNotAvailable.Code, "")
	}
	now := c.opts.Now()
	var kvs []kv
	g, code, msg := c.consumerGroupFor(req, now, &kvs)
	if code != 0 {
		return fail(code, msg)
	}
	defer c.arm(g)
	defer c.dropIfUnusedConsumer(g)
	cg := g.consumer
	epoch0 := cg.epoch

	var m *cmember
	switch req.MemberEpoch {
	case leaveEpoch, staticLeaveEpoch:
		m = cg.members[req.MemberID]
		if m == nil {
			if req.InstanceID != nil && cg.static[*req.InstanceID] != "" {
				return fail(kerr.FencedInstanceID.Code, "")
			}
			return fail(kerr.UnknownMemberID.Code, "")
		}
		if req.InstanceID != nil && cg.static[*req.InstanceID] != req.MemberID {
			return fail(kerr.FencedInstanceID.Code, "")
		}
		resp.MemberID = &m.id
		resp.MemberEpoch = req.MemberEpoch
		if req.MemberEpoch == leaveEpoch && c.downgradeOK(g, m) {
			c.downgradeToClassic(g, m, now, &kvs, "the last consumer-protocol member left")
			return c.commitRecords(g, now, kvs, resp)
		}
		if req.MemberEpoch == staticLeaveEpoch && m.instanceID != nil {
			// Kafka keeps a static member's partitions for it until
			// its session ends or its instance comes back.
			cg.release(m)
			m.revoking = assignment{}
			m.revokeBy = time.Time{}
			m.prevEpoch, m.epoch = m.epoch, staticLeaveEpoch
			cg.hold(m)
			kvs = append(kvs, kv{cgCurrentKey(g.name, m.id), cgCurrentValue(m)})
			c.log.Info("static member left for now", "group", g.name, "member", m.id, "instance", *m.instanceID)
		} else {
			c.removeConsumerMember(g, m, now, &kvs, "left the group")
		}
		cg.updateState(g, now)
		return c.commitRecords(g, now, kvs, resp)
	case 0:
		var code int16
		var msg string
		m, code, msg = c.consumerJoin(g, req, clientID, clientHost, now, &kvs)
		if code != 0 {
			return fail(code, msg)
		}
	default:
		m = cg.members[req.MemberID]
		if m != nil && m.classic != nil {
			return fail(kerr.UnknownMemberID.Code, "Member "+m.id+" uses the classic protocol.")
		}
		if m == nil {
			if req.InstanceID != nil && cg.static[*req.InstanceID] != "" {
				return fail(kerr.FencedInstanceID.Code, "")
			}
			return fail(kerr.UnknownMemberID.Code, "")
		}
		if req.InstanceID != nil && cg.static[*req.InstanceID] != m.id {
			return fail(kerr.FencedInstanceID.Code, "")
		}
		if req.MemberEpoch != m.epoch {
			// A member that missed our last answer may come back with
			// its previous epoch while owning a subset of what it has.
			owned := fromOwned(req.Topics)
			ok := req.MemberEpoch == m.prevEpoch && owned != nil
			if ok {
				owned.each(func(id [16]byte, p int32) {
					if !m.assigned.has(id, p) {
						ok = false
					}
				})
			}
			if !ok {
				return fail(kerr.FencedMemberEpoch.Code, fmt.Sprintf("The member epoch %d does not match the expected epoch %d.", req.MemberEpoch, m.epoch))
			}
		}
		if changed := c.updateMember(m, req, clientID, clientHost); changed {
			kvs = append(kvs, kv{cgMemberKey(g.name, m.id), cgMemberValue(m)})
			c.bump(g, now, &kvs, "member "+m.id+" changed its subscription")
		}
	}
	m.expires = now.Add(c.cfg.ConsumerSessionTimeout)
	if cg.epoch == epoch0 {
		c.maybeMetadataChanged(g, now, &kvs)
	}
	before := m.assigned
	if c.reconcile(cg, m, fromOwned(req.Topics), now) || req.MemberEpoch == 0 {
		kvs = append(kvs, kv{cgCurrentKey(g.name, m.id), cgCurrentValue(m)})
	}
	cg.updateState(g, now)
	resp.MemberID = &m.id
	resp.MemberEpoch = m.epoch
	full := req.MemberEpoch == 0 || (req.RebalanceTimeoutMillis != -1 && (req.SubscribedTopicNames != nil || req.SubscribedTopicRegex != nil) && req.Topics != nil)
	if full || !before.equal(m.assigned) {
		resp.Assignment = heartbeatAssignment(m.assigned)
	}
	return c.commitRecords(g, now, kvs, resp)
}

// consumerGroupFor finds or makes the consumer group a heartbeat names
// (mu held): a new one for epoch 0, an empty classic group upgraded at
// once, a classic group with members upgraded online (mixed.go). A
// non-zero code refuses the heartbeat, with its message.
func (c *Coordinator) consumerGroupFor(req *kmsg.ConsumerGroupHeartbeatRequest, now time.Time, kvs *[]kv) (*group, int16, string) {
	g := c.groups[req.Group]
	switch {
	case g == nil && req.MemberEpoch != 0:
		return nil, kerr.GroupIDNotFound.Code, "Consumer group " + req.Group + " not found."
	case g == nil:
		g = newGroup(req.Group, now)
		c.groups[req.Group] = g
		g.protocolType = "consumer"
		g.consumer = newConsumerGroup()
	case g.consumer == nil && (req.MemberEpoch != 0 || g.state == Dead):
		return nil, kerr.GroupIDNotFound.Code, "Group " + req.Group + " is not a consumer group."
	case g.consumer == nil && len(g.members) == 0:
		// An empty classic group is upgraded at once (its offsets stay).
		if g.protocolType != "" || g.generation > 0 {
			*kvs = append(*kvs, kv{groupKey(g.name), nil})
		}
		c.log.Info("empty classic group upgraded to a consumer group", "group", g.name)
		g.pending = map[string]time.Time{}
		g.protocolType, g.protocol, g.leader, g.generation = "consumer", "", "", 0
		g.consumer = newConsumerGroup()
	case g.consumer == nil:
		// Kafka's online upgrade: the classic members carry on inside
		// the consumer group (mixed.go).
		if code, msg := c.upgradeToConsumer(g, now, kvs); code != 0 {
			return nil, code, msg
		}
	}
	return g, 0, ""
}

// heartbeatAssignment is a member's assignment as a heartbeat answers it,
// topics in id order.
func heartbeatAssignment(assigned assignment) *kmsg.ConsumerGroupHeartbeatResponseAssignment {
	a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
	ids := make([][16]byte, 0, len(assigned))
	for id := range assigned {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return string(ids[i][:]) < string(ids[j][:]) })
	for _, id := range ids {
		t := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
		t.TopicID, t.Partitions = id, slices.Clone(assigned[id])
		a.Topics = append(a.Topics, t)
	}
	return &a
}

// consumerJoin admits a member with epoch 0: new, rejoining with its id, or
// a static member replacing its earlier incarnation.
func (c *Coordinator) consumerJoin(g *group, req *kmsg.ConsumerGroupHeartbeatRequest, clientID, clientHost string, now time.Time, kvs *[]kv) (*cmember, int16, string) {
	cg := g.consumer
	id := req.MemberID
	if id == "" {
		id = newConsumerMemberID() // v0: the coordinator names members
	}
	m := cg.members[id]
	var old *cmember
	if req.InstanceID != nil {
		if oid, ok := cg.static[*req.InstanceID]; ok && oid != id {
			old = cg.members[oid]
			if old != nil && !old.left() && old.classic == nil {
				return nil, kerr.UnreleasedInstanceID.Code, fmt.Sprintf("Static member %s with instance id %s cannot join the group because the instance id is owned by %s member.", id, *req.InstanceID, oid)
			}
		}
	}
	if m != nil && m.classic != nil {
		return nil, kerr.UnknownMemberID.Code, "Member " + m.id + " uses the classic protocol."
	}
	if m != nil {
		if m.instanceID != nil && (req.InstanceID == nil || *req.InstanceID != *m.instanceID) {
			return nil, kerr.FencedInstanceID.Code, ""
		}
		if m.left() {
			m.epoch = 0
		}
		if c.updateMember(m, req, clientID, clientHost) {
			*kvs = append(*kvs, kv{cgMemberKey(g.name, m.id), cgMemberValue(m)})
			c.bump(g, now, kvs, "member "+m.id+" rejoined with a new subscription")
		}
		return m, 0, ""
	}
	active := 0
	for _, x := range cg.members {
		if !x.left() {
			active++
		}
	}
	if old == nil && active >= c.cfg.ConsumerMaxSize {
		return nil, kerr.GroupMaxSizeReached.Code, fmt.Sprintf("The consumer group has reached its maximum capacity of %d members.", c.cfg.ConsumerMaxSize)
	}
	m = &cmember{id: id, state: memberStable, assigned: assignment{}, revoking: assignment{}, target: assignment{}}
	c.updateMember(m, req, clientID, clientHost)
	if old != nil {
		// The static member is back under a new id: it takes over the
		// old incarnation's partitions and target.
		cg.release(old)
		m.assigned, m.target, m.assignedAt = old.assigned, old.target, old.assignedAt
		delete(cg.members, old.id)
		*kvs = append(*kvs, kv{cgCurrentKey(g.name, old.id), nil}, kv{cgTargetMemberKey(g.name, old.id), nil}, kv{cgMemberKey(g.name, old.id), nil})
		c.log.Info("static member replaced", "group", g.name, "instance", *req.InstanceID, "old", old.id, "member", id)
	}
	cg.members[id] = m
	if m.instanceID != nil {
		cg.static[*m.instanceID] = id
	}
	cg.hold(m)
	*kvs = append(*kvs, kv{cgMemberKey(g.name, id), cgMemberValue(m)})
	if old == nil || !slices.Equal(old.topics, m.topics) || !ptrEq(old.regex, m.regex) || !ptrEq(old.assignor, m.assignor) {
		c.bump(g, now, kvs, "member "+id+" joined")
	} else {
		*kvs = append(*kvs, kv{cgTargetMemberKey(g.name, id), cgTargetMemberValue(m.target)})
	}
	return m, 0, ""
}

func ptrEq(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// updateMember applies the optional fields of a heartbeat; it reports
// whether the subscription (topics, regex, assignor) changed.
func (c *Coordinator) updateMember(m *cmember, req *kmsg.ConsumerGroupHeartbeatRequest, clientID, clientHost string) bool {
	m.clientID, m.clientHost = clientID, clientHost
	if req.InstanceID != nil {
		m.instanceID = req.InstanceID
	}
	if req.RackID != nil {
		m.rackID = req.RackID
	}
	if req.RebalanceTimeoutMillis > 0 {
		m.rebalanceTimeout = ms(req.RebalanceTimeoutMillis)
	} else if m.rebalanceTimeout <= 0 {
		m.rebalanceTimeout = c.cfg.ConsumerSessionTimeout
	}
	changed := false
	if req.SubscribedTopicNames != nil {
		ts := slices.Clone(req.SubscribedTopicNames)
		sort.Strings(ts)
		ts = slices.Compact(ts)
		if !slices.Equal(ts, m.topics) || m.regex != nil {
			changed = true
		}
		m.topics, m.regex = ts, nil
	}
	if req.SubscribedTopicRegex != nil {
		if m.regex == nil || *m.regex != *req.SubscribedTopicRegex || len(m.topics) > 0 {
			changed = true
		}
		r := *req.SubscribedTopicRegex
		m.regex, m.topics = &r, nil
	}
	if req.ServerAssignor != nil && !ptrEq(m.assignor, req.ServerAssignor) {
		a := *req.ServerAssignor
		m.assignor = &a
		changed = true
	}
	return changed
}

// removeConsumerMember fences m: its partitions are free, the group gets a
// new epoch and target assignment.
func (c *Coordinator) removeConsumerMember(g *group, m *cmember, now time.Time, kvs *[]kv, reason string) {
	cg := g.consumer
	cg.release(m)
	delete(cg.members, m.id)
	if m.instanceID != nil && cg.static[*m.instanceID] == m.id {
		delete(cg.static, *m.instanceID)
	}
	*kvs = append(*kvs, kv{cgCurrentKey(g.name, m.id), nil}, kv{cgTargetMemberKey(g.name, m.id), nil}, kv{cgMemberKey(g.name, m.id), nil})
	c.log.Info("consumer group member removed", "group", g.name, "member", m.id, "reason", reason)
	c.bump(g, now, kvs, reason)
}

// commitRecords appends kvs (if any) and answers resp once they are
// committed; a failed write answers COORDINATOR_NOT_AVAILABLE (the client
// retries; a leadership change reloads the group from the log).
func (c *Coordinator) commitRecords(g *group, now time.Time, kvs []kv, resp *kmsg.ConsumerGroupHeartbeatResponse) Reply {
	return c.commitThen(g, now, kvs, resp, func(code int16) kmsg.Response {
		r := resp.RequestKind().ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		r.ErrorCode = code
		return r
	})
}

// commitThen appends kvs (if any) and answers ok once they are committed,
// or failed(code) if they cannot be.
func (c *Coordinator) commitThen(g *group, now time.Time, kvs []kv, ok kmsg.Response, failed func(code int16) kmsg.Response) Reply {
	if len(kvs) == 0 {
		return respond(ok)
	}
	end, err := c.appendKVs(g.name, now, kvs)
	if err != nil {
		c.log.Warn("writing consumer group records failed", "group", g.name, "err", err)
		code := kerr.CoordinatorNotAvailable.Code
		if errors.Is(err, records.ErrTooLarge) {
			code = kerr.UnknownServerError.Code
		}
		return respond(failed(code))
	}
	log := c.logs[c.partition(g.name)]
	return func(ctx context.Context) kmsg.Response {
		if err := log.WaitCommitted(ctx, end); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.log.Warn("consumer group records not durable", "group", g.name, "err", err)
			return failed(kerr.CoordinatorNotAvailable.Code)
		}
		return ok
	}
}

// dropIfUnusedConsumer forgets a consumer group a failed first join created.
func (c *Coordinator) dropIfUnusedConsumer(g *group) {
	if g.consumer != nil && g.consumer.epoch == 0 && len(g.consumer.members) == 0 && len(g.offsets) == 0 {
		if g.timer != nil {
			g.timer.Stop()
		}
		delete(c.groups, g.name)
	}
}

// expireConsumer removes members whose session ended or that did not revoke
// within their rebalance timeout.
func (c *Coordinator) expireConsumer(g *group, now time.Time) {
	cg := g.consumer
	var kvs []kv
	for _, m := range cg.members {
		why := m.classicExpired(now)
		switch {
		case !now.Before(m.expires):
			why = "session timeout"
		case m.state == memberUnrevoked && !m.revokeBy.IsZero() && !now.Before(m.revokeBy):
			why = "partitions not revoked within the rebalance timeout"
		}
		if why == "" {
			continue
		}
		if c.downgradeOK(g, m) {
			c.downgradeToClassic(g, m, now, &kvs, "the last consumer-protocol member was fenced: "+why)
			break
		}
		c.removeConsumerMember(g, m, now, &kvs, why)
	}
	if len(kvs) == 0 {
		return
	}
	if g.consumer != nil {
		cg.updateState(g, now)
	}
	if _, err := c.appendKVs(g.name, now, kvs); err != nil {
		c.log.Warn("writing consumer group records failed", "group", g.name, "err", err)
	}
}

// consumerDeadlines feeds arm with the group's member deadlines.
func (cg *consumerGroup) deadlines(consider func(time.Time)) {
	for _, m := range cg.members {
		consider(m.expires)
		if m.state == memberUnrevoked {
			consider(m.revokeBy)
		}
		m.classicDeadlines(consider)
	}
}

// convertToClassic turns an empty consumer group into a classic one for a
// JoinGroup (Kafka's downgrade of an empty group): its consumer records are
// deleted, its offsets stay.
func (c *Coordinator) convertToClassic(g *group, now time.Time) error {
	kvs := []kv{{cgTargetMetaKey(g.name), nil}, {cgMetadataKey(g.name), nil}}
	if _, err := c.appendKVs(g.name, now, kvs); err != nil {
		return err
	}
	c.log.Info("empty consumer group converted to a classic group", "group", g.name)
	g.consumer = nil
	g.protocolType = ""
	g.setState(Empty, now)
	return nil
}

// consumerRecordsGone are the tombstones that delete an empty consumer
// group's records (DeleteGroups, offset expiry).
func consumerTombstones(g *group) []kv {
	kvs := []kv{}
	for id := range g.consumer.members {
		kvs = append(kvs, kv{cgCurrentKey(g.name, id), nil}, kv{cgTargetMemberKey(g.name, id), nil}, kv{cgMemberKey(g.name, id), nil})
	}
	return append(kvs, kv{cgTargetMetaKey(g.name), nil}, kv{cgMetadataKey(g.name), nil})
}
