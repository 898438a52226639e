package faulttest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClusterGrayLeaderLatency measures, on real processes in network
// namespaces, what a producer waits when the leader of its partition (and,
// in the second case, the controller as well) is cut from its peers for
// 22 s while clients still reach it (blackhole routes between the nodes
// only), as issue 26's lab did. One franz-go producer with its defaults
// (idempotent, acks=all) writes one record at a time; its worst latency
// is logged for docs/faults.md, and every acknowledged record must be
// read back once. A benchmark: it runs only with HOLDFAST_GRAY_BENCH=1;
// HOLDFAST_GRAY_FROM=<commit> runs an older tree's binary instead
// (buildRelease), for the "before" column.
func TestClusterGrayLeaderLatency(t *testing.T) {
	if os.Getenv("HOLDFAST_GRAY_BENCH") == "" {
		t.Skip("a benchmark: set HOLDFAST_GRAY_BENCH=1")
	}
	var bin string
	if from := os.Getenv("HOLDFAST_GRAY_FROM"); from != "" {
		bin = buildRelease(t, from)
	}
	for _, ctrl := range []bool{false, true} {
		t.Run(map[bool]string{false: "partition-leader", true: "controller"}[ctrl], func(t *testing.T) {
			c := Start(t, Options{Nodes: 3, Cluster: true, Bin: bin})
			if !c.Netns() {
				t.Skip("needs network namespaces")
			}
			const topic = "gray"
			createTopic(t, c, topic, 3, 3)
			waitReplicasInSync(t, c, topic, 30*time.Second)
			md, err := c.Admin().BrokerMetadata(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			// The partition to write: one the controller leads, or one
			// it does not.
			var part int32 = -1
			var cut int
			for p := range int32(3) {
				l := leaderOf(t, c, topic, p)
				if (l == int(md.Controller)) == ctrl {
					part, cut = p, l
					break
				}
			}
			if part < 0 {
				t.Skipf("no partition fits (controller %d)", md.Controller)
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.Bootstrap(), ",")...), kgo.DefaultProduceTopic(topic),
				kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var (
				mu    sync.Mutex
				acked int
				worst time.Duration
				perr  error
			)
			stop, done := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					err := cl.ProduceSync(ctx, &kgo.Record{Partition: part, Value: []byte(strconv.Itoa(i))}).FirstErr()
					cancel()
					mu.Lock()
					if err != nil {
						perr = err
						mu.Unlock()
						return
					}
					acked, worst = i+1, max(worst, time.Since(start))
					mu.Unlock()
				}
			}()
			time.Sleep(2 * time.Second) // load before the fault: the cut lands on a busy leader
			for i := 1; i <= 3; i++ {
				if i != cut {
					c.PartitionPair(cut, i)
				}
			}
			t.Logf("node %d (leader of %s/%d, controller: %v) cut from its peers", cut, topic, part, ctrl)
			time.Sleep(22 * time.Second) // the gray fault lasts past the session timeout and the clients' retries
			for i := 1; i <= 3; i++ {
				if i != cut {
					c.HealPair(cut, i)
				}
			}
			time.Sleep(5 * time.Second) // load after the heal, before the check
			close(stop)
			<-done
			mu.Lock()
			defer mu.Unlock()
			if perr != nil {
				t.Fatalf("produce: %v", perr)
			}
			t.Logf("%d records acknowledged; the producer's worst latency: %v", acked, worst)
			got := readAll(t, c, topic, part)
			if len(got) != acked {
				t.Fatalf("read %d records back, %d were acknowledged", len(got), acked)
			}
			for i, v := range got {
				if v != strconv.Itoa(i) {
					t.Fatalf("record %d is %q: lost, duplicated or reordered", i, v)
				}
			}
		})
	}
}

// readAll reads topic/part from the start up to its end.
func readAll(t *testing.T, c *Cluster, topic string, part int32) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.Bootstrap(), ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := c.Admin()
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, part)
	var out []string
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for int64(len(out)) < end.Offset {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading back after %d: %v", len(out), err)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	return out
}
