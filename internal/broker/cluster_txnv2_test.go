package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
)

// TestClusterTxnV2CoordinatorFailover: on a 3-node cluster, UpdateFeatures
// through any node finalizes transaction.version for every node (the
// metadata log); franz-go then runs KIP-890 part 2 transactions (partitions
// added by Produce v12, an epoch bump per EndTxn v5), and one transaction's
// coordinator is stopped between its records and its commit. The commit
// goes through on the new coordinator (replay of __transaction_state; the
// client's retried EndTxn names the epoch from before the bump), and
// read_committed shows every committed record exactly once.
func TestClusterTxnV2CoordinatorFailover(t *testing.T) {
	nodes := startCluster(t, 3, func(c *broker.Config) {
		c.Txn.StatePartitions = 3
		fastLiveness(c)
	})
	const topic, id = "v2-failover", "v2-failover-txn"
	createClusterTopic(t, nodes, topic, 3, 3, nil)

	// The feature level is the cluster's, whichever node is asked.
	for _, level := range []int16{0, 2} {
		if code, msg := setFeature(t, nodes[2], "transaction.version", level, 2); code != 0 {
			t.Fatalf("transaction.version %d through node %d: %v %s", level, nodes[2].Cfg.NodeID, kerr.ErrorForCode(code), msg)
		}
		awaitCluster(t, "every node finalizing the level", func() error {
			for _, n := range nodes {
				if v := finalizedTxnVersion(t, n); v != level {
					return fmt.Errorf("node %d: transaction.version %d, want %d", n.Cfg.NodeID, v, level)
				}
			}
			return nil
		})
	}

	running := func() []*brokertest.Node {
		var out []*brokertest.Node
		for _, n := range nodes {
			if n.B != nil {
				out = append(out, n)
			}
		}
		return out
	}
	epoch := func() int16 {
		var e int16
		awaitCluster(t, "the transaction described", func() error {
			cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(running())...))
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ds, err := kadm.NewClient(cl).DescribeTransactions(ctx, id)
			if err != nil {
				return err
			}
			d, ok := ds[id]
			if !ok || d.Err != nil {
				return fmt.Errorf("describe: %+v", d)
			}
			e = d.ProducerEpoch
			return nil
		})
		return e
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.TransactionalID(id), kgo.DefaultProduceTopic(topic),
		kgo.RecordRetries(100), kgo.RetryTimeout(90*time.Second), kgo.MetadataMinAge(100*time.Millisecond),
		kgo.TransactionTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var want []string
	txn := func(i int, beforeCommit func()) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for j := range 12 {
			v := fmt.Sprintf("txn%d-%d", i, j)
			recs = append(recs, &kgo.Record{Value: []byte(v), Partition: int32(j % 3)})
			want = append(want, v)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("transaction %d: produce: %v", i, err)
		}
		if beforeCommit != nil {
			beforeCommit()
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("transaction %d: commit: %v", i, err)
		}
	}
	txn(0, nil) // franz-go may run its first transaction the old way
	txn(1, nil)
	before := epoch()
	txn(2, nil)
	if e := epoch(); e != before+1 {
		t.Fatalf("epoch %d -> %d over one transaction: EndTxn v5 bumps it once", before, e)
	}
	before = epoch()
	txn(3, func() {
		down := txnCoordinator(t, nodes, id)
		t.Logf("stopping node %d, the transaction coordinator, before the commit", down.Cfg.NodeID)
		down.Stop()
	})
	if e := epoch(); e != before+1 {
		t.Fatalf("epoch %d -> %d over the transaction that moved coordinator", before, e)
	}
	txn(4, nil)

	rc, err := kgo.NewClient(kgo.SeedBrokers(addrs(running())...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	seen := map[string]int{}
	total := 0
	for total < len(want) && ctx.Err() == nil {
		for _, r := range rc.PollFetches(ctx).Records() {
			seen[string(r.Value)]++
			total++
		}
	}
	for _, v := range want {
		if seen[v] != 1 {
			t.Fatalf("committed %s read %d times", v, seen[v])
		}
	}
	if total != len(want) {
		t.Fatalf("read %d records, want %d", total, len(want))
	}
}
