package group

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func cgReq(group, member string, epoch int32) *kmsg.ConsumerGroupHeartbeatRequest {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group, req.MemberID, req.MemberEpoch = group, member, epoch
	req.RebalanceTimeoutMillis = 30000
	if epoch == 0 {
		req.SubscribedTopicNames = []string{"t"}
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	}
	return req
}

func cgBeat(c *Coordinator, req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	return c.ConsumerGroupHeartbeat(req, "cli", "/10.1.1.1")(context.Background()).(*kmsg.ConsumerGroupHeartbeatResponse)
}

// TestConsumerHeartbeatValidation: the request checks KIP-848 names,
// each with Kafka's message.
func TestConsumerHeartbeatValidation(t *testing.T) {
	c := newConsumerTestCoordinator(t, []Log{&memLog{}}, "")
	empty, re := "", "t.*"
	bad := "no-such-assignor"
	for _, tc := range []struct {
		name string
		edit func(*kmsg.ConsumerGroupHeartbeatRequest)
		code int16
		msg  string
	}{
		{"no group", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.Group = "" }, kerr.InvalidRequest.Code, "GroupId can't be empty."},
		{"no member id (v1)", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberID = "" }, kerr.InvalidRequest.Code, "MemberId can't be empty."},
		{"empty instance id", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.InstanceID = &empty }, kerr.InvalidRequest.Code, "InstanceId can't be empty."},
		{"empty rack", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.RackID = &empty }, kerr.InvalidRequest.Code, "RackId can't be empty."},
		{"epoch -3", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = -3 }, kerr.InvalidRequest.Code, "MemberEpoch is invalid."},
		{"no rebalance timeout on join", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.RebalanceTimeoutMillis = -1 }, kerr.InvalidRequest.Code, "RebalanceTimeoutMs must be provided"},
		{"owned partitions on join", func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: topicT.ID, Partitions: []int32{0}}}
		}, kerr.InvalidRequest.Code, "TopicPartitions must be empty"},
		{"no subscription on join", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicNames = nil }, kerr.InvalidRequest.Code, "must be set in first request"},
		{"names and regex", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.SubscribedTopicRegex = &re }, kerr.InvalidRequest.Code, "cannot both be set"},
		{"a bad regex", func(r *kmsg.ConsumerGroupHeartbeatRequest) {
			r.SubscribedTopicNames, r.SubscribedTopicRegex = nil, new(string)
			*r.SubscribedTopicRegex = "(unclosed"
		}, kerr.InvalidRegularExpression.Code, ""},
		{"an unknown assignor", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.ServerAssignor = &bad }, kerr.UnsupportedAssignor.Code, "Supported assignors: uniform, range."},
		{"a heartbeat to no group", func(r *kmsg.ConsumerGroupHeartbeatRequest) { r.MemberEpoch = 5 }, kerr.GroupIDNotFound.Code, "Consumer group g not found."},
	} {
		req := cgReq("g", "m1", 0)
		tc.edit(req)
		resp := cgBeat(c, req)
		msg := ""
		if resp.ErrorMessage != nil {
			msg = *resp.ErrorMessage
		}
		if resp.ErrorCode != tc.code || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %v %q, want %v %q", tc.name, kerr.ErrorForCode(resp.ErrorCode), msg, kerr.ErrorForCode(tc.code), tc.msg)
		}
	}
}

