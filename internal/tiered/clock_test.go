package tiered_test

import (
	"testing"
	"time"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/clock"
	"holdfast/internal/testwait"
	"holdfast/internal/wire"
)

// TestUploadBackoffOnTheClock: the task runs every TaskInterval of the
// node's clock and a failed upload waits its backoff (500 ms, then
// doubled) on that clock. On a fake clock moved one task interval (100 ms)
// per pass: the first upload to a dead store fails, the next four passes
// skip the partition, the fifth retries (and fails: the backoff doubles
// to 1 s); with the store back, the tenth pass after that uploads. On the
// time package's ticker (before the clock seam) the passes ran on their
// own and the counts did not hold.
func TestUploadBackoffOnTheClock(t *testing.T) {
	s := startObjectStore(t)
	clk := clock.NewFake(time.Now())
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
		c.Tiered = s.config()
		c.Tiered.TaskInterval = 100 * time.Millisecond
		c.Tiered.RetryBackoffMax = time.Hour
		c.Clock = clk
	})
	const topic = "tiered-backoff"
	n.CreateTopic(topic, 1, tieredTopic())
	s.kill()
	produce(t, n.Client(), topic, 0, 1500) // 4096-byte segments: several closed
	st := n.B.TieredStats()
	// pass moves the clock one interval and waits for the task's pass: a
	// tick is read before the next is sent, none dropped.
	pass := func() {
		t.Helper()
		p := st.Passes.Load()
		clk.Advance(100 * time.Millisecond)
		testwait.Until(t, 60*time.Second, "a pass of the tiered task", func() bool { return st.Passes.Load() > p })
	}
	pass()
	if got := st.CopyErrors.Load(); got != 1 {
		t.Fatalf("copy errors %d after the first pass with the store down, want 1", got)
	}
	for i := range 4 {
		pass()
		if got := st.CopyErrors.Load(); got != 1 {
			t.Fatalf("copy errors %d at pass %d of the 500 ms backoff, want 1 (no retry)", got, i+2)
		}
	}
	pass()
	if got := st.CopyErrors.Load(); got != 2 {
		t.Fatalf("copy errors %d after the 500 ms backoff, want 2 (one retry)", got)
	}
	s.start()
	for i := range 9 {
		pass()
		if got := st.CopyRequests.Load(); got != 0 {
			t.Fatalf("%d uploads at pass %d of the 1 s backoff, want none", got, i+1)
		}
	}
	pass()
	if st.CopyRequests.Load() == 0 || st.CopyErrors.Load() != 2 {
		t.Fatalf("after the 1 s backoff: %d uploads, %d copy errors; want uploads and no new error", st.CopyRequests.Load(), st.CopyErrors.Load())
	}
}
