package cluster_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/cluster"
	"holdfast/internal/clustertest"
	"holdfast/internal/metadata"
	"holdfast/internal/replica"
)

// TestAddPartitionsPlacementAndLimit: new partitions go where assign
// says, open here, and count against max.broker.partitions like a new
// topic's.
func TestAddPartitionsPlacementAndLimit(t *testing.T) {
	n := clustertest.Start(t, func(c *cluster.Config, _ *replica.Config) { c.MaxBrokerPartitions = 5 })
	c := n.Cluster
	ctx := ctx5(t)
	if _, err := c.CreateTopic(ctx, "grow", 2, -1, nil, nil, false, true); err != nil {
		t.Fatal(err)
	}
	tp, err := c.AddPartitions("grow", 4, [][]int32{{1}, {1}})
	if err != nil || tp.Partitions != 4 || !slices.Equal(tp.Replicas[3], []int32{1}) {
		t.Fatalf("AddPartitions with an assignment: %+v %v", tp, err)
	}
	// Opened in the background after the apply.
	waitFor(t, "grow-3 open", func() bool { return n.Replicas.Get("grow", 3) != nil })
	// 4 held, 2 more would be 6 > 5.
	if _, err := c.AddPartitions("grow", 6, nil); codeOf(err) != kerr.PolicyViolation.Code {
		t.Fatalf("past max.broker.partitions: %v", err)
	}
	if tp, _ := n.Meta.Topic("grow"); tp.Partitions != 4 {
		t.Fatalf("a refused AddPartitions changed the topic: %d partitions", tp.Partitions)
	}
	if tp, err := c.AddPartitions("grow", 5, nil); err != nil || tp.Partitions != 5 {
		t.Fatalf("up to the limit: %+v %v", tp, err)
	}
}

// TestProposeAnswersInKafkasCodes: a proposal that cannot finish in time
// is REQUEST_TIMED_OUT, not a hang or an untyped error.
func TestProposeAnswersInKafkasCodes(t *testing.T) {
	n := clustertest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := n.Cluster.Propose(ctx, metadata.Command{Op: metadata.OpBrokerConfigs, Name: "", Configs: map[string]string{"log.retention.ms": "5"}})
	if codeOf(err) != kerr.RequestTimedOut.Code {
		t.Fatalf("Propose with a done context: %v", err)
	}
	// A command the metadata refuses keeps its own error.
	err = n.Cluster.Propose(ctx5(t), metadata.Command{Op: metadata.OpFence})
	if err == nil || !strings.Contains(err.Error(), "without broker ids") {
		t.Fatalf("fence without ids: %v", err)
	}
}

// TestSendRefusals: Send names the broker it cannot reach - one not
// registered, or one without the inter-broker listener - before it dials.
func TestSendRefusals(t *testing.T) {
	n := clustertest.Start(t, func(c *cluster.Config, _ *replica.Config) {
		c.InterBrokerListener = "INTERNAL"
		c.Self.Listeners = []metadata.Endpoint{{Name: "EXTERNAL", Host: "127.0.0.1", Port: 9092, Protocol: "PLAINTEXT"}}
	})
	ctx := ctx5(t)
	if _, err := n.Cluster.Send(ctx, 7, kmsg.NewPtrMetadataRequest()); err == nil || !strings.Contains(err.Error(), "broker 7 is not registered") {
		t.Fatalf("Send to an unknown broker: %v", err)
	}
	if _, err := n.Cluster.Send(ctx, 1, kmsg.NewPtrMetadataRequest()); err == nil || !strings.Contains(err.Error(), "has no INTERNAL listener") {
		t.Fatalf("Send without the listener: %v", err)
	}
	// The node's own address on the inter-broker listener.
	br, _ := n.Meta.Broker(1)
	if _, ok := n.Cluster.BrokerAddr(br); ok {
		t.Fatal("an address on a listener the broker does not have")
	}
}

