package group

import (
	"context"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func newMixedTestCoordinator(t *testing.T, logs []Log, policy string) *Coordinator {
	return newTopicTTestCoordinator(t, logs, func(cfg *Config) {
		cfg.InitialRebalanceDelay = 0
		cfg.ConsumerMigrationPolicy = policy
	})
}

// classicClient is a cooperative classic member: it reports what it owns
// in every JoinGroup.
type classicClient struct {
	id    string
	gen   int32
	owned []int32
}

func (m *classicClient) protocols() []kmsg.JoinGroupRequestProtocol {
	md := kmsg.NewConsumerMemberMetadata()
	md.Version = 1
	md.Topics = []string{"t"}
	if len(m.owned) > 0 {
		md.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "t", Partitions: slices.Clone(m.owned)}}
	}
	return []kmsg.JoinGroupRequestProtocol{{Name: "cooperative-sticky", Metadata: md.AppendTo(nil)}}
}

func (m *classicClient) join(t *testing.T, c *Coordinator) *kmsg.JoinGroupResponse {
	t.Helper()
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 3
	req.Group, req.MemberID, req.ProtocolType = "g", m.id, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 30000
	req.Protocols = m.protocols()
	resp := c.JoinGroup(req, "client", "/127.0.0.1")(context.Background()).(*kmsg.JoinGroupResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("join: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	m.id, m.gen = resp.MemberID, resp.Generation
	return resp
}

// sync sends SyncGroup (with assign when it is the leader) and takes the
// assignment it gets.
func (m *classicClient) sync(t *testing.T, c *Coordinator, assign []int32) {
	t.Helper()
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = 3
	req.Group, req.MemberID, req.Generation = "g", m.id, m.gen
	if assign != nil {
		a := kmsg.NewConsumerMemberAssignment()
		a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "t", Partitions: assign}}
		req.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: m.id, MemberAssignment: a.AppendTo(nil)}}
	}
	resp := c.SyncGroup(req)(context.Background()).(*kmsg.SyncGroupResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("sync: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(resp.MemberAssignment); err != nil {
		t.Fatal(err)
	}
	m.owned = nil
	for _, tp := range a.Topics {
		m.owned = append(m.owned, tp.Partitions...)
	}
	slices.Sort(m.owned)
}

func (m *classicClient) heartbeat(c *Coordinator) int16 {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = "g", m.id, m.gen
	return c.Heartbeat(req)(context.Background()).(*kmsg.HeartbeatResponse).ErrorCode
}

