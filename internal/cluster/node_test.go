package cluster_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/cluster"
	"holdfast/internal/clustertest"
	"holdfast/internal/metadata"
	"holdfast/internal/replica"
	"holdfast/internal/testwait"
)

func codeOf(err error) int16 {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return 0
}

func ctx5(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestSingleNodeIsItsOwnController: a node that is a cluster of one leads
// its metadata group, is registered (with its directory id) when Start
// returns, and serves the controller-only requests.
func TestSingleNodeIsItsOwnController(t *testing.T) {
	n := clustertest.Start(t)
	c := n.Cluster
	if !c.SingleNode() || c.BrokerOnly() || !c.IsController() || c.ControllerID() != 1 || c.ControllerOnly() != 0 {
		t.Fatalf("single %v broker-only %v controller %v id %d only %d", c.SingleNode(), c.BrokerOnly(), c.IsController(), c.ControllerID(), c.ControllerOnly())
	}
	br, ok := n.Meta.Broker(1)
	if !ok || br.Host != "127.0.0.1" || br.Port != 9092 || br.DirID != c.Identity().DirectoryID.String() {
		t.Fatalf("registration %+v %v, identity %+v", br, ok, c.Identity())
	}
	if n.Meta.ClusterID() == "" || n.Meta.ClusterID() != c.Identity().ClusterID {
		t.Fatalf("cluster id %q, identity %q", n.Meta.ClusterID(), c.Identity().ClusterID)
	}
	if u := c.UnfencedBrokers(); len(u) != 1 || u[0].ID != 1 {
		t.Fatalf("unfenced %v", u)
	}
	// A single node has nobody to hand its clients to: no fence.
	if err := c.FenceForShutdown(ctx5(t)); err != nil || n.Meta.Fenced(1) {
		t.Fatalf("FenceForShutdown: %v, fenced %v", err, n.Meta.Fenced(1))
	}
}

// TestCreateTopicRefusals: the answers CreateTopics gets from the
// controller, each with Kafka's error code, and nothing committed.
func TestCreateTopicRefusals(t *testing.T) {
	n := clustertest.Start(t, func(c *cluster.Config, _ *replica.Config) { c.MaxBrokerPartitions = 4 })
	c := n.Cluster
	ctx := ctx5(t)
	if _, err := c.CreateTopic(ctx, "a.b", 1, -1, nil, nil, false, true); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		partitions int32
		rf         int16
		assign     [][]int32
		internal   bool
		code       int16
		errIs      error
	}{
		{"a.b", 1, -1, nil, false, kerr.TopicAlreadyExists.Code, nil},
		{"a_b", 1, -1, nil, false, kerr.InvalidTopicException.Code, nil}, // collides with a.b
		{"bad/name", 1, -1, nil, false, kerr.InvalidTopicException.Code, nil},
		{"", 1, -1, nil, false, kerr.InvalidTopicException.Code, nil},
		{strings.Repeat("x", 250), 1, -1, nil, false, kerr.InvalidTopicException.Code, nil},
		{"zero", 0, -1, nil, false, 0, metadata.ErrInvalidCount},
		{"rf2", 1, 2, nil, false, kerr.InvalidReplicationFactor.Code, nil},
		// max.broker.partitions: a.b holds one of the four.
		{"big", 4, -1, nil, false, kerr.PolicyViolation.Code, nil},
		{"assigned", 2, -1, [][]int32{{1}, {1}, {1}, {1}}, false, kerr.PolicyViolation.Code, nil},
	} {
		_, err := c.CreateTopic(ctx, tc.name, tc.partitions, tc.rf, tc.assign, nil, tc.internal, true)
		if tc.errIs != nil && !errors.Is(err, tc.errIs) || tc.errIs == nil && codeOf(err) != tc.code {
			t.Errorf("CreateTopic(%.20q, %d, rf %d): %v, want code %d / %v", tc.name, tc.partitions, tc.rf, err, tc.code, tc.errIs)
		}
	}
	if ts := n.Meta.Topics(); len(ts) != 1 || ts[0].Name != "a.b" {
		t.Fatalf("topics after the refusals: %v", ts)
	}
	// Not new: the existing topic, not an error.
	if tp, err := c.CreateTopic(ctx, "a.b", 9, -1, nil, nil, false, false); err != nil || tp.Partitions != 1 {
		t.Fatalf("existing topic: %+v %v", tp, err)
	}
	// Internal topics are exempt from max.broker.partitions.
	if tp, err := c.CreateTopic(ctx, metadata.OffsetsTopic, 5, -1, nil, nil, true, false); err != nil || !tp.Internal || tp.Partitions != 5 {
		t.Fatalf("internal topic: %+v %v", tp, err)
	}
}

