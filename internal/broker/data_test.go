package broker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/records"
	"holdfast/internal/storage"
	"holdfast/internal/wire"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sample returns n records with keys, headers and distinct timestamps.
func sample(topic string, n int, base time.Time) []*kgo.Record {
	out := make([]*kgo.Record, n)
	for i := range out {
		out[i] = &kgo.Record{
			Topic:     topic,
			Key:       []byte("key-" + strconv.Itoa(i)),
			Value:     bytes.Repeat([]byte{byte('a' + i%26)}, 10+i%50),
			Headers:   []kgo.RecordHeader{{Key: "h", Value: []byte(strconv.Itoa(i))}, {Key: "empty"}},
			Timestamp: base.Add(time.Duration(i) * time.Millisecond).Truncate(time.Millisecond),
		}
	}
	return out
}

// consumeAll reads n records of topic from the start (one partition).
func consumeAll(t *testing.T, n *brokertest.Node, topic string, want int, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	cl := n.Client(append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	ctx := testCtx(t)
	var got []*kgo.Record
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records of %s: %v", len(got), want, topic, err)
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch %s[%d]: %v", e.Topic, e.Partition, e.Err)
		}
		got = append(got, fs.Records()...)
	}
	return got
}

func sameRecord(t *testing.T, i int, got, want *kgo.Record) {
	t.Helper()
	if !bytes.Equal(got.Key, want.Key) || !bytes.Equal(got.Value, want.Value) {
		t.Fatalf("record %d: got key %q value %q, want %q %q", i, got.Key, got.Value, want.Key, want.Value)
	}
	if !got.Timestamp.Equal(want.Timestamp) {
		t.Fatalf("record %d: timestamp %v, want %v", i, got.Timestamp, want.Timestamp)
	}
	if len(got.Headers) != len(want.Headers) {
		t.Fatalf("record %d: %d headers, want %d", i, len(got.Headers), len(want.Headers))
	}
	for j := range want.Headers {
		if got.Headers[j].Key != want.Headers[j].Key || !bytes.Equal(got.Headers[j].Value, want.Headers[j].Value) {
			t.Fatalf("record %d header %d: %v, want %v", i, j, got.Headers[j], want.Headers[j])
		}
	}
}

func TestProduceConsumeAcksAndCodecs(t *testing.T) {
	n := brokertest.Start(t)
	codecs := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	acks := map[string]kgo.Acks{"0": kgo.NoAck(), "1": kgo.LeaderAck(), "all": kgo.AllISRAcks()}
	base := time.Now().Add(-time.Hour)
	for an, ack := range acks {
		for cn, codec := range codecs {
			t.Run("acks="+an+"/"+cn, func(t *testing.T) {
				topic := "produce-" + an + "-" + cn
				n.CreateTopic(topic, 1, nil)
				opts := []kgo.Opt{kgo.RequiredAcks(ack), kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(0)}
				if an != "all" {
					opts = append(opts, kgo.DisableIdempotentWrite())
				}
				cl := n.Client(opts...)
				want := sample(topic, 200, base)
				if err := cl.ProduceSync(testCtx(t), want...).FirstErr(); err != nil {
					t.Fatal(err)
				}
				got := consumeAll(t, n, topic, len(want))
				if len(got) != len(want) {
					t.Fatalf("consumed %d records, want %d", len(got), len(want))
				}
				for i := range want {
					if got[i].Offset != int64(i) {
						t.Fatalf("record %d at offset %d", i, got[i].Offset)
					}
					sameRecord(t, i, got[i], want[i])
				}
			})
		}
	}
}

