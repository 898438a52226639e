package group

// Online migration between classic and consumer groups (KIP-848), as Kafka
// 4.0 does it, so a running application can move to group.protocol=consumer
// one instance at a time, and back:
//   - upgrade: the first ConsumerGroupHeartbeat to a non-empty classic
//     group of protocol type "consumer" converts it; every classic member
//     becomes a member of the consumer group that keeps speaking the
//     classic protocol (its subscription read from its JoinGroup metadata,
//     its partitions from its last SyncGroup assignment, its epoch the
//     classic generation);
//   - a classic member inside a consumer group is served by translating
//     its requests: JoinGroup reconciles it one step (owned partitions come
//     from its subscription) and answers at once with its member epoch as
//     the generation and no leader, so it never assigns; SyncGroup hands it
//     its current assignment; Heartbeat says REBALANCE_IN_PROGRESS when it
//     must rejoin (a new group epoch, partitions to revoke, or partitions
//     it waited for are free);
//   - downgrade: when the last consumer-protocol member leaves or is
//     fenced and classic members remain, the group becomes a classic group
//     again (generation = group epoch, assignments kept) and rebalances.
// The rule that a partition never has two owners holds throughout: the
// consumer group only hands out a partition after its previous owner
// stopped reporting it, classic members included.
// group.consumer.migration.policy (bidirectional, upgrade, downgrade,
// disabled) chooses which conversions happen; classic members already in a
// consumer group are served whatever the policy, as in Kafka.

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Migration policies (group.consumer.migration.policy).
const (
	MigrationBidirectional = "bidirectional"
	MigrationUpgrade       = "upgrade"
	MigrationDowngrade     = "downgrade"
	MigrationDisabled      = "disabled"
)

// MigrationPolicies lists the values group.consumer.migration.policy takes.
var MigrationPolicies = []string{MigrationBidirectional, MigrationUpgrade, MigrationDowngrade, MigrationDisabled}

// classicMeta is what a classic-protocol member of a consumer group keeps
// besides a consumer member's fields (Kafka's ClassicMemberMetadata).
type classicMeta struct {
	sessionTimeout time.Duration
	protocols      []kmsg.JoinGroupRequestProtocol

	joinBy time.Time // told to rejoin: fenced unless it joins by then
	syncBy time.Time // joined: fenced unless it syncs by then
}

func (c *Coordinator) upgradeEnabled() bool {
	p := c.cfg.ConsumerMigrationPolicy
	return p == MigrationBidirectional || p == MigrationUpgrade
}

func (c *Coordinator) downgradeEnabled() bool {
	p := c.cfg.ConsumerMigrationPolicy
	return p == MigrationBidirectional || p == MigrationDowngrade
}

// classicSubscription reads the embedded consumer protocol's subscription
// (every protocol of a member carries the same one; Kafka reads the first).
func classicSubscription(ps []kmsg.JoinGroupRequestProtocol) (*kmsg.ConsumerMemberMetadata, error) {
	if len(ps) == 0 {
		return nil, fmt.Errorf("no protocols")
	}
	var md kmsg.ConsumerMemberMetadata
	if err := md.ReadFrom(ps[0].Metadata); err != nil {
		return nil, fmt.Errorf("malformed consumer protocol subscription: %w", err)
	}
	return &md, nil
}

// topicIDs maps topic names to ids and back for the classic members,
// whose protocol names topics.
func (c *Coordinator) topicIDs() (byName map[string][16]byte, byID map[[16]byte]string) {
	byName, byID = map[string][16]byte{}, map[[16]byte]string{}
	for _, t := range c.opts.Topics() {
		byName[t.Name], byID[t.ID] = t.ID, t.Name
	}
	return byName, byID
}

// ownedFromSubscription is what a joining classic member reports it owns
// (empty for an eager member, which gave everything up before joining).
func ownedFromSubscription(md *kmsg.ConsumerMemberMetadata, byName map[string][16]byte) assignment {
	a := assignment{}
	for _, t := range md.OwnedPartitions {
		id, ok := byName[t.Topic]
		if !ok {
			continue
		}
		for _, p := range t.Partitions {
			a.add(id, p)
		}
	}
	return a
}

