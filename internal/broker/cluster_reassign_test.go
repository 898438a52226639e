package broker_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

// startBrokerOnly adds broker id to a running cluster as a broker-only
// node (brokertest.AddBrokerOnly) and waits until every node lists it.
func startBrokerOnly(t *testing.T, nodes []*brokertest.Node, id int32, opts ...func(*broker.Config)) *brokertest.Node {
	t.Helper()
	return brokertest.AddBrokerOnly(t, nodes, id, func(c *broker.Config, _ *wire.Limits) {
		for _, o := range opts {
			o(c)
		}
	})
}

// replicasEverywhere waits until every node's metadata lists want (sorted)
// as the replicas of topic's partition 0.
func replicasEverywhere(t *testing.T, nodes []*brokertest.Node, topic string, want []int32) {
	t.Helper()
	awaitCluster(t, fmt.Sprintf("replicas %v of %s everywhere", want, topic), func() error {
		for _, n := range nodes {
			md, err := metadata(n, []string{topic})
			if err != nil {
				return err
			}
			if len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 1 {
				return fmt.Errorf("node %d: %+v", n.Cfg.NodeID, md.Topics)
			}
			got := slices.Clone(md.Topics[0].Partitions[0].Replicas)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("node %d: replicas %v", n.Cfg.NodeID, got)
			}
		}
		return nil
	})
}

// quorum asks every node for DescribeQuorum of topic-0 and returns the
// leader's voters and observers (learners), sorted.
func quorum(nodes []*brokertest.Node, topic string) (voters, observers []int32, err error) {
	err = errors.New("no leader answered")
	for _, n := range nodes {
		cl, cerr := kgo.NewClient(kgo.SeedBrokers(n.Addr))
		if cerr != nil {
			return nil, nil, cerr
		}
		req := kmsg.NewPtrDescribeQuorumRequest()
		rt := kmsg.NewDescribeQuorumRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewDescribeQuorumRequestTopicPartition()
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, rerr := cl.SeedBrokers()[0].Request(ctx, req)
		cancel()
		cl.Close()
		if rerr != nil {
			continue
		}
		p := resp.(*kmsg.DescribeQuorumResponse).Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			continue
		}
		voters, observers = nil, nil
		for _, v := range p.CurrentVoters {
			voters = append(voters, v.ReplicaID)
		}
		for _, o := range p.Observers {
			observers = append(observers, o.ReplicaID)
		}
		slices.Sort(voters)
		slices.Sort(observers)
		return voters, observers, nil
	}
	return nil, nil, err
}

func awaitVoters(t *testing.T, nodes []*brokertest.Node, topic string, want []int32) {
	t.Helper()
	awaitCluster(t, fmt.Sprintf("voters %v of %s", want, topic), func() error {
		v, o, err := quorum(nodes, topic)
		if err != nil {
			return err
		}
		if !slices.Equal(v, want) || len(o) != 0 {
			return fmt.Errorf("voters %v observers %v", v, o)
		}
		return nil
	})
}

func createRF3(t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	createRF(t, adm, topic, 3)
}

// createRF creates topic with one partition of rf replicas.
func createRF(t *testing.T, adm *kadm.Client, topic string, rf int16) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopics(ctx, 1, rf, nil, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

func alter(t *testing.T, adm *kadm.Client, topic string, replicas []int32) error {
	t.Helper()
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(topic, 0, replicas)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		t.Fatalf("AlterPartitionAssignments: %v", err)
	}
	return resp[topic][0].Err
}

func listReassignments(t *testing.T, adm *kadm.Client, topic string) map[int32]kadm.ListPartitionReassignmentsResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: {0: {}}})
	if err != nil {
		t.Fatalf("ListPartitionReassignments: %v", err)
	}
	return resp[topic]
}

// producer produces values 0, 1, 2 ... to partition 0 of topic, acks=all
// and idempotent, in small synchronous batches, until stopped; acked is
// how many were acknowledged (all of them in order).
type producer struct {
	stop  chan struct{}
	done  chan struct{}
	acked atomic.Int64
	err   error // read after done
}