func TestListOffsetsAndFetchByTime(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("times", 1, nil)
	cl := n.Client()
	base := time.UnixMilli(1_700_000_000_000)
	want := sample("times", 100, base)
	// Make one record the newest, out of order, for MaxTimestamp (KIP-734).
	want[40].Timestamp = base.Add(time.Hour)
	for _, r := range want { // one batch each, so offsets are exact per timestamp
		if err := cl.ProduceSync(testCtx(t), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := n.Admin()
	ctx := testCtx(t)
	start, err := adm.ListStartOffsets(ctx, "times")
	if err != nil {
		t.Fatal(err)
	}
	end, err := adm.ListEndOffsets(ctx, "times")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := start.Lookup("times", 0); o.Offset != 0 || o.Err != nil {
		t.Fatalf("earliest = %+v, want 0", o)
	}
	if o, _ := end.Lookup("times", 0); o.Offset != 100 || o.Err != nil {
		t.Fatalf("latest = %+v, want 100", o)
	}
	at, err := adm.ListOffsetsAfterMilli(ctx, base.Add(50*time.Millisecond).UnixMilli(), "times")
	if err != nil {
		t.Fatal(err)
	}
	// Record 40 carries the newest timestamp, so the first record at or
	// after base+50ms is record 40.
	if o, _ := at.Lookup("times", 0); o.Offset != 40 || o.Err != nil {
		t.Fatalf("after base+50ms = %+v, want offset 40", o)
	}
	// Max timestamp, straight from kmsg (-3).
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "times"
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = -3
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != 40 || p.Timestamp != want[40].Timestamp.UnixMilli() {
		t.Fatalf("max timestamp: %+v", p)
	}
	// A timestamp after every record: no offset.
	late, err := adm.ListOffsetsAfterMilli(ctx, base.Add(2*time.Hour).UnixMilli(), "times")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := late.Lookup("times", 0); o.Offset != -1 && o.Offset != 100 {
		t.Fatalf("after the newest record: %+v", o)
	}

	// Consume from a timestamp and from the end.
	got := consumeAll(t, n, "times", 60, kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(base.Add(50*time.Millisecond).UnixMilli())))
	if got[0].Offset != 40 {
		t.Fatalf("consuming after base+50ms starts at %d, want 40", got[0].Offset)
	}
	tail := n.Client(kgo.ConsumeTopics("times"), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	// The consumer starts at the end, so it sees only what comes after.
	done := make(chan []*kgo.Record)
	go func() {
		var rs []*kgo.Record
		for len(rs) == 0 {
			fs := tail.PollFetches(ctx)
			if ctx.Err() != nil {
				break
			}
			rs = append(rs, fs.Records()...)
		}
		done <- rs
	}()
	for i := 0; ; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "times", Value: []byte("new")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		select {
		case rs := <-done:
			if len(rs) == 0 || string(rs[0].Value) != "new" || rs[0].Offset < 100 {
				t.Fatalf("consumer at end got %v", rs)
			}
			return
		case <-time.After(200 * time.Millisecond):
			// The consumer may have listed the end before our first
			// record; keep producing until it sees one.
		}
	}
}

func TestMessageSizeLimit(t *testing.T) {
	n := brokertest.Start(t)
	limit := "100000"
	n.CreateTopic("sized", 1, map[string]*string{"max.message.bytes": &limit})
	cl := n.Client(kgo.ProducerBatchMaxBytes(4<<20), kgo.ProducerLinger(0))
	ctx := testCtx(t)
	near := &kgo.Record{Topic: "sized", Value: bytes.Repeat([]byte("x"), 99_000)}
	if err := cl.ProduceSync(ctx, near).FirstErr(); err != nil {
		t.Fatalf("record just below max.message.bytes: %v", err)
	}
	big := make([]byte, 200_000)
	rand.New(rand.NewSource(1)).Read(big) // incompressible: franz-go compresses by default
	over := &kgo.Record{Topic: "sized", Value: big}
	if err := cl.ProduceSync(ctx, over).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("record above max.message.bytes: err %v, want MESSAGE_TOO_LARGE", err)
	}
	got := consumeAll(t, n, "sized", 1)
	if len(got) != 1 || len(got[0].Value) != 99_000 {
		t.Fatalf("consumed %d records", len(got))
	}
	if end := endOffset(t, n, "sized", 0); end != 1 {
		t.Fatalf("end offset %d after one accepted and one refused record, want 1", end)
	}
}

