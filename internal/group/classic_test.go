package group

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/testwait"
)

// classic is a classic-protocol member driven by hand (JoinGroup v3:
// no MEMBER_ID_REQUIRED round trip).
type classic struct {
	t     *testing.T
	c     *Coordinator
	group string
	id    string
	gen   int32
}

func (m *classic) joinReq(protocols ...string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 3
	req.Group, req.MemberID, req.ProtocolType = m.group, m.id, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 10000
	if len(protocols) == 0 {
		protocols = []string{"range"}
	}
	for _, p := range protocols {
		req.Protocols = append(req.Protocols, kmsg.JoinGroupRequestProtocol{Name: p, Metadata: []byte("md-" + m.id)})
	}
	return req
}

// join sends JoinGroup and waits for its answer (a rebalance may hold it).
func (m *classic) join(protocols ...string) *kmsg.JoinGroupResponse {
	m.t.Helper()
	resp := m.c.JoinGroup(m.joinReq(protocols...), "client-"+m.group, "/10.0.0.1")(context.Background()).(*kmsg.JoinGroupResponse)
	if resp.ErrorCode != 0 {
		m.t.Fatalf("join %s: %v", m.id, kerr.ErrorForCode(resp.ErrorCode))
	}
	m.id, m.gen = resp.MemberID, resp.Generation
	return resp
}

// joinAsync starts a join that completes later (another member must
// rejoin first).
func (m *classic) joinAsync() <-chan *kmsg.JoinGroupResponse {
	reply := m.c.JoinGroup(m.joinReq(), "client", "/10.0.0.2")
	ch := make(chan *kmsg.JoinGroupResponse, 1)
	go func() { ch <- reply(context.Background()).(*kmsg.JoinGroupResponse) }()
	return ch
}

func (m *classic) syncReply(assign map[string]string) func(context.Context) kmsg.Response {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = 3
	req.Group, req.MemberID, req.Generation = m.group, m.id, m.gen
	for id, a := range assign {
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: []byte(a)})
	}
	return m.c.SyncGroup(req)
}

func (m *classic) heartbeat(gen int32) int16 {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version = 3
	req.Group, req.MemberID, req.Generation = m.group, m.id, gen
	return m.c.Heartbeat(req)(context.Background()).(*kmsg.HeartbeatResponse).ErrorCode
}

func (m *classic) leave() int16 {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Version = 3
	req.Group = m.group
	req.Members = []kmsg.LeaveGroupRequestMember{{MemberID: m.id}}
	resp := m.c.LeaveGroup(req)(context.Background()).(*kmsg.LeaveGroupResponse)
	if resp.ErrorCode != 0 {
		return resp.ErrorCode
	}
	return resp.Members[0].ErrorCode
}

func newClassicCoordinator(t *testing.T, edit func(*Config)) *Coordinator {
	return newTopicTTestCoordinator(t, []Log{&memLog{}}, func(cfg *Config) {
		cfg.InitialRebalanceDelay = 0
		if edit != nil {
			edit(cfg)
		}
	})
}

func describe(t *testing.T, c *Coordinator, group string) kmsg.DescribeGroupsResponseGroup {
	t.Helper()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Version = 5
	req.Groups = []string{group}
	return c.DescribeGroups(req)(context.Background()).(*kmsg.DescribeGroupsResponse).Groups[0]
}

