package tiered_test

import (
	"fmt"
	"testing"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/metrics"
	"holdfast/internal/wire"
)

// TestTieredCopyThrottle: with remote.log.manager.copy.max.bytes.per.second
// the uploads wait for the rate (their waits are counted) and still
// upload every closed segment; the metric shows the wait. 8 KiB/s against a backlog of more
// than 12 KiB: the bucket (one second of the rate) runs dry.
func TestTieredCopyThrottle(t *testing.T) {
	s := startObjectStore(t)
	n := brokertest.Start(t, func(c *broker.Config, l *wire.Limits) {
		withTiered(s)(c, l)
		c.Tiered.CopyMaxBytesPerSecond = 8 << 10
	})
	const topic = "tiered-throttle"
	n.CreateTopic(topic, 1, tieredTopic())
	s.kill() // a backlog first, uploaded in one pass once the store is back
	produce(t, n.Client(), topic, 0, 1500)
	stats := n.B.TieredStats()
	brokertest.Await(t, "a backlog of closed segments", func() error {
		// Over 12 KiB: more than the bucket holds (8 KiB) plus what it
		// refills while the pass reads them.
		if lag, segs := stats.CopyLagBytes.Load(), stats.CopyLagSegments.Load(); lag <= 12<<10 || segs < 4 {
			return fmt.Errorf("%d bytes in %d segments not uploaded", lag, segs)
		}
		return nil
	})
	s.start()
	brokertest.Await(t, "every closed segment uploaded", func() error {
		if lag, segs := stats.CopyLagBytes.Load(), stats.RemoteLogSegments.Load(); lag != 0 || segs < 4 {
			return fmt.Errorf("%d bytes not uploaded, %d segments remote", lag, segs)
		}
		return nil
	})
	if stats.CopyThrottledNanos.Load() <= 0 {
		t.Fatalf("uploaded %d bytes at 8 KiB/s without waiting", stats.CopyBytes.Load())
	}
	fam, err := metrics.New(n.B, wire.NewServer(n.B, wire.Limits{}, nil)).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fam {
		if f.GetName() == "holdfast_remote_copy_throttled_seconds_total" {
			if v := f.GetMetric()[0].GetCounter().GetValue(); v <= 0 {
				t.Fatalf("%s is %v", f.GetName(), v)
			}
			return
		}
	}
	t.Fatal("no holdfast_remote_copy_throttled_seconds_total")
}