func startProducer(t *testing.T, seeds []string, topic string) *producer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RetryTimeout(90*time.Second),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer cl.Close()
		for {
			select {
			case <-p.stop:
				return
			default:
			}
			recs := make([]*kgo.Record, 20)
			for i := range recs {
				recs[i] = &kgo.Record{Value: []byte(strconv.Itoa(int(p.acked.Load()) + i))}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			err := cl.ProduceSync(ctx, recs...).FirstErr()
			cancel()
			if err != nil {
				p.err = err
				return
			}
			p.acked.Add(int64(len(recs)))
		}
	}()
	return p
}

func (p *producer) finish(t *testing.T) int {
	t.Helper()
	close(p.stop)
	<-p.done
	if p.err != nil {
		t.Fatalf("produce: %v", p.err)
	}
	return int(p.acked.Load())
}

// awaitAcked waits until n more records than now are acknowledged, or the
// producer failed (finish reports it).
func (p *producer) awaitAcked(t *testing.T, what string, n int64) {
	t.Helper()
	want := p.acked.Load() + n
	awaitCluster(t, what, func() error {
		select {
		case <-p.done:
			return nil
		default:
		}
		if got := p.acked.Load(); got < want {
			return fmt.Errorf("%d of %d acked", got, want)
		}
		return nil
	})
}