func endOffset(t *testing.T, n *brokertest.Node, topic string, p int32) int64 {
	t.Helper()
	end, err := n.Admin().ListEndOffsets(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := end.Lookup(topic, p)
	if !ok || o.Err != nil {
		t.Fatalf("end offset of %s[%d]: %+v", topic, p, o)
	}
	return o.Offset
}

// rawBatch builds a batch of n records as a producer would.
func rawBatch(t *testing.T, pid int64, epoch int16, seq int32, n int, codec records.Codec) []byte {
	t.Helper()
	recs := make([]records.Record, n)
	for i := range recs {
		recs[i] = records.Record{Timestamp: time.Now().UnixMilli(), Key: []byte("k"), Value: []byte(fmt.Sprintf("v%d-%d", seq, i))}
	}
	b, err := records.Build(records.Batch{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, Codec: codec}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// produceRaw sends one batch to topic[0] with acks=all and returns the
// partition's answer.
func produceRaw(t *testing.T, cl *kgo.Client, topic string, batch []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	return produceRawTo(t, cl, topic, 0, batch)
}

// produceRawTo is produceRaw to partition p.
func produceRawTo(t *testing.T, cl *kgo.Client, topic string, p int32, batch []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = p, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	// v11: topics by name, and transactional batches in the flow before
	// KIP-890 part 2 (v12+ adds partitions implicitly; txnv2_test.go).
	kresp, err := cl.Request(testCtx(t), brokertest.Pin(req, 11))
	if err != nil {
		t.Fatal(err)
	}
	return kresp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
}

func TestCorruptBatchRefused(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("corrupt", 1, nil)
	cl := n.Client()
	for _, codec := range []records.Codec{records.CodecNone, records.CodecZstd} {
		b := rawBatch(t, -1, -1, -1, 3, codec)
		b[len(b)-2] ^= 0x40 // inside the records: the CRC no longer matches
		if p := produceRaw(t, cl, "corrupt", b); p.ErrorCode != kerr.CorruptMessage.Code {
			t.Fatalf("codec %v: flipped byte answered %v, want CORRUPT_MESSAGE", codec, kerr.ErrorForCode(p.ErrorCode))
		}
	}
	// Bad length: the batch claims more bytes than it has.
	b := rawBatch(t, -1, -1, -1, 3, records.CodecNone)
	if p := produceRaw(t, cl, "corrupt", b[:len(b)-5]); p.ErrorCode != kerr.CorruptMessage.Code {
		t.Fatalf("truncated batch answered %v, want CORRUPT_MESSAGE", kerr.ErrorForCode(p.ErrorCode))
	}
	// Old magic.
	b = rawBatch(t, -1, -1, -1, 1, records.CodecNone)
	b[16] = 1
	if p := produceRaw(t, cl, "corrupt", b); p.ErrorCode != kerr.UnsupportedForMessageFormat.Code && p.ErrorCode != kerr.CorruptMessage.Code {
		t.Fatalf("magic 1 answered %v", kerr.ErrorForCode(p.ErrorCode))
	}
	if end := endOffset(t, n, "corrupt", 0); end != 0 {
		t.Fatalf("end offset %d after only bad batches, want 0", end)
	}
	// A good batch after all that lands at offset 0.
	if p := produceRaw(t, cl, "corrupt", rawBatch(t, -1, -1, -1, 2, records.CodecNone)); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("good batch: %+v", p)
	}
}

func TestInvalidAcksAndUnknownPartition(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("acks", 1, nil)
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = 2, 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "acks"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = rawBatch(t, -1, -1, -1, 1, records.CodecNone)
	rt.Partitions = append(rt.Partitions, rp)
	rp.Partition = 7
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	// franz-go rewrites Acks to its own setting, so this goes over a raw
	// connection.
	req.Version = 8
	resp := rawRequest(t, n, req).(*kmsg.ProduceResponse)
	for _, p := range resp.Topics[0].Partitions {
		if p.ErrorCode != kerr.InvalidRequiredAcks.Code {
			t.Fatalf("acks=2 partition %d: %v", p.Partition, kerr.ErrorForCode(p.ErrorCode))
		}
	}
	req.Acks = -1
	ps := rawRequest(t, n, req).(*kmsg.ProduceResponse).Topics[0].Partitions
	if ps[0].ErrorCode != 0 || ps[1].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("acks=-1: %v / %v", kerr.ErrorForCode(ps[0].ErrorCode), kerr.ErrorForCode(ps[1].ErrorCode))
	}
	if end := endOffset(t, n, "acks", 0); end != 1 {
		t.Fatalf("end offset %d: the acks=2 request must not have been written", end)
	}
}

// rawRequest sends req (a non-flexible version) on a fresh connection and
// decodes the answer.
func rawRequest(t *testing.T, n *brokertest.Node, req kmsg.Request) kmsg.Response {
	t.Helper()
	if req.IsFlexible() {
		t.Fatal("rawRequest handles only non-flexible versions")
	}
	conn, err := net.Dial("tcp", n.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw")).AppendRequest(nil, req, 1)
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(conn, body); err != nil {
		t.Fatal(err)
	}
	resp := req.ResponseKind()
	if err := resp.ReadFrom(body[4:]); err != nil { // after the correlation id
		t.Fatal(err)
	}
	return resp
}

func TestLongPollReturnsWhenDataArrives(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("poll", 1, nil)
	cl := n.Client()
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 30_000, 1, 1<<20
	req.SessionEpoch = -1 // sessionless
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = "poll", topicID(t, n, "poll")
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx := testCtx(t)
	type result struct {
		resp kmsg.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := cl.Broker(int(n.Cfg.NodeID)).Request(ctx, req)
		done <- result{resp, err}
	}()
	p := produceRaw(t, cl, "poll", rawBatch(t, -1, -1, -1, 3, records.CodecNone))
	if p.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(p.ErrorCode))
	}
	r := <-done // a fetch that ignored the new data would only return after 30s, empty
	if r.err != nil {
		t.Fatal(r.err)
	}
	fp := r.resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if fp.ErrorCode != 0 || fp.HighWatermark != 3 {
		t.Fatalf("long poll: error %v, high watermark %d", kerr.ErrorForCode(fp.ErrorCode), fp.HighWatermark)
	}
	recs, err := records.Records(fp.RecordBatches)
	if err != nil || len(recs) != 3 {
		t.Fatalf("long poll returned %d records (%v)", len(recs), err)
	}
}

