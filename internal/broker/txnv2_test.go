package broker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/brokertest"
)

// finalizedTxnVersion reads transaction.version from ApiVersions (0 when
// not listed, as Kafka omits level 0).
func finalizedTxnVersion(t *testing.T, n *brokertest.Node) int16 {
	t.Helper()
	kresp, err := n.Request(kmsg.NewPtrApiVersionsRequest())
	mustNil(t, "ApiVersions", err)
	for _, f := range kresp.(*kmsg.ApiVersionsResponse).FinalizedFeatures {
		if f.Name == "transaction.version" {
			return f.MaxVersionLevel
		}
	}
	return 0
}

// setFeature finalizes one feature with UpdateFeatures v1 and returns the
// per-feature code and message.
func setFeature(t *testing.T, n *brokertest.Node, name string, level int16, typ int8) (int16, string) {
	t.Helper()
	return setFeatureAt(t, n, name, level, typ, 2)
}

// setFeatureAt is setFeature with UpdateFeatures at most at version max:
// v2 answers without per-feature results (the failure is top-level), v1
// with one result per feature.
func setFeatureAt(t *testing.T, n *brokertest.Node, name string, level int16, typ int8, max int16) (int16, string) {
	t.Helper()
	req := kmsg.NewPtrUpdateFeaturesRequest()
	req.TimeoutMillis = 10_000
	u := kmsg.NewUpdateFeaturesRequestFeatureUpdate()
	u.Feature, u.MaxVersionLevel, u.UpgradeType = name, level, typ
	req.FeatureUpdates = append(req.FeatureUpdates, u)
	kresp, err := n.Request(brokertest.Pin(req, max))
	mustNil(t, "UpdateFeatures", err)
	resp := kresp.(*kmsg.UpdateFeaturesResponse)
	if resp.ErrorCode != 0 {
		return resp.ErrorCode, *resp.ErrorMessage
	}
	if max >= 2 {
		if len(resp.Results) != 0 {
			t.Fatalf("UpdateFeatures v2 answered per-feature results %+v", resp.Results)
		}
		return 0, ""
	}
	if len(resp.Results) != 1 {
		t.Fatalf("UpdateFeatures v%d answered %d results for one feature", max, len(resp.Results))
	}
	r := resp.Results[0]
	msg := ""
	if r.ErrorMessage != nil {
		msg = *r.ErrorMessage
	}
	return r.ErrorCode, msg
}

