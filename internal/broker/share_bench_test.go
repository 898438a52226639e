package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

// BenchmarkShareVsGroupConsume reads the same 200,000 records (3 partitions,
// 100 B values) on one node with one franz-go consumer each way: a share
// group accepting every record (each poll's acknowledgements piggybacked
// on the next ShareFetch, each made durable before it is answered), and a
// classic group with franz-go's default autocommit (every 5 s), each from
// the client's start (joining included; no initial rebalance delay). It
// reports records/s of each and their ratio, measured in the same run.
func BenchmarkShareVsGroupConsume(b *testing.B) {
	const total = 200000
	n := brokertest.Start(b, shareTestConfig, func(c *broker.Config, _ *wire.Limits) {
		c.Groups.InitialRebalanceDelay = 0 // the classic group's join would wait 3 s for more members
	})
	n.CreateTopic("sb", 3, nil)
	produceSized(b, n, "sb", total, 100)
	var shareRate, groupRate float64
	for i := 0; i < b.N; i++ {
		group := fmt.Sprintf("sbg-%d", i)
		setGroupConfigs(b, n.Client(), group, "share.auto.offset.reset", "earliest")
		shareRate += consumeRate(b, total, true, kgo.SeedBrokers(n.Addr), kgo.ShareGroup(group), kgo.ConsumeTopics("sb"))
		groupRate += consumeRate(b, total, false, kgo.SeedBrokers(n.Addr), kgo.ConsumerGroup("cg-"+group), kgo.ConsumeTopics("sb"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	}
	b.ReportMetric(shareRate/float64(b.N), "share-records/s")
	b.ReportMetric(groupRate/float64(b.N), "group-records/s")
	b.ReportMetric(shareRate/groupRate, "share/group")
}

func produceSized(b *testing.B, n *brokertest.Node, topic string, count, size int) {
	cl := n.Client(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	defer cl.Close()
	val := make([]byte, size)
	recs := make([]*kgo.Record, count)
	for i := range recs {
		recs[i] = &kgo.Record{Value: val}
	}
	if err := cl.ProduceSync(gctx(b, 60*time.Second), recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
}

// consumeRate reads total records with a client of opts (accepting each
// share record) and returns records/s, joining the group included.
func consumeRate(b *testing.B, total int, share bool, opts ...kgo.Opt) float64 {
	cl, err := kgo.NewClient(append(opts, kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	start := time.Now()
	for got := 0; got < total; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			b.Fatalf("read %d of %d", got, total)
		}
		recs := fs.Records()
		got += len(recs)
		if share {
			for _, r := range recs {
				r.Ack(kgo.AckAccept)
			}
		}
	}
	if share {
		if err := cl.FlushAcks(ctx); err != nil {
			b.Logf("flush acks: %v", err)
		}
	}
	return float64(total) / time.Since(start).Seconds()
}