// TestClusterReassign: a 4th, broker-only node joins a 3-node cluster; a
// partition RF=3 under continuous acks=all idempotent produce moves from
// {1,2,3} to {2,3,4}; every acknowledged record is read exactly once from
// the new replicas with node 1 stopped; node 1's copy is deleted; the new
// membership survives restarts. Bad requests get Kafka's error codes, and
// a move that cannot finish (its new replica is down) is cancelled back
// to the original replicas.
func TestClusterReassign(t *testing.T) {
	nodes := startCluster(t, 3)
	adm := kadmClient(t, addrs(nodes))
	const moved, cancelled = "moved", "cancelled"
	createRF3(t, adm, moved)
	createRF3(t, adm, cancelled)
	n4 := startBrokerOnly(t, nodes, 4)
	all := append(slices.Clone(nodes), n4)
	awaitCluster(t, "a leader", func() error { _, _, _, err := leaderOf(nodes[0], moved); return err })

	// Bad requests.
	for _, c := range []struct {
		topic    string
		replicas []int32
		want     *kerr.Error
	}{
		{moved, []int32{2, 3, 9}, kerr.InvalidReplicaAssignment},
		{moved, []int32{2, 2, 3}, kerr.InvalidReplicaAssignment},
		{moved, []int32{}, kerr.InvalidReplicaAssignment},
		{moved, nil, kerr.NoReassignmentInProgress},
		{"no-such-topic", []int32{1, 2, 3}, kerr.UnknownTopicOrPartition},
	} {
		if err := alter(t, adm, c.topic, c.replicas); !errors.Is(err, c.want) {
			t.Fatalf("reassign %s to %v: %v, want %v", c.topic, c.replicas, err, c.want)
		}
	}
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(moved, 7, []int32{2, 3, 4})
	if resp, err := adm.AlterPartitionAssignments(context.Background(), req); err != nil || !errors.Is(resp[moved][7].Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("unknown partition: %v %+v", err, resp)
	}
	if code := rawReassign(t, notControllerNode(t, all), moved, []int32{2, 3, 4}); code != kerr.NotController.Code {
		t.Fatalf("reassign on a non-controller: %v", kerr.ErrorForCode(code))
	}

	// The move, under continuous produce.
	prod := startProducer(t, addrs(all), moved)
	prod.awaitAcked(t, "records acknowledged before the move", 200)
	if err := alter(t, adm, moved, []int32{2, 3, 4}); err != nil {
		t.Fatalf("reassign: %v", err)
	}
	if err := alter(t, adm, moved, []int32{1, 2, 4}); err != nil && !errors.Is(err, kerr.ReassignmentInProgress) {
		t.Fatalf("second target during a move: %v", err) // nil only if the first one already finished
	}
	replicasEverywhere(t, all, moved, []int32{2, 3, 4})
	if l := listReassignments(t, adm, moved); len(l) != 0 {
		t.Fatalf("listed after completion: %+v", l)
	}
	awaitVoters(t, all, moved, []int32{2, 3, 4})
	prod.awaitAcked(t, "records acknowledged after the move", 200)
	acked := prod.finish(t)
	awaitCluster(t, "node 1's copy deleted", func() error {
		if _, err := os.Stat(filepath.Join(nodes[0].Cfg.DataDir, moved+"-0")); !os.IsNotExist(err) {
			return fmt.Errorf("moved-0 on node 1: %v", err)
		}
		return nil
	})

	// The cancel: node 4 is down, so its learner never catches up and the
	// move stays pending until it is cancelled.
	n4.Stop()
	if err := alter(t, adm, cancelled, []int32{4, 2, 3}); err != nil {
		t.Fatalf("reassign: %v", err)
	}
	awaitCluster(t, "the pending move listed", func() error {
		l := listReassignments(t, adm, cancelled)
		r, ok := l[0]
		if !ok || !slices.Equal(r.AddingReplicas, []int32{4}) || !slices.Equal(r.RemovingReplicas, []int32{1}) || len(r.Replicas) != 4 {
			return fmt.Errorf("listed %+v", l)
		}
		return nil
	})
	awaitCluster(t, "node 4 a learner (an observer)", func() error {
		v, o, err := quorum(nodes, cancelled)
		if err != nil {
			return err
		}
		if len(v) != 3 || !slices.Equal(o, []int32{4}) {
			return fmt.Errorf("voters %v observers %v", v, o)
		}
		return nil
	})
	awaitCluster(t, "the ISR without the learner", func() error {
		_, _, isr, err := leaderOf(leaderNode(t, nodes, cancelled), cancelled)
		if err != nil {
			return err
		}
		if slices.Contains(isr, 4) || len(isr) != 3 {
			return fmt.Errorf("isr %v", isr)
		}
		return nil
	})
	if err := alter(t, adm, cancelled, nil); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	replicasEverywhere(t, nodes, cancelled, []int32{1, 2, 3})
	awaitVoters(t, nodes, cancelled, []int32{1, 2, 3})
	if l := listReassignments(t, adm, cancelled); len(l) != 0 {
		t.Fatalf("listed after the cancel: %+v", l)
	}

	// Node 4 comes back: it replays the move and its cancellation and
	// keeps no copy; the moved partition is read from {2,3,4} alone.
	n4.Restart()
	nodes[0].Stop()
	rest := []*brokertest.Node{nodes[1], nodes[2], n4}
	consumeExactly(t, addrs(rest), moved, acked)
	awaitCluster(t, "node 4 without a copy of the cancelled move", func() error {
		if _, err := os.Stat(filepath.Join(n4.Cfg.DataDir, cancelled+"-0")); !os.IsNotExist(err) {
			return fmt.Errorf("cancelled-0 on node 4: %v", err)
		}
		return nil
	})

	// Restarts keep the new membership.
	for _, n := range rest {
		n.Restart()
	}
	nodes[0].Restart()
	replicasEverywhere(t, all, moved, []int32{2, 3, 4})
	awaitVoters(t, all, moved, []int32{2, 3, 4})
	if _, err := os.Stat(filepath.Join(nodes[0].Cfg.DataDir, moved+"-0")); !os.IsNotExist(err) {
		t.Fatalf("moved-0 back on node 1: %v", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(rest)...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RetryTimeout(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produceRange(t, cl, moved, acked, 50)
	nodes[0].Stop()
	consumeExactly(t, addrs(rest), moved, acked+50)

	// Removing the broker-only node: refused while it holds a replica;
	// after moving its replica away, it leaves the registered brokers and
	// the metadata group.
	nodes[0].Restart()
	for _, c := range []struct {
		id   int32
		want *kerr.Error
	}{{4, kerr.InvalidRequest}, {1, kerr.InvalidRequest}, {9, kerr.BrokerIDNotRegistered}} {
		if code := rawUnregister(t, nodes[1], c.id); code != c.want.Code {
			t.Fatalf("unregister %d: %v, want %v", c.id, kerr.ErrorForCode(code), c.want)
		}
	}
	if err := alter(t, adm, moved, []int32{1, 2, 3}); err != nil {
		t.Fatalf("reassign back: %v", err)
	}
	replicasEverywhere(t, all, moved, []int32{1, 2, 3})
	awaitCluster(t, "node 4's copy deleted", func() error {
		if _, err := os.Stat(filepath.Join(n4.Cfg.DataDir, moved+"-0")); !os.IsNotExist(err) {
			return fmt.Errorf("moved-0 on node 4: %v", err)
		}
		return nil
	})
	if code := rawUnregister(t, notControllerNode(t, nodes), 4); code != 0 {
		t.Fatalf("unregister 4 through a non-controller: %v", kerr.ErrorForCode(code))
	}
	awaitCluster(t, "node 4 gone from the metadata and its group", func() error {
		for _, n := range nodes {
			if got := n.B.RegisteredBrokers(); got != 3 {
				return fmt.Errorf("node %d knows %d brokers", n.Cfg.NodeID, got)
			}
		}
		v, o, err := quorum(nodes, "__cluster_metadata")
		if err != nil {
			return err
		}
		if !slices.Equal(v, []int32{1, 2, 3}) || len(o) != 0 {
			return fmt.Errorf("metadata voters %v observers %v", v, o)
		}
		return nil
	})
	n4.Stop()
	consumeExactly(t, addrs(nodes), moved, acked+50)
}

// rawUnregister sends UnregisterBroker to n and returns its error code,
// retrying while the controller role moves (after restarts).
func rawUnregister(t *testing.T, n *brokertest.Node, id int32) int16 {
	t.Helper()
	var code int16
	awaitCluster(t, "a controller answering UnregisterBroker", func() error {
		if code = unregisterOnce(t, n, id); code == kerr.NotController.Code {
			return kerr.NotController
		}
		return nil
	})
	return code
}

func unregisterOnce(t *testing.T, n *brokertest.Node, id int32) int16 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrUnregisterBrokerRequest()
	req.BrokerID = id
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.(*kmsg.UnregisterBrokerResponse).ErrorCode
}

// TestClusterReassignTime measures (logs, never asserts) how long moving
// a partition holding HOLDFAST_REASSIGN_MB (default 8) MB to a new broker
// takes, from AlterPartitionReassignments to completion everywhere.
func TestClusterReassignTime(t *testing.T) {
	mb := 8
	if s := os.Getenv("HOLDFAST_REASSIGN_MB"); s != "" {
		var err error
		if mb, err = strconv.Atoi(s); err != nil || mb <= 0 || mb > 4096 {
			t.Fatalf("HOLDFAST_REASSIGN_MB=%q", s)
		}
	}
	nodes := startCluster(t, 3)
	adm := kadmClient(t, addrs(nodes))
	const topic = "bulk"
	createRF3(t, adm, topic)
	n4 := startBrokerOnly(t, nodes, 4)
	all := append(slices.Clone(nodes), n4)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RetryTimeout(90*time.Second),
		kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Random values: kgo compresses batches, and zeros would shrink to
	// nothing on disk.
	rng := rand.New(rand.NewPCG(1, 2))
	recs := make([]*kgo.Record, mb*64)
	for i := range recs {
		val := make([]byte, 16<<10)
		for j := 0; j < len(val); j += 8 {
			binary.LittleEndian.PutUint64(val[j:], rng.Uint64())
		}
		recs[i] = &kgo.Record{Topic: topic, Value: val}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	from := sortedReplicas(t, nodes[0], topic)
	target := append(slices.DeleteFunc(slices.Clone(from), func(id int32) bool { return id == from[0] }), 4)
	start := time.Now()
	if err := alter(t, adm, topic, target); err != nil {
		t.Fatalf("reassign: %v", err)
	}
	replicasEverywhere(t, all, topic, target)
	took := time.Since(start)
	t.Logf("moving a partition with %d MB (%d records of 16 KiB) from %v to %v took %v (%.1f MB/s)", mb, len(recs), from, target, took, float64(mb)/took.Seconds())
	consumeCount(t, addrs([]*brokertest.Node{n4}), topic, len(recs))
}

// consumeCount reads partition 0 to n records.
func consumeCount(t *testing.T, seeds []string, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records", got, n)
		}
		got += fs.NumRecords()
	}
	if got != n {
		t.Fatalf("consumed %d records, want %d", got, n)
	}
}

// sortedReplicas is partition 0's replica set as n's metadata lists it.
func sortedReplicas(t *testing.T, n *brokertest.Node, topic string) []int32 {
	t.Helper()
	var rs []int32
	awaitCluster(t, "the replicas of "+topic, func() error {
		md, err := metadata(n, []string{topic})
		if err != nil {
			return err
		}
		if len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 1 || len(md.Topics[0].Partitions[0].Replicas) == 0 {
			return fmt.Errorf("%+v", md.Topics)
		}
		rs = slices.Clone(md.Topics[0].Partitions[0].Replicas)
		return nil
	})
	slices.Sort(rs)
	return rs
}

func leaderNode(t *testing.T, nodes []*brokertest.Node, topic string) *brokertest.Node {
	t.Helper()
	var n *brokertest.Node
	awaitCluster(t, "the leader of "+topic, func() error {
		l, _, _, err := leaderOf(nodes[0], topic)
		if err != nil {
			return err
		}
		if n = nodeByID(nodes, l); n == nil {
			return fmt.Errorf("leader %d not among the nodes", l)
		}
		return nil
	})
	return n
}

// notControllerNode is a node that does not lead the metadata group.
func notControllerNode(t *testing.T, nodes []*brokertest.Node) *brokertest.Node {
	t.Helper()
	md, err := metadata(nodes[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Cfg.NodeID != md.ControllerID {
			return n
		}
	}
	t.Fatal("every node is the controller")
	return nil
}

// rawReassign sends AlterPartitionReassignments straight to n (no
// routing to the controller) and returns the top-level error code.
func rawReassign(t *testing.T, n *brokertest.Node, topic string, replicas []int32) int16 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrAlterPartitionAssignmentsRequest()
	rt := kmsg.NewAlterPartitionAssignmentsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewAlterPartitionAssignmentsRequestTopicPartition()
	rp.Replicas = replicas
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.(*kmsg.AlterPartitionAssignmentsResponse).ErrorCode
}

// TestClusterReassignCompacted: a partition whose log start was moved by
// DeleteRecords is moved to a new broker, which cannot replay the log
// from its first entry: it gets the log-start snapshot (with the current
// membership) and then the rest, and ends with the same log start and
// high watermark as the others, also after a restart.
func TestClusterReassignCompacted(t *testing.T) {
	nodes := startCluster(t, 3)
	const topic = "compacted"
	seg := "1024"
	createClusterTopic(t, nodes, topic, 1, len(nodes), map[string]*string{"segment.bytes": &seg})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RetryTimeout(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < 300; i += 10 {
		produceRange(t, cl, topic, i, 10) // many small batches over many segments
	}
	if r := deleteRecords(t, nodes, topic, 200); r.Err != nil {
		t.Fatalf("delete records: %v", r.Err)
	}
	awaitLogStart(t, nodes, topic, 200)
	n4 := startBrokerOnly(t, nodes, 4)
	adm := kadmClient(t, addrs(nodes))
	from := sortedReplicas(t, nodes[0], topic)
	target := []int32{2, 3, 4}
	if err := alter(t, adm, topic, target); err != nil {
		t.Fatalf("reassign: %v", err)
	}
	all := append(slices.Clone(nodes), n4)
	replicasEverywhere(t, all, topic, target)
	produceRange(t, cl, topic, 300, 10)
	moved := []*brokertest.Node{nodes[1], nodes[2], n4}
	check := func() {
		t.Helper()
		awaitCluster(t, "node 4 at the same log start and high watermark", func() error {
			var hw []int64
			for _, n := range moved {
				for _, s := range n.B.PartitionStats() {
					if s.Topic == topic && s.Partition == 0 {
						hw = append(hw, s.HighWatermark)
					}
				}
			}
			starts := logStarts(moved, topic)
			if len(hw) != 3 || hw[2] != hw[0] || hw[2] != hw[1] || starts[2] != 200 || starts[0] != 200 {
				return fmt.Errorf("from %v: high watermarks %v log starts %v", from, hw, starts)
			}
			return nil
		})
	}
	check()
	n4.Restart()
	check()
	// With nodes 1 and 2 down (no controller quorum either), node 4 is
	// needed for every commit.
	nodes[0].Stop()
	nodes[1].Stop()
	produceRange(t, cl, topic, 310, 10)
	seeds := addrs([]*brokertest.Node{nodes[2], n4})
	rc, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Offset 200 holds a value a little below 200: every leader's
	// first entry takes an offset too.
	var got []int
	for (len(got) == 0 || got[len(got)-1] < 319) && ctx.Err() == nil {
		rc.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			v, _ := strconv.Atoi(string(r.Value))
			got = append(got, v)
		})
	}
	if len(got) == 0 || got[0] > 200 || got[0] < 190 {
		t.Fatalf("consumed %d records, from %v", len(got), got[:min(1, len(got))])
	}
	for i, v := range got {
		if v != got[0]+i {
			t.Fatalf("record %d is %d (%d records from %d)", i, v, len(got), got[0])
		}
	}
	if got[len(got)-1] != 319 {
		t.Fatalf("consumed up to %d, want 319", got[len(got)-1])
	}
}

