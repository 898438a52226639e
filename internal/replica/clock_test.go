package replica_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/clock"
	"holdfast/internal/wire"
)

// An idle cleaner thread looks for work again after log.cleaner.backoff.ms
// of the node's clock: with an hour's backoff and no kick, a dirty
// compacted log is cleaned once a fake clock passes the hour. With the
// backoff on the time package (before the clock seam) the test timed out.
func TestCleanerBackoffOnTheClock(t *testing.T) {
	clk := clock.NewFake(time.Now())
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
		c.Clock = clk
		c.LogCleaner = broker.DefaultCleanerConfig()
		c.LogCleaner.Backoff = time.Hour
		c.LogCleaner.DedupeBufferSize = 4 << 20
	})
	n.CreateTopic("c", 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact"), "segment.bytes": kadm.StringPtr("14"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.01")})
	keys := []string{"k0", "k1", "k0", "k1", "z"}
	produceEach(t, n.Client(), "c", times(len(keys), time.Now()), keys...)
	// Each look moves the clock an hour: the thread waits on a timer it
	// may set after a step, so one step alone could come too early.
	waitUntil(t, "a cleaner pass after the backoff", func() bool {
		clk.Advance(time.Hour)
		return n.B.CleanerStats().RecordsRemoved >= 2
	})
	if st := n.B.CleanerStats(); st.RecordsRemoved != 2 || st.Failed != 0 {
		t.Fatalf("cleaner stats %+v", st)
	}
}
