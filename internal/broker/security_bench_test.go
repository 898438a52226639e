package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/storage"
	"holdfast/internal/wire"
)

// BenchmarkTLS measures produce and fetch throughput over TLS next to
// plaintext, on one broker serving both listeners, so the two are measured
// in the same run on the same data. Produce: 1 KiB records, acks=all,
// uncompressed, with flush=os so the transport and not the disk is
// measured. Fetch: raw 1 MiB Fetch requests of data in the page cache
// (plaintext sends it with sendfile, TLS has to read and encrypt it).
//
//	go test ./internal/broker -run X -bench TLS -benchtime 2s -count 3
func BenchmarkTLS(b *testing.B) {
	dir := b.TempDir()
	ca, err := auth.NewCA("bench CA", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	node, _ := ca.Issue(auth.CertOptions{CommonName: "node-1", Hosts: []string{"127.0.0.1"}})
	writeTestFile(b, filepath.Join(dir, "node.pem"), node.Keystore())
	writeTestFile(b, filepath.Join(dir, "ca.pem"), ca.CertPEM)
	mat, err := auth.LoadTLS(auth.TLSConfig{KeystoreLocation: filepath.Join(dir, "node.pem"), TruststoreLocation: filepath.Join(dir, "ca.pem")}, nil)
	if err != nil {
		b.Fatal(err)
	}
	n := brokertest.StartListeners(b, []*wire.Listener{
		{Name: "PLAINTEXT", Protocol: wire.Plaintext, Internal: true},
		{Name: "SSL", Protocol: wire.SSL, TLS: mat.ServerConfig()},
	}, func(c *broker.Config, _ *wire.Limits) {
		c.LogDefaults.Flush = storage.FlushPolicy{Mode: storage.FlushOS}
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	clientTLS := &tls.Config{RootCAs: pool}
	opts := map[string][]kgo.Opt{
		"plaintext": {kgo.SeedBrokers(n.Addrs["PLAINTEXT"])},
		"tls":       {kgo.SeedBrokers(n.Addrs["SSL"]), kgo.DialTLSConfig(clientTLS)},
	}
	n.CreateTopic("tlsbench-fetch", 1, nil)
	fill := n.Client(kgo.DefaultProduceTopic("tlsbench-fetch"), kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerBatchCompression(kgo.NoCompression()))
	val := bytes.Repeat([]byte("x"), 16<<10)
	for sent := 0; sent < 64<<20; sent += len(val) {
		fill.Produce(context.Background(), &kgo.Record{Value: val}, nil)
	}
	if err := fill.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	for _, kind := range []string{"plaintext", "tls"} {
		b.Run("produce/"+kind, func(b *testing.B) { benchProduceVia(b, n, kind, opts[kind]) })
	}
	for _, kind := range []string{"plaintext", "tls"} {
		b.Run("fetch/"+kind, func(b *testing.B) { benchFetchVia(b, opts[kind]) })
	}
}

var benchTopics int

func benchProduceVia(b *testing.B, n *brokertest.Node, kind string, opts []kgo.Opt) {
	benchTopics++
	topic := fmt.Sprintf("tlsbench-produce-%s-%d", kind, benchTopics)
	n.CreateTopic(topic, 1, nil)
	cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerLinger(0), kgo.RequiredAcks(kgo.AllISRAcks()))...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	val := bytes.Repeat([]byte("v"), 1024)
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: val}).FirstErr(); err != nil {
		b.Fatal(err) // connected and warmed up before the clock starts
	}
	b.SetBytes(int64(len(val)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cl.Produce(ctx, &kgo.Record{Value: val}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

func benchFetchVia(b *testing.B, opts []kgo.Opt) {
	const topic = "tlsbench-fetch"
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr(topic)}}
	md, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		b.Fatal(err)
	}
	topicID := md.Topics[0].TopicID
	var bytesRead int64
	offset := int64(0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 1, 64<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, topicID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = offset, 1<<20, -1
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
		bytesRead += int64(len(p.RecordBatches))
		rec := p.RecordBatches
		for len(rec) >= 61 {
			var batch kmsg.RecordBatch
			size := 12 + int(int32(uint32(rec[8])<<24|uint32(rec[9])<<16|uint32(rec[10])<<8|uint32(rec[11])))
			if size > len(rec) || batch.ReadFrom(rec[:size]) != nil {
				break
			}
			offset = batch.FirstOffset + int64(batch.LastOffsetDelta) + 1
			rec = rec[size:]
		}
		if offset >= p.HighWatermark {
			offset = 0
		}
	}
	b.SetBytes(bytesRead / int64(max(b.N, 1)))
}
