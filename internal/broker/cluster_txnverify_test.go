package broker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/testwait"
)

// produceTo sends one transactional produce for topic/partition straight to
// node n (no client routing) and returns the partition's error code.
func produceTo(t *testing.T, n *brokertest.Node, txnID, topic string, partition int32, batch []byte) int16 {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis, req.TransactionID = -1, 10_000, kmsg.StringPtr(txnID)
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := n.Request(brokertest.Pin(req, 11)) // verification, not KIP-890 part 2's implicit add
	if err != nil {
		t.Fatal(err)
	}
	return resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
}

// partitionLeaders maps each partition of topic to its leader's node.
func partitionLeaders(t *testing.T, nodes []*brokertest.Node, topic string) map[int32]*brokertest.Node {
	t.Helper()
	out := map[int32]*brokertest.Node{}
	brokertest.Await(t, "leaders of "+topic, func() error {
		md, err := nodes[0].Metadata(topic)
		if err != nil {
			return err
		}
		for _, p := range md.Topics[0].Partitions {
			if p.ErrorCode != 0 || p.Leader <= 0 {
				return fmt.Errorf("partition %d: leader %d code %d", p.Partition, p.Leader, p.ErrorCode)
			}
			out[p.Partition] = nodeByID(nodes, p.Leader)
		}
		return nil
	})
	return out
}

// stableEqualsHighWatermark checks that no transaction hangs on any
// partition of topic: the last stable offset equals the high watermark.
func stableEqualsHighWatermark(t *testing.T, nodes []*brokertest.Node, topic string) {
	t.Helper()
	adm := kadmClient(t, addrs(nodes))
	brokertest.Await(t, "LSO = HW on "+topic, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hw, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return err
		}
		lso, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			return err
		}
		var bad error
		hw.Each(func(o kadm.ListedOffset) {
			l, ok := lso.Lookup(topic, o.Partition)
			if o.Err != nil || !ok || l.Err != nil || l.Offset != o.Offset {
				bad = fmt.Errorf("partition %d: high watermark %d, last stable offset %d (%v %v)", o.Partition, o.Offset, l.Offset, o.Err, l.Err)
			}
		})
		return bad
	})
}

