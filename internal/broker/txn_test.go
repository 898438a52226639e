package broker_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

// txnNode starts a broker with a small __transaction_state.
func txnNode(t *testing.T, opts ...func(*broker.Config, *wire.Limits)) *brokertest.Node {
	t.Helper()
	return brokertest.Start(t, append([]func(*broker.Config, *wire.Limits){func(c *broker.Config, _ *wire.Limits) {
		c.Txn.StatePartitions = 3
	}}, opts...)...)
}

// txnProducer is a franz-go transactional producer.
func txnProducer(t *testing.T, n *brokertest.Node, id string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return n.Client(append([]kgo.Opt{kgo.TransactionalID(id), kgo.RecordRetries(20)}, opts...)...)
}

func produceTxn(t *testing.T, cl *kgo.Client, commit bool, recs ...*kgo.Record) {
	t.Helper()
	ctx := testCtx(t)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce in transaction: %v", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("end transaction (commit %v): %v", commit, err)
	}
}

// values consumes topic from the start until want records or, with
// settle, until it has seen the partition's end, and returns the values.
func values(t *testing.T, n *brokertest.Node, topic string, readCommitted bool, want int) []string {
	t.Helper()
	iso := kgo.ReadUncommitted()
	if readCommitted {
		iso = kgo.ReadCommitted()
	}
	var out []string
	for _, r := range consumeAll(t, n, topic, want, kgo.FetchIsolationLevel(iso)) {
		out = append(out, string(r.Value))
	}
	return out
}

func recs(topic, prefix string, n int) []*kgo.Record {
	out := make([]*kgo.Record, n)
	for i := range out {
		out[i] = &kgo.Record{Topic: topic, Value: []byte(prefix + strconv.Itoa(i))}
	}
	return out
}

// TestTxnCommitAbortVisibility: read_committed sees committed transactions
// only; read_uncommitted sees the aborted records too (but never markers).
func TestTxnCommitAbortVisibility(t *testing.T) {
	n := txnNode(t)
	n.CreateTopic("tv", 1, nil)
	cl := txnProducer(t, n, "tv-producer")
	produceTxn(t, cl, true, recs("tv", "c1-", 3)...)
	produceTxn(t, cl, false, recs("tv", "a1-", 4)...)
	produceTxn(t, cl, true, recs("tv", "c2-", 2)...)

	got := values(t, n, "tv", true, 5)
	want := []string{"c1-0", "c1-1", "c1-2", "c2-0", "c2-1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read_committed: %v, want %v", got, want)
	}
	if all := values(t, n, "tv", false, 9); len(all) != 9 {
		t.Fatalf("read_uncommitted: %d records %v, want 9", len(all), all)
	}

	// ListOffsets: 3 data + 1 marker, 4 + 1, 2 + 1.
	if end := endOffset(t, n, "tv", 0); end != 12 {
		t.Fatalf("end offset %d, want 12", end)
	}
}
