package group

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/testwait"
)

// groupOn is a group name that PartitionFor places on partition p of n.
func groupOn(p, n int32) string {
	for i := 0; ; i++ {
		if g := fmt.Sprint("grp-", i); PartitionFor(g, int(n)) == p {
			return g
		}
	}
}

// TestPartitionOwnership: a partition this node does not coordinate
// answers NOT_COORDINATOR; one it is loading, COORDINATOR_LOAD_IN_PROGRESS;
// an unload drops its groups, which a load brings back from the log.
func TestPartitionOwnership(t *testing.T) {
	logs := []Log{&memLog{}, &memLog{}}
	c := newTopicTTestCoordinator(t, logs, func(*Config) {})
	g0, g1 := groupOn(0, 2), groupOn(1, 2)
	for _, g := range []string{g0, g1} {
		if codes := commitCodes(t, c, commitOne(g, "t", 0, 11, nil)); codes["t/0"] != 0 {
			t.Fatal(codes)
		}
	}
	if !c.Owns(0) || !c.Owns(1) || c.Loading(g0) || c.Unavailable(g0) != 0 {
		t.Fatal("a loaded coordinator does not own its partitions")
	}
	c.UnloadPartition(1)
	if c.Owns(1) || c.Unavailable(g1) != kerr.NotCoordinator.Code || c.Unavailable(g0) != 0 {
		t.Fatalf("after unloading 1: owns %v, g1 %v", c.Owns(1), kerr.ErrorForCode(c.Unavailable(g1)))
	}
	if codes := commitCodes(t, c, commitOne(g1, "t", 0, 12, nil)); codes["t/0"] != kerr.NotCoordinator.Code {
		t.Fatalf("commit to an unloaded partition: %v", kerr.ErrorForCode(codes["t/0"]))
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 8
	req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: g1}}
	if code := c.OffsetFetch(req)(context.Background()).(*kmsg.OffsetFetchResponse).Groups[0].ErrorCode; code != kerr.NotCoordinator.Code {
		t.Fatalf("fetch from an unloaded partition: %v", kerr.ErrorForCode(code))
	}
	c.LoadPartition(1)
	testwait.Until(t, 10*time.Second, "partition 1 loaded again", func() bool { return c.Loaded(1) })
	if off, _ := fetch(t, c, g1, 0); off != 11 {
		t.Fatalf("g1's offset after the reload: %d", off)
	}
	if got := c.NumPartitions(); got != 2 {
		t.Fatalf("NumPartitions %d", got)
	}
}

// TestCommittedOffsetsView: the figures' view of every committed offset,
// sorted, with its group's state and size.
func TestCommittedOffsetsView(t *testing.T) {
	c := newClassicCoordinator(t, nil)
	for _, x := range []struct {
		g   string
		p   int32
		off int64
	}{{"b", 1, 5}, {"a", 2, 7}, {"a", 0, 3}} {
		commitCodes(t, c, commitOne(x.g, "t", x.p, x.off, nil))
	}
	m := &classic{t: t, c: c, group: "b"}
	m.join()
	m.syncReply(map[string]string{m.id: "x"})(context.Background())
	got := c.CommittedOffsets()
	var rows []string
	for _, o := range got {
		rows = append(rows, fmt.Sprintf("%s/%s/%d/%d %s %d", o.Group, o.Topic, o.Partition, o.Offset, o.State, o.Members))
	}
	want := []string{"a/t/0/3 Empty 0", "a/t/2/7 Empty 0", "b/t/1/5 Stable 1"}
	if !slices.Equal(rows, want) {
		t.Fatalf("CommittedOffsets:\n%v\nwant\n%v", rows, want)
	}
}

// TestDescribeClassicMembers: DescribeGroups shows each member's client,
// host, metadata and assignment, and the group's protocol.
func TestDescribeClassicMembers(t *testing.T) {
	c := newClassicCoordinator(t, nil)
	m := &classic{t: t, c: c, group: "d"}
	m.join()
	m.syncReply(map[string]string{m.id: "assigned-bytes"})(context.Background())
	d := describe(t, c, "d")
	if d.ErrorCode != 0 || d.State != "Stable" || d.Protocol != "range" || len(d.Members) != 1 {
		t.Fatalf("described: %+v", d)
	}
	dm := d.Members[0]
	if dm.MemberID != m.id || dm.ClientID != "client-d" || dm.ClientHost != "/10.0.0.1" ||
		string(dm.ProtocolMetadata) != "md-" || string(dm.MemberAssignment) != "assigned-bytes" {
		t.Fatalf("member %+v", dm)
	}
	// Several groups in one request, one unknown, one invalid.
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Version = 5
	req.Groups = []string{"d", "ghost", ""}
	gs := c.DescribeGroups(req)(context.Background()).(*kmsg.DescribeGroupsResponse).Groups
	if len(gs) != 3 || gs[0].State != "Stable" || gs[1].State != "Dead" || gs[2].ErrorCode != kerr.InvalidGroupID.Code {
		t.Fatalf("three groups: %+v", gs)
	}
}

// TestReplayRestoresGroupKinds: after a restart (a new coordinator over
// the same log) a consumer group keeps its members, epochs and
// assignment, a simple group its offsets, and ListGroups their types.
func TestReplayRestoresGroupKinds(t *testing.T) {
	logs := []Log{&memLog{}}
	c := newConsumerTestCoordinator(t, logs, "range")
	a, b := &cgClient{id: "a"}, &cgClient{id: "b"}
	a.beat(t, c)
	for range 5 {
		b.beat(t, c)
		a.beat(t, c)
	}
	commitCodes(t, c, commitOne("plain", "t", 3, 33, nil))
	r := newConsumerTestCoordinator(t, logs, "range")
	dreq := kmsg.NewPtrConsumerGroupDescribeRequest()
	dreq.Groups = []string{"g"}
	d := r.ConsumerGroupDescribe(dreq)(context.Background()).(*kmsg.ConsumerGroupDescribeResponse).Groups[0]
	if d.ErrorCode != 0 || len(d.Members) != 2 || d.Epoch != a.epoch || d.AssignorName != "range" {
		t.Fatalf("replayed consumer group: %+v", d)
	}
	for _, m := range d.Members {
		want := a
		if m.MemberID == "b" {
			want = b
		}
		var got []int32
		for _, tp := range m.Assignment.TopicPartitions {
			got = append(got, tp.Partitions...)
		}
		slices.Sort(got)
		var owned []int32
		for p := range want.owned {
			owned = append(owned, p)
		}
		slices.Sort(owned)
		if m.MemberEpoch != want.epoch || !slices.Equal(got, owned) {
			t.Fatalf("replayed member %s: epoch %d assigned %v, want %d %v", m.MemberID, m.MemberEpoch, got, want.epoch, owned)
		}
	}
	// The members carry on at their epochs with the new coordinator.
	a.beat(t, r)
	if off, _ := fetch(t, r, "plain", 3); off != 33 {
		t.Fatalf("plain's offset after replay: %d", off)
	}
	types := map[string]string{}
	for _, g := range r.ListGroups(kmsg.NewPtrListGroupsRequest())(context.Background()).(*kmsg.ListGroupsResponse).Groups {
		types[g.Group] = g.ProtocolType
	}
	if types["g"] != "consumer" || len(types) != 2 {
		t.Fatalf("listed after replay: %v", types)
	}
}