// TestClassicRebalance: a group's life under the classic protocol - the
// first member leads, a second joining sends the first back to rejoin
// (REBALANCE_IN_PROGRESS on its heartbeat), the leader's assignment reaches
// every member through SyncGroup, old generations and strangers are
// refused, and a member leaving starts the next generation.
func TestClassicRebalance(t *testing.T) {
	c := newClassicCoordinator(t, nil)
	a := &classic{t: t, c: c, group: "g"}
	ra := a.join()
	if ra.LeaderID != a.id || ra.Generation != 1 || len(ra.Members) != 1 || ra.Protocol == nil || *ra.Protocol != "range" {
		t.Fatalf("first join: %+v", ra)
	}
	sa := a.syncReply(map[string]string{a.id: "all of it"})(context.Background()).(*kmsg.SyncGroupResponse)
	if sa.ErrorCode != 0 || string(sa.MemberAssignment) != "all of it" {
		t.Fatalf("leader's sync: %+v", sa)
	}
	if code := a.heartbeat(1); code != 0 {
		t.Fatalf("heartbeat: %v", kerr.ErrorForCode(code))
	}
	if d := describe(t, c, "g"); d.State != "Stable" || d.ProtocolType != "consumer" || d.Protocol != "range" || len(d.Members) != 1 {
		t.Fatalf("described: %+v", d)
	}

	b := &classic{t: t, c: c, group: "g"}
	bJoined := b.joinAsync()
	if code := a.heartbeat(1); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("heartbeat during the rebalance: %v", kerr.ErrorForCode(code))
	}
	if d := describe(t, c, "g"); d.State != "PreparingRebalance" {
		t.Fatalf("state while b joins: %s", d.State)
	}
	ra = a.join()
	rb := <-bJoined
	if rb.ErrorCode != 0 || ra.Generation != 2 || rb.Generation != 2 || ra.LeaderID != a.id || rb.LeaderID != a.id {
		t.Fatalf("second generation: a %+v, b %+v", ra, rb)
	}
	if len(ra.Members) != 2 || len(rb.Members) != 0 {
		t.Fatalf("only the leader gets the members: %d and %d", len(ra.Members), len(rb.Members))
	}
	b.id, b.gen = rb.MemberID, rb.Generation
	// The follower's sync waits for the leader's assignment.
	bSync := b.syncReply(nil)
	bGot := make(chan *kmsg.SyncGroupResponse, 1)
	go func() { bGot <- bSync(context.Background()).(*kmsg.SyncGroupResponse) }()
	if d := describe(t, c, "g"); d.State != "CompletingRebalance" {
		t.Fatalf("state before the leader's sync: %s", d.State)
	}
	a.syncReply(map[string]string{a.id: "p0", b.id: "p1"})(context.Background())
	if sb := <-bGot; sb.ErrorCode != 0 || string(sb.MemberAssignment) != "p1" {
		t.Fatalf("follower's sync: %+v", sb)
	}
	for _, c := range []struct {
		m    *classic
		gen  int32
		want int16
	}{
		{a, 2, 0}, {b, 2, 0},
		{a, 1, kerr.IllegalGeneration.Code},
		{&classic{c: c, group: "g", id: "stranger"}, 2, kerr.UnknownMemberID.Code},
		{&classic{c: c, group: "nope", id: "x"}, 1, kerr.UnknownMemberID.Code},
	} {
		if code := c.m.heartbeat(c.gen); code != c.want {
			t.Errorf("heartbeat of %s at %d: %v, want %v", c.m.id, c.gen, kerr.ErrorForCode(code), kerr.ErrorForCode(c.want))
		}
	}
	// b leaves: a rejoins alone in generation 3.
	if code := b.leave(); code != 0 {
		t.Fatalf("leave: %v", kerr.ErrorForCode(code))
	}
	if code := b.leave(); code != kerr.UnknownMemberID.Code {
		t.Fatalf("second leave: %v", kerr.ErrorForCode(code))
	}
	if code := a.heartbeat(2); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("heartbeat after b left: %v", kerr.ErrorForCode(code))
	}
	if ra = a.join(); ra.Generation != 3 || len(ra.Members) != 1 {
		t.Fatalf("after b left: %+v", ra)
	}
	a.syncReply(map[string]string{a.id: "all"})(context.Background())
	if code := a.leave(); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	if d := describe(t, c, "g"); d.State != "Empty" || len(d.Members) != 0 {
		t.Fatalf("after everyone left: %+v", d)
	}
}

