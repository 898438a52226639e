package broker_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/records"
	"holdfast/internal/storage"
	"holdfast/internal/testwait"
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

// TestTxnOpenHoldsLSO: while a transaction is open, read_committed stops at
// its first offset (LSO); ListOffsets latest answers the LSO under
// read_committed and the high watermark otherwise.
func TestTxnOpenHoldsLSO(t *testing.T) {
	n := txnNode(t)
	n.CreateTopic("lso", 1, nil)
	plain := n.Client()
	ctx := testCtx(t)
	if err := plain.ProduceSync(ctx, recs("lso", "plain-", 2)...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl := txnProducer(t, n, "lso-producer")
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs("lso", "open-", 3)...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := n.Admin()
	committed, err := adm.ListCommittedOffsets(ctx, "lso")
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, "lso")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := committed.Lookup("lso", 0); o.Offset != 2 {
		t.Fatalf("read_committed end %d (%v), want the LSO 2", o.Offset, o.Err)
	}
	if o, _ := ends.Lookup("lso", 0); o.Offset != 5 {
		t.Fatalf("read_uncommitted end %d (%v), want 5", o.Offset, o.Err)
	}
	// DescribeProducers shows the open transaction's first offset.
	ps, err := adm.DescribeProducers(ctx, kadmSet("lso", 0))
	if err != nil {
		t.Fatal(err)
	}
	txnPID, _, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	starts := map[int64]int64{} // the plain client is idempotent too
	ps.EachProducer(func(p kadm.DescribedProducer) { starts[p.ProducerID] = p.CurrentTxnStartOffset })
	if len(starts) != 2 || starts[txnPID] != 2 {
		t.Fatalf("describe producers: %v, want producer %d's transaction from offset 2", starts, txnPID)
	}
	for pid, start := range starts {
		if pid != txnPID && start != -1 {
			t.Fatalf("plain producer %d has a transaction from %d", pid, start)
		}
	}
	// ListTransactions by state finds it while it is open.
	lt, err := adm.ListTransactions(ctx, nil, []string{"Ongoing"})
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := lt["lso-producer"]; !ok || len(lt) != 1 || l.State != "Ongoing" {
		t.Fatalf("list transactions: %+v", lt)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if lt, err = adm.ListTransactions(ctx, nil, []string{"Ongoing"}); err != nil || len(lt) != 0 {
		t.Fatalf("list ongoing after commit: %+v %v", lt, err)
	}
	if got := values(t, n, "lso", true, 5); len(got) != 5 {
		t.Fatalf("after commit read_committed got %v", got)
	}
}

func kadmSet(topic string, ps ...int32) kadm.TopicsSet {
	s := kadm.TopicsSet{}
	s.Add(topic, ps...)
	return s
}

// TestTxnZombieFenced: a second producer with the same transactional id
// fences the first; the first's open transaction is aborted and it can
// neither produce nor commit any more.
func TestTxnZombieFenced(t *testing.T) {
	n := txnNode(t)
	n.CreateTopic("zombie", 2, nil)
	ctx := testCtx(t)
	old := txnProducer(t, n, "shared-id", kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := old.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := old.ProduceSync(ctx, &kgo.Record{Topic: "zombie", Partition: 0, Value: []byte("zombie-0")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	oldPID, oldEpoch, err := old.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fresh := txnProducer(t, n, "shared-id", kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceTxn(t, fresh, true, &kgo.Record{Topic: "zombie", Partition: 1, Value: []byte("fresh-1")})

	// The zombie, to a partition of its (aborted) transaction and to a new one.
	for _, p := range []int32{0, 1} {
		err := old.ProduceSync(ctx, &kgo.Record{Topic: "zombie", Partition: p, Value: []byte("zombie-late")}).FirstErr()
		if !isFenced(err) {
			t.Fatalf("zombie produce to partition %d: %v, want fenced", p, err)
		}
	}
	// franz-go refuses to commit after failed produces
	// (OPERATION_NOT_ATTEMPTED), so the zombie's EndTxn is sent raw.
	if err := old.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Fatal("zombie commit succeeded")
	}
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = "shared-id", oldPID, oldEpoch, true
	if er := rawRequest(t, n, end).(*kmsg.EndTxnResponse); er.ErrorCode != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("zombie EndTxn: %v, want INVALID_PRODUCER_EPOCH", kerr.ErrorForCode(er.ErrorCode))
	}
	// read_committed: only the fresh producer's record, on both partitions.
	got := values(t, n, "zombie", true, 1)
	if fmt.Sprint(got) != "[fresh-1]" {
		t.Fatalf("read_committed %v, want [fresh-1]", got)
	}
	in := describeTxn(t, n, "shared-id")
	if in.State != "CompleteCommit" {
		t.Fatalf("state %s, want CompleteCommit", in.State)
	}
}

func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

func describeTxn(t *testing.T, n *brokertest.Node, id string) kadm.DescribedTransaction {
	t.Helper()
	d, err := n.Admin().DescribeTransactions(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	in, ok := d[id]
	if !ok || in.Err != nil {
		t.Fatalf("describe %s: %+v", id, in)
	}
	return in
}

// TestTxnCoordinatorRestartCompletesCommit: the coordinator stops right
// after the PrepareCommit record is durable, before any marker; after a
// restart, replay writes the markers and the commit is visible.
func TestTxnCoordinatorRestartCompletesCommit(t *testing.T) {
	var crashed atomic.Bool
	hit := make(chan struct{})
	n := txnNode(t, func(c *broker.Config, _ *wire.Limits) {
		c.Txn.AfterPrepare = func(id string) bool {
			if id == "crash-id" && crashed.CompareAndSwap(false, true) {
				close(hit)
				return true
			}
			return false
		}
	})
	n.CreateTopic("crash", 3, nil)
	cl := txnProducer(t, n, "crash-id")
	ctx := testCtx(t)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 3; p++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "crash", Partition: p, Value: []byte("v" + strconv.Itoa(int(p)))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ended := make(chan error, 1)
	go func() { ended <- cl.EndTransaction(ctx, kgo.TryCommit) }()
	select {
	case <-hit:
	case <-ctx.Done():
		t.Fatal("prepare hook never ran")
	}
	// No marker exists: read_committed sees nothing (the LSO is held).
	adm := n.Admin()
	lso, err := adm.ListCommittedOffsets(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	lso.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Fatalf("partition %d LSO %d before the markers, want 0", o.Partition, o.Offset)
		}
	})
	n.Restart()
	if err := <-ended; err != nil {
		t.Fatalf("commit across the coordinator restart: %v", err)
	}
	if got := values(t, n, "crash", true, 3); len(got) != 3 {
		t.Fatalf("read_committed after restart: %v", got)
	}
	if in := describeTxn(t, n, "crash-id"); in.State != "CompleteCommit" {
		t.Fatalf("state %s, want CompleteCommit", in.State)
	}
}

// TestTxnTimeoutAborts: a transaction left open past its timeout is aborted
// by the coordinator, and its producer is fenced.
func TestTxnTimeoutAborts(t *testing.T) {
	n := txnNode(t, func(c *broker.Config, _ *wire.Limits) { c.Txn.AbortInterval = 50 * time.Millisecond })
	n.CreateTopic("slow", 1, nil)
	cl := txnProducer(t, n, "slow-id", kgo.TransactionTimeout(300*time.Millisecond))
	ctx := testCtx(t)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs("slow", "late-", 2)...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, time.Minute, "the timed-out transaction to abort", func() bool { return describeTxn(t, n, "slow-id").State == "CompleteAbort" })
	if err := cl.EndTransaction(ctx, kgo.TryCommit); !isFenced(err) {
		t.Fatalf("commit after the timeout abort: %v, want fenced", err)
	}
	// Nothing visible; the LSO moved past the aborted records and marker.
	committed, err := n.Admin().ListCommittedOffsets(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := committed.Lookup("slow", 0); o.Offset != 3 {
		t.Fatalf("LSO %d after abort, want 3", o.Offset)
	}
	plain := n.Client()
	if err := plain.ProduceSync(ctx, &kgo.Record{Topic: "slow", Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if got := values(t, n, "slow", true, 1); fmt.Sprint(got) != "[after]" {
		t.Fatalf("read_committed %v, want [after]", got)
	}
}

// TestTxnInvalidTimeoutAndUnaddedPartition: raw protocol checks.
func TestTxnInvalidTimeoutAndUnaddedPartition(t *testing.T) {
	n := txnNode(t, func(c *broker.Config, _ *wire.Limits) { c.Txn.MaxTimeout = time.Minute })
	n.CreateTopic("raw", 1, nil)
	id := "raw-id"
	// As a client does: find the coordinator first (which creates
	// __transaction_state), then ask it.
	brokertest.Await(t, "the transaction coordinator", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return n.Admin().FindTxnCoordinators(ctx, id).Error()
	})
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID = &id
	init.TransactionTimeoutMillis = int32((2 * time.Minute).Milliseconds())
	init.ProducerID, init.ProducerEpoch = -1, -1
	resp := rawRequest(t, n, init).(*kmsg.InitProducerIDResponse)
	if resp.ErrorCode != kerr.InvalidTransactionTimeout.Code {
		t.Fatalf("timeout above max: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	init.TransactionTimeoutMillis = 10000
	brokertest.Await(t, "the coordinator to load its partition", func() error {
		// Retried as a client retries while the coordinator loads.
		resp = rawRequest(t, n, init).(*kmsg.InitProducerIDResponse)
		if code := resp.ErrorCode; code == kerr.NotCoordinator.Code || code == kerr.CoordinatorLoadInProgress.Code {
			return kerr.ErrorForCode(code)
		}
		return nil
	})
	if resp.ErrorCode != 0 || resp.ProducerEpoch != 0 {
		t.Fatalf("init: %v epoch %d", kerr.ErrorForCode(resp.ErrorCode), resp.ProducerEpoch)
	}
	// A transactional batch to a partition never added: INVALID_TXN_STATE,
	// and nothing is written.
	cl := n.Client()
	sp := produceRaw(t, cl, "raw", txnBatch(t, resp.ProducerID, resp.ProducerEpoch, 0, 2))
	if sp.ErrorCode != kerr.InvalidTxnState.Code {
		t.Fatalf("unadded partition: %v", kerr.ErrorForCode(sp.ErrorCode))
	}
	if end := endOffset(t, n, "raw", 0); end != 0 {
		t.Fatalf("end offset %d after a refused batch", end)
	}
	// EndTxn with nothing ongoing is INVALID_TXN_STATE; a stale epoch fenced.
	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = id, resp.ProducerID, resp.ProducerEpoch, true
	if er := rawRequest(t, n, end).(*kmsg.EndTxnResponse); er.ErrorCode != kerr.InvalidTxnState.Code {
		t.Fatalf("end with nothing ongoing: %v", kerr.ErrorForCode(er.ErrorCode))
	}
	end.ProducerEpoch = resp.ProducerEpoch - 1
	if er := rawRequest(t, n, end).(*kmsg.EndTxnResponse); er.ErrorCode != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("end with a stale epoch: %v", kerr.ErrorForCode(er.ErrorCode))
	}
}

func txnBatch(t *testing.T, pid int64, epoch int16, seq int32, n int) []byte {
	t.Helper()
	rs := make([]records.Record, n)
	for i := range rs {
		rs[i] = records.Record{Timestamp: time.Now().UnixMilli(), Value: []byte("raw")}
	}
	b, err := records.Build(records.Batch{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, Transactional: true}, rs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTxnSarama: sarama's transactional producer, commit and abort.
func TestTxnSarama(t *testing.T) {
	n := txnNode(t)
	n.CreateTopic("sarama-txn", 1, nil)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Producer.Transaction.ID = "sarama-txn-id"
	cfg.Net.MaxOpenRequests = 1
	sp, err := sarama.NewSyncProducer([]string{n.Addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	send := func(v string) {
		t.Helper()
		if _, _, err := sp.SendMessage(&sarama.ProducerMessage{Topic: "sarama-txn", Value: sarama.StringEncoder(v)}); err != nil {
			t.Fatalf("send %s: %v", v, err)
		}
	}
	for _, step := range []struct {
		vals   []string
		commit bool
	}{{[]string{"s1", "s2"}, true}, {[]string{"aborted"}, false}, {[]string{"s3"}, true}} {
		if err := sp.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		for _, v := range step.vals {
			send(v)
		}
		if step.commit {
			err = sp.CommitTxn()
		} else {
			err = sp.AbortTxn()
		}
		if err != nil {
			t.Fatalf("end (commit %v): %v", step.commit, err)
		}
	}
	if got := values(t, n, "sarama-txn", true, 3); fmt.Sprint(got) != "[s1 s2 s3]" {
		t.Fatalf("read_committed %v", got)
	}
	// sarama's read_committed consumer, which skips by AbortedTransactions.
	ccfg := sarama.NewConfig()
	ccfg.Version = sarama.V3_0_0_0
	ccfg.Consumer.IsolationLevel = sarama.ReadCommitted
	sc, err := sarama.NewConsumer([]string{n.Addr}, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	pc, err := sc.ConsumePartition("sarama-txn", 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var sgot []string
	ctx := testCtx(t)
	for len(sgot) < 3 {
		select {
		case m := <-pc.Messages():
			sgot = append(sgot, string(m.Value))
		case err := <-pc.Errors():
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("sarama read_committed got %v", sgot)
		}
	}
	if fmt.Sprint(sgot) != "[s1 s2 s3]" {
		t.Fatalf("sarama read_committed %v", sgot)
	}
	if got := values(t, n, "sarama-txn", false, 4); fmt.Sprint(got) != "[s1 s2 aborted s3]" {
		t.Fatalf("read_uncommitted %v", got)
	}

	// Offsets in a transaction (AddOffsetsToTxn + TxnOffsetCommit): kept
	// on commit, dropped on abort.
	for _, step := range []struct {
		off    int64
		commit bool
	}{{2, true}, {5, false}} {
		if err := sp.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		send(fmt.Sprintf("with-offset-%d", step.off))
		offs := map[string][]*sarama.PartitionOffsetMetadata{"sarama-txn": {{Partition: 0, Offset: step.off}}}
		if err := sp.AddOffsetsToTxn(offs, "sarama-group"); err != nil {
			t.Fatal(err)
		}
		if step.commit {
			err = sp.CommitTxn()
		} else {
			err = sp.AbortTxn()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	fo, err := n.Admin().FetchOffsets(testCtx(t), "sarama-group")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := fo.Lookup("sarama-txn", 0); !ok || o.At != 2 {
		t.Fatalf("group offset %+v, want 2 (the aborted 5 must not apply)", o)
	}
}

// TestTxnExactlyOncePipeline: consume A in a group, transform, produce to B
// with the offsets in the transaction (kgo.GroupTransactSession), while the
// broker restarts mid-transaction a few times. B ends with every input
// exactly once under read_committed.
func TestTxnExactlyOncePipeline(t *testing.T) {
	// crashNext makes the coordinator abandon the next commit right after
	// its PrepareCommit is durable, as a crash there would.
	var crashNext atomic.Bool
	crashed := make(chan struct{}, 1)
	n := txnNode(t, func(c *broker.Config, _ *wire.Limits) {
		c.Groups.InitialRebalanceDelay = 0
		c.Txn.AfterPrepare = func(string) bool {
			if crashNext.CompareAndSwap(true, false) {
				crashed <- struct{}{}
				return true
			}
			return false
		}
	})
	const total = 400
	n.CreateTopic("eos-in", 2, nil)
	n.CreateTopic("eos-out", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in := n.Client()
	for i := 0; i < total; i += 50 {
		batch := recs("eos-in", "", 50)
		for j, r := range batch {
			r.Value = []byte(strconv.Itoa(i + j))
		}
		if err := in.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	newSession := func() *kgo.GroupTransactSession {
		s, err := kgo.NewGroupTransactSession(
			kgo.SeedBrokers(n.Addr),
			kgo.TransactionalID("eos-pipeline"),
			kgo.ConsumerGroup("eos-group"),
			kgo.ConsumeTopics("eos-in"),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.DefaultProduceTopic("eos-out"),
			kgo.SessionTimeout(6*time.Second),
			kgo.HeartbeatInterval(200*time.Millisecond),
			kgo.FetchMaxWait(200*time.Millisecond),
			kgo.RetryTimeout(time.Minute),
		)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := newSession()
	defer func() { s.Close() }()
	adm := n.Admin()
	// committedInputs is the truth: the group's committed offsets.
	committedInputs := func() int {
		sum := 0
		if !testwait.PollContext(ctx, time.Minute, func() bool {
			os, err := adm.FetchOffsets(ctx, "eos-group")
			if err != nil || os.Error() != nil {
				return false
			}
			os.Each(func(o kadm.OffsetResponse) { sum += int(o.At) })
			return true
		}) {
			t.Fatal("fetching the group's offsets timed out")
		}
		return sum
	}

	restartAt := map[int]bool{60: true, 180: true, 300: true}
	done, txns, aborted, crashes := 0, 0, 0, 0
	for done < total {
		if ctx.Err() != nil {
			t.Fatalf("pipeline stuck after %d committed inputs", done)
		}
		fs := s.PollRecords(ctx, 40)
		rs := fs.Records()
		if len(rs) == 0 {
			continue
		}
		if err := s.Begin(); err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			s.Produce(ctx, &kgo.Record{Value: append([]byte("out-"), r.Value...)}, nil)
		}
		txns++
		restart := false
		for at := range restartAt {
			if done < at && done+len(rs) >= at {
				restart = true
				delete(restartAt, at)
			}
		}
		if restart {
			// Mid-transaction: records produced (maybe), nothing committed.
			s.Client().Flush(ctx)
			n.Restart()
		}
		var committed bool
		var err error
		switch {
		case txns%5 == 0:
			// Processing "failed": the inputs must come round again.
			committed, err = s.End(ctx, kgo.TryAbort)
		case txns%4 == 0 && crashes < 2:
			crashes++
			crashNext.Store(true)
			type result struct {
				ok  bool
				err error
			}
			res := make(chan result, 1)
			go func() {
				ok, err := s.End(ctx, kgo.TryCommit)
				res <- result{ok, err}
			}()
			select {
			case <-crashed:
			case <-ctx.Done():
				t.Fatal("the commit never reached PrepareCommit")
			}
			n.Restart() // replay completes the commit
			r := <-res
			committed, err = r.ok, r.err
		default:
			committed, err = s.End(ctx, kgo.TryCommit)
		}
		if err != nil {
			// The outcome is unknown to the client (the broker was down
			// for its retries). The application's move: start over from
			// what the broker has, with a new session (which fences the
			// old one and rejoins the group).
			t.Logf("end transaction %d: %v (restarting the session)", txns, err)
			s.Close()
			s = newSession()
		}
		if !committed {
			aborted++
		}
		done = committedInputs()
	}
	t.Logf("%d inputs committed in %d transactions (%d not committed)", done, txns, aborted)
	if len(restartAt) != 0 || crashes != 2 {
		t.Fatalf("restarts not done: %v, crashes after prepare %d", restartAt, crashes)
	}
	seen := map[string]int{}
	for _, v := range values(t, n, "eos-out", true, total) {
		seen[v]++
	}
	// Anything past the first total records is a duplicate: look for it.
	tail := n.Client(kgo.ConsumeTopics("eos-out"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	// The first total records are there (values read them): wait for
	// them, however long a loaded machine takes (an empty 2 s poll midway
	// ended this read early before, and the count came up short).
	var all int
	for all < total && ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		fs := tail.PollFetches(pctx)
		pcancel()
		all += len(fs.Records())
	}
	// Then read on until a poll comes back empty: a negative check that
	// passes when it stops at once; a duplicate past the first total would
	// come in the same fetch or the next one on a quiet machine.
	for ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := tail.PollFetches(pctx)
		pcancel()
		if len(fs.Records()) == 0 {
			break
		}
		all += len(fs.Records())
	}
	if all != total {
		t.Fatalf("output has %d committed records, want %d", all, total)
	}
	for i := 0; i < total; i++ {
		if c := seen["out-"+strconv.Itoa(i)]; c != 1 {
			t.Fatalf("input %d appears %d times in the output", i, c)
		}
	}
	if len(seen) != total {
		t.Fatalf("output has %d distinct values, want %d", len(seen), total)
	}
}

// BenchmarkIdempotentVsPlainProduce measures acks=all produce throughput of
// an idempotent producer against a non-idempotent one in the same run and
// reports the ratio (idempotent / plain).
func BenchmarkIdempotentVsPlainProduce(b *testing.B) {
	n := brokertest.Start(b)
	n.CreateTopic("bench-idem", 1, nil)
	n.CreateTopic("bench-plain", 1, nil)
	value := make([]byte, 100)
	idemCl := n.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("bench-idem"), kgo.ProducerLinger(0))
	plainCl := n.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("bench-plain"), kgo.ProducerLinger(0), kgo.DisableIdempotentWrite())
	// Rounds alternate the two so that warm-up and noise from other
	// processes fall on both.
	const rounds = 4
	run := func(cl *kgo.Client, count int) time.Duration {
		ctx := context.Background()
		start := time.Now()
		for i := 0; i < count; i++ {
			cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
				if err != nil {
					b.Error(err)
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	b.ResetTimer()
	var tPlain, tIdem time.Duration
	per := max(b.N/rounds, 1)
	for r := 0; r < rounds; r++ {
		tPlain += run(plainCl, per)
		tIdem += run(idemCl, per)
	}
	plain := float64(per*rounds) / tPlain.Seconds()
	idem := float64(per*rounds) / tIdem.Seconds()
	b.ReportMetric(plain, "plain-rec/s")
	b.ReportMetric(idem, "idempotent-rec/s")
	b.ReportMetric(idem/plain, "ratio")
}

// BenchmarkTransactions: committed transactions per second with one record
// on each of 1 or 10 partitions.
func BenchmarkTransactions(b *testing.B) {
	for _, parts := range []int32{1, 10} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			n := brokertest.Start(b, func(c *broker.Config, _ *wire.Limits) { c.Txn.StatePartitions = 3 })
			topic := fmt.Sprintf("bench-txn-%d", parts)
			n.CreateTopic(topic, parts, nil)
			cl := n.Client(kgo.TransactionalID(topic), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
			ctx := context.Background()
			value := make([]byte, 100)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if err := cl.BeginTransaction(); err != nil {
					b.Fatal(err)
				}
				for p := int32(0); p < parts; p++ {
					cl.Produce(ctx, &kgo.Record{Partition: p, Value: value}, nil)
				}
				if err := cl.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "txn/s")
		})
	}
}

// dropProxy forwards Kafka connections to a broker and, for every
// dropEvery-th Produce response, closes the connection instead of
// delivering it: the batch was appended, the client never hears so, and
// retries.
type dropProxy struct {
	ln        net.Listener
	target    string
	dropEvery int64
	frames    atomic.Int64
	dropped   atomic.Int64
}

func startDropProxy(t *testing.T, target string, dropEvery int64) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target, dropEvery: dropEvery}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *dropProxy) serve(c net.Conn) {
	defer c.Close()
	b, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer b.Close()
	var produces sync.Map // correlation id of a Produce request -> true
	go func() {
		defer b.Close()
		var size [4]byte
		for {
			if _, err := io.ReadFull(c, size[:]); err != nil {
				return
			}
			frame := make([]byte, 4+binary.BigEndian.Uint32(size[:]))
			copy(frame, size[:])
			if _, err := io.ReadFull(c, frame[4:]); err != nil || len(frame) < 12 {
				return
			}
			if int16(binary.BigEndian.Uint16(frame[4:])) == kmsg.Produce.Int16() {
				produces.Store(binary.BigEndian.Uint32(frame[8:]), true)
			}
			if _, err := b.Write(frame); err != nil {
				return
			}
		}
	}()
	var size [4]byte
	for {
		if _, err := io.ReadFull(b, size[:]); err != nil {
			return
		}
		frame := make([]byte, 4+binary.BigEndian.Uint32(size[:]))
		copy(frame, size[:])
		if _, err := io.ReadFull(b, frame[4:]); err != nil {
			return
		}
		if _, isProduce := produces.LoadAndDelete(binary.BigEndian.Uint32(frame[4:])); isProduce && p.frames.Add(1)%p.dropEvery == 0 {
			p.dropped.Add(1)
			return // the response is lost with the connection
		}
		if _, err := c.Write(frame); err != nil {
			return
		}
	}
}

// TestIdempotentRetryAfterLostResponses: an idempotent producer whose
// responses are lost (connection reset after the broker appended) retries,
// and the log holds every record exactly once, in order.
func TestIdempotentRetryAfterLostResponses(t *testing.T) {
	n := txnNode(t)
	n.CreateTopic("lossy", 1, nil)
	px := startDropProxy(t, n.Addr, 3)
	var d net.Dialer
	cl := n.Client(
		kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, px.ln.Addr().String())
		}),
		kgo.DefaultProduceTopic("lossy"),
		kgo.MaxBufferedRecords(50), // many small requests, so many are lost
		kgo.RecordRetries(100),
	)
	ctx := testCtx(t)
	const total = 600
	for i := 0; i < total; i++ {
		cl.Produce(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}, func(r *kgo.Record, err error) {
			if err != nil {
				t.Errorf("record %s: %v", r.Value, err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if px.dropped.Load() == 0 {
		t.Fatal("the proxy dropped nothing; the test tested nothing")
	}
	got := values(t, n, "lossy", false, total)
	for i, v := range got {
		if v != strconv.Itoa(i) {
			t.Fatalf("record %d is %q (duplicate or reordered)", i, v)
		}
	}
	if end := endOffset(t, n, "lossy", 0); end != total {
		t.Fatalf("log end %d, want %d: duplicates were written", end, total)
	}
	t.Logf("%d of %d produce responses dropped", px.dropped.Load(), px.frames.Load())
}

// crashBroker is a broker on a CrashFS that can lose power: unlike
// brokertest's Restart, nothing is closed cleanly first.
type crashBroker struct {
	t    *testing.T
	cfg  broker.Config
	fs   *storage.CrashFS
	addr string
	b    *broker.Broker
	srv  *wire.Server
}

func startCrashBroker(t *testing.T, seed int64) *crashBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := broker.DefaultConfig()
	cfg.DataDir = "/data"
	cfg.OffsetsTopicPartitions = 3
	cfg.Txn.StatePartitions = 3
	cfg.Txn.AbortInterval = 50 * time.Millisecond
	cfg.Groups.InitialRebalanceDelay = 0
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.AdvertisedHost, cfg.AdvertisedPort = "127.0.0.1", int32(ln.Addr().(*net.TCPAddr).Port)
	cb := &crashBroker{t: t, cfg: cfg, fs: storage.NewCrashFS(seed), addr: ln.Addr().String()}
	cb.cfg.FS = cb.fs
	cb.serve(ln)
	t.Cleanup(func() {
		cb.srv.Close()
		cb.b.Close()
	})
	return cb
}

func (cb *crashBroker) serve(ln net.Listener) {
	cb.t.Helper()
	b, err := broker.New(cb.cfg)
	if err != nil {
		ln.Close()
		cb.t.Fatalf("broker.New: %v", err)
	}
	cb.b, cb.srv = b, wire.NewServer(b, wire.DefaultLimits(), cb.cfg.Logger)
	go cb.srv.Serve(ln)
}

// powerCut drops everything not fsynced, then boots a new broker on what
// is left.
func (cb *crashBroker) powerCut() {
	cb.t.Helper()
	cb.fs.Crash()
	cb.srv.Close()
	cb.b.Close() // fails on the dead handles: nothing more reaches the disk
	var ln net.Listener
	var err error
	testwait.Poll(5*time.Second, func() bool { ln, err = net.Listen("tcp", cb.addr); return err == nil })
	if err != nil {
		cb.t.Fatal(err)
	}
	cb.serve(ln)
}

func (cb *crashBroker) client(opts ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cb.addr)}, opts...)...)
	if err != nil {
		cb.t.Fatal(err)
	}
	cb.t.Cleanup(cl.Close)
	return cl
}

func (cb *crashBroker) values(topic string, readCommitted bool, want int) []string {
	cb.t.Helper()
	iso := kgo.ReadUncommitted()
	if readCommitted {
		iso = kgo.ReadCommitted()
	}
	cl := cb.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(iso))
	ctx := testCtx(cb.t)
	var out []string
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			cb.t.Fatalf("%s: got %v, want %d records", topic, out, want)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	return out
}

// TestTxnPowerCut: after a power cut, a committed transaction is there, an
// aborted one never becomes visible, and an open one (its records acked)
// is aborted by the timeout rather than left hanging or half-visible.
func TestTxnPowerCut(t *testing.T) {
	cb := startCrashBroker(t, 5)
	ctx := testCtx(t)
	adm := kadm.NewClient(cb.client())
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "cut"); err != nil {
		t.Fatal(err)
	}
	p := cb.client(kgo.TransactionalID("cut-id"), kgo.DefaultProduceTopic("cut"), kgo.TransactionTimeout(time.Second))
	produceTxn(t, p, true, recs("cut", "commit-", 3)...)
	produceTxn(t, p, false, recs("cut", "abort-", 2)...)
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, recs("cut", "open-", 2)...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cb.powerCut()

	// Everything acknowledged survived (read_uncommitted sees all 7).
	if got := cb.values("cut", false, 7); len(got) != 7 {
		t.Fatalf("read_uncommitted after the cut: %v", got)
	}
	// The open transaction times out and is aborted; after it, a plain
	// record shows read_committed has moved past everything.
	plain := cb.client(kgo.DefaultProduceTopic("cut"))
	if err := plain.ProduceSync(ctx, &kgo.Record{Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := cb.values("cut", true, 4)
	if fmt.Sprint(got) != "[commit-0 commit-1 commit-2 after]" {
		t.Fatalf("read_committed after the cut: %v", got)
	}
}

// TestTxnAddPartitionsV4: the KIP-890 broker form, batched adds and
// verify-only checks.
func TestTxnAddPartitionsV4(t *testing.T) {
	n := txnNode(t)
	n.CreateTopic("v4", 2, nil)
	cl := n.Client()
	ctx := testCtx(t)
	type producer struct {
		id    string
		pid   int64
		epoch int16
	}
	var ps []producer
	for _, id := range []string{"v4-a", "v4-b"} {
		init := kmsg.NewPtrInitProducerIDRequest()
		init.TransactionalID, init.TransactionTimeoutMillis = &id, 10000
		resp, err := init.RequestWith(ctx, cl)
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("init %s: %v %v", id, err, kerr.ErrorForCode(resp.ErrorCode))
		}
		ps = append(ps, producer{id, resp.ProducerID, resp.ProducerEpoch})
	}
	txnReq := func(p producer, verify bool, parts ...int32) kmsg.AddPartitionsToTxnRequestTransaction {
		tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
		tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, tx.VerifyOnly = p.id, p.pid, p.epoch, verify
		tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
		tt.Topic, tt.Partitions = "v4", parts
		tx.Topics = append(tx.Topics, tt)
		return tx
	}
	send := func(txs ...kmsg.AddPartitionsToTxnRequestTransaction) map[string]map[int32]int16 {
		t.Helper()
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.Transactions = txs
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Version < 4 {
			t.Fatalf("sent as v%d", resp.Version)
		}
		out := map[string]map[int32]int16{}
		for _, tx := range resp.Transactions {
			out[tx.TransactionalID] = map[int32]int16{}
			for _, tt := range tx.Topics {
				for _, p := range tt.Partitions {
					out[tx.TransactionalID][p.Partition] = p.ErrorCode
				}
			}
		}
		return out
	}
	if got := send(txnReq(ps[0], false, 0), txnReq(ps[1], false, 1)); got["v4-a"][0] != 0 || got["v4-b"][1] != 0 {
		t.Fatalf("batched add: %v", got)
	}
	stale := ps[1]
	stale.epoch--
	got := send(txnReq(ps[0], true, 0, 1), txnReq(stale, true, 1))
	if got["v4-a"][0] != 0 || got["v4-a"][1] != kerr.InvalidTxnState.Code || got["v4-b"][1] != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("verify only: %v", got)
	}
	// Verify-only added nothing: v4-a may write to partition 0, not 1.
	for part, want := range map[int32]int16{0: 0, 1: kerr.InvalidTxnState.Code} {
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 10_000
		req.TransactionID = &ps[0].id
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "v4"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = part, txnBatch(t, ps[0].pid, ps[0].epoch, 0, 1)
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := cl.Request(ctx, brokertest.Pin(req, 11)) // verification, not v12's implicit add
		if err != nil {
			t.Fatal(err)
		}
		resp := kresp.(*kmsg.ProduceResponse)
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != want {
			t.Fatalf("produce to partition %d: %v, want %v", part, kerr.ErrorForCode(code), kerr.ErrorForCode(want))
		}
	}
}

// TestPowerCutAfterFirstStart: a power cut right after a new node started
// (nothing done since but what the start itself wrote: its identity, Raft
// journal and metadata log, each in a directory it made) leaves a node that
// starts again as the same cluster and takes topics. The directories' own
// names must have been fsynced into their parents: the metadata log's
// directory lost under a Raft journal that remembers its entries, or a data
// directory lost altogether, is a node that does not come back as itself.
func TestPowerCutAfterFirstStart(t *testing.T) {
	cb := startCrashBroker(t, 11)
	ctx := testCtx(t)
	adm := kadm.NewClient(cb.client())
	md, err := adm.Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := md.Cluster

	cb.powerCut()

	adm = kadm.NewClient(cb.client())
	if md, err = adm.Metadata(ctx); err != nil {
		t.Fatal(err)
	}
	if md.Cluster != before {
		t.Fatalf("cluster id %q after the power cut, was %q", md.Cluster, before)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "after"); err != nil {
		t.Fatal(err)
	}
	p := cb.client(kgo.DefaultProduceTopic("after"))
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if got := cb.values("after", false, 1); len(got) != 1 {
		t.Fatalf("after the cut: %v", got)
	}
}
