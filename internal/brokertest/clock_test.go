package brokertest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/clock"
	"holdfast/internal/testwait"
	"holdfast/internal/wire"
)

// The control plane's periodic loops run on broker.Config.Clock
// (internal/clock): on a fake clock, retention - every
// log.retention.check.interval.ms, five minutes here - runs when the test
// moves the clock past the interval, and not before, with no wait of
// five minutes and no shortened interval.
func TestRetentionOnInjectedClock(t *testing.T) {
	clk := clock.NewFake(time.Now())
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
		c.Clock = clk
		c.RetentionCheckInterval = 5 * time.Minute
	})
	n.CreateTopic("aged", 1, map[string]*string{"cleanup.policy": kadm.StringPtr("delete"),
		"segment.bytes": kadm.StringPtr("14"), "retention.ms": kadm.StringPtr("60000")})
	cl := n.Client()
	old, now := time.Now().Add(-time.Hour), time.Now()
	for i, ts := range []time.Time{old, old, old, now} {
		// One batch per record: with segment.bytes 14, one segment each.
		r := &kgo.Record{Topic: "aged", Value: fmt.Appendf(nil, "r%d", i), Timestamp: ts}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := cl.ProduceSync(ctx, r).FirstErr()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	adm := n.Admin()
	start := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := adm.ListStartOffsets(ctx, "aged")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := l.Lookup("aged", 0)
		return o.Offset
	}
	if got := start(); got != 0 {
		t.Fatalf("log start %d before the clock moved: retention ran on the wall clock", got)
	}
	clk.Advance(5 * time.Minute)
	if !testwait.Poll(10*time.Second, func() bool { return start() == 3 }) {
		t.Fatalf("log start %d 10 s after the clock passed the retention interval, want 3", start())
	}
}
