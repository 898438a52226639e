package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/brokertest"
	"holdfast/internal/records"
)

// TestSequenceBelowCacheIsNotASuccess: a batch whose sequence lies below
// the producer's cached batches is OUT_OF_ORDER_SEQUENCE_NUMBER, not
// DUPLICATE_SEQUENCE_NUMBER (raw protocol); a retry of a cached batch still
// gets its original offsets.
func TestSequenceBelowCacheIsNotASuccess(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("below", 1, nil)
	cl := n.Client()
	pid, epoch := initProducerID(t, cl, -1, -1)
	var last []byte
	for i := range 8 { // sequences 0..15 in batches of 2; the cache keeps 6..15
		last = rawBatch(t, pid, epoch, int32(2*i), 2, records.CodecNone)
		if p := produceRaw(t, cl, "below", bytes.Clone(last)); p.ErrorCode != 0 {
			t.Fatal(kerr.ErrorForCode(p.ErrorCode))
		}
	}
	if p := produceRaw(t, cl, "below", bytes.Clone(last)); p.ErrorCode != 0 || p.BaseOffset != 14 {
		t.Fatalf("retry of the newest batch: code %d base %d, want its original offset 14", p.ErrorCode, p.BaseOffset)
	}
	for _, seq := range []int32{0, 2, 4} {
		p := produceRaw(t, cl, "below", rawBatch(t, pid, epoch, seq, 2, records.CodecNone))
		if p.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
			t.Fatalf("sequence %d below the cache: %v (base %d), want OUT_OF_ORDER_SEQUENCE_NUMBER", seq, kerr.ErrorForCode(p.ErrorCode), p.BaseOffset)
		}
	}
	if end := endOffset(t, n, "below", 0); end != 16 {
		t.Fatalf("end offset %d, want 16", end)
	}
}

// TestReusedProducerIDLosesNoRecord reproduces issue 10's silent loss with
// a real client. The broker forgets its producer id counter (as a wiped
// cluster node did), so a new franz-go producer gets the id of an earlier
// one whose batches are still cached on the partition. Its first batch's
// sequences lie below that cache: answered DUPLICATE_SEQUENCE_NUMBER, the
// client counted the records as written though none was stored. Answered
// OUT_OF_ORDER_SEQUENCE_NUMBER, the client takes a new producer id and
// writes them: every record it was told is stored is in the log, at the
// offset the ack named.
func TestReusedProducerIDLosesNoRecord(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("reuse", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	first := n.Client(kgo.DefaultProduceTopic("reuse"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	firstID, _, err := first.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for b := range 10 { // ten batches of ten records: the cache keeps sequences 50..99
		recs := make([]*kgo.Record, 10)
		for i := range recs {
			recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "first-%d", b*10+i)}
		}
		if err := first.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	first.Close()

	n.Stop()
	if err := os.Remove(filepath.Join(n.Cfg.DataDir, "producer-ids")); err != nil {
		t.Fatal(err)
	}
	n.Start()

	second := n.Client(kgo.DefaultProduceTopic("reuse"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	secondID, _, err := second.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if secondID != firstID {
		t.Fatalf("the second producer got id %d, not the reused %d: the test needs the reuse to mean anything", secondID, firstID)
	}
	recs := make([]*kgo.Record, 30)
	for i := range recs {
		recs[i] = &kgo.Record{Value: fmt.Appendf(nil, "second-%d", i)}
	}
	res := second.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	stored := map[int64]string{}
	cons := n.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"reuse": {0: kgo.NewOffset().AtStart()}}))
	for len(stored) < 130 && ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { stored[r.Offset] = string(r.Value) })
	}
	for _, r := range res {
		if got, ok := stored[r.Record.Offset]; !ok || got != string(r.Record.Value) {
			t.Fatalf("acknowledged %q at offset %d, but the log has %q there (present %v): an ack for a record never stored",
				r.Record.Value, r.Record.Offset, got, ok)
		}
	}
	if len(stored) != 130 {
		t.Fatalf("%d records in the log, want 130", len(stored))
	}
}