// TestClassicJoinRefusals: the JoinGroup errors a client must be able to
// act on.
func TestClassicJoinRefusals(t *testing.T) {
	c := newClassicCoordinator(t, func(cfg *Config) { cfg.MaxSize = 2 })
	call := func(req *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
		return c.JoinGroup(req, "client", "/10.0.0.1")(context.Background()).(*kmsg.JoinGroupResponse)
	}
	m := &classic{t: t, c: c, group: "g"}
	for _, tc := range []struct {
		name string
		edit func(*kmsg.JoinGroupRequest)
		want int16
	}{
		{"session below group.min.session.timeout.ms", func(r *kmsg.JoinGroupRequest) { r.SessionTimeoutMillis = 10 }, kerr.InvalidSessionTimeout.Code},
		{"session above group.max.session.timeout.ms", func(r *kmsg.JoinGroupRequest) { r.SessionTimeoutMillis = 1 << 30 }, kerr.InvalidSessionTimeout.Code},
		{"a member id the group never gave", func(r *kmsg.JoinGroupRequest) { r.MemberID = "made-up" }, kerr.UnknownMemberID.Code},
		{"no group id", func(r *kmsg.JoinGroupRequest) { r.Group = "" }, kerr.InvalidGroupID.Code},
	} {
		req := m.joinReq()
		tc.edit(req)
		if resp := call(req); resp.ErrorCode != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, kerr.ErrorForCode(resp.ErrorCode), kerr.ErrorForCode(tc.want))
		}
	}
	// v4 and later: the first join gets a member id and MEMBER_ID_REQUIRED.
	req := m.joinReq()
	req.Version = 5
	resp := call(req)
	if resp.ErrorCode != kerr.MemberIDRequired.Code || resp.MemberID == "" {
		t.Fatalf("v5 first join: %v %q", kerr.ErrorForCode(resp.ErrorCode), resp.MemberID)
	}
	req.MemberID = resp.MemberID
	if resp = call(req); resp.ErrorCode != 0 || resp.MemberID != req.MemberID {
		t.Fatalf("v5 join with the given id: %v %q", kerr.ErrorForCode(resp.ErrorCode), resp.MemberID)
	}
	// Another protocol type, or no protocol in common: refused.
	other := &classic{t: t, c: c, group: "g"}
	req = other.joinReq("roundrobin")
	if resp := call(req); resp.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("no common protocol: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	req = other.joinReq()
	req.ProtocolType = "connect"
	if resp := call(req); resp.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("another protocol type: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
}

// TestClassicSessionExpiry: a member that stops heartbeating is removed
// once its session ends, and the group, empty, says so.
func TestClassicSessionExpiry(t *testing.T) {
	c := newClassicCoordinator(t, func(cfg *Config) { cfg.MinSessionTimeout = time.Millisecond })
	m := &classic{t: t, c: c, group: "g"}
	req := m.joinReq()
	req.SessionTimeoutMillis = 100
	resp := c.JoinGroup(req, "client", "/10.0.0.1")(context.Background()).(*kmsg.JoinGroupResponse)
	if resp.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(resp.ErrorCode))
	}
	m.id, m.gen = resp.MemberID, resp.Generation
	m.syncReply(map[string]string{m.id: "x"})(context.Background())
	testwait.Until(t, 10*time.Second, "the silent member's session to end", func() bool {
		d := describe(t, c, "g")
		return d.State == "Empty" && len(d.Members) == 0
	})
	if code := m.heartbeat(m.gen); code != kerr.UnknownMemberID.Code {
		t.Fatalf("heartbeat after expiry: %v", kerr.ErrorForCode(code))
	}
}

// TestListAndDeleteGroups: ListGroups filters by state and type;
// DeleteGroups refuses a group with members and forgets an empty one.
func TestListAndDeleteGroups(t *testing.T) {
	c := newClassicCoordinator(t, nil)
	m := &classic{t: t, c: c, group: "live"}
	m.join()
	m.syncReply(map[string]string{m.id: "x"})(context.Background())
	c.OffsetCommit(commitReq("simple", 0, 4, ""))(context.Background())
	list := func(states, types []string) []string {
		req := kmsg.NewPtrListGroupsRequest()
		req.Version = 5
		req.StatesFilter, req.TypesFilter = states, types
		resp := c.ListGroups(req)(context.Background()).(*kmsg.ListGroupsResponse)
		var out []string
		for _, g := range resp.Groups {
			out = append(out, g.Group+"/"+g.GroupState+"/"+g.GroupType)
		}
		slices.Sort(out)
		return out
	}
	if got := list(nil, nil); !slices.Equal(got, []string{"live/Stable/classic", "simple/Empty/classic"}) {
		t.Fatalf("all groups: %v", got)
	}
	if got := list([]string{"Stable"}, nil); !slices.Equal(got, []string{"live/Stable/classic"}) {
		t.Fatalf("stable groups: %v", got)
	}
	if got := list(nil, []string{"consumer"}); len(got) != 0 {
		t.Fatalf("consumer-protocol groups: %v", got)
	}
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Version = 2
	del.Groups = []string{"live", "simple", "never"}
	resp := c.DeleteGroups(del)(context.Background()).(*kmsg.DeleteGroupsResponse)
	codes := map[string]int16{}
	for _, g := range resp.Groups {
		codes[g.Group] = g.ErrorCode
	}
	if codes["live"] != kerr.NonEmptyGroup.Code || codes["simple"] != 0 || codes["never"] != kerr.GroupIDNotFound.Code {
		t.Fatalf("delete codes %v", codes)
	}
	if got := list(nil, nil); !slices.Equal(got, []string{"live/Stable/classic"}) {
		t.Fatalf("after delete: %v", got)
	}
	if off, _ := fetch(t, c, "simple", 0); off != -1 {
		t.Fatalf("a deleted group's offset: %d", off)
	}
	if d := describe(t, c, "never"); d.State != "Dead" || d.ErrorCode != 0 {
		t.Fatalf("describe of an unknown group: %+v", d)
	}
}

