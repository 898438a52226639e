package broker_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/records"
	"holdfast/internal/wire"
)

// The cluster set-up is brokertest's (Cluster); these names stay for the
// many cluster_*_test.go files that use them.

// startCluster starts n in-process brokers on loopback that form one
// Raft cluster, with opts applied to each broker's config, and waits until
// every one is registered everywhere.
func startCluster(t *testing.T, n int, opts ...func(*broker.Config)) []*brokertest.Node {
	t.Helper()
	return brokertest.NewCluster(t, n, func(c *broker.Config, _ *wire.Limits) {
		for _, o := range opts {
			o(c)
		}
	}).Nodes
}

func awaitCluster(t *testing.T, what string, fn func() error) {
	t.Helper()
	brokertest.Await(t, what, fn)
}

// createClusterTopic creates topic with rf replicas per partition and waits
// until every node's metadata has all its partitions, each with a leader.
func createClusterTopic(t *testing.T, nodes []*brokertest.Node, topic string, partitions, rf int, configs map[string]*string) {
	t.Helper()
	brokertest.CreateClusterTopic(t, nodes, topic, partitions, rf, configs)
}

// metadata asks one node directly (not through a client's routing).
func metadata(n *brokertest.Node, topics []string) (*kmsg.MetadataResponse, error) {
	return n.Metadata(topics...)
}

// leaderOf returns partition 0's leader and epoch as node asks.
func leaderOf(n *brokertest.Node, topic string) (leader, epoch int32, isr []int32, err error) {
	p, err := n.Partition(topic, 0)
	if err != nil {
		return -1, -1, nil, err
	}
	if p.Leader <= 0 || p.LeaderEpoch < 0 {
		return -1, -1, nil, fmt.Errorf("leader %d epoch %d", p.Leader, p.LeaderEpoch)
	}
	return p.Leader, p.LeaderEpoch, p.ISR, nil
}

func addrs(nodes []*brokertest.Node) []string { return brokertest.Addrs(nodes) }

func produceRange(t *testing.T, cl *kgo.Client, topic string, from, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: []byte(strconv.Itoa(from + i))}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// consumeExactly reads partition 0 to its end and checks every value 0..n-1
// is there exactly once, in order.
func consumeExactly(t *testing.T, seeds []string, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []int
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records", len(got), n)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			v, _ := strconv.Atoi(string(r.Value))
			got = append(got, v)
		})
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("record %d is %d: lost, duplicated or reordered (%d records)", i, v, len(got))
		}
	}
	if len(got) != n {
		t.Fatalf("consumed %d records, want %d", len(got), n)
	}
}

func nodeByID(nodes []*brokertest.Node, id int32) *brokertest.Node {
	for _, n := range nodes {
		if n.Cfg.NodeID == id {
			return n
		}
	}
	return nil
}

// TestClusterFailover: RF=3, acks=all idempotent produce; the leader's
// broker stops, the client moves to the new leader (higher epoch), and
// every acknowledged record is there exactly once; the old leader restarts,
// catches up, and carries the data when the next leader stops.
func TestClusterFailover(t *testing.T) {
	// Without controlled shutdown a clean stop is a crash for Raft: this
	// test is about the election (TestClusterRollingRestart has both).
	nodes := startCluster(t, 3, func(c *broker.Config) { c.ControlledShutdown = false })
	const topic = "replicated"
	createClusterTopic(t, nodes, topic, 1, 3, nil)
	var leader, epoch int32
	awaitCluster(t, "a leader", func() (err error) { leader, epoch, _, err = leaderOf(nodes[2], topic); return err })

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RetryTimeout(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produceRange(t, cl, topic, 0, 200)

	old := nodeByID(nodes, leader)
	old.Stop()
	var others []*brokertest.Node
	for _, n := range nodes {
		if n != old {
			others = append(others, n)
		}
	}
	produceRange(t, cl, topic, 200, 200)
	var newLeader, newEpoch int32
	awaitCluster(t, "a new leader", func() (err error) {
		newLeader, newEpoch, _, err = leaderOf(others[0], topic)
		return err
	})
	if newLeader == leader || newEpoch <= epoch {
		t.Fatalf("after failover leader %d epoch %d, before %d epoch %d", newLeader, newEpoch, leader, epoch)
	}
	consumeExactly(t, addrs(others), topic, 400)

	// The old leader comes back and catches up: in sync again, and when
	// the current leader stops it is one of the two holding everything.
	old.Restart()
	awaitCluster(t, "the restarted node back in the ISR", func() error {
		l, _, isr, err := leaderOf(nodeByID(nodes, newLeader), topic)
		if err != nil {
			return err
		}
		if l != newLeader || len(isr) != 3 {
			return fmt.Errorf("leader %d isr %v", l, isr)
		}
		return nil
	})
	produceRange(t, cl, topic, 400, 100)
	nodeByID(nodes, newLeader).Stop()
	var rest []string
	for _, n := range nodes {
		if n.Cfg.NodeID != newLeader {
			rest = append(rest, n.Addr)
		}
	}
	consumeExactly(t, rest, topic, 500)
}

// TestClusterMinInsync: with min.insync.replicas=3 and one replica down,
// acks=all is refused with NOT_ENOUGH_REPLICAS before appending, while
// acks=1 still works.
func TestClusterMinInsync(t *testing.T) {
	nodes := startCluster(t, 3)
	const topic = "strict"
	three := "3"
	createClusterTopic(t, nodes, topic, 1, 3, map[string]*string{"min.insync.replicas": &three})
	// Leadership may still move (to the preferred replica) right after
	// creation: a NOT_LEADER answer sends the produce to the new leader,
	// as a client's retry would. Other answers in meanwhile: what the
	// leader may say until it sees the change (a stopped follower counts
	// in sync for an election timeout); any other fails.
	produce := func(what string, acks int16, want int16, meanwhile ...int16) {
		t.Helper()
		awaitCluster(t, what, func() error {
			ln := leaderOfRunning(t, nodes, topic)
			code := rawProduce(t, ln, topic, acks)
			switch {
			case code == want:
				return nil
			case code == kerr.NotLeaderForPartition.Code || slices.Contains(meanwhile, code):
				return fmt.Errorf("answered %v", kerr.ErrorForCode(code))
			default:
				t.Fatalf("%s: %v", what, kerr.ErrorForCode(code))
				return nil
			}
		})
	}
	// A follower not heard from within an election timeout does not
	// count where min.insync.replicas is above a majority
	// (Broker.inSyncReplicas): on a loaded machine that can happen with
	// every replica up, and a client retries NOT_ENOUGH_REPLICAS.
	produce("acks=all with every replica up", -1, 0, kerr.NotEnoughReplicas.Code)
	ln := leaderOfRunning(t, nodes, topic)
	for _, n := range nodes {
		if n != ln {
			n.Stop()
			break
		}
	}
	produce("NOT_ENOUGH_REPLICAS for acks=all with one replica down", -1, kerr.NotEnoughReplicas.Code, 0)
	produce("acks=1 with one replica down", 1, 0)
}

// rawProduce sends one non-idempotent batch straight to node and returns
// the partition's error code.
func rawProduce(t *testing.T, n *brokertest.Node, topic string, acks int16) int16 {
	t.Helper()
	batch, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]records.Record{{Timestamp: time.Now().UnixMilli(), Value: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	code, _, err := n.Produce(topic, 0, acks, 10*time.Second, batch)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

func kadmClient(t *testing.T, seeds []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}
