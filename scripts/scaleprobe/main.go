// Command scaleprobe creates many partitions and has every one of them
// acknowledge a write, for scripts/bench-scale.sh (issue 27: "CreateTopics
// of 100 topics x 1,000 partitions to every partition acknowledging a
// write"). Modes:
//
//	create: TOPICS topics of PARTITIONS partitions each (CreateTopics
//	        requests of -batch topics; one that exists already is fine),
//	        then one record (acks=all, idempotent) to every partition,
//	        retried until each is acknowledged; prints the seconds to the
//	        creations answered and to the last acknowledgement.
//	all:    only the records to every partition.
//	one:    one record to the last partition of the last topic, retried
//	        until acknowledged (a restart's first acknowledgement).
//	serving: ListOffsets of every partition, once a second, until every
//	        one answers without an error (a restart's replicas all open
//	        again; read-only, so the logs stay as the clean stop left them).
//
//	go run ./scripts/scaleprobe -bootstrap 127.0.0.1:9092 -mode create -topics 100 -partitions 1000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "comma-separated seed brokers")
	mode := flag.String("mode", "create", "create, all, one or serving")
	prefix := flag.String("prefix", "scale", "topic names: <prefix><i>")
	topics := flag.Int("topics", 1, "topics")
	parts := flag.Int("partitions", 1000, "partitions per topic")
	rf := flag.Int("rf", 1, "replication factor")
	batch := flag.Int("batch", 10, "topics per CreateTopics request")
	timeout := flag.Duration("timeout", 30*time.Minute, "give up after")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	start := time.Now()
	name := func(i int) string { return fmt.Sprintf("%s%d", *prefix, i) }
	if *topics == 1 {
		name = func(int) string { return *prefix }
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "scaleprobe:", err)
		os.Exit(1)
	}
	seeds := strings.Split(*bootstrap, ",")
	switch *mode {
	case "create":
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequestTimeoutOverhead(min(*timeout, 15*time.Minute)))
		if err != nil {
			fail(err)
		}
		for i := 0; i < *topics; i += *batch {
			req := kmsg.NewPtrCreateTopicsRequest()
			req.TimeoutMillis = int32(timeout.Milliseconds())
			for j := i; j < min(i+*batch, *topics); j++ {
				t := kmsg.NewCreateTopicsRequestTopic()
				t.Topic, t.NumPartitions, t.ReplicationFactor = name(j), int32(*parts), int16(*rf)
				req.Topics = append(req.Topics, t)
			}
			for {
				resp, err := req.RequestWith(ctx, cl)
				if err != nil {
					fail(err)
				}
				retry := false
				for _, t := range resp.Topics {
					switch err := kerr.ErrorForCode(t.ErrorCode); {
					case err == nil, errors.Is(err, kerr.TopicAlreadyExists):
					case errors.Is(err, kerr.InvalidReplicationFactor), kerr.IsRetriable(err):
						retry = true // brokers not all registered yet
					default:
						fail(fmt.Errorf("create %s: %v %s", t.Topic, err, deref(t.ErrorMessage)))
					}
				}
				if !retry {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
		}
		cl.Close()
		fmt.Printf("created %.2f\n", time.Since(start).Seconds())
		fallthrough
	case "all":
		var recs []*kgo.Record
		for i := range *topics {
			for p := range *parts {
				recs = append(recs, &kgo.Record{Topic: name(i), Partition: int32(p), Value: []byte("x")})
			}
		}
		produce(ctx, seeds, recs, fail)
		fmt.Printf("acked %.2f\n", time.Since(start).Seconds())
	case "one":
		produce(ctx, seeds, []*kgo.Record{{Topic: name(*topics - 1), Partition: int32(*parts - 1), Value: []byte("x")}}, fail)
		fmt.Printf("acked %.2f\n", time.Since(start).Seconds())
	case "serving":
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			fail(err)
		}
		defer cl.Close()
		var req kmsg.ListOffsetsRequest
		for i := range *topics {
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = name(i)
			for p := range *parts {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = int32(p), -1, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
		}
		for {
			resp, err := req.RequestWith(ctx, cl)
			left := 0
			if err == nil {
				for _, t := range resp.Topics {
					for _, p := range t.Partitions {
						if p.ErrorCode != 0 {
							left++
						}
					}
				}
			}
			if err == nil && left == 0 {
				break
			}
			if ctx.Err() != nil {
				fail(fmt.Errorf("%d partitions not serving: %v", left, err))
			}
			time.Sleep(time.Second)
		}
		fmt.Printf("serving %.2f\n", time.Since(start).Seconds())
	default:
		fail(fmt.Errorf("mode %q: want create, all, one or serving", *mode))
	}
}

// produce sends recs (acks=all, idempotent: the client's defaults) and
// retries each until acknowledged, or the context ends.
func produce(ctx context.Context, seeds []string, recs []*kgo.Record, fail func(error)) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxBufferedRecords(len(recs)+1), kgo.ProducerLinger(0), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		fail(err)
	}
	defer cl.Close()
	for len(recs) > 0 {
		var again []*kgo.Record
		for _, r := range cl.ProduceSync(ctx, recs...) {
			if r.Err != nil {
				if ctx.Err() != nil {
					fail(fmt.Errorf("%d records not acknowledged: %v", len(recs), r.Err))
				}
				again = append(again, &kgo.Record{Topic: r.Record.Topic, Partition: r.Record.Partition, Value: r.Record.Value})
			}
		}
		if len(again) > 0 {
			time.Sleep(250 * time.Millisecond)
		}
		recs = again
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
