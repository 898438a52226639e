package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
)

// TestClusterDirectIO runs log.direct.io on a 3-node cluster with franz-go:
// large batches acknowledged with acks=all are read back byte for byte (by
// a consumer tailing them, served from the read cache, and from the start),
// again after every node restarted, and some bytes went O_DIRECT (where the
// filesystem accepts it; elsewhere the page cache fallback is what ran).
func TestClusterDirectIO(t *testing.T) {
	nodes := startCluster(t, 3, func(c *broker.Config) { c.DirectIO = true })
	createClusterTopic(t, nodes, "dio", 2, 3, nil)
	directBytes := func() (n int64) {
		for _, nd := range nodes {
			n += nd.B.SegmentWrites().DirectBytes // each broker's own count
		}
		return n
	}
	before := directBytes()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := nodes[0].Client(kgo.DefaultProduceTopic("dio"), kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerLinger(5*time.Millisecond))
	const n = 1200
	value := func(i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("%06d|", i)), 8<<10/7) }
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: value(i)})
	}
	// readBack reads all n records from the start and checks them; first,
	// if not nil, is closed once it has read one.
	readBack := func(stage string, first chan<- struct{}) error {
		c := nodes[0].Client(kgo.ConsumeTopics("dio"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		defer c.Close()
		seen := map[string]bool{}
		var bad error
		for len(seen) < n && ctx.Err() == nil && bad == nil {
			fs := c.PollFetches(ctx)
			fs.EachError(func(_ string, _ int32, err error) { t.Logf("%s: fetch: %v", stage, err) })
			fs.EachRecord(func(r *kgo.Record) {
				var i int
				fmt.Sscan(string(r.Key), &i)
				if !bytes.Equal(r.Value, value(i)) && bad == nil {
					bad = fmt.Errorf("%s: record %d at %d/%d differs", stage, i, r.Partition, r.Offset)
				}
				seen[string(r.Key)] = true
				if first != nil {
					close(first)
					first = nil
				}
			})
		}
		if bad != nil {
			return bad
		}
		if len(seen) != n {
			return fmt.Errorf("%s: read %d of %d records", stage, len(seen), n)
		}
		return nil
	}
	read := func(stage string) {
		t.Helper()
		if err := readBack(stage, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A consumer tails the topic while it is produced: with direct I/O
	// the newest bytes are not in the page cache, and its fetches are
	// served from the read cache (a log keeps chunks while fetched from).
	cacheHits := func() (n int64) {
		for _, nd := range nodes {
			n += nd.B.ReadCacheStats().Hits // each broker's own cache
		}
		return n
	}
	hits := cacheHits()
	// The consumer tails before the bulk is written: a log keeps written
	// chunks only while fetches ask for them, so a consumer that started
	// late (a busy machine) read everything from the files.
	if err := cl.ProduceSync(ctx, rs[0]).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	tailing, first := make(chan error, 1), make(chan struct{})
	go func() { tailing <- readBack("tailing", first) }()
	select {
	case <-first:
	case err := <-tailing:
		t.Fatalf("tailing consumer ended before a record: %v", err)
	}
	if err := cl.ProduceSync(ctx, rs[1:]...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if err := <-tailing; err != nil {
		t.Fatal(err)
	}
	read("after produce")
	if directBytes() != before && cacheHits() == hits {
		t.Fatal("bytes went O_DIRECT but no fetch of them was served from the read cache")
	}
	if directBytes() == before {
		probe, err := os.OpenFile(filepath.Join(t.TempDir(), "probe"), os.O_CREATE|os.O_WRONLY|syscall.O_DIRECT, 0o644)
		if err == nil {
			probe.Close()
			t.Fatal("O_DIRECT works on this filesystem, but no byte was written with it")
		}
		t.Logf("this filesystem refuses O_DIRECT (%v): the page cache fallback ran", err)
	}
	for _, nd := range nodes {
		nd.Restart()
	}
	brokertest.Await(t, "leaders after the restart", func() error {
		_, err := nodes[0].Partition("dio", 1)
		return err
	})
	read("after restarting every node")
}
