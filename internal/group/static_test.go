package group

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// staticJoin sends a JoinGroup (v9) for instance "i1" with no member id,
// as a restarted static member does.
func staticJoin(t *testing.T, c *Coordinator, ps []kmsg.JoinGroupRequestProtocol) *kmsg.JoinGroupResponse {
	t.Helper()
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 9
	req.Group, req.ProtocolType = "g", "consumer"
	inst := "i1"
	req.InstanceID = &inst
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 30000
	req.Protocols = ps
	resp := c.JoinGroup(req, "client", "/127.0.0.1")(context.Background()).(*kmsg.JoinGroupResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("join: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	return resp
}

// TestStaticRejoinKeepsGenerationWhenProtocolStays: a restarted static
// member whose subscription bytes changed (a cooperative-sticky client
// lists the partitions it owned, which a restarted one does not know) keeps
// the group's generation and assignment, as Kafka's coordinator does; only
// a rejoin that changes the group's selected protocol rebalances.
func TestStaticRejoinKeepsGenerationWhenProtocolStays(t *testing.T) {
	c := newMixedTestCoordinator(t, []Log{&memLog{}}, "disabled")
	m := &classicClient{}
	first := staticJoin(t, c, m.protocols())
	m.id, m.gen = first.MemberID, first.Generation
	m.sync(t, c, []int32{0, 1, 2, 3})
	// It rejoins (a cooperative client's second round does), now listing
	// what it owns: the broker keeps that subscription.
	m.join(t, c)
	m.sync(t, c, []int32{0, 1, 2, 3})
	if m.gen != 2 {
		t.Fatalf("generation %d after the member's own rejoin", m.gen)
	}

	// Restarted: the client (not the broker) forgot what it owned; the
	// group's protocol stays cooperative-sticky.
	restarted := &classicClient{}
	r := staticJoin(t, c, restarted.protocols())
	if r.Generation != 2 || r.MemberID == m.id || r.Protocol == nil || *r.Protocol != "cooperative-sticky" {
		t.Fatalf("rejoin: generation %d member %q (was %q) protocol %v", r.Generation, r.MemberID, m.id, r.Protocol)
	}
	if !r.SkipAssignment {
		t.Fatal("the leader rejoined without SkipAssignment: it would assign again")
	}
	c.mu.Lock()
	g := c.groups["g"]
	state, md := g.state, string(g.members[r.MemberID].metadata("cooperative-sticky"))
	c.mu.Unlock()
	if state != Stable {
		t.Fatalf("group %s after a rejoin that changes nothing", state)
	}
	if want := string(restarted.protocols()[0].Metadata); md != want {
		t.Fatal("the member's subscription was not updated to what it sent")
	}

	// A rejoin that prefers another protocol, which the group's vote then
	// selects, does rebalance.
	other := kmsg.NewConsumerMemberMetadata()
	other.Topics = []string{"t"}
	ps := append([]kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: other.AppendTo(nil)}}, restarted.protocols()...)
	r = staticJoin(t, c, ps)
	if r.Generation != 3 || r.Protocol == nil || *r.Protocol != "range" {
		t.Fatalf("rejoin with another protocol: generation %d protocol %v", r.Generation, r.Protocol)
	}
}
