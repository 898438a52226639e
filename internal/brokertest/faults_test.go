package brokertest_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/records"
	"holdfast/internal/wire"
)

// TestClusterIsolatedLeader: the leader of an RF=3 partition is cut off
// from its peers' Raft traffic (its Kafka listener still answers). The
// other two elect a leader with a higher epoch and keep taking acks=all
// writes; the isolated node acknowledges nothing, and what it appended
// alone is gone after healing. Once healed it catches up: its own log holds
// exactly every acknowledged record, in order.
func TestClusterIsolatedLeader(t *testing.T) {
	c := brokertest.NewCluster(t, 3, func(cfg *broker.Config, _ *wire.Limits) {
		cfg.ControlledShutdown = false
	})
	const topic = "isolated"
	c.CreateTopic(topic, 1, 3, nil)
	leader, epoch := c.AwaitLeader(topic, 0)
	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic), kgo.RetryTimeout(90*time.Second),
		kgo.MetadataMinAge(100*time.Millisecond))
	produce(t, cl, 0, 100)

	c.Isolate(leader)
	t.Logf("leader %d (epoch %d) isolated", leader, epoch)
	newLeader, newEpoch := c.AwaitLeader(topic, 0, leader)
	if newEpoch <= epoch {
		t.Fatalf("new leader %d has epoch %d, the isolated one had %d", newLeader, newEpoch, epoch)
	}
	b, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]records.Record{{Timestamp: time.Now().UnixMilli(), Value: []byte("isolated")}})
	if err != nil {
		t.Fatal(err)
	}
	code, off, err := c.Node(leader).Produce(topic, 0, -1, 2*time.Second, b)
	if err != nil {
		t.Fatal(err)
	}
	if code == 0 {
		t.Fatalf("the isolated node %d acknowledged acks=all at offset %d", leader, off)
	}
	t.Logf("the isolated node answered acks=all with %v", kerr.ErrorForCode(code))
	produce(t, cl, 100, 100)

	c.Heal()
	c.AwaitInSync(topic, 0)
	produce(t, cl, 200, 50)
	brokertest.Await(t, "the healed node's log to hold every acknowledged record", func() error {
		return holdsExactly(c.Node(leader), topic, 250)
	})
}

// TestClusterReplacedDiskWhileUpToDateDown is faulttest's test of the
// same name in one process (it runs without root and network namespaces;
// the stops here are clean closes, not SIGKILL). RF=3, one partition: a
// follower is cut off and falls behind while the other two commit; then
// the leader and the up-to-date follower stop, the up-to-date follower
// comes back with an empty data directory, and the cut-off follower
// reconnects. Those two are two of three voters, but the new directory has
// lost what its node acknowledged: nothing may be acknowledged. When the
// up-to-date node returns, the partition is available again and every node
// holds exactly every acknowledged record.
func TestClusterReplacedDiskWhileUpToDateDown(t *testing.T) {
	c := brokertest.NewCluster(t, 3, func(cfg *broker.Config, _ *wire.Limits) {
		cfg.ControlledShutdown = false
	})
	const topic = "replaced"
	c.CreateTopic(topic, 1, 3, nil)
	c.AwaitInSync(topic, 0)
	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic), kgo.RetryTimeout(90*time.Second),
		kgo.MetadataMinAge(100*time.Millisecond))
	produce(t, cl, 0, 100)
	l, _ := c.AwaitLeader(topic, 0)
	lag, wiped := 1+l%3, 1+(l+1)%3
	c.Isolate(lag)
	produce(t, cl, 100, 100)
	t.Logf("leader %d and node %d committed 200 records with node %d cut off; stopping %d and %d, wiping %d", l, wiped, lag, l, wiped, wiped)
	c.Node(l).Stop()
	c.Node(wiped).Wipe()
	c.Heal()
	// Start returns once the node has found its cluster: through the
	// reconnected node, which has it.
	c.Node(wiped).Start()

	b, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]records.Record{{Timestamp: time.Now().UnixMilli(), Value: []byte("must-not-be-acknowledged")}})
	if err != nil {
		t.Fatal(err)
	}
	answers := map[int32]map[int16]int{lag: {}, wiped: {}} // node -> error code -> count
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); {
		for _, id := range []int32{lag, wiped} {
			code, off, err := c.Node(id).Produce(topic, 0, -1, time.Second, b)
			if err != nil {
				continue
			}
			if code == 0 {
				t.Fatalf("node %d acknowledged a record at offset %d with only the lagging replica and a new data directory up", id, off)
			}
			answers[id][code]++
		}
		time.Sleep(200 * time.Millisecond) // produce attempts spread over the 8 s: none may be acknowledged
	}
	for id, codes := range answers {
		if len(codes) == 0 {
			t.Fatalf("node %d never answered the probe: it proves nothing", id)
		}
		t.Logf("node %d answered the probe with error codes (code: count) %v", id, codes)
	}

	t.Logf("starting the up-to-date node %d again", l)
	c.Node(l).Start()
	c.AwaitInSync(topic, 0)
	produce(t, cl, 200, 50)
	for _, n := range c.Nodes {
		brokertest.Await(t, fmt.Sprintf("node %d's log to hold every acknowledged record", n.Cfg.NodeID), func() error {
			return holdsExactly(n, topic, 250)
		})
	}
}

func produce(t *testing.T, cl *kgo.Client, from, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Value: []byte(strconv.Itoa(from + i))}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// holdsExactly: node's own log of topic/0 holds the values 0..n-1, each
// once, in order, and nothing else.
func holdsExactly(node *brokertest.Node, topic string, n int) error {
	l := node.B.PartitionLog(topic, 0)
	if l == nil {
		return fmt.Errorf("node %d has no log of %s/0", node.Cfg.NodeID, topic)
	}
	var got []string
	err := l.Scan(l.StartOffset(), func(h records.Header, b []byte) error {
		if h.IsControl() {
			return nil
		}
		recs, err := records.Records(b)
		if err != nil {
			return err
		}
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, v := range got {
		if v != strconv.Itoa(i) {
			return fmt.Errorf("node %d: record %d of %d is %q: lost, duplicated, reordered or never acknowledged", node.Cfg.NodeID, i, len(got), v)
		}
	}
	if len(got) != n {
		return fmt.Errorf("node %d holds %d records, want %d", node.Cfg.NodeID, len(got), n)
	}
	return nil
}