// TestClusterReassignSoleReplicaToThree: the partition of an RF=1 topic on a
// 3-node cluster takes its batches on the sole-voter path (raft.solo.path,
// on by default: no etcd raft Ready per batch); it grows to three replicas
// under continuous acks=all idempotent produce, which hands its Raft group
// back to etcd raft's per-entry path mid-stream. Then its first replica is
// stopped, and every acknowledged record is read exactly once from the
// other two: nothing the sole-voter path acknowledged is missing from the
// replicas that joined, and nothing is doubled.
func TestClusterReassignSoleReplicaToThree(t *testing.T) {
	nodes := startCluster(t, 3)
	adm := kadmClient(t, addrs(nodes))
	const topic = "grown"
	createRF(t, adm, topic, 1)
	var first int32
	awaitCluster(t, "the sole replica leading", func() error {
		// Only the replica's own node knows its leader epoch; the others
		// answer with the assignment and epoch -1.
		for _, n := range nodes {
			if l, _, _, err := leaderOf(n, topic); err == nil {
				first = l
				return nil
			}
		}
		return fmt.Errorf("no node names a leader of %s with its epoch", topic)
	})
	prod := startProducer(t, addrs(nodes), topic)
	prod.awaitAcked(t, "records acknowledged on the sole replica", 400)
	target := []int32{first}
	for _, n := range nodes {
		if n.Cfg.NodeID != first {
			target = append(target, n.Cfg.NodeID)
		}
	}
	if err := alter(t, adm, topic, target); err != nil {
		t.Fatalf("reassign to %v: %v", target, err)
	}
	replicasEverywhere(t, nodes, topic, []int32{1, 2, 3})
	awaitVoters(t, nodes, topic, []int32{1, 2, 3})
	prod.awaitAcked(t, "records acknowledged on three replicas", 200)
	acked := prod.finish(t)
	var rest []*brokertest.Node
	for _, n := range nodes {
		if n.Cfg.NodeID == first {
			n.Stop()
		} else {
			rest = append(rest, n)
		}
	}
	consumeExactly(t, addrs(rest), topic, acked)
}