// TestUpdateFeatures: transaction.version is finalized at 2 by default;
// UpdateFeatures refuses what Kafka refuses (unknown feature, a level out
// of the supported range, a downgrade without a downgrade type) with
// INVALID_UPDATE_VERSION, finalizes what it may through the metadata log,
// and the level survives a restart.
func TestUpdateFeatures(t *testing.T) {
	n := txnNode(t)
	if v := finalizedTxnVersion(t, n); v != 2 {
		t.Fatalf("default transaction.version %d, want 2", v)
	}
	for _, c := range []struct {
		name  string
		level int16
		typ   int8
		want  string
	}{
		{"no.such.feature", 1, 1, "does not support the given feature"},
		{"transaction.version", 3, 1, "only supports versions 0-2"},
		{"metadata.version", 8, 1, "only supports versions 7-7"},
		{"group.version", 2, 1, "only supports versions 0-1"},
		{"transaction.version", -1, 1, "cannot be less than 0"},
		{"transaction.version", 1, 1, "Can't downgrade the version of this feature without setting the upgrade type"},
		{"transaction.version", 1, 9, "does not support the given upgrade type"},
	} {
		for _, v := range []int16{1, 2} { // per-feature result (v1), top-level (v2)
			code, msg := setFeatureAt(t, n, c.name, c.level, c.typ, v)
			if code != kerr.InvalidUpdateVersion.Code || !strings.Contains(msg, c.want) {
				t.Fatalf("v%d %s=%d type %d: %v %q, want INVALID_UPDATE_VERSION %q", v, c.name, c.level, c.typ, kerr.ErrorForCode(code), msg, c.want)
			}
		}
	}
	if v := finalizedTxnVersion(t, n); v != 2 {
		t.Fatalf("transaction.version %d after refused updates", v)
	}
	if code, msg := setFeatureAt(t, n, "transaction.version", 0, 2, 1); code != 0 {
		t.Fatalf("safe downgrade to 0: %v %s", kerr.ErrorForCode(code), msg)
	}
	if v := finalizedTxnVersion(t, n); v != 0 {
		t.Fatalf("transaction.version %d after the downgrade, want 0 (not listed)", v)
	}
	n.Restart()
	if v := finalizedTxnVersion(t, n); v != 0 {
		t.Fatalf("transaction.version %d after a restart, want 0: the level is in the metadata log", v)
	}
	if code, msg := setFeature(t, n, "transaction.version", 2, 1); code != 0 {
		t.Fatalf("upgrade to 2: %v %s", kerr.ErrorForCode(code), msg)
	}
	if v := finalizedTxnVersion(t, n); v != 2 {
		t.Fatalf("transaction.version %d after the upgrade", v)
	}
	// group.version 0 turns KIP-848 off, as Kafka.
	if code, msg := setFeature(t, n, "group.version", 0, 2); code != 0 {
		t.Fatalf("group.version 0: %v %s", kerr.ErrorForCode(code), msg)
	}
	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Group, hb.MemberID, hb.MemberEpoch, hb.RebalanceTimeoutMillis = "g848", "m1", 0, 30000
	hb.SubscribedTopicNames = []string{"x"}
	kresp, err := n.Request(hb)
	mustNil(t, "ConsumerGroupHeartbeat", err)
	if code := kresp.(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode; code != kerr.UnsupportedVersion.Code {
		t.Fatalf("heartbeat with group.version 0: %v", kerr.ErrorForCode(code))
	}
}

// TestTxnV2FranzGo: with transaction.version 2 finalized, franz-go runs
// KIP-890 part 2 (no AddPartitionsToTxn, EndTxn v5): every commit and
// abort moves the producer epoch on, read_committed sees exactly the
// committed records, and the consume-transform-produce session commits
// its offsets through TxnOffsetCommit v5. With the feature at 0 the same
// client falls back to the old flow and the epoch stays put.
func TestTxnV2FranzGo(t *testing.T) {
	n := txnNode(t)
	n.CreateTopic("v2", 2, nil)
	cl := txnProducer(t, n, "v2-producer", kgo.DefaultProduceTopic("v2"))
	var epochs []int16
	var want []string
	for i := range 4 {
		commit := i != 2
		var recs []*kgo.Record
		for j := range 3 {
			v := fmt.Sprintf("t%d-%d", i, j)
			recs = append(recs, &kgo.Record{Value: []byte(v), Partition: int32(j % 2)})
			if commit {
				want = append(want, v)
			}
		}
		produceTxn(t, cl, commit, recs...)
		epochs = append(epochs, describeTxn(t, n, "v2-producer").ProducerEpoch)
	}
	// franz-go decides at BeginTransaction from the ApiVersions it has
	// seen; its first transaction may run the old flow, after which it
	// notices transaction.version 2 and opts in (a producer id reload).
	for i := 2; i < len(epochs); i++ {
		if epochs[i] != epochs[i-1]+1 {
			t.Fatalf("epochs after each transaction %v: KIP-890 part 2 bumps it by one per EndTxn", epochs)
		}
	}
	got := consumeAll(t, n, "v2", len(want), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	seen := map[string]int{}
	for _, r := range got {
		seen[string(r.Value)]++
	}
	for _, v := range want {
		if seen[v] != 1 {
			t.Fatalf("committed record %s seen %d times (all: %v)", v, seen[v], seen)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("read_committed got %d records, want %d", len(got), len(want))
	}

	// The old flow: transaction.version 0, a new client.
	if code, msg := setFeature(t, n, "transaction.version", 0, 2); code != 0 {
		t.Fatalf("downgrade: %v %s", kerr.ErrorForCode(code), msg)
	}
	old := txnProducer(t, n, "v1-producer", kgo.DefaultProduceTopic("v2"))
	produceTxn(t, old, true, &kgo.Record{Value: []byte("old-1")})
	e1 := describeTxn(t, n, "v1-producer").ProducerEpoch
	produceTxn(t, old, false, &kgo.Record{Value: []byte("old-2")})
	produceTxn(t, old, true, &kgo.Record{Value: []byte("old-3")})
	if e2 := describeTxn(t, n, "v1-producer").ProducerEpoch; e2 != e1 {
		t.Fatalf("epoch %d -> %d under transaction.version 0: only InitProducerId moves it", e1, e2)
	}
}

// TestTxnV2LateProduceFenced is the hole KIP-890 part 2 closes: a batch of
// a finished transaction arriving late (a retry stuck in the network, a
// zombie) must not land, neither on a partition of that transaction nor,
// by implicitly adding a new partition, as the start of another one. EndTxn
// v5 bumps the epoch and the markers carry it, so the late batch of the
// old epoch is INVALID_PRODUCER_EPOCH everywhere and nothing is written; a
// retried EndTxn of the old epoch gets the same answer.
func TestTxnV2LateProduceFenced(t *testing.T) {
	n := txnNode(t)
	n.CreateTopic("late", 2, nil)
	const id = "late-txn"
	brokertest.Await(t, "the transaction coordinator", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return n.Admin().FindTxnCoordinators(ctx, id).Error()
	})
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID = kmsg.StringPtr(id)
	init.TransactionTimeoutMillis = 60_000
	init.ProducerID, init.ProducerEpoch = -1, -1
	var ir *kmsg.InitProducerIDResponse
	brokertest.Await(t, "InitProducerId", func() error {
		kresp, err := n.Request(init)
		if err != nil {
			return err
		}
		ir = kresp.(*kmsg.InitProducerIDResponse)
		return kerr.ErrorForCode(ir.ErrorCode)
	})
	pid, epoch := ir.ProducerID, ir.ProducerEpoch
	produce := func(version int16, p int32, e int16, seq int32) int16 {
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis, req.TransactionID = -1, 10_000, kmsg.StringPtr(id)
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "late"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = p, txnBatch(t, pid, e, seq, 2)
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := n.Request(brokertest.Pin(req, version))
		mustNil(t, "produce", err)
		return kresp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
	}
	endTxn := func(e int16, commit bool) *kmsg.EndTxnResponse {
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = id, pid, e, commit
		kresp, err := n.Request(req)
		mustNil(t, "EndTxn", err)
		return kresp.(*kmsg.EndTxnResponse)
	}
	// Produce v12 adds partition 0 itself: no AddPartitionsToTxn.
	if code := produce(12, 0, epoch, 0); code != 0 {
		t.Fatalf("produce v12 with an implicit add: %v", kerr.ErrorForCode(code))
	}
	er := endTxn(epoch, true)
	if er.Version < 5 || er.ErrorCode != 0 || er.ProducerID != pid || er.ProducerEpoch != epoch+1 {
		t.Fatalf("EndTxn v%d: %v id %d epoch %d, want id %d epoch %d", er.Version, kerr.ErrorForCode(er.ErrorCode), er.ProducerID, er.ProducerEpoch, pid, epoch+1)
	}
	// The retry of that EndTxn (its answer lost) names the old epoch.
	if r := endTxn(epoch, true); r.ErrorCode != 0 || r.ProducerEpoch != epoch+1 {
		t.Fatalf("retried EndTxn: %v epoch %d", kerr.ErrorForCode(r.ErrorCode), r.ProducerEpoch)
	}
	// The late batches of the old epoch: the next sequence on the
	// transaction's partition, and a partition it never had.
	if code := produce(12, 0, epoch, 2); code != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("late batch on the transaction's partition: %v, want INVALID_PRODUCER_EPOCH", kerr.ErrorForCode(code))
	}
	if code := produce(12, 1, epoch, 0); code != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("late batch implicitly adding a new partition: %v, want INVALID_PRODUCER_EPOCH", kerr.ErrorForCode(code))
	}
	if end := endOffset(t, n, "late", 1); end != 0 {
		t.Fatalf("partition 1 end offset %d: the late batch was written", end)
	}
	if r := endTxn(epoch, false); r.ErrorCode != kerr.ProducerFenced.Code {
		t.Fatalf("abort with the old epoch after the commit: %v, want PRODUCER_FENCED", kerr.ErrorForCode(r.ErrorCode))
	}
	// The next transaction, at the new epoch, starts its sequences at 0;
	// an abort with nothing produced is allowed and bumps again.
	next := epoch + 1
	if code := produce(12, 1, next, 0); code != 0 {
		t.Fatalf("next transaction's batch: %v", kerr.ErrorForCode(code))
	}
	if r := endTxn(next, false); r.ErrorCode != 0 || r.ProducerEpoch != next+1 {
		t.Fatalf("abort: %v epoch %d", kerr.ErrorForCode(r.ErrorCode), r.ProducerEpoch)
	}
	if r := endTxn(next+1, false); r.ErrorCode != 0 || r.ProducerEpoch != next+2 {
		t.Fatalf("empty abort: %v epoch %d", kerr.ErrorForCode(r.ErrorCode), r.ProducerEpoch)
	}
	if r := endTxn(next+2, true); r.ErrorCode != kerr.InvalidTxnState.Code {
		t.Fatalf("empty commit: %v, want INVALID_TXN_STATE", kerr.ErrorForCode(r.ErrorCode))
	}
	// read_committed: the one committed batch (2 records), nothing else.
	// Polled until the 2 came (a loaded machine may take seconds to the
	// first fetch), then a while longer for anything that should not come.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := n.Client(kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"late": {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart()}}))
	more := 0
	var after time.Time
	for ctx.Err() == nil && (after.IsZero() || time.Now().Before(after)) {
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		pcancel()
		for _, r := range fs.Records() {
			if r.Partition != 0 {
				t.Fatalf("read_committed shows a record of partition %d: %+v", r.Partition, r)
			}
			more++
		}
		if more >= 2 && after.IsZero() {
			after = time.Now().Add(time.Second)
		}
	}
	if more != 2 {
		t.Fatalf("read_committed %d records, want the committed 2", more)
	}
}