// TestUnregisterAndReassignment: a broker that holds replicas cannot be
// unregistered; a reassignment lists the union of old and new replicas
// while it is pending, and a cancellation puts the old ones back.
func TestUnregisterAndReassignment(t *testing.T) {
	n := clustertest.Start(t)
	c := n.Cluster
	ctx := ctx5(t)
	if err := c.Propose(ctx, metadata.Command{Op: metadata.OpRegister, Broker: &metadata.BrokerInfo{ID: 2, Host: "127.0.0.2", Port: 9092}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTopic(ctx, "r", 1, -1, [][]int32{{1}}, nil, false, true); err != nil {
		t.Fatal(err)
	}
	if err := c.Propose(ctx, metadata.Command{Op: metadata.OpUnregister, BrokerID: 1}); !errors.Is(err, metadata.ErrBrokerInUse) {
		t.Fatalf("unregistering a broker with replicas: %v", err)
	}
	// Move r-0 to {1, 2}: pending (broker 2 never catches up here).
	if err := c.Propose(ctx, metadata.Command{Op: metadata.OpReassign, Name: "r", Partition: 0, Target: []int32{1, 2}}); err != nil {
		t.Fatal(err)
	}
	tp, _ := n.Meta.Topic("r")
	if r, ok := tp.Reassignment(0); !ok || !slices.Equal(r.Target, []int32{1, 2}) {
		t.Fatalf("reassignment %+v %v", tp.Reassigning, ok)
	}
	if rs := slices.Sorted(slices.Values(tp.Replicas[0])); !slices.Equal(rs, []int32{1, 2}) {
		t.Fatalf("replicas while moving: %v, want the union", tp.Replicas[0])
	}
	// Broker 2 is now in use too.
	if err := c.Propose(ctx, metadata.Command{Op: metadata.OpUnregister, BrokerID: 2}); !errors.Is(err, metadata.ErrBrokerInUse) {
		t.Fatalf("unregistering a reassignment's target: %v", err)
	}
	if err := c.Propose(ctx, metadata.Command{Op: metadata.OpReassign, Name: "r", Partition: 0}); err != nil {
		t.Fatal(err)
	}
	// The cancellation is a move back to the original replicas, which
	// the partition's leader (this node) carries out and reports done.
	waitFor(t, "the move back to {1} done", func() bool {
		tp, _ = n.Meta.Topic("r")
		_, moving := tp.Reassignment(0)
		return !moving && slices.Equal(tp.Replicas[0], []int32{1})
	})
	// Nothing left on broker 2: it may leave.
	if err := c.Propose(ctx, metadata.Command{Op: metadata.OpUnregister, BrokerID: 2}); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Meta.Broker(2); ok {
		t.Fatal("broker 2 still registered")
	}
	// The replica stays open and led here throughout.
	p := n.Replicas.Get("r", 0)
	if p == nil {
		t.Fatal("r-0 closed")
	}
	waitFor(t, "r-0 led here", p.IsLeader)
}

// TestDeleteTopicRemovesItsData: a deleted topic's partition directories
// go (at once, or when its name is created again), and a topic created
// again under the name starts empty.
func TestDeleteTopicRemovesItsData(t *testing.T) {
	n := clustertest.Start(t)
	c := n.Cluster
	ctx := ctx5(t)
	if _, err := c.CreateTopic(ctx, "d", 2, -1, nil, nil, false, true); err != nil {
		t.Fatal(err)
	}
	dirs := func() []string {
		ents, _ := os.ReadDir(n.Dir)
		var out []string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "d-") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	if len(dirs()) != 2 {
		t.Fatalf("partition directories %v", dirs())
	}
	if _, err := c.DeleteTopic("d"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTopic(ctx, "d", 1, -1, nil, nil, false, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "one partition directory of the new d", func() bool { return len(dirs()) == 1 })
	if p := n.Replicas.Get("d", 0); p == nil || p.Log().EndOffset() != 0 {
		t.Fatal("the new d-0 is not open and empty")
	}
}
