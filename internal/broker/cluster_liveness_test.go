package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
)

// fastLiveness shortens the heartbeat and session so a stopped broker is
// fenced within seconds. The session is still several election timeouts
// long: a busy test machine must not fence brokers that are alive.
func fastLiveness(c *broker.Config) {
	c.BrokerHeartbeatInterval, c.BrokerSessionTimeout = 200*time.Millisecond, 3*time.Second
}

// liveBrokers are the broker ids node lists in Metadata.
func liveBrokers(n *brokertest.Node) ([]int32, error) {
	md, err := metadata(n, nil)
	if err != nil {
		return nil, err
	}
	var ids []int32
	for _, b := range md.Brokers {
		ids = append(ids, b.NodeID)
	}
	slices.Sort(ids)
	return ids, nil
}

// describeCluster asks n for DescribeCluster v2 with the fenced brokers.
func describeCluster(n *brokertest.Node) (*kmsg.DescribeClusterResponse, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	req := kmsg.NewPtrDescribeClusterRequest()
	req.IncludeFencedBrokers = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return req.RequestWith(ctx, cl.SeedBrokers()[0])
}

// awaitBrokers waits until every node in on lists exactly want in
// Metadata, and DescribeCluster agrees (fenced ones flagged), and returns
// how long that took.
func awaitBrokers(t *testing.T, on []*brokertest.Node, want []int32) time.Duration {
	t.Helper()
	start := time.Now()
	awaitCluster(t, fmt.Sprintf("brokers %v listed", want), func() error {
		for _, n := range on {
			got, err := liveBrokers(n)
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("node %d lists %v", n.Cfg.NodeID, got)
			}
			dc, err := describeCluster(n)
			if err != nil {
				return err
			}
			for _, b := range dc.Brokers {
				if b.IsFenced == slices.Contains(want, b.NodeID) {
					return fmt.Errorf("node %d: DescribeCluster says broker %d fenced=%v", n.Cfg.NodeID, b.NodeID, b.IsFenced)
				}
			}
		}
		return nil
	})
	return time.Since(start)
}

func without(nodes []*brokertest.Node, gone ...*brokertest.Node) []*brokertest.Node {
	return slices.DeleteFunc(slices.Clone(nodes), func(n *brokertest.Node) bool { return slices.Contains(gone, n) })
}

// controllerNode is the node the others name as controller.
func controllerNode(t *testing.T, nodes []*brokertest.Node) *brokertest.Node {
	t.Helper()
	var ctrl *brokertest.Node
	awaitCluster(t, "a controller", func() error {
		md, err := metadata(nodes[0], nil)
		if err != nil {
			return err
		}
		if ctrl = nodeByID(nodes, md.ControllerID); ctrl == nil {
			return fmt.Errorf("controller %d", md.ControllerID)
		}
		return nil
	})
	return ctrl
}

// TestClusterLiveness: a stopped broker is fenced through the metadata and
// disappears from Metadata and DescribeCluster on the survivors, is
// reported offline and never as a leader, and comes back once restarted.
// The same when the controller itself stops (the new controller fences it
// after giving it a full session), and at once with FenceForShutdown.
func TestClusterLiveness(t *testing.T) {
	nodes := startCluster(t, 3, fastLiveness)
	all := []int32{1, 2, 3}
	const topic = "live"
	adm := kadmClient(t, addrs(nodes))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if resp, err := adm.CreateTopics(ctx, 3, 3, nil, topic); err != nil || resp.Error() != nil {
		t.Fatalf("create topic: %v %v", err, resp.Error())
	}

	ctrl := controllerNode(t, nodes)
	var victim *brokertest.Node
	for _, n := range nodes {
		if n != ctrl {
			victim = n
			break
		}
	}
	id := victim.Cfg.NodeID
	rest := slices.DeleteFunc(slices.Clone(all), func(x int32) bool { return x == id })
	victim.Stop()
	t.Logf("broker %d (not the controller) stopped: gone from Metadata after %v", id, awaitBrokers(t, without(nodes, victim), rest))

	// Its partitions: never led by it, listed offline, not in sync.
	awaitCluster(t, "partitions without the fenced broker", func() error {
		for _, n := range without(nodes, victim) {
			md, err := metadata(n, []string{topic})
			if err != nil {
				return err
			}
			for _, p := range md.Topics[0].Partitions {
				if p.Leader == id || slices.Contains(p.ISR, id) || !slices.Contains(p.OfflineReplicas, id) {
					return fmt.Errorf("node %d partition %d: leader %d isr %v offline %v", n.Cfg.NodeID, p.Partition, p.Leader, p.ISR, p.OfflineReplicas)
				}
			}
		}
		return nil
	})

	victim.Restart()
	t.Logf("broker %d restarted: back after %v", id, awaitBrokers(t, nodes, all))

	// The controller stops: a new one is elected, and fences it only
	// after a full session of its own.
	ctrl = controllerNode(t, nodes)
	cid := ctrl.Cfg.NodeID
	rest = slices.DeleteFunc(slices.Clone(all), func(x int32) bool { return x == cid })
	ctrl.Stop()
	t.Logf("controller %d stopped: gone from Metadata after %v", cid, awaitBrokers(t, without(nodes, ctrl), rest))
	ctrl.Restart()
	awaitBrokers(t, nodes, all)

	// A clean shutdown fences itself without waiting for its session.
	ctrl = controllerNode(t, nodes)
	other := without(nodes, ctrl)[0]
	for _, n := range []*brokertest.Node{ctrl, other} {
		nid := n.Cfg.NodeID
		if err := n.B.FenceForShutdown(ctx); err != nil {
			t.Fatalf("FenceForShutdown on %d: %v", nid, err)
		}
		rest = slices.DeleteFunc(slices.Clone(all), func(x int32) bool { return x == nid })
		t.Logf("broker %d fenced itself: gone from Metadata after %v", nid, awaitBrokers(t, without(nodes, n), rest))
		n.Restart()
		awaitBrokers(t, nodes, all)
	}
}

