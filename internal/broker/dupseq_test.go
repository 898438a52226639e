package broker_test

import (
	"bytes"
	"context"
	"fmt"
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
// a real client. A wiped cluster node once handed out a producer id again
// (ids now come from blocks in the metadata log, so that cannot happen):
// the new franz-go producer's first sequences lay below the batches of the
// earlier producer of that id still cached on the partition. Answered
// DUPLICATE_SEQUENCE_NUMBER, the client counted its records as written
// though none was stored. Answered OUT_OF_ORDER_SEQUENCE_NUMBER, the client
// takes a new producer id and writes them: every record it was told is
// stored is in the log, at the offset the ack named. The earlier producer
// is played here by raw batches under the id the broker hands out next.
func TestReusedProducerIDLosesNoRecord(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("reuse", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	probe := n.Client()
	firstID, _, err := probe.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reused := firstID + 1 // the next id of this broker's block
	for b := range 10 {   // ten batches of ten records: the cache keeps sequences 50..99
		batch := rawBatch(t, reused, 0, int32(b*10), 10, records.CodecNone)
		if p := produceRaw(t, probe, "reuse", batch); p.ErrorCode != 0 {
			t.Fatal(kerr.ErrorForCode(p.ErrorCode))
		}
	}

	second := n.Client(kgo.DefaultProduceTopic("reuse"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	secondID, _, err := second.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if secondID != reused {
		t.Fatalf("the second producer got id %d, not %d: the test needs the reuse to mean anything", secondID, reused)
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