func TestMixedGroupUpgradeReplayDowngrade(t *testing.T) {
	log := &memLog{}
	c := newMixedTestCoordinator(t, []Log{log}, MigrationBidirectional)

	// A classic group: one member owns all four partitions.
	k := &classicClient{}
	k.join(t, c)
	k.sync(t, c, []int32{0, 1, 2, 3})
	if len(k.owned) != 4 {
		t.Fatalf("classic member owns %v", k.owned)
	}

	// A consumer-protocol member joins: upgraded; it waits for the
	// partitions the classic member still owns.
	a := &cgClient{id: "a"}
	a.beat(t, c)
	if len(a.owned) != 0 {
		t.Fatalf("a was given %v while the classic member owns everything", a.owned)
	}
	if code := k.heartbeat(c); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("classic heartbeat after the upgrade: %v, want REBALANCE_IN_PROGRESS", kerr.ErrorForCode(code))
	}
	// The classic member rejoins reporting all four: it keeps its epoch
	// and is told to give two up.
	oldGen := k.gen
	jr := k.join(t, c)
	if jr.LeaderID != "" || len(jr.Members) != 0 || jr.Protocol == nil || *jr.Protocol != "cooperative-sticky" {
		t.Fatalf("join answered leader %q, %d members, protocol %v", jr.LeaderID, len(jr.Members), jr.Protocol)
	}
	if k.gen != oldGen {
		t.Fatalf("generation moved from %d to %d before the revocation", oldGen, k.gen)
	}
	k.sync(t, c, nil)
	if len(k.owned) != 2 {
		t.Fatalf("classic member kept %v, want two partitions", k.owned)
	}
	a.beat(t, c)
	if len(a.owned) != 0 {
		t.Fatalf("a was given %v before the classic member confirmed the revocation", a.owned)
	}
	// It confirms by rejoining with what it kept: new epoch.
	if code := k.heartbeat(c); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("classic heartbeat while revoking: %v", kerr.ErrorForCode(code))
	}
	k.join(t, c)
	k.sync(t, c, nil)
	if k.gen <= oldGen || len(k.owned) != 2 {
		t.Fatalf("after the revocation: generation %d (was %d), owns %v", k.gen, oldGen, k.owned)
	}
	a.beat(t, c)
	if len(a.owned) != 2 {
		t.Fatalf("a owns %v after the classic member revoked", a.owned)
	}
	for p := range a.owned {
		if slices.Contains(k.owned, p) {
			t.Fatalf("partition %d owned by both", p)
		}
	}
	if code := k.heartbeat(c); code != 0 {
		t.Fatalf("classic heartbeat when stable: %v", kerr.ErrorForCode(code))
	}

	// A commit with the classic member's generation is accepted at an old
	// version; a wrong one is ILLEGAL_GENERATION.
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version = 7
	commit.Group, commit.MemberID, commit.Generation = "g", k.id, k.gen
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: k.owned[0], Offset: 7, LeaderEpoch: -1}}}}
	if code := c.OffsetCommit(commit)(context.Background()).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("classic commit: %v", kerr.ErrorForCode(code))
	}
	commit.Generation++
	if code := c.OffsetCommit(commit)(context.Background()).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.IllegalGeneration.Code {
		t.Fatalf("classic commit with a wrong generation: %v", kerr.ErrorForCode(code))
	}

	// Another coordinator replays the mixed group, classic member included.
	c2 := newMixedTestCoordinator(t, []Log{log}, MigrationBidirectional)
	c2.mu.Lock()
	g := c2.groups["g"]
	var km *cmember
	if g != nil && g.consumer != nil {
		km = g.consumer.members[k.id]
	}
	c2.mu.Unlock()
	if km == nil || km.classic == nil || km.classic.sessionTimeout.Milliseconds() != 10000 || len(km.classic.protocols) != 1 || km.epoch != k.gen {
		t.Fatalf("classic member replayed as %+v", km)
	}
	if code := k.heartbeat(c2); code != 0 {
		t.Fatalf("classic heartbeat after the replay: %v", kerr.ErrorForCode(code))
	}
	a.beat(t, c2)

	// The consumer-protocol member leaves: a classic group again, whose
	// members rejoin.
	leave := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	leave.Version = 1
	leave.Group, leave.MemberID, leave.MemberEpoch = "g", "a", -1
	if code := c2.ConsumerGroupHeartbeat(leave, "client", "")(context.Background()).(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode; code != 0 {
		t.Fatalf("leave: %v", kerr.ErrorForCode(code))
	}
	c2.mu.Lock()
	g = c2.groups["g"]
	state, isConsumer := g.state, g.consumer != nil
	c2.mu.Unlock()
	if isConsumer || state != PreparingRebalance {
		t.Fatalf("after the last consumer member left: consumer %v, state %s", isConsumer, state)
	}
	if code := k.heartbeat(c2); code != kerr.RebalanceInProgress.Code {
		t.Fatalf("classic heartbeat after the downgrade: %v", kerr.ErrorForCode(code))
	}
	k.join(t, c2)
	k.sync(t, c2, []int32{0, 1, 2, 3})
	if len(k.owned) != 4 {
		t.Fatalf("after the downgrade the classic member owns %v", k.owned)
	}
	c3 := newMixedTestCoordinator(t, []Log{log}, MigrationBidirectional)
	c3.mu.Lock()
	g = c3.groups["g"]
	ok := g != nil && g.consumer == nil && len(g.members) == 1 && g.members[k.id] != nil
	c3.mu.Unlock()
	if !ok {
		t.Fatal("the downgraded group did not replay as a classic group with its member")
	}
}

func TestMixedGroupPolicyDisabled(t *testing.T) {
	c := newMixedTestCoordinator(t, []Log{&memLog{}}, MigrationDisabled)
	k := &classicClient{}
	k.join(t, c)
	k.sync(t, c, []int32{0, 1, 2, 3})
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group, req.MemberID, req.MemberEpoch = "g", "a", 0
	req.RebalanceTimeoutMillis = 30000
	req.SubscribedTopicNames = []string{"t"}
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	resp := c.ConsumerGroupHeartbeat(req, "client", "")(context.Background()).(*kmsg.ConsumerGroupHeartbeatResponse)
	if resp.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("consumer join with the upgrade disabled: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	if code := k.heartbeat(c); code != 0 {
		t.Fatalf("the classic member after a refused upgrade: %v", kerr.ErrorForCode(code))
	}
}