// TestClusterTxnCoordinatorFailover: a transactional producer commits
// transactions in a loop; the broker hosting its transaction coordinator
// stops in the middle of one. The producer aborts what fails (kgo's
// documented pattern), carries on with the new coordinator, and a
// read_committed consumer sees each committed transaction exactly once
// and nothing of an aborted one.
func TestClusterTxnCoordinatorFailover(t *testing.T) {
	nodes := startCluster(t, 3, fastLiveness)
	const topic, txnID = "txf", "failover-txn"
	adm := kadmClient(t, addrs(nodes))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if resp, err := adm.CreateTopics(ctx, 3, 3, nil, topic); err != nil || resp.Error() != nil {
		t.Fatalf("create topic: %v %v", err, resp.Error())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.TransactionalID(txnID),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionTimeout(20*time.Second), kgo.RetryTimeout(60*time.Second),
		kgo.WithLogger(kgo.BasicLogger(testLogWriter{t, new(atomic.Int64)}, kgo.LogLevelInfo, func() string { return "kgo: " })))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// outcome of each transaction: committed, aborted, or unknown (the
	// commit failed: it may still have been applied).
	const (
		committed = "committed"
		aborted   = "aborted"
		unknown   = "unknown"
	)
	outcome := map[int]string{}
	// Two failovers: the coordinator stops between transactions (the next
	// one starts with AddPartitionsToTxn to it), then - after it is back -
	// the next coordinator stops between a transaction's records and its
	// commit (EndTxn to it).
	const perTxn, firstStop, restart, secondStop, total = 3, 5, 10, 12, 20
	var down *brokertest.Node
	stop := func(i int) {
		t.Helper()
		down = txnCoordinator(t, nodes, txnID)
		t.Logf("stopping broker %d, the transaction coordinator, at transaction %d", down.Cfg.NodeID, i)
		down.Stop()
	}
	for i, done := 0, 0; done < total; i++ {
		if ctx.Err() != nil {
			t.Fatalf("transaction %d: out of time; outcomes %v", i, outcome)
		}
		switch {
		case done == firstStop && down == nil:
			stop(i)
		case done == restart && down != nil:
			t.Logf("restarting broker %d", down.Cfg.NodeID)
			down.Restart()
			down = nil
			awaitBrokers(t, nodes, []int32{1, 2, 3})
		}
		if err := cl.BeginTransaction(); err != nil {
			t.Fatalf("begin %d: %v", i, err)
		}
		var recs []*kgo.Record
		for j := 0; j < perTxn; j++ {
			recs = append(recs, &kgo.Record{Partition: int32(j), Value: fmt.Appendf(nil, "t%d-%d", i, j)})
		}
		err := cl.ProduceSync(ctx, recs...).FirstErr()
		if err == nil && done == secondStop && down == nil {
			stop(i)
		}
		if err == nil {
			err = cl.EndTransaction(ctx, kgo.TryCommit)
			if err == nil {
				outcome[i] = committed
				done++
				continue
			}
			outcome[i] = unknown
			t.Logf("commit %d: %v", i, err)
		} else {
			outcome[i] = aborted
			t.Logf("produce %d: %v", i, err)
		}
		// kgo's rollback: drop what is buffered, then abort.
		if err := cl.AbortBufferedRecords(ctx); err != nil {
			t.Fatalf("aborting buffered records: %v", err)
		}
		for attempt := 1; ; attempt++ {
			err := cl.EndTransaction(ctx, kgo.TryAbort)
			if err == nil {
				break
			}
			t.Logf("abort %d, attempt %d: %v", i, attempt, err)
			// "unknown broker": the coordinator one node named is not yet
			// (or no longer) in another node's Metadata - the nodes apply
			// the fence or unfence at slightly different times. kgo gives
			// up on it; an application retries, as here.
			if attempt == 5 || !kerr.IsRetriable(err) && !strings.Contains(err.Error(), "unknown broker") {
				t.Fatalf("transaction %d cannot be aborted: %v", i, err)
			}
		}
	}
	if down == nil {
		t.Fatal("the second coordinator was never stopped")
	}
	t.Logf("outcomes: %v", outcome)

	survivors := without(nodes, down)
	rd, err := kgo.NewClient(kgo.SeedBrokers(addrs(survivors)...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	last := 0
	for i, o := range outcome {
		if o == committed {
			last = max(last, i)
		}
	}
	got := map[string]int{}
	for seen := 0; seen < perTxn; {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading: %v; got %v", ctx.Err(), got)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch: %v", err) })
		for _, r := range fs.Records() {
			got[string(r.Value)]++
			if strings.HasPrefix(string(r.Value), fmt.Sprintf("t%d-", last)) {
				seen++
			}
		}
	}
	for i, o := range outcome {
		n := 0
		for j := 0; j < perTxn; j++ {
			c := got[fmt.Sprintf("t%d-%d", i, j)]
			if c > 1 {
				t.Errorf("transaction %d (%s): record %d read %d times", i, o, j, c)
			}
			n += c
		}
		switch {
		case o == committed && n != perTxn:
			t.Errorf("committed transaction %d: read %d of %d records", i, n, perTxn)
		case o == aborted && n != 0:
			t.Errorf("aborted transaction %d: read %d records", i, n)
		case o == unknown && n != 0 && n != perTxn:
			t.Errorf("transaction %d with an unknown outcome: read %d of %d records (not atomic)", i, n, perTxn)
		}
	}
}