// topicID looks a topic's id up (fetch v13+ names topics by id).
func topicID(t *testing.T, n *brokertest.Node, topic string) [16]byte {
	t.Helper()
	td, err := n.Admin().ListTopics(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	return td[topic].ID
}

func initProducerID(t *testing.T, cl *kgo.Client, pid int64, epoch int16) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.ProducerID, req.ProducerEpoch = pid, epoch
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(resp.ErrorCode))
	}
	return resp.ProducerID, resp.ProducerEpoch
}

func TestIdempotentProducer(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("idem", 1, nil)
	cl := n.Client()
	pid, epoch := initProducerID(t, cl, -1, -1)
	if pid < 0 || epoch != 0 {
		t.Fatalf("InitProducerId = %d/%d", pid, epoch)
	}
	expect := func(what string, p kmsg.ProduceResponseTopicPartition, code *kerr.Error, base int64) {
		t.Helper()
		if code == nil && p.ErrorCode != 0 {
			t.Fatalf("%s: %v", what, kerr.ErrorForCode(p.ErrorCode))
		}
		if code != nil && p.ErrorCode != code.Code {
			t.Fatalf("%s: %v, want %v", what, kerr.ErrorForCode(p.ErrorCode), code)
		}
		if code == nil && p.BaseOffset != base {
			t.Fatalf("%s: base offset %d, want %d", what, p.BaseOffset, base)
		}
	}
	b0 := rawBatch(t, pid, epoch, 0, 5, records.CodecNone)
	expect("first batch", produceRaw(t, cl, "idem", bytes.Clone(b0)), nil, 0)
	expect("retry of the first batch", produceRaw(t, cl, "idem", bytes.Clone(b0)), nil, 0)
	b1 := rawBatch(t, pid, epoch, 5, 3, records.CodecLZ4)
	expect("second batch", produceRaw(t, cl, "idem", bytes.Clone(b1)), nil, 5)
	expect("retry of the second batch", produceRaw(t, cl, "idem", bytes.Clone(b1)), nil, 5)
	expect("retry of the first batch again", produceRaw(t, cl, "idem", bytes.Clone(b0)), nil, 0)
	expect("sequence gap", produceRaw(t, cl, "idem", rawBatch(t, pid, epoch, 20, 1, records.CodecNone)), kerr.OutOfOrderSequenceNumber, 0)
	expect("unknown producer mid-stream", produceRaw(t, cl, "idem", rawBatch(t, pid+100, 0, 7, 1, records.CodecNone)), kerr.UnknownProducerID, 0)
	if end := endOffset(t, n, "idem", 0); end != 8 {
		t.Fatalf("end offset %d, want 8: retries were written twice or refusals stored", end)
	}

	// The state survives a restart: the retry is still recognised.
	n.Restart()
	cl = n.Client()
	expect("retry after restart", produceRaw(t, cl, "idem", bytes.Clone(b1)), nil, 5)
	expect("next batch after restart", produceRaw(t, cl, "idem", rawBatch(t, pid, epoch, 8, 2, records.CodecNone)), nil, 8)

	// KIP-360 epoch bump: the new epoch starts at sequence 0; the old epoch is fenced.
	pid2, epoch2 := initProducerID(t, cl, pid, epoch)
	if pid2 != pid || epoch2 != epoch+1 {
		t.Fatalf("epoch bump gave %d/%d, want %d/%d", pid2, epoch2, pid, epoch+1)
	}
	expect("new epoch not at 0", produceRaw(t, cl, "idem", rawBatch(t, pid, epoch2, 10, 1, records.CodecNone)), kerr.OutOfOrderSequenceNumber, 0)
	expect("new epoch at 0", produceRaw(t, cl, "idem", rawBatch(t, pid, epoch2, 0, 1, records.CodecNone)), nil, 10)
	expect("old epoch", produceRaw(t, cl, "idem", rawBatch(t, pid, epoch, 10, 1, records.CodecNone)), kerr.InvalidProducerEpoch, 0)
	if end := endOffset(t, n, "idem", 0); end != 11 {
		t.Fatalf("end offset %d, want 11", end)
	}

	// And across a second restart (the snapshot of the first was consumed).
	n.Restart()
	cl = n.Client()
	expect("retry after second restart", produceRaw(t, cl, "idem", rawBatch(t, pid, epoch2, 0, 1, records.CodecNone)), nil, 10)
}

