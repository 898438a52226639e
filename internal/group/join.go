package group

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func respond(r kmsg.Response) Reply { return func(context.Context) kmsg.Response { return r } }

// await is a Reply that waits for the coordinator to deliver the response.
func await(ch chan kmsg.Response) Reply {
	return func(ctx context.Context) kmsg.Response {
		select {
		case r := <-ch:
			return r
		case <-ctx.Done():
			return nil
		}
	}
}

func ms(v int32) time.Duration { return time.Duration(v) * time.Millisecond }

// JoinGroup handles a JoinGroup request; the Reply waits for the join phase
// of the rebalance to complete.
func (c *Coordinator) JoinGroup(req *kmsg.JoinGroupRequest, clientID, clientHost string) Reply {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.MemberID = req.MemberID
	fail := func(code int16) Reply {
		resp.ErrorCode = code
		return respond(resp)
	}
	if code := c.admit(req.Group); code != 0 {
		return fail(code)
	}
	session := ms(req.SessionTimeoutMillis)
	if session < c.cfg.MinSessionTimeout || session > c.cfg.MaxSessionTimeout {
		return fail(kerr.InvalidSessionTimeout.Code)
	}
	rebalance := ms(req.RebalanceTimeoutMillis)
	if req.Version == 0 || rebalance <= 0 {
		rebalance = session // v0 has no rebalance timeout: Kafka uses the session timeout
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fail(kerr.CoordinatorNotAvailable.Code)
	}
	now := c.opts.Now()
	g := c.groups[req.Group]
	if g == nil {
		if req.MemberID != "" {
			return fail(kerr.UnknownMemberID.Code)
		}
		g = newGroup(req.Group, now)
		c.groups[req.Group] = g
	}
	if g.consumer != nil {
		// A consumer group: a classic member joins it as one of its
		// members (mixed.go); an empty one becomes a classic group.
		if len(g.consumer.members) > 0 {
			defer c.arm(g)
			return c.classicJoinConsumer(g, joinParams{req: req, clientID: clientID, clientHost: clientHost, session: session, rebalance: rebalance}, now)
		}
		if err := c.convertToClassic(g, now); err != nil {
			c.log.Warn("converting consumer group failed", "group", g.name, "err", err)
			return fail(kerr.CoordinatorNotAvailable.Code)
		}
	}
	defer c.arm(g)
	defer c.dropIfUnused(g)
	if g.state == Dead {
		return fail(kerr.CoordinatorNotAvailable.Code)
	}
	j := joinParams{req: req, clientID: clientID, clientHost: clientHost, session: session, rebalance: rebalance}
	if req.MemberID == "" {
		if !g.supports(req.ProtocolType, req.Protocols) {
			return fail(kerr.InconsistentGroupProtocol.Code)
		}
		return c.joinUnknown(g, j, resp, now)
	}
	if _, ok := g.pending[req.MemberID]; ok {
		if !g.supports(req.ProtocolType, req.Protocols) {
			return fail(kerr.InconsistentGroupProtocol.Code)
		}
		delete(g.pending, req.MemberID)
		return c.addAndJoin(g, req.MemberID, j, now)
	}
	if g.fenced(req.InstanceID, req.MemberID) {
		return fail(kerr.FencedInstanceID.Code)
	}
	m := g.members[req.MemberID]
	if m == nil || (req.InstanceID != nil && g.static[*req.InstanceID] == "") {
		return fail(kerr.UnknownMemberID.Code)
	}
	if !g.supports(req.ProtocolType, req.Protocols) {
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	switch g.state {
	case PreparingRebalance:
		return c.updateAndJoin(g, m, j, now, "member rejoined")
	case CompletingRebalance:
		if m.sameProtocols(req.Protocols) {
			// The member lost our response: send the same one again.
			m.expires = now.Add(m.sessionTimeout)
			r := c.joinResponse(g, m)
			if m.id == g.leader {
				r.Members = c.joinMembers(g)
			}
			return respond(r)
		}
		return c.updateAndJoin(g, m, j, now, "member changed protocols")
	case Stable:
		if m.id != g.leader && m.sameProtocols(req.Protocols) {
			m.expires = now.Add(m.sessionTimeout)
			return respond(c.joinResponse(g, m))
		}
		// A rejoining leader asks for a new assignment (its metadata may
		// have changed); so does a member with new protocols.
		return c.updateAndJoin(g, m, j, now, "leader or changed member rejoined")
	default:
		return fail(kerr.UnknownMemberID.Code)
	}
}

type joinParams struct {
	req                  *kmsg.JoinGroupRequest
	clientID, clientHost string
	session, rebalance   time.Duration
}

func (c *Coordinator) joinMembers(g *group) []kmsg.JoinGroupResponseMember {
	var all []kmsg.JoinGroupResponseMember
	for _, m := range g.members {
		all = append(all, kmsg.JoinGroupResponseMember{MemberID: m.id, InstanceID: m.instanceID, ProtocolMetadata: m.metadata(g.protocol)})
	}
	return all
}

// dropIfUnused forgets a group that a failed first join created.
func (c *Coordinator) dropIfUnused(g *group) {
	if g.state == Empty && len(g.members) == 0 && len(g.pending) == 0 && len(g.offsets) == 0 && g.generation == 0 && g.protocolType == "" {
		if g.timer != nil {
			g.timer.Stop()
		}
		delete(c.groups, g.name)
	}
}

func (c *Coordinator) joinUnknown(g *group, j joinParams, resp *kmsg.JoinGroupResponse, now time.Time) Reply {
	req := j.req
	if req.InstanceID != nil {
		newID := newMemberID(*req.InstanceID)
		if oldID, ok := g.static[*req.InstanceID]; ok && g.members[oldID] != nil {
			return c.staticRejoin(g, g.members[oldID], newID, j, now)
		}
		if g.size() >= c.cfg.MaxSize {
			resp.ErrorCode = kerr.GroupMaxSizeReached.Code
			return respond(resp)
		}
		// KIP-394's round trip is for dynamic members only: a static
		// member's identity is its instance id.
		return c.addAndJoin(g, newID, j, now)
	}
	if g.size() >= c.cfg.MaxSize {
		resp.ErrorCode = kerr.GroupMaxSizeReached.Code
		return respond(resp)
	}
	id := newMemberID(j.clientID)
	if req.Version >= 4 {
		// KIP-394: hand out the id first so a client that retries joins
		// does not leave a trail of ghost members.
		g.pending[id] = now.Add(j.session)
		resp.MemberID = id
		resp.ErrorCode = kerr.MemberIDRequired.Code
		return respond(resp)
	}
	return c.addAndJoin(g, id, j, now)
}

func (c *Coordinator) addAndJoin(g *group, id string, j joinParams, now time.Time) Reply {
	if g.size() >= c.cfg.MaxSize {
		r := j.req.ResponseKind().(*kmsg.JoinGroupResponse)
		r.MemberID = id
		r.ErrorCode = kerr.GroupMaxSizeReached.Code
		return respond(r)
	}
	m := &member{
		id:               id,
		instanceID:       j.req.InstanceID,
		clientID:         j.clientID,
		clientHost:       j.clientHost,
		sessionTimeout:   j.session,
		rebalanceTimeout: j.rebalance,
		protocolType:     j.req.ProtocolType,
		protocols:        j.req.Protocols,
		isNew:            true,
	}
	ch := make(chan kmsg.Response, 1)
	m.join = ch
	g.addMember(m)
	g.newMemberAdded = true
	if g.state != PreparingRebalance {
		c.prepareRebalance(g, now, "member "+id+" joined")
	}
	c.maybeCompleteJoin(g, now)
	return await(ch)
}

// updateAndJoin records a known member's new join and waits for the join
// phase, starting a rebalance if none is running.
func (c *Coordinator) updateAndJoin(g *group, m *member, j joinParams, now time.Time, reason string) Reply {
	m.protocols = j.req.Protocols
	m.sessionTimeout = j.session
	m.rebalanceTimeout = j.rebalance
	m.clientID, m.clientHost = j.clientID, j.clientHost
	if m.join != nil {
		// A newer join from the same member replaces the old one.
		r := c.joinResponse(g, m)
		r.ErrorCode = kerr.RebalanceInProgress.Code
		m.join <- r
	}
	ch := make(chan kmsg.Response, 1)
	m.join = ch
	if g.state != PreparingRebalance {
		c.prepareRebalance(g, now, reason)
	}
	c.maybeCompleteJoin(g, now)
	return await(ch)
}

// staticRejoin handles a known group.instance.id joining with no member id
// (a restarted static member, KIP-345): the old member id is fenced, and if
// the group is Stable and the member's new protocols leave the group's
// protocol selected, the group keeps its generation and assignment, as
// Kafka's coordinator does. Not a byte comparison of the metadata: a
// cooperative-sticky member's metadata lists the partitions it owned,
// which a restarted client no longer knows, so that would rebalance on
// nearly every restart - what static membership exists to avoid.
func (c *Coordinator) staticRejoin(g *group, old *member, newID string, j joinParams, now time.Time) Reply {
	oldID := old.id
	fence := func() {
		if old.join != nil {
			r := c.joinResponse(g, old)
			r.ErrorCode = kerr.FencedInstanceID.Code
			old.join <- r
			old.join = nil
		}
		if old.sync != nil {
			r := kmsg.NewPtrSyncGroupResponse()
			r.ErrorCode = kerr.FencedInstanceID.Code
			old.sync <- r
			old.sync = nil
		}
		delete(g.members, oldID)
		old.id = newID
		g.members[newID] = old
		g.static[*j.req.InstanceID] = newID
		if g.leader == oldID {
			g.leader = newID
		}
	}
	fence()
	unchanged := false
	if g.state == Stable && j.req.ProtocolType == g.protocolType {
		prev := old.protocols
		old.protocols = j.req.Protocols
		unchanged = g.selectProtocol() == g.protocol
		if !unchanged {
			old.protocols = prev // updateAndJoin sets them
		}
	}
	c.log.Info("static member rejoined", "group", g.name, "instance", *j.req.InstanceID, "old", oldID, "member", newID, "rebalance", !unchanged)
	if unchanged {
		old.sessionTimeout, old.rebalanceTimeout = j.session, j.rebalance
		old.clientID, old.clientHost = j.clientID, j.clientHost
		old.expires = now.Add(j.session)
		r := c.joinResponse(g, old)
		if newID == g.leader {
			r.Members = c.joinMembers(g)
			r.SkipAssignment = true // KIP-814: the assignment stands
		}
		end, ok := c.persistGroup(g, now)
		log := c.logs[c.partition(g.name)]
		return func(ctx context.Context) kmsg.Response {
			if ok {
				if err := log.WaitCommitted(ctx, end); err != nil {
					c.log.Warn("static member replacement not durable", "group", g.name, "err", err)
				}
			}
			return r
		}
	}
	return c.updateAndJoin(g, old, j, now, "static member "+*j.req.InstanceID+" rejoined")
}

// SyncGroup handles a SyncGroup request; followers wait for the leader's
// assignment, the leader's assignment is persisted before anyone gets it.
func (c *Coordinator) SyncGroup(req *kmsg.SyncGroupRequest) Reply {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	fail := func(code int16) Reply {
		resp.ErrorCode = code
		return respond(resp)
	}
	if code := c.admit(req.Group); code != 0 {
		return fail(code)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[req.Group]
	switch {
	case c.closed:
		return fail(kerr.CoordinatorNotAvailable.Code)
	case g == nil:
		return fail(kerr.UnknownMemberID.Code)
	case g.consumer != nil:
		defer c.arm(g)
		return respond(c.classicSyncConsumer(g, req, c.opts.Now()))
	case g.state == Dead:
		return fail(kerr.CoordinatorNotAvailable.Code)
	case g.fenced(req.InstanceID, req.MemberID):
		return fail(kerr.FencedInstanceID.Code)
	case g.members[req.MemberID] == nil:
		return fail(kerr.UnknownMemberID.Code)
	case req.Generation != g.generation:
		return fail(kerr.IllegalGeneration.Code)
	case req.ProtocolType != nil && *req.ProtocolType != g.protocolType,
		req.Protocol != nil && *req.Protocol != g.protocol:
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	defer c.arm(g)
	now := c.opts.Now()
	m := g.members[req.MemberID]
	switch g.state {
	case PreparingRebalance:
		return fail(kerr.RebalanceInProgress.Code)
	case Stable:
		m.expires = now.Add(m.sessionTimeout)
		return respond(c.syncResponse(g, m))
	case CompletingRebalance:
	default:
		return fail(kerr.UnknownMemberID.Code)
	}
	ch := make(chan kmsg.Response, 1)
	if m.sync != nil {
		r := kmsg.NewPtrSyncGroupResponse()
		r.ErrorCode = kerr.RebalanceInProgress.Code
		m.sync <- r
	}
	m.sync = ch
	m.synced = true
	if m.id != g.leader || g.syncDeadline.IsZero() {
		// A follower, or a leader whose assignment is already being stored.
		return await(ch)
	}
	assign := map[string][]byte{}
	for _, a := range req.GroupAssignment {
		assign[a.MemberID] = a.MemberAssignment
	}
	for id, mm := range g.members {
		mm.assignment = assign[id]
	}
	g.syncDeadline = time.Time{} // the leader has spoken
	gen := g.generation
	end, ok := c.persistGroup(g, now)
	if !ok {
		c.failSync(g, now, kerr.CoordinatorNotAvailable.Code)
		return await(ch)
	}
	log := c.logs[c.partition(g.name)]
	wait := max(g.maxRebalanceTimeout(), 30*time.Second)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		err := log.WaitCommitted(ctx, end)
		cancel()
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed || c.groups[g.name] != g || g.generation != gen || g.state != CompletingRebalance {
			return // a newer rebalance took over
		}
		now := c.opts.Now()
		if err != nil {
			c.log.Warn("storing group assignment failed", "group", g.name, "generation", gen, "err", err)
			c.failSync(g, now, kerr.CoordinatorNotAvailable.Code)
		} else {
			c.completeSync(g, now)
		}
		c.arm(g)
	}()
	return await(ch)
}

// failSync answers waiting syncs with code and starts over.
func (c *Coordinator) failSync(g *group, now time.Time, code int16) {
	for _, m := range g.members {
		m.assignment = nil
		if m.sync != nil {
			r := kmsg.NewPtrSyncGroupResponse()
			r.ErrorCode = code
			m.sync <- r
			m.sync = nil
		}
	}
	c.prepareRebalance(g, now, "storing the assignment failed")
}

// Heartbeat handles a Heartbeat request.
func (c *Coordinator) Heartbeat(req *kmsg.HeartbeatRequest) Reply {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	resp.ErrorCode = c.heartbeat(req)
	return respond(resp)
}

func (c *Coordinator) heartbeat(req *kmsg.HeartbeatRequest) int16 {
	if code := c.admit(req.Group); code != 0 {
		return code
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[req.Group]
	switch {
	case c.closed:
		return kerr.CoordinatorNotAvailable.Code
	case g == nil:
		return kerr.UnknownMemberID.Code
	case g.consumer != nil:
		defer c.arm(g)
		return c.classicHeartbeatConsumer(g, req, c.opts.Now())
	case g.state == Dead:
		return kerr.CoordinatorNotAvailable.Code
	case g.fenced(req.InstanceID, req.MemberID):
		return kerr.FencedInstanceID.Code
	case g.members[req.MemberID] == nil:
		return kerr.UnknownMemberID.Code
	case req.Generation != g.generation:
		return kerr.IllegalGeneration.Code
	}
	defer c.arm(g)
	m := g.members[req.MemberID]
	switch g.state {
	case Empty:
		return kerr.UnknownMemberID.Code
	case PreparingRebalance:
		m.expires = c.opts.Now().Add(m.sessionTimeout)
		return kerr.RebalanceInProgress.Code
	default:
		m.expires = c.opts.Now().Add(m.sessionTimeout)
		return 0
	}
}

// LeaveGroup handles a LeaveGroup request (one member before v3, a batch of
// members and instance ids from v3, KIP-345).
func (c *Coordinator) LeaveGroup(req *kmsg.LeaveGroupRequest) Reply {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	leaving := req.Members
	if req.Version < 3 {
		leaving = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	}
	top := func(code int16) Reply {
		resp.ErrorCode = code
		return respond(resp)
	}
	if code := c.admit(req.Group); code != 0 {
		return top(code)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[req.Group]
	if c.closed || g != nil && g.state == Dead {
		return top(kerr.CoordinatorNotAvailable.Code)
	}
	now := c.opts.Now()
	if g != nil && g.consumer != nil {
		defer c.arm(g)
		return c.classicLeaveConsumer(g, req, leaving, now)
	}
	for _, lm := range leaving {
		code := int16(0)
		switch {
		case g == nil:
			code = kerr.UnknownMemberID.Code
		case lm.InstanceID != nil:
			id, ok := g.static[*lm.InstanceID]
			switch {
			case !ok:
				code = kerr.UnknownMemberID.Code
			case lm.MemberID != "" && lm.MemberID != id:
				code = kerr.FencedInstanceID.Code
			default:
				c.memberLeft(g, id, now, "left the group")
			}
		default:
			if _, ok := g.pending[lm.MemberID]; ok {
				delete(g.pending, lm.MemberID)
				c.maybeCompleteJoin(g, now)
			} else if g.members[lm.MemberID] == nil {
				code = kerr.UnknownMemberID.Code
			} else {
				c.memberLeft(g, lm.MemberID, now, "left the group")
			}
		}
		resp.Members = append(resp.Members, kmsg.LeaveGroupResponseMember{MemberID: lm.MemberID, InstanceID: lm.InstanceID, ErrorCode: code})
	}
	if g != nil {
		c.arm(g)
	}
	if req.Version < 3 {
		resp.ErrorCode = resp.Members[0].ErrorCode
		resp.Members = nil
	}
	return respond(resp)
}
