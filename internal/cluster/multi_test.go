package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/cluster"
	"holdfast/internal/clustertest"
	"holdfast/internal/metadata"
	"holdfast/internal/partition"
	"holdfast/internal/records"
	"holdfast/internal/replica"
	"holdfast/internal/testwait"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// leaderOf is the running node that leads topic-p, or nil.
func leaderOf(nodes []*clustertest.Node, topic string, p int32) *clustertest.Node {
	for _, n := range nodes {
		if !n.Running() {
			continue
		}
		if r := n.Replicas.Get(topic, p); r != nil && r.IsLeader() {
			return n
		}
	}
	return nil
}

func awaitLeader(t *testing.T, nodes []*clustertest.Node, topic string, p int32) *clustertest.Node {
	t.Helper()
	var l *clustertest.Node
	testwait.Until(t, 30*time.Second, fmt.Sprintf("a leader of %s-%d", topic, p), func() bool {
		l = leaderOf(nodes, topic, p)
		return l != nil
	})
	return l
}

// appendN appends n one-record batches on topic-p's leader and waits for
// their commit.
func appendN(t *testing.T, p *partition.Partition, n int) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	for i := range n {
		b, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
			[]records.Record{{Timestamp: time.Now().UnixMilli(), Value: fmt.Appendf(nil, "v%d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Append(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitCommitted(ctx, res.LastOffset+1); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClusterMetadataOnEveryNode: three voters form one cluster; what
// the controller commits is applied on every node, whose replicas of a
// new topic open and elect a leader per partition.
func TestClusterMetadataOnEveryNode(t *testing.T) {
	nodes := clustertest.StartCluster(t, 3)
	ctrl := clustertest.Controller(t, nodes)
	for _, n := range nodes {
		if n.Cluster.Identity().ClusterID != ctrl.Cluster.Identity().ClusterID || n.Cluster.ControllerID() != ctrl.ID() {
			t.Fatalf("node %d: cluster %s controller %d", n.ID(), n.Cluster.Identity().ClusterID, n.Cluster.ControllerID())
		}
		if n.Cluster.SingleNode() || n.Cluster.DefaultReplicationFactor() != 3 {
			t.Fatalf("node %d: single %v rf %d", n.ID(), n.Cluster.SingleNode(), n.Cluster.DefaultReplicationFactor())
		}
	}
	if _, err := ctrl.Cluster.CreateTopic(ctxFor(t, 30*time.Second), "m", 3, -1, nil, map[string]string{"retention.ms": "60000"}, false, true); err != nil {
		t.Fatal(err)
	}
	// Only the controller creates topics a client asks for.
	for _, n := range nodes {
		if n != ctrl {
			if _, err := n.Cluster.CreateTopic(ctxFor(t, 5*time.Second), "other", 1, -1, nil, nil, false, true); codeOf(err) != kerr.NotController.Code {
				t.Fatalf("CreateTopics on node %d: %v", n.ID(), err)
			}
			break
		}
	}
	want, _ := ctrl.Meta.Topic("m")
	testwait.Until(t, 30*time.Second, "m applied and open on every node", func() bool {
		for _, n := range nodes {
			got, ok := n.Meta.Topic("m")
			if !ok || got.ID != want.ID || !slices.EqualFunc(got.Replicas, want.Replicas, slices.Equal) || got.Configs["retention.ms"] != "60000" {
				return false
			}
			for p := range int32(3) {
				if n.Replicas.Get("m", p) == nil {
					return false
				}
			}
		}
		return true
	})
	for p := range int32(3) {
		awaitLeader(t, nodes, "m", p)
	}
}

// TestClusterReassignmentMovesData: a partition held by one node is moved
// to the controller: the leader adds it as a learner, promotes it once it
// caught up, hands over and leaves; the controller commits the end; the
// records are all on the new replica and the old one is gone.
func TestClusterReassignmentMovesData(t *testing.T) {
	nodes := clustertest.StartCluster(t, 3)
	ctrl := clustertest.Controller(t, nodes)
	var from *clustertest.Node
	for _, n := range nodes {
		if n != ctrl {
			from = n
			break
		}
	}
	ctx := ctxFor(t, time.Minute)
	if _, err := ctrl.Cluster.CreateTopic(ctx, "mv", 1, -1, [][]int32{{from.ID()}}, nil, false, true); err != nil {
		t.Fatal(err)
	}
	l := awaitLeader(t, nodes, "mv", 0)
	if l != from {
		t.Fatalf("mv-0 led by %d, want %d", l.ID(), from.ID())
	}
	appendN(t, from.Replicas.Get("mv", 0), 20)
	if err := ctrl.Cluster.Propose(ctx, metadata.Command{Op: metadata.OpReassign, Name: "mv", Partition: 0, Target: []int32{ctrl.ID()}}); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, time.Minute, "the move to the controller committed", func() bool {
		tp, _ := ctrl.Meta.Topic("mv")
		_, moving := tp.Reassignment(0)
		return !moving && slices.Equal(tp.Replicas[0], []int32{ctrl.ID()})
	})
	testwait.Until(t, 30*time.Second, "the old replica dropped", func() bool { return from.Replicas.Get("mv", 0) == nil })
	p := awaitLeader(t, nodes, "mv", 0)
	if p != ctrl {
		t.Fatalf("mv-0 led by %d after the move", p.ID())
	}
	r := ctrl.Replicas.Get("mv", 0)
	n := 0
	if err := r.Scan(r.LogStartOffset(), func(records.Header, []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 20 || r.HighWatermark() != 20 {
		t.Fatalf("the moved replica holds %d batches, high watermark %d; want 20", n, r.HighWatermark())
	}
}

// TestClusterHandOverAndBalance: controlled shutdown (HandOver) moves
// every leadership off the node; with auto leader rebalance on, the
// preferred replicas take their partitions back once they can.
func TestClusterHandOverAndBalance(t *testing.T) {
	nodes := clustertest.StartCluster(t, 3, func(c *cluster.Config, _ *replica.Config) {
		c.ControlledShutdown, c.ControlledShutdownMaxWait = true, 20*time.Second
		c.AutoLeaderRebalance, c.LeaderImbalanceCheckInterval, c.LeaderImbalancePerBrokerPct = true, 100*time.Millisecond, 0
	})
	for _, n := range nodes {
		n.Cluster.StartBalancing()
	}
	ctrl := clustertest.Controller(t, nodes)
	ctx := ctxFor(t, time.Minute)
	assign := [][]int32{{1, 2, 3}, {2, 3, 1}, {3, 1, 2}}
	if _, err := ctrl.Cluster.CreateTopic(ctx, "h", 3, -1, assign, nil, false, true); err != nil {
		t.Fatal(err)
	}
	preferredLead := func() bool {
		for p := range int32(3) {
			l := leaderOf(nodes, "h", p)
			if l == nil || l.ID() != assign[p][0] {
				return false
			}
		}
		return true
	}
	testwait.Until(t, time.Minute, "every partition led by its preferred replica", preferredLead)
	// Node 2 hands over: nothing stays led there.
	n2 := nodes[1]
	n2.Cluster.HandOver()
	for p := range int32(3) {
		if l := leaderOf(nodes, "h", p); l == n2 {
			t.Fatalf("h-%d still led by node 2 after HandOver", p)
		}
	}
	if n2.Cluster.IsController() {
		t.Fatal("node 2 kept the controller role after HandOver")
	}
	// Node 2 is still up: the balancer gives h-1 back to it.
	testwait.Until(t, time.Minute, "h-1 back on its preferred replica", preferredLead)
}
