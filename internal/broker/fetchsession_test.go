package broker_test

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/brokertest"
	"holdfast/internal/records"
)

// TestFetchSessionProtocol walks KIP-227 by hand: a full fetch opens a
// session; an incremental fetch with nothing new returns no partitions;
// one partition's new records return that partition only; a forgotten
// partition is not returned; a wrong epoch, an unknown session and a
// closed one are refused with Kafka's codes.
func TestFetchSessionProtocol(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("fs", 3, nil)
	cl := n.Client()
	md, err := n.Metadata("fs")
	if err != nil {
		t.Fatal(err)
	}
	id := md.Topics[0].TopicID
	for p := range int32(3) {
		rt := produceRawTo(t, cl, "fs", p, rawBatch(t, -1, -1, -1, 2, records.CodecNone))
		if rt.ErrorCode != 0 {
			t.Fatalf("produce to %d: %v", p, kerr.ErrorForCode(rt.ErrorCode))
		}
	}
	fetch := func(sid, epoch int32, offsets map[int32]int64, forget []int32) *kmsg.FetchResponse {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MaxBytes, req.SessionID, req.SessionEpoch = 0, 1<<20, sid, epoch
		if len(offsets) > 0 {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = "fs", id
			for p := range int32(3) {
				if off, ok := offsets[p]; ok {
					rp := kmsg.NewFetchRequestTopicPartition()
					rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, off, 1<<20
					rt.Partitions = append(rt.Partitions, rp)
				}
			}
			req.Topics = append(req.Topics, rt)
		}
		if len(forget) > 0 {
			ft := kmsg.NewFetchRequestForgottenTopic()
			ft.Topic, ft.TopicID, ft.Partitions = "fs", id, forget
			req.ForgottenTopics = append(req.ForgottenTopics, ft)
		}
		resp, err := req.RequestWith(testCtx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Version < 13 {
			t.Fatalf("fetch v%d", resp.Version)
		}
		return resp
	}
	parts := func(resp *kmsg.FetchResponse) map[int32]int {
		out := map[int32]int{}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				out[rp.Partition] = len(rp.RecordBatches)
			}
		}
		return out
	}

	full := fetch(0, 0, map[int32]int64{0: 0, 1: 0, 2: 0}, nil)
	if full.ErrorCode != 0 || full.SessionID == 0 || len(parts(full)) != 3 {
		t.Fatalf("full fetch: code %d session %d partitions %v", full.ErrorCode, full.SessionID, parts(full))
	}
	sid := full.SessionID
	if got := n.B.FetchSessions(); got != 1 {
		t.Fatalf("%d sessions cached, want 1", got)
	}
	// The client moves to the end of what it read: nothing is new.
	inc := fetch(sid, 1, map[int32]int64{0: 2, 1: 2, 2: 2}, nil)
	if inc.ErrorCode != 0 || inc.SessionID != sid {
		t.Fatalf("incremental: code %d session %d", inc.ErrorCode, inc.SessionID)
	}
	// Partitions whose offsets moved but that have nothing new: their
	// high watermark is unchanged, so none is returned.
	if got := parts(inc); len(got) != 0 {
		t.Fatalf("incremental fetch with nothing new returned %v", got)
	}
	produceRawTo(t, cl, "fs", 1, rawBatch(t, -1, -1, -1, 1, records.CodecNone))
	inc = fetch(sid, 2, nil, nil)
	if got := parts(inc); len(got) != 1 || got[1] == 0 {
		t.Fatalf("after a produce to partition 1 the incremental fetch returned %v; want partition 1 with records", got)
	}
	fetch(sid, 3, map[int32]int64{1: 3}, []int32{2})
	produceRawTo(t, cl, "fs", 2, rawBatch(t, -1, -1, -1, 1, records.CodecNone))
	if got := parts(fetch(sid, 4, nil, nil)); len(got) != 0 {
		t.Fatalf("a forgotten partition's new records came back: %v", got)
	}
	if code := fetch(sid, 9, nil, nil).ErrorCode; code != kerr.InvalidFetchSessionEpoch.Code {
		t.Fatalf("wrong epoch: code %d, want INVALID_FETCH_SESSION_EPOCH", code)
	}
	if code := fetch(sid+1, 1, nil, nil).ErrorCode; code != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("unknown session: code %d, want FETCH_SESSION_ID_NOT_FOUND", code)
	}
	// The final epoch closes it.
	if resp := fetch(sid, -1, map[int32]int64{0: 0}, nil); resp.ErrorCode != 0 || resp.SessionID != 0 {
		t.Fatalf("closing fetch: code %d session %d", resp.ErrorCode, resp.SessionID)
	}
	if code := fetch(sid, 5, nil, nil).ErrorCode; code != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("closed session: code %d, want FETCH_SESSION_ID_NOT_FOUND", code)
	}
}

// TestFetchSessionConsumers: franz-go consumes 60 partitions through
// sessions (its default) while records keep arriving; every record is read
// once, in order per partition.
func TestFetchSessionConsumers(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("fsc", 60, nil)
	ctx := testCtx(t)
	prod := n.Client(kgo.DefaultProduceTopic("fsc"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	const total = 3000
	done := make(chan error, 1)
	go func() {
		for i := range total {
			if err := prod.ProduceSync(ctx, kgo.StringRecord(fmt.Sprint(i))).FirstErr(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	cons := n.Client(kgo.ConsumeTopics("fsc"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	last := map[int32]int64{}
	for len(seen) < total {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", len(seen), total)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Errorf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if prev, ok := last[r.Partition]; ok && r.Offset != prev+1 {
				t.Errorf("partition %d: offset %d after %d", r.Partition, r.Offset, prev)
			}
			last[r.Partition] = r.Offset
			if seen[string(r.Value)] {
				t.Errorf("record %s read twice", r.Value)
			}
			seen[string(r.Value)] = true
		})
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := n.B.FetchSessions(); got < 1 {
		t.Fatalf("%d fetch sessions: the consumer did not use one", got)
	}
}
