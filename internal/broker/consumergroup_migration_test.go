package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/testwait"
)

// Online migration between the classic and the consumer group protocol
// (KIP-848) on one group id while it consumes: two classic members
// (franz-go, cooperative-sticky), a consumer-protocol member joins (the
// group is upgraded, the classic members carry on inside it), then leaves
// (the group is downgraded back to classic). Every record is read, and a
// partition never has two owners in the group's own view.

func TestConsumerGroupOnlineMigration(t *testing.T) {
	n := startConsumerGroups(t)
	n.CreateTopic("mig", 6, nil)
	runOnlineMigration(t, []string{n.Addr}, n.Admin(), "mig", "mig-app", nil)
}

// The classic members are eager (range): they give up every partition
// before each JoinGroup and report none owned.
func TestConsumerGroupOnlineMigrationEager(t *testing.T) {
	n := startConsumerGroups(t)
	n.CreateTopic("mig-eager", 6, nil)
	runOnlineMigration(t, []string{n.Addr}, n.Admin(), "mig-eager", "mig-eager-app", nil, kgo.Balancers(kgo.RangeBalancer()))
}

func TestClusterConsumerGroupOnlineMigration(t *testing.T) {
	nodes := startCluster(t, 3, func(c *broker.Config) {
		c.OffsetsTopicPartitions = 4
		c.Txn.StatePartitions = 4
		c.Groups.ConsumerSessionTimeout = 10 * time.Second
		c.Groups.ConsumerHeartbeatInterval = 200 * time.Millisecond
	})
	seeds := addrs(nodes)
	createClusterTopic(t, nodes, "mig", 6, 3, nil)
	// While the group is mixed its coordinator stops: the next one
	// replays the group, classic members included, from __consumer_offsets.
	failover := func(adm *kadm.Client) *kadm.Client {
		fc := adm.FindGroupCoordinators(gctx(t, 10*time.Second), "mig-app")
		if err := fc.Error(); err != nil {
			t.Fatalf("find coordinator: %v", err)
		}
		var coord int32 = -1
		for _, c := range fc {
			coord = c.NodeID
		}
		old := nodeByID(nodes, coord)
		if old == nil {
			t.Fatalf("coordinator %d is not a node", coord)
		}
		t.Logf("stopping the coordinator, node %d", coord)
		old.Stop()
		var rest []string
		for _, nd := range nodes {
			if nd != old {
				rest = append(rest, nd.Addr)
			}
		}
		return kadmClient(t, rest)
	}
	runOnlineMigration(t, seeds, kadmClient(t, seeds), "mig", "mig-app", failover)
}

func runOnlineMigration(t *testing.T, seeds []string, adm *kadm.Client, topic, group string, failover func(*kadm.Client) *kadm.Client, classicOpts ...kgo.Opt) {
	const batch = 200
	produced := 0
	produce := func() {
		produceValues(t, seeds, topic, produced, batch)
		produced += batch
	}
	var ms []*cgMember
	readAll := func(what string) {
		t.Helper()
		waitFor(t, 90*time.Second, what, func() bool {
			seen := seenAll(ms...)
			for v := 0; v < produced; v++ {
				if seen[v] == 0 {
					return false
				}
			}
			return true
		})
	}

	// A classic group with two members.
	produce()
	ms = append(ms, startGroupMember(t, seeds, group, topic, classicOpts...), startGroupMember(t, seeds, group, topic, classicOpts...))
	waitClassicStable(t, adm, group, 2)
	readAll("the classic group read the first records")

	// A consumer-protocol member joins: the group is upgraded in place.
	k := startCGMember(t, seeds, group, topic)
	ms = append(ms, k)
	checkMixed := func() {
		t.Helper()
		g := waitCGStable(t, adm, group, 3, 6)
		classic := 0
		for _, m := range g.Members {
			if m.MemberType == 0 {
				classic++
			}
			if m.MemberEpoch != g.Epoch {
				t.Fatalf("member %s at epoch %d, group at %d", m.MemberID, m.MemberEpoch, g.Epoch)
			}
		}
		if classic != 2 {
			t.Fatalf("%d classic members in the upgraded group, want 2: %+v", classic, g.Members)
		}
	}
	checkMixed()
	waitFor(t, 60*time.Second, "every member consuming", func() bool {
		return ms[0].partitions() > 0 && ms[1].partitions() > 0 && k.partitions() > 0 &&
			ms[0].partitions()+ms[1].partitions()+k.partitions() == 6
	})
	produce()
	readAll("the mixed group read every record")
	lg, err := adm.ListGroups(gctx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := lg[group]; !ok || l.GroupType != "consumer" {
		t.Fatalf("the upgraded group is listed as %+v", l)
	}
	if failover != nil {
		adm = failover(adm)
		checkMixed()
		produce()
		readAll("the mixed group read every record after the failover")
	}

	// The consumer-protocol member leaves: back to a classic group.
	k.stop()
	waitClassicStable(t, adm, group, 2)
	waitFor(t, 60*time.Second, "the classic members hold every partition", func() bool {
		return ms[0].partitions()+ms[1].partitions() == 6
	})
	produce()
	readAll("the downgraded group read every record")
	dup := 0
	for _, c := range seenAll(ms...) {
		if c > 1 {
			dup++
		}
	}
	t.Logf("%d records, %d read more than once across the two conversions", produced, dup)
}

// waitClassicStable waits until DescribeGroups shows group as a Stable
// classic group of members members whose assignments cover 6 partitions.
func waitClassicStable(t *testing.T, adm *kadm.Client, group string, members int) {
	t.Helper()
	var last string
	if !testwait.Poll(90*time.Second, func() bool {
		gs, err := adm.DescribeGroups(gctx(t, 10*time.Second), group)
		if err != nil {
			last = err.Error()
			return false
		}
		g := gs[group]
		owned := map[string]bool{}
		total := 0
		for _, m := range g.Members {
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, tp := range a.Topics {
					for _, p := range tp.Partitions {
						owned[fmt.Sprint(tp.Topic, p)] = true
						total++
					}
				}
			}
		}
		last = fmt.Sprintf("state %s protocol type %q, %d members, %d partitions (%d distinct), err %v", g.State, g.ProtocolType, len(g.Members), total, len(owned), g.Err)
		return g.Err == nil && g.State == "Stable" && g.ProtocolType == "consumer" && len(g.Members) == members && total == 6 && len(owned) == 6
	}) {
		t.Fatalf("classic group %s not stable with %d members: %s", group, members, last)
	}
}