// TestConsumerEpochsAndLeave: a member's epoch follows the group's as
// its assignment changes; a stale epoch is fenced unless it is the
// previous one with a subset of what it holds (a lost answer); leaving
// gives its partitions to the others.
func TestConsumerEpochsAndLeave(t *testing.T) {
	c := newConsumerTestCoordinator(t, []Log{&memLog{}}, "uniform")
	a := &cgClient{id: "a"}
	a.beat(t, c)
	if a.epoch != 1 || len(a.owned) != 4 {
		t.Fatalf("a: epoch %d owns %v", a.epoch, a.owned)
	}
	b := &cgClient{id: "b"}
	for range 6 {
		b.beat(t, c)
		a.beat(t, c)
	}
	if len(a.owned) != 2 || len(b.owned) != 2 || a.epoch != b.epoch || a.epoch < 2 {
		t.Fatalf("after b joined: a %d %v, b %d %v", a.epoch, a.owned, b.epoch, b.owned)
	}
	// A made-up epoch: fenced.
	req := cgReq("g", "a", a.epoch+5)
	if resp := cgBeat(c, req); resp.ErrorCode != kerr.FencedMemberEpoch.Code || resp.ErrorMessage == nil || !strings.Contains(*resp.ErrorMessage, "does not match the expected epoch") {
		t.Fatalf("a future epoch: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	// The previous epoch owning more than it was given: fenced too.
	req = cgReq("g", "a", a.epoch-1)
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: topicT.ID, Partitions: []int32{0, 1, 2, 3}}}
	if resp := cgBeat(c, req); resp.ErrorCode != kerr.FencedMemberEpoch.Code {
		t.Fatalf("the previous epoch owning everything: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	// Describe: both members, the assignor, the epochs.
	dreq := kmsg.NewPtrConsumerGroupDescribeRequest()
	dreq.Groups = []string{"g", "none"}
	dresp := c.ConsumerGroupDescribe(dreq)(context.Background()).(*kmsg.ConsumerGroupDescribeResponse)
	d := dresp.Groups[0]
	if d.ErrorCode != 0 || d.State != "Stable" || d.AssignorName != "uniform" || len(d.Members) != 2 || d.Epoch != a.epoch {
		t.Fatalf("described: %+v", d)
	}
	if dresp.Groups[1].ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("describe of an unknown group: %v", kerr.ErrorForCode(dresp.Groups[1].ErrorCode))
	}
	// b leaves (epoch -1): a gets everything back.
	if resp := cgBeat(c, cgReq("g", "b", -1)); resp.ErrorCode != 0 || resp.MemberEpoch != -1 {
		t.Fatalf("leave: %v epoch %d", kerr.ErrorForCode(resp.ErrorCode), resp.MemberEpoch)
	}
	a.beat(t, c)
	if len(a.owned) != 4 {
		t.Fatalf("a after b left owns %v", a.owned)
	}
	if resp := cgBeat(c, cgReq("g", "b", b.epoch)); resp.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("a heartbeat after leaving: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	// A classic group (here a simple one, made by a commit) is not a
	// consumer group.
	commitCodes(t, c, commitOne("old", "t", 0, 1, nil))
	dreq.Groups = []string{"old"}
	if d := c.ConsumerGroupDescribe(dreq)(context.Background()).(*kmsg.ConsumerGroupDescribeResponse).Groups[0]; d.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("describe of a classic group: %v", kerr.ErrorForCode(d.ErrorCode))
	}
}

// TestConsumerStaticMembers: a static member rejoining under its instance
// id takes its predecessor's place and partitions; a second live member
// with the same instance id is refused; a static leave (-2) keeps the
// partitions for it.
func TestConsumerStaticMembers(t *testing.T) {
	c := newConsumerTestCoordinator(t, []Log{&memLog{}}, "uniform")
	inst := "box-1"
	join := func(id string) *kmsg.ConsumerGroupHeartbeatResponse {
		req := cgReq("g", id, 0)
		req.InstanceID = &inst
		return cgBeat(c, req)
	}
	r := join("first")
	if r.ErrorCode != 0 || r.Assignment == nil || len(r.Assignment.Topics[0].Partitions) != 4 {
		t.Fatalf("static join: %+v", r)
	}
	// Another member id with the same instance id while the first is live.
	if r := join("second"); r.ErrorCode != kerr.UnreleasedInstanceID.Code && r.ErrorCode != kerr.FencedInstanceID.Code {
		t.Fatalf("a second live member with box-1: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	// The first leaves as a static member (-2): box-1 keeps its place.
	leave := cgReq("g", "first", -2)
	leave.InstanceID = &inst
	if r := cgBeat(c, leave); r.ErrorCode != 0 || r.MemberEpoch != -2 {
		t.Fatalf("static leave: %v %d", kerr.ErrorForCode(r.ErrorCode), r.MemberEpoch)
	}
	r = join("second")
	if r.ErrorCode != 0 || r.Assignment == nil || len(r.Assignment.Topics) == 0 || len(r.Assignment.Topics[0].Partitions) != 4 {
		t.Fatalf("box-1 back under a new member id: %v %+v", kerr.ErrorForCode(r.ErrorCode), r.Assignment)
	}
	dreq := kmsg.NewPtrConsumerGroupDescribeRequest()
	dreq.Groups = []string{"g"}
	d := c.ConsumerGroupDescribe(dreq)(context.Background()).(*kmsg.ConsumerGroupDescribeResponse).Groups[0]
	if len(d.Members) != 1 || d.Members[0].MemberID != "second" || d.Members[0].InstanceID == nil || *d.Members[0].InstanceID != inst {
		t.Fatalf("members: %+v", d.Members)
	}
}

// TestConsumerGroupMaxSize: group.consumer.max.size refuses the member
// past it, with Kafka's message.
func TestConsumerGroupMaxSize(t *testing.T) {
	c := newTopicTTestCoordinator(t, []Log{&memLog{}}, func(cfg *Config) { cfg.ConsumerMaxSize = 2 })
	for i := range 3 {
		resp := cgBeat(c, cgReq("g", fmt.Sprint("m", i), 0))
		want := int16(0)
		if i == 2 {
			want = kerr.GroupMaxSizeReached.Code
		}
		if resp.ErrorCode != want {
			t.Fatalf("member %d: %v", i, kerr.ErrorForCode(resp.ErrorCode))
		}
	}
	lg := c.ListGroups(kmsg.NewPtrListGroupsRequest())(context.Background()).(*kmsg.ListGroupsResponse)
	if len(lg.Groups) != 1 || lg.Groups[0].ProtocolType != "consumer" {
		t.Fatalf("list: %+v", lg.Groups)
	}
	if got := c.GroupType("g"); got != "consumer" {
		t.Fatalf("GroupType = %q", got)
	}
	commitCodes(t, c, commitOne("simple", "t", 0, 1, nil))
	for name, want := range map[string]string{"nope": "", "simple": "classic", "g": "consumer"} {
		if got := c.GroupType(name); got != want {
			t.Fatalf("GroupType(%s) = %q, want %q", name, got, want)
		}
	}
}

// TestConsumerGroupListingAndDescribeFlags: ListGroups tells consumer
// groups from classic ones by type and state filters; ConsumerGroupDescribe
// reports authorized operations when asked, and refuses an empty id.
func TestConsumerGroupListingAndDescribeFlags(t *testing.T) {
	c := newConsumerTestCoordinator(t, []Log{&memLog{}}, "")
	(&cgClient{id: "a"}).beat(t, c)
	commitCodes(t, c, commitOne("plain", "t", 0, 1, nil))
	list := func(types, states []string) map[string]string {
		req := kmsg.NewPtrListGroupsRequest()
		req.Version = 5
		req.TypesFilter, req.StatesFilter = types, states
		out := map[string]string{}
		for _, g := range c.ListGroups(req)(context.Background()).(*kmsg.ListGroupsResponse).Groups {
			out[g.Group] = g.GroupType + "/" + g.GroupState
		}
		return out
	}
	if got := list([]string{"consumer"}, nil); len(got) != 1 || got["g"] != "consumer/Stable" {
		t.Fatalf("consumer groups: %v", got)
	}
	if got := list([]string{"classic"}, []string{"Empty"}); len(got) != 1 || got["plain"] != "classic/Empty" {
		t.Fatalf("empty classic groups: %v", got)
	}
	if got := list(nil, []string{"Dead"}); len(got) != 0 {
		t.Fatalf("dead groups listed: %v", got)
	}
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups, req.IncludeAuthorizedOperations = []string{"g", ""}, true
	gs := c.ConsumerGroupDescribe(req)(context.Background()).(*kmsg.ConsumerGroupDescribeResponse).Groups
	if gs[0].ErrorCode != 0 || gs[0].AuthorizedOperations <= 0 || gs[1].ErrorCode != kerr.InvalidGroupID.Code {
		t.Fatalf("describe: %d ops %d, empty id %v", gs[0].ErrorCode, gs[0].AuthorizedOperations, kerr.ErrorForCode(gs[1].ErrorCode))
	}
}