// txnCoordinator finds the node hosting id's transaction coordinator.
func txnCoordinator(t *testing.T, nodes []*brokertest.Node, id string) *brokertest.Node {
	t.Helper()
	var n *brokertest.Node
	awaitCluster(t, "the transaction coordinator", func() error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(nodes[0].Addr))
		if err != nil {
			return err
		}
		defer cl.Close()
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorType, req.CoordinatorKeys = 1, []string{id}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
		if err != nil {
			return err
		}
		c := resp.Coordinators[0]
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

// testLogWriter sends a client's log lines to the test log, only the first
// warnings: a client retrying a dead broker warns thousands of times.
type testLogWriter struct {
	t     *testing.T
	warns *atomic.Int64
}

func (w testLogWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("[WARN]")) && w.warns.Add(1) > 30 {
		return len(p), nil
	}
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestClusterAddOffsetsToTxnCreatesOffsetsTopic: a transaction's
// AddOffsetsToTxn before any group lookup created __consumer_offsets
// creates it (as FindCoordinator does) instead of answering
// COORDINATOR_NOT_AVAILABLE until someone else does; the offsets then
// commit with the transaction.
func TestClusterAddOffsetsToTxnCreatesOffsetsTopic(t *testing.T) {
	nodes := startCluster(t, 3, fastLiveness)
	const topic, group = "aot", "aot-group"
	adm := kadmClient(t, addrs(nodes))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if resp, err := adm.CreateTopics(ctx, 1, 3, nil, topic); err != nil || resp.Error() != nil {
		t.Fatalf("create topic: %v %v", err, resp.Error())
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.TransactionalID("aot-txn"), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if md, err := metadata(n, []string{"__consumer_offsets"}); err != nil || md.Topics[0].ErrorCode == 0 {
			t.Fatalf("node %d: __consumer_offsets exists before the test asks for it (%v)", n.Cfg.NodeID, err)
		}
	}
	// Only AddOffsetsToTxn: nothing else looks the group up. Retriable
	// answers are retried, as clients do.
	awaitCluster(t, "AddOffsetsToTxn accepted", func() error {
		req := kmsg.NewPtrAddOffsetsToTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group = "aot-txn", pid, epoch, group
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		if resp.ErrorCode != 0 {
			return kerr.ErrorForCode(resp.ErrorCode)
		}
		return nil
	})
	awaitCluster(t, "TxnOffsetCommit accepted", func() error {
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = "aot-txn", group, pid, epoch
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 0, 1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
			return kerr.ErrorForCode(code)
		}
		return nil
	})
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit: %v", err)
	}
	awaitCluster(t, "the transaction's offset committed", func() error {
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return err
		}
		if o, ok := offs.Lookup(topic, 0); !ok || o.At != 1 {
			return fmt.Errorf("offsets %+v", offs)
		}
		return nil
	})
}

// TestClusterBrokerOnlyNodeStaysLive: a broker-only node (not in --peers)
// heartbeats like the others, so it is still listed, unfenced, after
// several sessions have passed.
func TestClusterBrokerOnlyNodeStaysLive(t *testing.T) {
	nodes := startCluster(t, 3, fastLiveness)
	n4 := startBrokerOnly(t, nodes, 4, fastLiveness)
	all := append(slices.Clone(nodes), n4)
	awaitBrokers(t, all, []int32{1, 2, 3, 4})
	time.Sleep(2 * 3 * time.Second) // two sessions: a node without heartbeats would be fenced by now
	awaitBrokers(t, all, []int32{1, 2, 3, 4})
}
