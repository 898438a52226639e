// Command restartprobe measures what a Kafka client sees right after a
// cluster (re)starts: one franz-go client with default settings produces
// one record (acks=all) to every partition of a topic at once and reports
// the time to the first acknowledgement and to the last, the Metadata
// requests it sent, and how many partitions those answers left without a
// leader (LEADER_NOT_AVAILABLE). Used by scripts/bench-restart.sh.
//
//	go run ./scripts/restartprobe -bootstrap 127.0.0.1:9092 -topic t -partitions 300
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// hooks counts Metadata requests and the partitions their answers left
// without a leader.
type hooks struct {
	metadata   atomic.Int64
	leaderless atomic.Int64
	mu         sync.Mutex
	errs       map[string]int
}

func (h *hooks) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _ time.Duration, _ time.Duration, err error) {
	if key == 3 && err == nil {
		h.metadata.Add(1)
	}
}

// OnBrokerRead sees no response body; leaderless partitions are counted by
// the probe's own Metadata request instead.

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "comma-separated seed brokers")
	topic := flag.String("topic", "restart", "topic")
	parts := flag.Int("partitions", 300, "partitions of the topic: one record to each")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after")
	verbose := flag.Bool("v", false, "log the client's info lines to stderr")
	flag.Parse()

	h := &hooks{errs: map[string]int{}}
	seeds := strings.Split(*bootstrap, ",")
	start := time.Now()

	// First what a client's first Metadata sees (before anything else).
	if n, err := leaderless(seeds, *topic); err == nil {
		h.leaderless.Store(int64(n))
	}
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(*topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.WithHooks(h)}
	if *verbose {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, func() string { return time.Now().Format("15:04:05.000 ") })))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer cl.Close()
	if *verbose {
		fmt.Fprintf(os.Stderr, "%s probe start, first Metadata answered\n", start.Format("15:04:05.000"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var first atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	for p := 0; p < *parts; p++ {
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Partition: int32(p), Value: []byte("x")}, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				failed.Add(1)
				h.mu.Lock()
				h.errs[err.Error()]++
				h.mu.Unlock()
				return
			}
			first.CompareAndSwap(0, int64(time.Since(start)))
		})
	}
	wg.Wait()
	all := time.Since(start)
	fmt.Printf("first_ack=%.2fs all_acked=%.2fs failed=%d metadata_requests=%d leaderless_in_first_metadata=%d\n",
		time.Duration(first.Load()).Seconds(), all.Seconds(), failed.Load(), h.metadata.Load(), h.leaderless.Load())
	for e, n := range h.errs {
		fmt.Fprintf(os.Stderr, "error x%d: %s\n", n, e)
	}
	if failed.Load() > 0 {
		os.Exit(1)
	}
}

// leaderless asks the first seed that answers for topic's metadata and
// counts its partitions without a leader.
func leaderless(seeds []string, topic string) (int, error) {
	var last error
	for _, s := range seeds {
		cl, err := kgo.NewClient(kgo.SeedBrokers(s))
		if err != nil {
			return 0, err
		}
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := req.RequestWith(ctx, cl)
		cancel()
		cl.Close()
		if err != nil {
			last = err
			continue
		}
		n := 0
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode == kerr.LeaderNotAvailable.Code || p.Leader < 0 {
					n++
				}
			}
		}
		return n, nil
	}
	return 0, last
}