func TestRestartMidStream(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("restart", 3, nil)
	const rounds, per = 4, 250
	total := 0
	for round := 0; round < rounds; round++ {
		cl := n.Client(kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
		var rs []*kgo.Record
		for i := 0; i < per; i++ {
			rs = append(rs, &kgo.Record{Topic: "restart", Value: []byte(fmt.Sprintf("%d", total+i))})
		}
		if err := cl.ProduceSync(testCtx(t), rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		total += per
		cl.Close()
		n.Restart()
	}
	got := consumeAll(t, n, "restart", total)
	if len(got) != total {
		t.Fatalf("consumed %d, want %d", len(got), total)
	}
	seen := map[string]bool{}
	next := map[int32]int64{}
	for _, r := range got {
		if seen[string(r.Value)] {
			t.Fatalf("record %s consumed twice", r.Value)
		}
		seen[string(r.Value)] = true
		if r.Offset != next[r.Partition] {
			t.Fatalf("partition %d: offset %d, want %d (offsets must continue across restarts)", r.Partition, r.Offset, next[r.Partition])
		}
		next[r.Partition]++
	}
}

func TestDeleteRecords(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("trim", 1, nil)
	cl := n.Client()
	if err := cl.ProduceSync(testCtx(t), sample("trim", 10, time.Now())...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := n.Admin()
	ctx := testCtx(t)
	resp, err := adm.DeleteRecords(ctx, kadmOffsets("trim", 0, 5))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := resp.Lookup("trim", 0)
	if r.Err != nil || r.LowWatermark != 5 {
		t.Fatalf("delete records: %+v", r)
	}
	resp, err = adm.DeleteRecords(ctx, kadmOffsets("trim", 0, 50))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := resp.Lookup("trim", 0); !errors.Is(r.Err, kerr.OffsetOutOfRange) {
		t.Fatalf("delete beyond the high watermark: %v, want OFFSET_OUT_OF_RANGE", r.Err)
	}
	fetchAt := func(off int64) kmsg.FetchResponseTopicPartition {
		req := kmsg.NewPtrFetchRequest()
		req.MaxBytes, req.SessionEpoch = 1<<20, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = "trim", topicID(t, n, "trim")
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes = off, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := cl.Broker(int(n.Cfg.NodeID)).Request(testCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	}
	if p := fetchAt(2); p.ErrorCode != kerr.OffsetOutOfRange.Code || p.LogStartOffset != 5 {
		t.Fatalf("fetch below the log start: %v, log start %d", kerr.ErrorForCode(p.ErrorCode), p.LogStartOffset)
	}
	n.Restart()
	cl = n.Client()
	start, err := n.Admin().ListStartOffsets(testCtx(t), "trim")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := start.Lookup("trim", 0); o.Offset != 5 {
		t.Fatalf("log start after restart: %d, want 5", o.Offset)
	}
	got := consumeAll(t, n, "trim", 5)
	if got[0].Offset != 5 || len(got) != 5 {
		t.Fatalf("after DeleteRecords consumed from %d, %d records", got[0].Offset, len(got))
	}
}

func kadmOffsets(topic string, p int32, off int64) kadm.Offsets {
	o := kadm.Offsets{}
	o.AddOffset(topic, p, off, -1)
	return o
}

func TestSaramaAndKafkaGo(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("interop", 1, nil)

	scfg := sarama.NewConfig()
	scfg.Version = sarama.V3_0_0_0
	scfg.Producer.Return.Successes = true
	scfg.Producer.RequiredAcks = sarama.WaitForAll
	scfg.Producer.Compression = sarama.CompressionSnappy
	sp, err := sarama.NewSyncProducer([]string{n.Addr}, scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	for i := 0; i < 10; i++ {
		_, off, err := sp.SendMessage(&sarama.ProducerMessage{Topic: "interop", Key: sarama.StringEncoder("s"), Value: sarama.StringEncoder(fmt.Sprintf("sarama-%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		if off != int64(i) {
			t.Fatalf("sarama message %d at offset %d", i, off)
		}
	}

	w := &kafka.Writer{Addr: kafka.TCP(n.Addr), Topic: "interop", RequiredAcks: kafka.RequireAll, BatchSize: 1, Compression: kafka.Gzip}
	defer w.Close()
	for i := 0; i < 10; i++ {
		if err := w.WriteMessages(testCtx(t), kafka.Message{Key: []byte("k"), Value: []byte(fmt.Sprintf("kafka-go-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}

	// sarama consumer reads all 20.
	c, err := sarama.NewConsumer([]string{n.Addr}, scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition("interop", 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var vals []string
	for len(vals) < 20 {
		select {
		case m := <-pc.Messages():
			vals = append(vals, string(m.Value))
		case e := <-pc.Errors():
			t.Fatal(e)
		case <-testCtx(t).Done():
			t.Fatalf("sarama consumed %d of 20", len(vals))
		}
	}
	if vals[0] != "sarama-0" || vals[19] != "kafka-go-9" {
		t.Fatalf("sarama consumed %v", vals)
	}

	// kafka-go reader reads them too.
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{n.Addr}, Topic: "interop", Partition: 0, MaxWait: 100 * time.Millisecond})
	defer rd.Close()
	for i := 0; i < 20; i++ {
		m, err := rd.ReadMessage(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if m.Offset != int64(i) || string(m.Value) != vals[i] {
			t.Fatalf("kafka-go message %d: offset %d value %q, want %q", i, m.Offset, m.Value, vals[i])
		}
	}
}

// TestStorageErrorNotAcknowledged: when fsync fails, the produce is answered
// KAFKA_STORAGE_ERROR, the partition refuses further appends, and
// consumers never see the unpersisted records.
func TestStorageErrorNotAcknowledged(t *testing.T) {
	fsys := storage.NewCrashFS(1)
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.FS = fsys })
	n.CreateTopic("failing", 1, nil)
	n.CreateTopic("healthy", 1, nil)
	cl := n.Client()
	fsys.InjectError(storage.OpSync, "failing-0", syscall.EIO)
	if p := produceRaw(t, cl, "failing", rawBatch(t, -1, -1, -1, 2, records.CodecNone)); p.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("produce with failing fsync: %v, want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(p.ErrorCode))
	}
	fsys.ClearErrors()
	if p := produceRaw(t, cl, "failing", rawBatch(t, -1, -1, -1, 2, records.CodecNone)); p.ErrorCode != kerr.KafkaStorageError.Code {
		t.Fatalf("produce after a storage failure: %v, want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(p.ErrorCode))
	}
	// Metadata now reports the partition's storage error, so clients will
	// not route to it; ask over a raw connection.
	lreq := kmsg.NewPtrListOffsetsRequest()
	lreq.Version = 4
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "failing"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -1
	lt.Partitions = append(lt.Partitions, lp)
	lreq.Topics = append(lreq.Topics, lt)
	if p := rawRequest(t, n, lreq).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]; p.ErrorCode != kerr.KafkaStorageError.Code && p.Offset != 0 {
		t.Fatalf("high watermark %d (%v): unpersisted records are visible", p.Offset, kerr.ErrorForCode(p.ErrorCode))
	}
	// Other partitions keep working.
	if p := produceRaw(t, cl, "healthy", rawBatch(t, -1, -1, -1, 2, records.CodecNone)); p.ErrorCode != 0 {
		t.Fatalf("healthy partition: %v", kerr.ErrorForCode(p.ErrorCode))
	}
}

// TestProduceTimeoutThenIdempotentRetry: a produce whose fsync outlasts
// timeout_ms gets REQUEST_TIMED_OUT; its retry is recognised and answered
// with the original offset once durable.
func TestProduceTimeoutThenIdempotentRetry(t *testing.T) {
	fsys := storage.NewCrashFS(2)
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.FS = fsys })
	n.CreateTopic("slow", 1, nil)
	cl := n.Client()
	pid, epoch := initProducerID(t, cl, -1, -1)
	b := rawBatch(t, pid, epoch, 0, 3, records.CodecNone)
	fsys.SetSyncDelay(3 * time.Second)
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 50
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "slow"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = bytes.Clone(b)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := cl.Request(testCtx(t), brokertest.Pin(req, 12)) // topics by name
	if err != nil {
		t.Fatal(err)
	}
	resp := kresp.(*kmsg.ProduceResponse)
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kerr.RequestTimedOut.Code {
		t.Fatalf("slow fsync: %v, want REQUEST_TIMED_OUT", kerr.ErrorForCode(p.ErrorCode))
	}
	fsys.SetSyncDelay(0)
	if p := produceRaw(t, cl, "slow", bytes.Clone(b)); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("retry: %v base %d", kerr.ErrorForCode(p.ErrorCode), p.BaseOffset)
	}
	if end := endOffset(t, n, "slow", 0); end != 3 {
		t.Fatalf("end offset %d, want 3 (one copy)", end)
	}
}
