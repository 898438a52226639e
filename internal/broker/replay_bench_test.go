package broker_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/testwait"
	"holdfast/internal/wire"
)

// TestOffsetsReplayMeasure measures start-up replay of __consumer_offsets
// after HOLDFAST_REPLAY_COMMITS offset commits (1M for the figure in
// docs/benchmarks.md) by 1000 groups, 10 partitions per commit, before
// and after the cleaner compacted the topic. A measurement, not a check:
// it runs only when asked.
//
//	HOLDFAST_REPLAY_COMMITS=1000000 go test ./internal/broker -run TestOffsetsReplayMeasure -v -timeout 30m
func TestOffsetsReplayMeasure(t *testing.T) {
	total, _ := strconv.Atoi(os.Getenv("HOLDFAST_REPLAY_COMMITS"))
	if total <= 0 {
		t.Skip("set HOLDFAST_REPLAY_COMMITS to measure __consumer_offsets replay (a benchmark, not a test)")
	}
	const groups, perCommit = 1000, 10
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
		fastCleaner(c)
		c.LogCleaner.Enable = false
		c.LogCleaner.DedupeBufferSize = 128 << 20
		c.OffsetsTopicPartitions = 10
		c.OffsetsTopicSegmentBytes = 1 << 20
	})
	n.CreateTopic("consumed", perCommit, nil)
	ctx := context.Background()
	adm := n.Admin()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	requests := int64(total / perCommit)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= requests {
					return
				}
				offs := kadm.Offsets{}
				for p := int32(0); p < perCommit; p++ {
					offs.AddOffset("consumed", p, i, -1)
				}
				resp, err := adm.CommitOffsets(ctx, fmt.Sprintf("group-%04d", i%groups), offs)
				if err == nil {
					err = resp.Error()
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d offset commits (%d requests) in %v", total, requests, time.Since(start).Round(time.Millisecond))
	size := func() (bytes int64) {
		for p := int32(0); p < 10; p++ {
			bytes += n.B.PartitionLog("__consumer_offsets", p).Size()
		}
		return bytes
	}
	replay := func() time.Duration {
		t.Helper()
		start := time.Now()
		n.Restart()
		testwait.Until(t, 5*time.Minute, "the groups loaded", n.B.GroupsLoaded)
		return time.Since(start)
	}
	before, sizeBefore := replay(), size()
	n.Cfg.LogCleaner.Enable = true
	n.Restart()
	cleanStart := time.Now()
	awaitCluster(t, "__consumer_offsets cleaned", func() error {
		for p := int32(0); p < 10; p++ {
			l := n.B.PartitionLog("__consumer_offsets", p)
			c, err := l.CleanableState(l.EndOffset(), math.MaxInt64)
			if err != nil {
				return err
			}
			if c.DirtyBytes > 0 {
				return fmt.Errorf("partition %d: %d dirty bytes", p, c.DirtyBytes)
			}
		}
		return nil
	})
	cleanTook := time.Since(cleanStart)
	after, sizeAfter := replay(), size()
	t.Logf("__consumer_offsets: %d MB replayed in %v before cleaning; cleaned in %v to %d MB, replayed in %v (%.1fx faster)",
		sizeBefore>>20, before.Round(time.Millisecond), cleanTook.Round(time.Millisecond), sizeAfter>>20, after.Round(time.Millisecond), before.Seconds()/after.Seconds())
	// What the groups see is the same.
	for g := 0; g < groups; g += 97 {
		resp, err := n.Admin().FetchOffsets(ctx, fmt.Sprintf("group-%04d", g))
		if err != nil {
			t.Fatal(err)
		}
		o, ok := resp.Lookup("consumed", 0)
		if want := int64(g) + (requests-1-int64(g))/groups*groups; !ok || o.Err != nil || (o.At != want && o.At != want-groups) {
			t.Fatalf("group %d: %+v, want %d", g, o, want)
		}
	}
}
