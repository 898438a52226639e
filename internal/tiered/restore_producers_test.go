package tiered_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/brokertest"
	"holdfast/internal/records"
)

// TestTieredRestoreKeepsProducerState: an idempotent producer writes a
// tiered topic; every disk is lost and the topic restored from the
// object store. The producer state uploaded with the last segment comes
// back with it: DescribeProducers knows the producer and its last
// sequence, a retry of the last uploaded batch is answered with its
// original offsets (not written twice), the next sequence after the
// restored records is accepted, and a sequence past the lost records is
// refused (OUT_OF_ORDER_SEQUENCE_NUMBER: the restore lost records the
// producer was told are stored). Before the producer snapshot was
// uploaded, the retry answered UNKNOWN_PRODUCER_ID.
func TestTieredRestoreKeepsProducerState(t *testing.T) {
	s := startObjectStore(t)
	const topic, perBatch, batches = "restored-producers", 20, 30
	n := brokertest.Start(t, withTiered(s))
	n.CreateTopic(topic, 1, tieredTopic())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	init := kmsg.NewPtrInitProducerIDRequest()
	init.ProducerID, init.ProducerEpoch = -1, -1
	ir, err := init.RequestWith(ctx, n.Client())
	if err == nil {
		err = kerr.ErrorForCode(ir.ErrorCode)
	}
	if err != nil {
		t.Fatal(err)
	}
	pid, epoch := ir.ProducerID, ir.ProducerEpoch
	// batch i holds records [i*perBatch, (i+1)*perBatch), sequence = offset.
	// A retry sends the same bytes (a client retries the batch it built).
	sent := map[int][]byte{}
	batch := func(first int) []byte {
		if b, ok := sent[first]; ok {
			return b
		}
		var recs []records.Record
		for j := first; j < first+perBatch; j++ {
			recs = append(recs, records.Record{Timestamp: time.Now().UnixMilli(), Value: fmt.Appendf(nil, "record-%06d-%s", j, strings.Repeat("x", 60))})
		}
		b, err := records.Build(records.Batch{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: int32(first)}, recs)
		if err != nil {
			t.Fatal(err)
		}
		sent[first] = b
		return b
	}
	produceAt := func(n *brokertest.Node, first int) (int64, error) {
		code, base, err := n.Produce(topic, 0, -1, 10*time.Second, batch(first))
		if err == nil {
			err = kerr.ErrorForCode(code)
		}
		return base, err
	}
	for i := 0; i < batches; i++ {
		if base, err := produceAt(n, i*perBatch); err != nil || base != int64(i*perBatch) {
			t.Fatalf("batch %d: offset %d, %v", i, base, err)
		}
	}
	passes := n.B.TieredStats().Passes.Load()
	brokertest.Await(t, "every closed segment uploaded", func() error {
		if st := n.B.TieredStats(); st.Passes.Load() < passes+2 || st.CopyLagSegments.Load() > 0 {
			return fmt.Errorf("%d segments not uploaded yet", st.CopyLagSegments.Load())
		}
		return nil
	})
	uploaded := int(partOffset(t, n, topic, 0, -5) + 1)
	if uploaded <= 0 || uploaded >= batches*perBatch || uploaded%perBatch != 0 {
		t.Fatalf("%d records uploaded of %d", uploaded, batches*perBatch)
	}
	n.Stop()
	if err := os.RemoveAll(n.Cfg.DataDir); err != nil {
		t.Fatal(err)
	}

	fresh := brokertest.Start(t, withTiered(s))
	configs := tieredTopic()
	configs["remote.storage.restore.from"] = strp(topic)
	fresh.CreateTopic(topic, -1, configs)
	brokertest.Await(t, "the restored manifest to commit", func() error {
		if e, err := partOffsetErr(fresh, topic, 0, -2); err != nil || e != 0 {
			return fmt.Errorf("earliest offset %d (%v)", e, err)
		}
		return nil
	})

	dp := kmsg.NewPtrDescribeProducersRequest()
	dt := kmsg.NewDescribeProducersRequestTopic()
	dt.Topic, dt.Partitions = topic, []int32{0}
	dp.Topics = append(dp.Topics, dt)
	dr, err := dp.RequestWith(ctx, fresh.Client())
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, ps := range dr.Topics[0].Partitions[0].ActiveProducers {
		if ps.ProducerID == pid {
			found = true
			if ps.ProducerEpoch != int32(epoch) || ps.LastSequence != int32(uploaded-1) {
				t.Fatalf("restored producer %d: epoch %d last sequence %d, want %d and %d", pid, ps.ProducerEpoch, ps.LastSequence, epoch, uploaded-1)
			}
		}
	}
	if !found {
		t.Fatalf("the restored partition does not know producer %d: %+v", pid, dr.Topics[0].Partitions[0])
	}

	// A batch with the last uploaded batch's sequences but other contents
	// (a producer of the new cluster given the same id) is no retry.
	last := uploaded - perBatch
	other := sent[last]
	delete(sent, last)
	if _, err := produceAt(fresh, last); err != kerr.OutOfOrderSequenceNumber {
		t.Fatalf("other contents with the sequences of the batch at %d: %v, want OUT_OF_ORDER_SEQUENCE_NUMBER", last, err)
	}
	sent[last] = other
	// A retry of the last uploaded batch: its original offsets, no copy.
	if base, err := produceAt(fresh, last); err != nil || base != int64(last) {
		t.Fatalf("retry of the batch at %d after the restore: offset %d, %v; want its original offset", last, base, err)
	}
	if end := partOffset(t, fresh, topic, 0, -1); end != int64(uploaded) {
		t.Fatalf("the retry was written again: log end %d, want %d", end, uploaded)
	}
	// A batch past the lost records is out of sequence; the next one
	// after the restored records goes on.
	if _, err := produceAt(fresh, batches*perBatch); err != kerr.OutOfOrderSequenceNumber {
		t.Fatalf("a batch after the lost records: %v, want OUT_OF_ORDER_SEQUENCE_NUMBER", err)
	}
	if base, err := produceAt(fresh, uploaded); err != nil || base != int64(uploaded) {
		t.Fatalf("the next batch in sequence: offset %d, %v; want %d", base, err, uploaded)
	}
	consumePart(t, fresh, topic, 0, 0, uploaded+perBatch)
}