// TestTopicLifecycle: create (replicas open here within the request's
// deadline), add partitions, change configs, delete (the deletion hook
// runs once, inside the apply), create the name again (a new id).
func TestTopicLifecycle(t *testing.T) {
	n := clustertest.Start(t)
	c := n.Cluster
	var mu sync.Mutex
	var deleted []metadata.Topic
	c.OnTopicDeleted(func(tp metadata.Topic) {
		mu.Lock()
		deleted = append(deleted, tp)
		mu.Unlock()
	})
	ctx := ctx5(t)
	tp, err := c.CreateTopic(ctx, "orders", 2, -1, nil, map[string]string{"retention.ms": "1000"}, false, true)
	if err != nil {
		t.Fatal(err)
	}
	if tp.Partitions != 2 || !slices.EqualFunc(tp.Replicas, [][]int32{{1}, {1}}, slices.Equal) || tp.Configs["retention.ms"] != "1000" || tp.Internal {
		t.Fatalf("created %+v", tp)
	}
	for i := range int32(2) {
		if n.Replicas.Get("orders", i) == nil {
			t.Fatalf("orders-%d not open after CreateTopic returned", i)
		}
	}
	if _, err := c.AddPartitions("orders", 2, nil); !errors.Is(err, metadata.ErrInvalidCount) {
		t.Fatalf("AddPartitions to the same count: %v", err)
	}
	if _, err := c.AddPartitions("nope", 3, nil); !errors.Is(err, metadata.ErrUnknownTopic) {
		t.Fatalf("AddPartitions of an unknown topic: %v", err)
	}
	if tp, err = c.AddPartitions("orders", 4, nil); err != nil || tp.Partitions != 4 || len(tp.Replicas) != 4 {
		t.Fatalf("AddPartitions: %+v %v", tp, err)
	}
	if tp, err = c.SetTopicConfigs("orders", map[string]string{"cleanup.policy": "compact"}); err != nil || tp.Configs["cleanup.policy"] != "compact" || tp.Configs["retention.ms"] != "" {
		t.Fatalf("SetTopicConfigs (a replacement): %+v %v", tp.Configs, err)
	}
	if _, err := c.SetTopicConfigs("nope", nil); !errors.Is(err, metadata.ErrUnknownTopic) {
		t.Fatalf("SetTopicConfigs of an unknown topic: %v", err)
	}
	if err := c.SetBrokerConfigs("", map[string]string{"log.retention.ms": "5000"}); err != nil || n.Meta.BrokerConfigs("")["log.retention.ms"] != "5000" {
		t.Fatalf("SetBrokerConfigs: %v %v", err, n.Meta.BrokerConfigs(""))
	}
	old := tp.ID
	if _, err := c.DeleteTopic("nope"); !errors.Is(err, metadata.ErrUnknownTopic) {
		t.Fatalf("DeleteTopic of an unknown topic: %v", err)
	}
	if _, err := c.DeleteTopic("orders"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(deleted) != 1 || deleted[0].ID != old {
		t.Fatalf("deletion hook ran for %v", deleted)
	}
	mu.Unlock()
	if _, ok := n.Meta.Topic("orders"); ok {
		t.Fatal("orders still in the metadata after DeleteTopic")
	}
	tp, err = c.CreateTopic(ctx, "orders", 1, -1, nil, nil, false, true)
	if err != nil || tp.ID == old {
		t.Fatalf("re-created: %+v %v (old id %x)", tp, err, old)
	}
}

// TestMetadataSurvivesRestart: what the node committed is there after a
// restart, and the entries replayed at start do not run the deletion hook
// again.
func TestMetadataSurvivesRestart(t *testing.T) {
	n := clustertest.Start(t)
	ctx := ctx5(t)
	for _, name := range []string{"keep", "gone"} {
		if _, err := n.Cluster.CreateTopic(ctx, name, 3, -1, nil, map[string]string{"segment.bytes": "1048576"}, false, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Cluster.DeleteTopic("gone"); err != nil {
		t.Fatal(err)
	}
	keep, _ := n.Meta.Topic("keep")
	cluster1 := n.Meta.ClusterID()
	n.Stop()
	n.Restart()
	hooked := false
	n.Cluster.OnTopicDeleted(func(metadata.Topic) { hooked = true })
	got, ok := n.Meta.Topic("keep")
	if !ok || got.ID != keep.ID || got.Partitions != 3 || got.Configs["segment.bytes"] != "1048576" {
		t.Fatalf("after restart: %+v %v", got, ok)
	}
	if _, ok := n.Meta.Topic("gone"); ok {
		t.Fatal("a deleted topic is back after restart")
	}
	if n.Meta.ClusterID() != cluster1 || !n.Cluster.IsController() {
		t.Fatalf("cluster id %q (was %q), controller %v", n.Meta.ClusterID(), cluster1, n.Cluster.IsController())
	}
	for i := range int32(3) {
		if n.Replicas.Get("keep", i) == nil {
			t.Fatalf("keep-%d not open after restart", i)
		}
	}
	// A new change applies after the replay: the hook has had its chance.
	if _, err := n.Cluster.CreateTopic(ctx, "later", 1, -1, nil, nil, false, true); err != nil {
		t.Fatal(err)
	}
	if hooked {
		t.Fatal("the deletion hook ran for a replayed deletion")
	}
}

// TestProducerIDBlocksNeverRepeat: blocks from the controller are
// disjoint and increasing, across restarts too - a repeated id would let
// one producer's sequence numbers pass for another's.
func TestProducerIDBlocksNeverRepeat(t *testing.T) {
	n := clustertest.Start(t)
	var blocks [][2]int64
	take := func() {
		t.Helper()
		start, count, err := n.Cluster.ReserveProducerIDs(ctx5(t))
		if err != nil || count <= 0 || start < 0 {
			t.Fatalf("ReserveProducerIDs: %d %d %v", start, count, err)
		}
		blocks = append(blocks, [2]int64{start, start + count})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 4 {
		wg.Go(func() {
			start, count, err := n.Cluster.ReserveProducerIDs(ctx5(t))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			blocks = append(blocks, [2]int64{start, start + count})
			mu.Unlock()
		})
	}
	wg.Wait()
	n.Stop()
	n.Restart()
	take()
	n.Stop()
	n.Restart()
	take()
	slices.SortFunc(blocks, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	for i := 1; i < len(blocks); i++ {
		if blocks[i][0] < blocks[i-1][1] {
			t.Fatalf("blocks overlap: %v", blocks)
		}
	}
	if len(blocks) != 6 {
		t.Fatalf("%d blocks", len(blocks))
	}
	last := blocks[len(blocks)-1]
	if !n.Meta.ProducerIDIssued(last[0]) || n.Meta.ProducerIDIssued(last[1]) {
		t.Fatalf("issued: %d %v, %d %v", last[0], n.Meta.ProducerIDIssued(last[0]), last[1], n.Meta.ProducerIDIssued(last[1]))
	}
}

// TestHeartbeatFencing: the controller's side of BrokerHeartbeat, and its
// fencing of a broker whose session expired, committed to the metadata.
func TestHeartbeatFencing(t *testing.T) {
	n := clustertest.Start(t, func(c *cluster.Config, _ *replica.Config) {
		c.BrokerHeartbeatInterval = 20 * time.Millisecond
		c.BrokerSessionTimeout = 200 * time.Millisecond
	})
	c := n.Cluster
	ctx := ctx5(t)
	if fenced, err := c.Heartbeat(ctx, 2, false); !errors.Is(err, kerr.BrokerIDNotRegistered) || !fenced {
		t.Fatalf("heartbeat of an unregistered broker: %v %v", fenced, err)
	}
	// Broker 2 registers (as BrokerRegistration would commit it).
	if err := c.Propose(ctx, metadata.Command{Op: metadata.OpRegister, Broker: &metadata.BrokerInfo{ID: 2, Host: "127.0.0.2", Port: 9092}}); err != nil {
		t.Fatal(err)
	}
	if fenced, err := c.Heartbeat(ctx, 2, true); err != nil || !fenced || !n.Meta.Fenced(2) {
		t.Fatalf("fencing heartbeat: %v %v", fenced, err)
	}
	if fenced, err := c.Heartbeat(ctx, 2, false); err != nil || fenced || n.Meta.Fenced(2) {
		t.Fatalf("unfencing heartbeat: %v %v", fenced, err)
	}
	if u := c.UnfencedBrokers(); len(u) != 2 {
		t.Fatalf("unfenced %v", u)
	}
	// No heartbeat from 2 any more: the controller fences it once its
	// session ends, and never fences itself.
	waitFor(t, "broker 2 fenced after its session", func() bool { return n.Meta.Fenced(2) })
	if n.Meta.Fenced(1) {
		t.Fatal("the controller fenced itself")
	}
	if u := c.UnfencedBrokers(); len(u) != 1 || u[0].ID != 1 {
		t.Fatalf("unfenced %v", u)
	}
	// A broker fenced by its session comes back with a heartbeat.
	if fenced, err := c.Heartbeat(ctx, 2, false); err != nil || fenced {
		t.Fatalf("heartbeat after the session: %v %v", fenced, err)
	}
}

// TestProposeReturnsTheCommandsError: a command the metadata refuses is
// committed, applied as a no-op, and its error reaches the proposer.
func TestProposeReturnsTheCommandsError(t *testing.T) {
	n := clustertest.Start(t)
	err := n.Cluster.Propose(ctx5(t), metadata.Command{Op: metadata.OpDeleteTopic, Name: "never-created"})
	if !errors.Is(err, metadata.ErrUnknownTopic) {
		t.Fatalf("Propose(delete of an unknown topic) = %v", err)
	}
	before := n.Meta.Generation()
	if err := n.Cluster.Propose(ctx5(t), metadata.Command{Op: metadata.OpBrokerConfigs, Name: "1", Configs: map[string]string{"log.retention.ms": "1"}}); err != nil {
		t.Fatal(err)
	}
	if n.Meta.BrokerConfigs("1")["log.retention.ms"] != "1" || n.Meta.Generation() == before {
		t.Fatalf("broker configs %v, generation %d -> %d", n.Meta.BrokerConfigs("1"), before, n.Meta.Generation())
	}
}

// waitFor waits for cond for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 10*time.Second, what, cond)
}
