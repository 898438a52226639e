package brokertest_test

import (
	"context"
	"fmt"
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

// TestClusterLeaderCutMidProduce: the leader of an RF=3 partition can no
// longer send to its peers (its Raft frames to them are dropped; theirs
// reach it, as when a node cannot open connections). What waits on it is
// answered NOT_LEADER_OR_FOLLOWER as soon as it stops leading (CheckQuorum,
// or the new leader's first message), naming the new leader when it knows
// it (KIP-951), not at the request's deadline: a produce with a 30 s
// timeout it appended but cannot commit, and a fetch long-poll with a 30 s
// MaxWait (a version before follower fetching). Before, the produce got
// REQUEST_TIMED_OUT after its timeout and the fetch its empty answer after
// its wait; a producer lost its request timeout at each failover. An
// idempotent producer writing across the cut loses and duplicates
// nothing. Once as a partition leader that is not the controller, once
// as the controller leading the partition, which must also hand the
// controller role over. The producer's worst latency is logged
// (docs/faults.md), not asserted.
func TestClusterLeaderCutMidProduce(t *testing.T) {
	for _, onController := range []bool{false, true} {
		t.Run(map[bool]string{false: "partition-leader", true: "controller"}[onController], func(t *testing.T) {
			leaderCutMidProduce(t, onController)
		})
	}
}

func leaderCutMidProduce(t *testing.T, onController bool) {
	c := brokertest.NewCluster(t, 3, func(cfg *broker.Config, _ *wire.Limits) {
		cfg.ControlledShutdown = false
	})
	const topic = "cutover"
	md, err := c.Nodes[0].Metadata()
	if err != nil {
		t.Fatal(err)
	}
	ctrl := md.ControllerID
	// The partition's preferred leader: the controller, or the node after it.
	want := ctrl
	if !onController {
		want = 1 + ctrl%3
	}
	createLedBy(t, c, topic, want)
	leader, epoch := c.AwaitLeader(topic, 0)
	if leader != want {
		t.Fatalf("node %d leads %s/0 after a preferred election of %d", leader, topic, want)
	}
	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic), kgo.RetryTimeout(90*time.Second),
		kgo.MetadataMinAge(100*time.Millisecond))
	produce(t, cl, 0, 50)
	// A long poll at the end of the log (the acknowledgements above came
	// from the leader, whose watermark is at 50), waiting on the leader.
	fetched := make(chan fetchAnswer, 1)
	go func() { fetched <- longPoll(c.Node(leader), topic, 50, 30*time.Second) }()

	for _, n := range c.Nodes {
		if n.Cfg.NodeID != leader {
			c.Lose(leader, n.Cfg.NodeID, 1)
		}
	}
	t.Logf("leader %d (epoch %d) cannot send to its peers", leader, epoch)

	// A produce it takes but cannot commit.
	produced := make(chan produceAnswer, 1)
	go func() { produced <- rawProduce(c.Node(leader), topic, 30*time.Second, "must-not-be-acknowledged") }()

	// The idempotent producer goes on: its next request goes to the cut
	// leader first.
	var worst time.Duration
	next := 50
	for ; next < 150; next++ {
		start := time.Now()
		produce(t, cl, next, 1)
		worst = max(worst, time.Since(start))
	}

	t.Logf("the producer's worst latency across the cut: %v", worst)
	pa := <-produced
	if pa.err != nil {
		t.Fatal(pa.err)
	}
	if pa.code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("the cut leader answered a produce it could not commit with %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(pa.code))
	}
	fa := <-fetched
	if fa.err != nil {
		t.Fatal(fa.err)
	}
	if fa.code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("the cut leader answered a waiting fetch with %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(fa.code))
	}
	newLeader, newEpoch := c.AwaitLeader(topic, 0, leader)
	// Named only if the old leader knew the new one when it answered.
	if pa.leader >= 0 && pa.leader != newLeader {
		t.Errorf("the produce answer names leader %d, want %d", pa.leader, newLeader)
	}
	t.Logf("the produce was answered NOT_LEADER_OR_FOLLOWER, naming leader %d", pa.leader)
	if pa.leader >= 0 && !pa.endpoint {
		t.Errorf("the produce answer names leader %d without its endpoint", pa.leader)
	}
	t.Logf("new leader %d (epoch %d)", newLeader, newEpoch)
	if onController {
		// The metadata group's leader cannot reach its quorum either: the
		// others elect another controller, and every node says so.
		brokertest.Await(t, "another controller", func() error {
			for _, n := range c.Nodes {
				md, err := n.Metadata()
				if err != nil {
					return err
				}
				if md.ControllerID == ctrl || md.ControllerID < 0 {
					return fmt.Errorf("node %d names controller %d", n.Cfg.NodeID, md.ControllerID)
				}
			}
			return nil
		})
	}

	c.Heal()
	c.AwaitInSync(topic, 0)
	produce(t, cl, next, 50)
	for _, n := range c.Nodes {
		brokertest.Await(t, fmt.Sprintf("node %d's log to hold every acknowledged record once", n.Cfg.NodeID), func() error {
			return holdsExactly(n, topic, next+50)
		})
	}
}