// TestClusterTxnVerification: KIP-890 in cluster mode. After a
// transaction commits (or aborts), a transactional batch of the same
// producer sent without AddPartitionsToTxn is refused with
// INVALID_TXN_STATE on every partition - whichever node leads it and
// wherever the coordinator is - so no transaction is left open to hold the
// last stable offset; a TxnOffsetCommit without AddOffsetsToTxn likewise.
func TestClusterTxnVerification(t *testing.T) {
	nodes := startCluster(t, 3, func(c *broker.Config) {
		c.OffsetsTopicPartitions = 3
		c.Txn.StatePartitions = 3
		c.Groups.InitialRebalanceDelay = 0
	})
	const topic, txnID, group = "verify", "verify-txn", "verify-group"
	createClusterTopic(t, nodes, topic, 3, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.TransactionalID(txnID),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RetryTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	coord := txnCoordinator(t, nodes, txnID)
	leaders := partitionLeaders(t, nodes, topic)
	remote := 0
	for _, n := range leaders {
		if n != coord {
			remote++
		}
	}
	t.Logf("transaction coordinator: node %d; %d of 3 partitions led elsewhere", coord.Cfg.NodeID, remote)

	seq := map[int32]int32{}
	for round, end := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for p := int32(0); p < 3; p++ {
			recs = append(recs, &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "r%d-%d", round, p)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		for p := range int32(3) {
			seq[p]++
		}
		if err := cl.EndTransaction(ctx, end); err != nil {
			t.Fatalf("end transaction (%v): %v", end, err)
		}
		pid, epoch, err := cl.ProducerID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for p, leader := range leaders {
			code := produceTo(t, leader, txnID, topic, p, txnBatch(t, pid, epoch, seq[p], 1))
			if code != kerr.InvalidTxnState.Code {
				t.Fatalf("round %d (%v): a transactional batch after the marker on partition %d (leader %d, coordinator %d): %v, want INVALID_TXN_STATE",
					round, end, p, leader.Cfg.NodeID, coord.Cfg.NodeID, kerr.ErrorForCode(code))
			}
		}
		stableEqualsHighWatermark(t, nodes, topic)
	}

	// TxnOffsetCommit after the transaction ended, without AddOffsetsToTxn.
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gc := groupCoordinatorNode(t, nodes, group)
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = txnID, group, pid, epoch
	req.Generation, req.MemberID = -1, ""
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = 0, 1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	// A coordinator that is still loading the group's partition answers
	// a retriable code, as it would a client: ask again.
	var code int16
	brokertest.Await(t, "a TxnOffsetCommit answer that is not retriable", func() error {
		resp, err := gc.Request(brokertest.Pin(req, 4)) // v5 adds the partition implicitly (KIP-890 part 2)
		if err != nil {
			return err
		}
		code = resp.(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
		if err := kerr.ErrorForCode(code); kerr.IsRetriable(err) {
			gc = groupCoordinatorNode(t, nodes, group)
			return err
		}
		return nil
	})
	if code != kerr.InvalidTxnState.Code {
		t.Fatalf("TxnOffsetCommit outside a transaction (group coordinator %d, transaction coordinator %d): %v, want INVALID_TXN_STATE",
			gc.Cfg.NodeID, coord.Cfg.NodeID, kerr.ErrorForCode(code))
	}
	stableEqualsHighWatermark(t, nodes, "__consumer_offsets")
}

// groupCoordinatorNode finds group's coordinator (creating
// __consumer_offsets on first use).
func groupCoordinatorNode(t *testing.T, nodes []*brokertest.Node, group string) *brokertest.Node {
	t.Helper()
	var n *brokertest.Node
	brokertest.Await(t, "the group coordinator", func() error {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorType, req.CoordinatorKeys = 0, []string{group}
		r, err := nodes[0].Request(req)
		if err != nil {
			return err
		}
		c := r.(*kmsg.FindCoordinatorResponse).Coordinators[0]
		if c.ErrorCode != 0 {
			return kerr.ErrorForCode(c.ErrorCode)
		}
		if n = nodeByID(nodes, c.NodeID); n == nil {
			return fmt.Errorf("coordinator %d", c.NodeID)
		}
		return nil
	})
	return n
}

// TestClusterGroupTransactAcrossCoordinatorMove: a consume-transform-produce
// pipeline (kgo.GroupTransactSession: offsets committed in the
// transaction) on a 3-node cluster with verification on, while the
// transaction coordinator moves twice - once between transactions, once
// between a transaction's records and its commit - by stopping its node
// (and restarting it). The output has every input exactly once under
// read_committed, and the group's committed offsets cover every input.
func TestClusterGroupTransactAcrossCoordinatorMove(t *testing.T) {
	nodes := startCluster(t, 3, func(c *broker.Config) {
		c.OffsetsTopicPartitions = 3
		c.Txn.StatePartitions = 3
		c.Groups.InitialRebalanceDelay = 0
		fastLiveness(c)
	})
	const in, out, txnID, group, total = "gt-in", "gt-out", "gt-pipeline", "gt-group", 120
	createClusterTopic(t, nodes, in, 3, 3, nil)
	createClusterTopic(t, nodes, out, 3, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.DefaultProduceTopic(in))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < total; i += 20 {
		var rs []*kgo.Record
		for j := i; j < i+20; j++ {
			rs = append(rs, &kgo.Record{Value: fmt.Appendf(nil, "%d", j)})
		}
		if err := pcl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	pcl.Close()

	newSession := func() *kgo.GroupTransactSession {
		s, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(addrs(nodes)...), kgo.TransactionalID(txnID),
			kgo.ConsumerGroup(group), kgo.ConsumeTopics(in), kgo.DefaultProduceTopic(out),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(200*time.Millisecond),
			kgo.FetchMaxWait(200*time.Millisecond), kgo.RetryTimeout(90*time.Second), kgo.MetadataMinAge(100*time.Millisecond),
			kgo.WithLogger(kgo.BasicLogger(testLogWriter{t, new(atomic.Int64)}, kgo.LogLevelInfo, func() string { return "kgo: " })))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := newSession()
	defer func() { s.Close() }()
	// The group's committed offsets, asked through the running nodes only
	// and by a fresh client each time: a kgo client kept across the stop
	// was seen retrying the stopped node for minutes while every live node
	// named another coordinator (a client-side stall, not the cluster's).
	running := func() []*brokertest.Node {
		var out []*brokertest.Node
		for _, n := range nodes {
			if n.B != nil {
				out = append(out, n)
			}
		}
		return out
	}
	committedInputs := func() int {
		var last error
		since := time.Now()
		sum := 0
		ok := testwait.PollContext(ctx, 2*time.Minute, func() bool {
			if time.Since(since) > 20*time.Second {
				// Stuck: say what the live nodes answer for the group.
				for _, n := range nodes {
					if n.B == nil {
						continue
					}
					req := kmsg.NewPtrFindCoordinatorRequest()
					req.CoordinatorKeys = []string{group}
					r, err := n.Request(req)
					if err == nil {
						c := r.(*kmsg.FindCoordinatorResponse).Coordinators[0]
						t.Logf("node %d: group coordinator %d (code %d %v)", n.Cfg.NodeID, c.NodeID, c.ErrorCode, c.ErrorMessage)
					}
				}
				since = time.Now()
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(running())...))
			if err != nil {
				t.Fatal(err)
			}
			fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
			os, err := kadm.NewClient(cl).FetchOffsets(fctx, group)
			fcancel()
			cl.Close()
			if err == nil {
				err = os.Error()
			}
			if err != nil {
				last = err
				return false
			}
			os.Each(func(o kadm.OffsetResponse) { sum += int(o.At) })
			return true
		})
		if !ok {
			t.Fatalf("fetching the group's offsets timed out: %v", last)
		}
		return sum
	}
	var down *brokertest.Node
	moves := 0
	done, txns := 0, 0
	for done < total {
		if ctx.Err() != nil {
			t.Fatalf("pipeline stuck after %d committed inputs (%d transactions)", done, txns)
		}
		if moves == 0 && done >= 30 {
			down = txnCoordinator(t, nodes, txnID)
			t.Logf("stopping node %d (transaction coordinator) between transactions", down.Cfg.NodeID)
			down.Stop()
			moves++
		}
		fs := s.PollRecords(ctx, 15)
		rs := fs.Records()
		if len(rs) == 0 {
			continue
		}
		if err := s.Begin(); err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			s.Produce(ctx, &kgo.Record{Partition: r.Partition, Value: append([]byte("out-"), r.Value...)}, nil)
		}
		txns++
		if moves == 1 && done >= 70 {
			// Bring the first one back, then move the coordinator while
			// this transaction's records are written but not committed.
			s.Client().Flush(ctx)
			t.Logf("restarting node %d", down.Cfg.NodeID)
			down.Start()
			awaitBrokers(t, nodes, []int32{1, 2, 3})
			down = txnCoordinator(t, nodes, txnID)
			t.Logf("stopping node %d (transaction coordinator) mid-transaction", down.Cfg.NodeID)
			down.Stop()
			moves++
		}
		committed, err := s.End(ctx, kgo.TryCommit)
		if err != nil {
			t.Logf("end transaction %d: %v (restarting the session)", txns, err)
			s.Close()
			s = newSession()
		} else if !committed {
			t.Logf("transaction %d aborted", txns)
		}
		done = committedInputs()
	}
	if moves != 2 {
		t.Fatalf("the coordinator moved %d times, want 2", moves)
	}
	if down != nil {
		down.Start()
	}
	t.Logf("%d inputs in %d transactions", done, txns)
	rd, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.ConsumeTopics(out),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	seen := map[string]int{}
	n := 0
	for n < total && ctx.Err() == nil {
		for _, r := range rd.PollFetches(ctx).Records() {
			seen[string(r.Value)]++
			n++
		}
	}
	// Anything more is a duplicate: read on briefly.
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		rs := rd.PollFetches(pctx).Records()
		pcancel()
		if len(rs) == 0 {
			break
		}
		for _, r := range rs {
			seen[string(r.Value)]++
			n++
		}
	}
	if n != total {
		t.Errorf("output has %d committed records, want %d", n, total)
	}
	for i := 0; i < total; i++ {
		if c := seen[fmt.Sprintf("out-%d", i)]; c != 1 {
			t.Errorf("input %d appears %d times in the output", i, c)
		}
	}
	stableEqualsHighWatermark(t, nodes, out)
}
