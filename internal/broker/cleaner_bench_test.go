package broker_test

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

// BenchmarkProduceWhileCleaning: the latency of acks=all produces of one
// 1 KiB record (one in flight, fsync before ack) to a plain topic while
// the cleaner is idle, then while it cleans 4 partitions of a compacted
// topic holding ~48 MiB each (100-byte values over 200k keys per
// partition), then idle again; p50/p99 of each phase and the ratio of the
// cleaning p99 to the idle one, from the same run. The cleaner is held off
// by min.compaction.lag.ms until the cleaning phase starts. Run unthrottled
// and with log.cleaner.io.max.bytes.per.second at 64 MB/s (each its own
// broker; the ratios compare phases of one run).
//
//	go test ./internal/broker -run '^$' -bench ProduceWhileCleaning -benchtime 1x
func BenchmarkProduceWhileCleaning(b *testing.B) {
	for _, rate := range []float64{0, 64e6} {
		name := "unthrottled"
		if rate > 0 {
			name = fmt.Sprintf("io.max.bytes.per.second=%.0fMB", rate/1e6)
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchProduceWhileCleaning(b, rate)
			}
		})
	}
}

func benchProduceWhileCleaning(b *testing.B, rate float64) {
	n := brokertest.Start(b, func(c *broker.Config, _ *wire.Limits) {
		fastCleaner(c)
		c.LogCleaner.DedupeBufferSize = 64 << 20
		c.LogCleaner.IOMaxBytesPerSecond = rate
	})
	ctx := context.Background()
	const dirty, parts = "dirty", 4
	n.CreateTopic(dirty, parts, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"), "segment.bytes": kadm.StringPtr("16777216"),
		"min.compaction.lag.ms": kadm.StringPtr("3600000000"),
	})
	n.CreateTopic("load", 1, nil)
	filler := n.Client(kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(5*time.Millisecond))
	rng := rand.New(rand.NewSource(1))
	val := make([]byte, 100)
	for p := int32(0); p < parts; p++ {
		for sent := 0; sent < 48<<20; sent += 120 {
			rng.Read(val)
			filler.Produce(ctx, &kgo.Record{Topic: dirty, Partition: p, Key: fmt.Appendf(nil, "key-%06d", rng.Intn(200_000)), Value: slices.Clone(val)}, nil)
		}
	}
	if err := filler.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	// Roll the active segments so nearly everything is cleanable.
	for p := int32(0); p < parts; p++ {
		for i := 0; i < 200; i++ {
			filler.Produce(ctx, &kgo.Record{Topic: dirty, Partition: p, Key: []byte("roll"), Value: make([]byte, 100<<10)}, nil)
		}
	}
	if err := filler.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	var size int64
	for p := int32(0); p < parts; p++ {
		size += n.B.PartitionLog(dirty, p).Size()
	}

	prod := n.Client(kgo.DefaultProduceTopic("load"), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	rec := make([]byte, 1024)
	measure := func(until func() bool) []time.Duration {
		var lat []time.Duration
		for !until() {
			start := time.Now()
			if err := prod.ProduceSync(ctx, &kgo.Record{Value: rec}).FirstErr(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		return lat
	}
	idleFor := func(d time.Duration) func() bool {
		end := time.Now().Add(d)
		return func() bool { return time.Now().After(end) }
	}
	b.ResetTimer()
	idle1 := measure(idleFor(3 * time.Second))

	adm := n.Admin()
	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "min.compaction.lag.ms", Value: kadm.StringPtr("0")}}, dirty)
	if err == nil {
		_, err = resp.On(dirty, nil)
	}
	if err != nil {
		b.Fatal(err)
	}
	n.B.KickCleaner()
	cleanStart := time.Now()
	cleaning := measure(func() bool {
		for p := int32(0); p < parts; p++ {
			l := n.B.PartitionLog(dirty, p)
			if c, err := l.CleanableState(l.EndOffset(), math.MaxInt64); err != nil || c.DirtyBytes > 0 || c.FirstDirty == 0 {
				return false
			}
		}
		return true
	})
	cleanTook := time.Since(cleanStart)
	idle2 := measure(idleFor(3 * time.Second))
	b.StopTimer()

	var after int64
	for p := int32(0); p < parts; p++ {
		after += n.B.PartitionLog(dirty, p).Size()
	}
	idle := append(idle1, idle2...)
	pct := func(l []time.Duration, q float64) float64 {
		slices.Sort(l)
		return float64(l[int(float64(len(l)-1)*q)].Microseconds()) / 1000
	}
	b.ReportMetric(pct(idle, 0.5), "idle-p50-ms")
	b.ReportMetric(pct(idle, 0.99), "idle-p99-ms")
	b.ReportMetric(pct(cleaning, 0.5), "cleaning-p50-ms")
	b.ReportMetric(pct(cleaning, 0.99), "cleaning-p99-ms")
	b.ReportMetric(pct(cleaning, 0.99)/pct(idle, 0.99), "p99-ratio")
	b.ReportMetric(float64(size)/cleanTook.Seconds()/1e6, "cleaned-MB/s")
	b.Logf("cleaned %d MB to %d MB in %v; %d produces idle, %d while cleaning", size>>20, after>>20, cleanTook.Round(time.Millisecond), len(idle), len(cleaning))
}