// createLedBy creates topic with one partition on all three nodes, lead
// first in its replica list, and makes lead its leader (a preferred
// election).
func createLedBy(t *testing.T, c *brokertest.Cluster, topic string, lead int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, -1, -1
	a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
	a.Partition, a.Replicas = 0, []int32{lead, 1 + lead%3, 1 + (lead+1)%3}
	rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	resp, err := req.RequestWith(context.Background(), c.Client())
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].ErrorCode; code != 0 {
		t.Fatalf("create %s: %v", topic, kerr.ErrorForCode(code))
	}
	c.AwaitInSync(topic, 0)
	adm := kadm.NewClient(c.Client())
	brokertest.Await(t, fmt.Sprintf("node %d to lead %s/0", lead, topic), func() error {
		if l, _ := c.AwaitLeader(topic, 0); l == lead {
			return nil
		}
		res, err := adm.ElectLeaders(context.Background(), kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {0: {}}})
		if err != nil {
			return err
		}
		return fmt.Errorf("not yet: %v", res)
	})
}

type produceAnswer struct {
	code     int16
	leader   int32 // KIP-951 CurrentLeader, -1 for none
	endpoint bool  // the response's Brokers has leader's endpoint
	err      error
}

// rawProduce sends one acks=all batch of value straight to n (Produce v10+,
// so that the answer may carry a leader hint).
func rawProduce(n *brokertest.Node, topic string, timeout time.Duration, value string) produceAnswer {
	b, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]records.Record{{Timestamp: time.Now().UnixMilli(), Value: []byte(value)}})
	if err != nil {
		return produceAnswer{err: err}
	}
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, int32(timeout/time.Millisecond)
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 0, b
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(),
		kgo.RequestTimeoutOverhead(timeout+10*time.Second))
	if err != nil {
		return produceAnswer{err: err}
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	resp, err := cl.SeedBrokers()[0].Request(ctx, brokertest.Pin(req, 12)) // topics by name
	if err != nil {
		return produceAnswer{err: err}
	}
	pr := resp.(*kmsg.ProduceResponse)
	if len(pr.Topics) != 1 || len(pr.Topics[0].Partitions) != 1 {
		return produceAnswer{err: fmt.Errorf("produce answer %+v", pr.Topics)}
	}
	p := pr.Topics[0].Partitions[0]
	a := produceAnswer{code: p.ErrorCode, leader: p.CurrentLeader.LeaderID}
	for _, br := range pr.Brokers {
		a.endpoint = a.endpoint || br.NodeID == a.leader && br.Port > 0
	}
	return a
}

type fetchAnswer struct {
	code int16
	err  error
}

// longPoll fetches topic/0 from offset on n, waiting up to wait for one
// byte. Fetch v10: from v11 on, a follower that knows the leader serves a
// consumer's fetch itself (replicaselector.go), and the cut leader, once
// it hears from the new one, is such a follower.
func longPoll(n *brokertest.Node, topic string, offset int64, wait time.Duration) fetchAnswer {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, int32(wait/time.Millisecond), 1, 1<<20
	req.SessionID, req.SessionEpoch = 0, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 0, offset, 1<<20, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr), kgo.RequestTimeoutOverhead(wait+10*time.Second))
	if err != nil {
		return fetchAnswer{err: err}
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait+10*time.Second)
	defer cancel()
	resp, err := cl.SeedBrokers()[0].Request(ctx, brokertest.Pin(req, 10))
	if err != nil {
		return fetchAnswer{err: err}
	}
	fr := resp.(*kmsg.FetchResponse)
	if len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 {
		return fetchAnswer{err: fmt.Errorf("fetch answer %+v", fr.Topics)}
	}
	p := fr.Topics[0].Partitions[0]
	return fetchAnswer{code: p.ErrorCode}
}