// classicAssignment encodes a for a classic member in the version of its
// subscription (Kafka's ConsumerProtocol.serializeAssignment).
func classicAssignment(m *cmember, byID map[[16]byte]string) []byte {
	v := kmsg.NewConsumerMemberAssignment()
	if len(m.classic.protocols) > 0 {
		r := kbin.Reader{Src: m.classic.protocols[0].Metadata}
		v.Version = min(max(r.Int16(), 0), 3)
	}
	for _, id := range sortedIDs(m.assigned) {
		name, ok := byID[id]
		if !ok {
			continue // deleted since: nothing to consume
		}
		t := kmsg.NewConsumerMemberAssignmentTopic()
		t.Topic, t.Partitions = name, slices.Clone(m.assigned[id])
		v.Topics = append(v.Topics, t)
	}
	return v.AppendTo(nil)
}

// supportsClassic reports whether a classic member with protocols may be
// in the group: protocol type consumer, and a protocol every classic
// member (besides skip) also supports.
func (cg *consumerGroup) supportsClassic(protocolType string, ps []kmsg.JoinGroupRequestProtocol, skip string) bool {
	if protocolType != "consumer" || len(ps) == 0 {
		return false
	}
	for _, p := range ps {
		all := true
		for _, m := range cg.members {
			if m.classic == nil || m.id == skip {
				continue
			}
			if !slices.ContainsFunc(m.classic.protocols, func(q kmsg.JoinGroupRequestProtocol) bool { return q.Name == p.Name }) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// waitingOnUnreleased reports whether part of m's target is still held by
// another member (then rejoining would not get it yet).
func (cg *consumerGroup) waitingOnUnreleased(m *cmember) bool {
	waiting := false
	m.target.each(func(id [16]byte, p int32) {
		if m.assigned.has(id, p) {
			return
		}
		if o, ok := cg.owner[tpKey{id, p}]; ok && o != m.id {
			waiting = true
		}
	})
	return waiting
}

// mustRejoin is Kafka's rule for telling a classic member to rejoin.
func (cg *consumerGroup) mustRejoin(m *cmember) bool {
	return m.epoch < cg.epoch || m.state == memberUnrevoked || (m.state == memberUnreleased && !cg.waitingOnUnreleased(m))
}

// upgradeToConsumer converts the classic group g (with members) into a
// consumer group whose members keep the classic protocol; the records go
// to kvs. code is non-zero (GROUP_ID_NOT_FOUND, Kafka's answer) when the
// group cannot be upgraded.
func (c *Coordinator) upgradeToConsumer(g *group, now time.Time, kvs *[]kv) (code int16, msg string) {
	notConsumer := func(why string) (int16, string) {
		c.log.Info("classic group not upgraded to a consumer group", "group", g.name, "reason", why)
		return kerr.GroupIDNotFound.Code, "Group " + g.name + " is not a consumer group: " + why + "."
	}
	switch {
	case !c.upgradeEnabled():
		return notConsumer("the online upgrade is disabled (group.consumer.migration.policy=" + c.cfg.ConsumerMigrationPolicy + ")")
	case g.protocolType != "consumer":
		return notConsumer("its protocol type is " + g.protocolType)
	case len(g.members) >= c.cfg.ConsumerMaxSize:
		return notConsumer("it has more members than group.consumer.max.size")
	case g.state == Dead:
		return notConsumer("it is being deleted")
	}
	byName, _ := c.topicIDs()
	cg := newConsumerGroup()
	cg.epoch, cg.assignmentEpoch = g.generation, g.generation
	for _, om := range g.members {
		md, err := classicSubscription(om.protocols)
		if err != nil {
			return notConsumer("member " + om.id + "'s " + err.Error())
		}
		m := &cmember{
			id: om.id, instanceID: om.instanceID, rackID: md.Rack, clientID: om.clientID, clientHost: om.clientHost,
			rebalanceTimeout: om.rebalanceTimeout,
			epoch:            g.generation, prevEpoch: g.generation, state: memberStable,
			assigned: assignment{}, revoking: assignment{}, assignedAt: map[tpKey]int32{},
			expires: now.Add(om.sessionTimeout),
			classic: &classicMeta{sessionTimeout: om.sessionTimeout, protocols: om.protocols},
		}
		m.topics = slices.Compact(slices.Sorted(slices.Values(md.Topics)))
		if len(om.assignment) > 0 {
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(om.assignment); err != nil {
				return notConsumer("member " + om.id + "'s assignment is malformed")
			}
			for _, t := range a.Topics {
				if id, ok := byName[t.Topic]; ok {
					for _, p := range t.Partitions {
						m.assigned.add(id, p)
						m.assignedAt[tpKey{id, p}] = m.epoch
					}
				}
			}
		}
		m.target = m.assigned.clone()
		cg.members[m.id] = m
		if m.instanceID != nil {
			cg.static[*m.instanceID] = m.id
		}
		cg.hold(m)
	}
	// Whoever waits on a join or sync of the old generation rejoins.
	g.failWaiters(kerr.RebalanceInProgress.Code)
	*kvs = append(*kvs, kv{groupKey(g.name), nil})
	for _, m := range cg.members {
		*kvs = append(*kvs,
			kv{cgMemberKey(g.name, m.id), cgMemberValue(m)},
			kv{cgTargetMemberKey(g.name, m.id), cgTargetMemberValue(m.target)},
			kv{cgCurrentKey(g.name, m.id), cgCurrentValue(m)})
	}
	*kvs = append(*kvs, kv{cgMetadataKey(g.name), cgMetadataValue(cg)}, kv{cgTargetMetaKey(g.name), cgTargetMetaValue(cg.assignmentEpoch)})
	c.log.Info("classic group upgraded to a consumer group", "group", g.name, "generation", g.generation, "classic members", len(cg.members))
	g.members, g.static, g.pending = map[string]*member{}, map[string]string{}, map[string]time.Time{}
	g.joinDeadline, g.syncDeadline = time.Time{}, time.Time{}
	g.protocolType, g.protocol, g.leader, g.generation = "consumer", "", "", 0
	g.consumer = cg
	return 0, ""
}

// downgradeOK reports whether removing leaving (a consumer-protocol member)
// leaves only classic members to carry on as a classic group.
func (c *Coordinator) downgradeOK(g *group, leaving *cmember) bool {
	cg := g.consumer
	if leaving.classic != nil || len(cg.members) <= 1 {
		return false
	}
	for _, m := range cg.members {
		if m.id != leaving.id && (m.classic == nil || m.left()) {
			return false
		}
	}
	if !c.downgradeEnabled() {
		c.log.Info("consumer group not downgraded: the online downgrade is disabled", "group", g.name)
		return false
	}
	if len(cg.members)-1 > c.cfg.MaxSize {
		c.log.Info("consumer group not downgraded: more members than group.max.size", "group", g.name)
		return false
	}
	return true
}

// downgradeToClassic removes leaving and turns the consumer group g, whose
// other members all speak the classic protocol, into a classic group that
// starts a rebalance; the records go to kvs.
func (c *Coordinator) downgradeToClassic(g *group, leaving *cmember, now time.Time, kvs *[]kv, reason string) {
	cg := g.consumer
	*kvs = append(*kvs, kv{cgCurrentKey(g.name, leaving.id), nil}, kv{cgTargetMemberKey(g.name, leaving.id), nil}, kv{cgMemberKey(g.name, leaving.id), nil})
	cg.release(leaving)
	delete(cg.members, leaving.id)
	*kvs = append(*kvs, consumerTombstones(g)...)
	_, byID := c.topicIDs()
	g.members, g.static, g.pending = map[string]*member{}, map[string]string{}, map[string]time.Time{}
	for _, cm := range cg.members {
		m := &member{
			id: cm.id, instanceID: cm.instanceID, clientID: cm.clientID, clientHost: cm.clientHost,
			sessionTimeout: cm.classic.sessionTimeout, rebalanceTimeout: cm.rebalanceTimeout,
			protocolType: "consumer", protocols: cm.classic.protocols,
			assignment: classicAssignment(cm, byID),
			expires:    now.Add(cm.classic.sessionTimeout),
		}
		g.addMember(m)
	}
	g.consumer = nil
	g.protocolType = "consumer"
	g.generation = cg.epoch
	g.protocol = g.selectProtocol()
	g.leader = sortedMemberIDs(g.members)[0] // the rebalance picks the real one
	g.setState(Stable, now)
	*kvs = append(*kvs, kv{groupKey(g.name), groupValue(g)})
	c.log.Info("consumer group downgraded to a classic group", "group", g.name, "generation", g.generation, "members", len(g.members), "reason", reason)
	c.prepareRebalance(g, now, "downgraded from a consumer group: "+reason)
}

// classicJoinConsumer serves a JoinGroup from a classic member of the
// consumer group g (Kafka's classicGroupJoinToConsumerGroup).
func (c *Coordinator) classicJoinConsumer(g *group, j joinParams, now time.Time) Reply {
	req := j.req
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.MemberID = req.MemberID
	fail := func(code int16) Reply {
		resp.ErrorCode = code
		return respond(resp)
	}
	cg := g.consumer
	id := req.MemberID
	unknown := id == ""
	if unknown {
		id = newConsumerMemberID()
	}
	if !cg.supportsClassic(req.ProtocolType, req.Protocols, id) {
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	md, err := classicSubscription(req.Protocols)
	if err != nil {
		c.log.Info("classic member rejected", "group", g.name, "member", id, "err", err)
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	if unknown && req.InstanceID == nil && req.Version >= 4 {
		// KIP-394: hand out the id; the member joins again with it.
		resp.MemberID = id
		return fail(kerr.MemberIDRequired.Code)
	}
	var kvs []kv
	m := cg.members[id]
	if req.InstanceID != nil {
		if oid, ok := cg.static[*req.InstanceID]; ok && oid != id {
			// The static member is back under a new id (Kafka replaces
			// it whichever protocol either incarnation speaks): it takes
			// over the old incarnation's partitions and target.
			if old := cg.members[oid]; old != nil {
				cg.release(old)
				delete(cg.members, old.id)
				kvs = append(kvs, kv{cgCurrentKey(g.name, old.id), nil}, kv{cgTargetMemberKey(g.name, old.id), nil}, kv{cgMemberKey(g.name, old.id), nil})
				m = &cmember{id: id, state: memberStable, epoch: 0, assigned: old.assigned, target: old.target, assignedAt: old.assignedAt, revoking: assignment{}}
				c.log.Info("static member replaced", "group", g.name, "instance", *req.InstanceID, "old", old.id, "member", id)
			}
		}
	}
	if m != nil && m.classic == nil && cg.members[m.id] == m {
		return fail(kerr.UnknownMemberID.Code) // it speaks the consumer protocol
	}
	isNew := cg.members[id] == nil
	if m == nil {
		if len(cg.members) >= c.cfg.ConsumerMaxSize {
			return fail(kerr.GroupMaxSizeReached.Code)
		}
		m = &cmember{id: id, state: memberStable, assigned: assignment{}, revoking: assignment{}, target: assignment{}, assignedAt: map[tpKey]int32{}}
	}
	before := struct {
		topics []string
		rack   *string
	}{m.topics, m.rackID}
	m.instanceID, m.clientID, m.clientHost = req.InstanceID, j.clientID, j.clientHost
	if md.Rack != nil {
		m.rackID = md.Rack
	}
	m.rebalanceTimeout = j.rebalance
	m.assignor = nil
	m.topics, m.regex = slices.Compact(slices.Sorted(slices.Values(md.Topics))), nil
	m.classic = &classicMeta{sessionTimeout: j.session, protocols: req.Protocols}
	m.expires = now.Add(j.session)
	if isNew {
		cg.members[id] = m
		if m.instanceID != nil {
			cg.static[*m.instanceID] = id
		}
		cg.hold(m)
	}
	kvs = append(kvs, kv{cgMemberKey(g.name, id), cgMemberValue(m)})
	if isNew || !slices.Equal(before.topics, m.topics) || !ptrEq(before.rack, m.rackID) {
		c.bump(g, now, &kvs, "classic member "+id+" joined")
	} else {
		c.maybeMetadataChanged(g, now, &kvs)
	}
	byName, _ := c.topicIDs()
	if c.reconcile(cg, m, ownedFromSubscription(md, byName), now) || isNew {
		kvs = append(kvs, kv{cgCurrentKey(g.name, id), cgCurrentValue(m)})
	}
	m.classic.joinBy = time.Time{}
	m.classic.syncBy = now.Add(m.rebalanceTimeout)
	cg.updateState(g, now)

	resp.MemberID = id
	resp.Generation = m.epoch
	pt, pn := "consumer", req.Protocols[0].Name
	resp.ProtocolType, resp.Protocol = &pt, &pn
	resp.LeaderID = "" // the coordinator assigns: nobody runs an assignor
	fresp := func(code int16) kmsg.Response {
		r := req.ResponseKind().(*kmsg.JoinGroupResponse)
		r.MemberID, r.ErrorCode = id, code
		return r
	}
	return c.commitThen(g, now, kvs, resp, fresp)
}

// classicMember finds the classic member a SyncGroup, Heartbeat or
// LeaveGroup names in a consumer group.
func (cg *consumerGroup) classicMember(memberID string, instanceID *string) (*cmember, int16) {
	if instanceID != nil {
		id, ok := cg.static[*instanceID]
		if !ok {
			return nil, kerr.UnknownMemberID.Code
		}
		if memberID != "" && memberID != id {
			return nil, kerr.FencedInstanceID.Code
		}
		memberID = id
	}
	m := cg.members[memberID]
	if m == nil || m.classic == nil {
		return nil, kerr.UnknownMemberID.Code
	}
	return m, 0
}

// classicSyncConsumer answers a classic member's SyncGroup with its
// current assignment.
func (c *Coordinator) classicSyncConsumer(g *group, req *kmsg.SyncGroupRequest, now time.Time) *kmsg.SyncGroupResponse {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	cg := g.consumer
	m, code := cg.classicMember(req.MemberID, req.InstanceID)
	switch {
	case code != 0:
	case req.Generation != m.epoch:
		code = kerr.IllegalGeneration.Code
	case req.ProtocolType != nil && *req.ProtocolType != "consumer",
		req.Protocol != nil && (len(m.classic.protocols) == 0 || *req.Protocol != m.classic.protocols[0].Name):
		code = kerr.InconsistentGroupProtocol.Code
	case cg.epoch > m.epoch && m.state != memberUnrevoked:
		if m.classic.joinBy.IsZero() {
			m.classic.joinBy = now.Add(m.rebalanceTimeout)
		}
		code = kerr.RebalanceInProgress.Code
	}
	if resp.ErrorCode = code; code != 0 {
		return resp
	}
	m.classic.syncBy = time.Time{}
	m.expires = now.Add(m.classic.sessionTimeout)
	_, byID := c.topicIDs()
	resp.ProtocolType, resp.Protocol = req.ProtocolType, req.Protocol
	resp.MemberAssignment = classicAssignment(m, byID)
	return resp
}

// classicHeartbeatConsumer answers a classic member's Heartbeat.
func (c *Coordinator) classicHeartbeatConsumer(g *group, req *kmsg.HeartbeatRequest, now time.Time) int16 {
	cg := g.consumer
	m, code := cg.classicMember(req.MemberID, req.InstanceID)
	switch {
	case code != 0:
		return code
	case req.Generation != m.epoch:
		return kerr.IllegalGeneration.Code
	}
	m.expires = now.Add(m.classic.sessionTimeout)
	if cg.mustRejoin(m) {
		if m.classic.joinBy.IsZero() {
			m.classic.joinBy = now.Add(m.rebalanceTimeout)
		}
		return kerr.RebalanceInProgress.Code
	}
	return 0
}

// classicLeaveConsumer removes the classic members a LeaveGroup names from
// the consumer group g.
func (c *Coordinator) classicLeaveConsumer(g *group, req *kmsg.LeaveGroupRequest, leaving []kmsg.LeaveGroupRequestMember, now time.Time) Reply {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	cg := g.consumer
	var kvs []kv
	for _, lm := range leaving {
		m, code := cg.classicMember(lm.MemberID, lm.InstanceID)
		if code == 0 {
			c.removeConsumerMember(g, m, now, &kvs, "classic member left the group")
		}
		resp.Members = append(resp.Members, kmsg.LeaveGroupResponseMember{MemberID: lm.MemberID, InstanceID: lm.InstanceID, ErrorCode: code})
	}
	cg.updateState(g, now)
	if req.Version < 3 {
		resp.ErrorCode = resp.Members[0].ErrorCode
		resp.Members = nil
	}
	fresp := func(code int16) kmsg.Response {
		r := req.ResponseKind().(*kmsg.LeaveGroupResponse)
		r.ErrorCode = code
		return r
	}
	return c.commitThen(g, now, kvs, resp, fresp)
}

// classicDeadlines feeds arm with a classic member's join and sync
// deadlines.
func (m *cmember) classicDeadlines(consider func(time.Time)) {
	if m.classic != nil {
		consider(m.classic.joinBy)
		consider(m.classic.syncBy)
	}
}

// classicExpired reports why a classic member is fenced at now, if it is.
func (m *cmember) classicExpired(now time.Time) string {
	switch {
	case m.classic == nil:
		return ""
	case !m.classic.joinBy.IsZero() && !now.Before(m.classic.joinBy):
		return "the classic member did not rejoin within the rebalance timeout"
	case !m.classic.syncBy.IsZero() && !now.Before(m.classic.syncBy):
		return "the classic member did not sync within the rebalance timeout"
	}
	return ""
}

// classicMetadata encodes ClassicMemberMetadata (the member record's tag 0;
// a nullable struct, so a presence byte first).
func classicMetadata(m *classicMeta) []byte {
	b := kbin.AppendInt8(nil, 1)
	b = kbin.AppendInt32(b, int32(m.sessionTimeout/time.Millisecond))
	b = kbin.AppendCompactArrayLen(b, len(m.protocols))
	for _, p := range m.protocols {
		b = kbin.AppendCompactString(b, p.Name)
		b = kbin.AppendCompactBytes(b, p.Metadata)
		b = appendTags(b)
	}
	return appendTags(b)
}

func readClassicMetadata(src []byte) (*classicMeta, error) {
	r := kbin.Reader{Src: src}
	if r.Int8() < 0 {
		return nil, r.Complete()
	}
	m := &classicMeta{sessionTimeout: ms(r.Int32())}
	n := r.CompactArrayLen()
	for i := int32(0); i < n && r.Ok(); i++ {
		var p kmsg.JoinGroupRequestProtocol
		p.Name = r.CompactString()
		p.Metadata = slices.Clone(r.CompactBytes())
		readTags(&r)
		m.protocols = append(m.protocols, p)
	}
	readTags(&r)
	return m, r.Complete()
}

// sortedMemberIDs is for stable output.
func sortedMemberIDs[T any](ms map[string]T) []string {
	ids := make([]string, 0, len(ms))
	for id := range ms {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
