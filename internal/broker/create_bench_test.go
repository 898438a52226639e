package broker_test

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/brokertest"
)

// BenchmarkCreatePartitions: the cost of creating partitions on one node
// (RF=1), from CreateTopics to every partition led: the process's CPU
// (user + system) and the wall time per partition created, over topics of
// 500 partitions (issue 27: ~4 ms of CPU each, 1,000 partitions ~6 s);
// then of the first write to each (one record, acks=all, a produce
// request for all of them): write-cpu-µs/partition. Then the heap the
// partitions hold (live bytes above the empty node's after a GC, per
// partition): heap-B/partition right after the writes (a buffer pooled
// after its write-out still counts), rest-heap-B/partition after three GCs
// (the pools emptied).
//
//	go test ./internal/broker -run '^$' -bench CreatePartitions -benchtime 4x
func BenchmarkCreatePartitions(b *testing.B) {
	const parts = 500
	n := brokertest.Start(b)
	cl := n.Client()
	pr := n.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	var cpu, wcpu time.Duration
	heap0 := liveHeap(1)
	start := time.Now()
	b.ResetTimer()
	for i := range b.N {
		topic := fmt.Sprintf("t%d", i)
		c0 := processCPU()
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 120000
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, parts, 1
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(b.Context(), cl)
		if err != nil {
			b.Fatal(err)
		}
		if c := resp.Topics[0].ErrorCode; c != 0 {
			b.Fatalf("create: code %d", c)
		}
		for {
			m, err := n.Metadata(topic)
			if err != nil {
				b.Fatal(err)
			}
			led := 0
			for _, tp := range m.Topics {
				for _, p := range tp.Partitions {
					if p.ErrorCode == 0 && p.Leader >= 0 {
						led++
					}
				}
			}
			if led == parts {
				break
			}
			time.Sleep(5 * time.Millisecond) // a benchmark polls on a fixed short step: a backing-off wait would pad the wall time it reports
		}
		c1 := processCPU()
		cpu += c1 - c0
		recs := make([]*kgo.Record, parts)
		for p := range recs {
			recs[p] = &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte("x")}
		}
		if err := pr.ProduceSync(b.Context(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		wcpu += processCPU() - c1
	}
	wall := time.Since(start)
	b.StopTimer()
	total := float64(b.N * parts)
	b.ReportMetric(float64(cpu.Microseconds())/total, "cpu-µs/partition")
	b.ReportMetric(float64(wall.Microseconds())/total, "wall-µs/partition")
	b.ReportMetric(float64(wcpu.Microseconds())/total, "write-cpu-µs/partition")
	b.ReportMetric(float64(liveHeap(1)-heap0)/total, "heap-B/partition")
	b.ReportMetric(float64(liveHeap(3)-heap0)/total, "rest-heap-B/partition")
}

// liveHeap is the heap's live bytes after gcs collections.
func liveHeap(gcs int) int64 {
	for range gcs {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
