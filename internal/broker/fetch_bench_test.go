package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/brokertest"
)

// BenchmarkFetchCached measures fetch throughput of data in the page cache to
// one consumer over loopback: raw Fetch requests (the client decodes no
// records) of 1 MiB (the clients' default max.partition.fetch.bytes) and
// 8 MiB per request.
//
//	go test ./internal/broker -run X -bench FetchCached -benchtime 3s
func BenchmarkFetchCached(b *testing.B) {
	for _, pmb := range []int32{1 << 20, 8 << 20} {
		b.Run(fmt.Sprintf("partition_max_bytes=%dMiB", pmb>>20), func(b *testing.B) { benchFetch(b, pmb) })
	}
}

func benchFetch(b *testing.B, partitionMaxBytes int32) {
	n := brokertest.Start(b)
	const topic, total = "fetchbench", 64 << 20
	n.CreateTopic(topic, 1, nil)
	prod := n.Client(kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx := context.Background()
	val := bytes.Repeat([]byte("x"), 16<<10)
	for sent := 0; sent < total; sent += len(val) {
		prod.Produce(ctx, &kgo.Record{Value: val}, nil)
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	cl := n.Client()
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr(topic)}}
	md, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		b.Fatal(err)
	}
	topicID := md.Topics[0].TopicID // kgo sends the broker's newest Fetch version, which names topics by id
	end := int64(-1)
	b.ResetTimer()
	var bytesRead int64
	offset := int64(0)
	for i := 0; i < b.N; i++ {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 1, 64<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, topicID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = offset, partitionMaxBytes, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			b.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			b.Fatalf("fetch error %d", p.ErrorCode)
		}
		end = p.HighWatermark
		bytesRead += int64(len(p.RecordBatches))
		// Walk to the next offset: the last batch's base + delta + 1.
		rec := p.RecordBatches
		for len(rec) >= 61 {
			var batch kmsg.RecordBatch
			size := 12 + int(int32(uint32(rec[8])<<24|uint32(rec[9])<<16|uint32(rec[10])<<8|uint32(rec[11])))
			if size > len(rec) {
				break
			}
			if err := batch.ReadFrom(rec[:size]); err != nil {
				b.Fatal(err)
			}
			offset = batch.FirstOffset + int64(batch.LastOffsetDelta) + 1
			rec = rec[size:]
		}
		if offset >= end {
			offset = 0
		}
	}
	b.SetBytes(bytesRead / int64(max(b.N, 1)))
}