// TestClassicLeaveShapes: LeaveGroup v0-2 names one member at the top
// level; v3 and later a batch, each answered on its own (an unknown
// member among known ones does not fail the others).
func TestClassicLeaveShapes(t *testing.T) {
	c := newClassicCoordinator(t, nil)
	a, b, d := &classic{t: t, c: c, group: "g"}, &classic{t: t, c: c, group: "g"}, &classic{t: t, c: c, group: "g"}
	a.join()
	bDone, dDone := b.joinAsync(), d.joinAsync()
	// Both wait for a, which learns of the rebalance on its heartbeat.
	testwait.Until(t, 10*time.Second, "the rebalance to start", func() bool { return a.heartbeat(a.gen) == kerr.RebalanceInProgress.Code })
	a.join()
	rb, rd := <-bDone, <-dDone
	b.id, d.id = rb.MemberID, rd.MemberID
	ms := []*classic{a, b, d}
	if d := describe(t, c, "g"); len(d.Members) != 3 {
		t.Fatalf("%d members", len(d.Members))
	}
	// v1: one member, at the top level.
	v1 := kmsg.NewPtrLeaveGroupRequest()
	v1.Version = 1
	v1.Group, v1.MemberID = "g", ms[0].id
	if code := c.LeaveGroup(v1)(context.Background()).(*kmsg.LeaveGroupResponse).ErrorCode; code != 0 {
		t.Fatalf("v1 leave: %v", kerr.ErrorForCode(code))
	}
	if code := c.LeaveGroup(v1)(context.Background()).(*kmsg.LeaveGroupResponse).ErrorCode; code != kerr.UnknownMemberID.Code {
		t.Fatalf("v1 leave again: %v", kerr.ErrorForCode(code))
	}
	// v3: a batch with a stranger in it.
	v3 := kmsg.NewPtrLeaveGroupRequest()
	v3.Version = 3
	v3.Group = "g"
	v3.Members = []kmsg.LeaveGroupRequestMember{{MemberID: ms[1].id}, {MemberID: "stranger"}, {MemberID: ms[2].id}}
	resp := c.LeaveGroup(v3)(context.Background()).(*kmsg.LeaveGroupResponse)
	codes := []int16{resp.Members[0].ErrorCode, resp.Members[1].ErrorCode, resp.Members[2].ErrorCode}
	if resp.ErrorCode != 0 || codes[0] != 0 || codes[1] != kerr.UnknownMemberID.Code || codes[2] != 0 {
		t.Fatalf("v3 batch: top %v, members %v", kerr.ErrorForCode(resp.ErrorCode), codes)
	}
	if d := describe(t, c, "g"); d.State != "Empty" || len(d.Members) != 0 {
		t.Fatalf("after everyone left: %+v", d)
	}
	v3.Group = "no-such-group"
	if resp := c.LeaveGroup(v3)(context.Background()).(*kmsg.LeaveGroupResponse); resp.ErrorCode != kerr.UnknownMemberID.Code && (len(resp.Members) == 0 || resp.Members[0].ErrorCode != kerr.UnknownMemberID.Code) {
		t.Fatalf("leave of a group that does not exist: %+v", resp)
	}
}
