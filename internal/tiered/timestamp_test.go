package tiered_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/brokertest"
)

// TestTieredListOffsetsRemote: ListOffsets by a timestamp whose records
// the local tier deleted answers from the remote log (the segment the
// manifest names by its largest timestamp, the batch its .index's time
// index names), as Kafka searches the remote log first; before, only the
// local log was searched and the answer was the local log's first batch.
// And -6 (KIP-1023, v11): the offset after the remote log on a tiered
// topic, the log start when nothing was uploaded, -1 on a topic that is
// not tiered, UNSUPPORTED_VERSION below v11.
func TestTieredListOffsetsRemote(t *testing.T) {
	s := startObjectStore(t)
	n := brokertest.Start(t, withTiered(s))
	const topic, records, perBatch = "tiered-time", 1000, 20
	n.CreateTopic(topic, 1, tieredTopic())
	base := time.Now().Add(-2 * time.Hour).UnixMilli()
	at := func(i int) int64 { return base + int64(i)*1000 }
	cl := n.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < records; {
		var batch []*kgo.Record
		for ; len(batch) < perBatch; i++ {
			batch = append(batch, &kgo.Record{Topic: topic, Timestamp: time.UnixMilli(at(i)), Value: fmt.Appendf(nil, "record-%06d-%s", i, strings.Repeat("x", 60))})
		}
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	passes := n.B.TieredStats().Passes.Load()
	brokertest.Await(t, "every closed segment uploaded and deleted locally", func() error {
		if st := n.B.TieredStats(); st.Passes.Load() < passes+2 || st.CopyLagSegments.Load() > 0 {
			return fmt.Errorf("%d segments not uploaded yet", st.CopyLagSegments.Load())
		}
		if local := listOffset(t, n, topic, -4); local < records/2 {
			return fmt.Errorf("local log start %d", local)
		}
		return nil
	})
	local := listOffset(t, n, topic, -4)

	for _, k := range []int{0, 1, 130, int(local) - 1, int(local), records - 1} {
		off, ts, err := offsetForTime(n, topic, at(k), 11)
		if err != nil {
			t.Fatalf("timestamp of record %d: %v", k, err)
		}
		// The batch holding record k (batch-level, as the local log
		// answers): its base offset, its largest timestamp.
		if off > int64(k) || off <= int64(k-perBatch) || ts < at(k) || ts > at(k+perBatch-1) {
			t.Fatalf("timestamp of record %d (local log start %d): offset %d timestamp %d, want the batch holding it", k, local, off, ts)
		}
	}
	if off, _, err := offsetForTime(n, topic, at(0)-1, 11); err != nil || off != 0 {
		t.Fatalf("a timestamp before every record: offset %d, %v; want 0", off, err)
	}
	if off, _, err := offsetForTime(n, topic, at(records), 11); err != nil || off != -1 {
		t.Fatalf("a timestamp after every record: offset %d, %v; want -1", off, err)
	}

	// -6: the offset after the remote log.
	tieredEnd := listOffset(t, n, topic, -5) + 1
	if off, _, err := offsetForTime(n, topic, -6, 11); err != nil || off != tieredEnd {
		t.Fatalf("earliest pending upload: %d, %v; want %d (after the remote log)", off, err, tieredEnd)
	}
	if _, _, err := offsetForTime(n, topic, -6, 10); !errors.Is(err, kerr.UnsupportedVersion) {
		t.Fatalf("-6 in v10: %v, want UNSUPPORTED_VERSION", err)
	}
	n.CreateTopic("tiered-empty", 1, tieredTopic())
	if off, _, err := offsetForTime(n, "tiered-empty", -6, 11); err != nil || off != 0 {
		t.Fatalf("earliest pending upload with nothing uploaded: %d, %v; want 0 (the log start)", off, err)
	}
	n.CreateTopic("plain", 1, nil)
	if off, _, err := offsetForTime(n, "plain", -6, 11); err != nil || off != -1 {
		t.Fatalf("earliest pending upload of a topic that is not tiered: %d, %v; want -1", off, err)
	}
}

// offsetForTime is ListOffsets of partition 0 for ts at version v.
func offsetForTime(n *brokertest.Node, topic string, ts int64, v int16) (offset, timestamp int64, err error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, ts, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := n.Request(brokertest.Pin(req, v))
	if err != nil {
		return 0, 0, err
	}
	p := resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	return p.Offset, p.Timestamp, kerr.ErrorForCode(p.ErrorCode)
}
