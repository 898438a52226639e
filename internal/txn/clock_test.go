package txn

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/clock"
	"holdfast/internal/testwait"
)

// TestTimeoutLoopOnTheClock: the loop itself (not a test's call of
// AbortTimedOut) aborts a transaction past its timeout, at the first
// transaction.abort.timed.out.transaction.cleanup.interval.ms of the
// coordinator's clock after it: an hour here, of a fake clock that also
// tells the transactions' time. On the time package's ticker (before the
// clock seam) the test timed out.
func TestTimeoutLoopOnTheClock(t *testing.T) {
	r := newRig(t)
	clk := clock.NewFake(time.Unix(1000, 0))
	c := New(Config{AbortInterval: time.Hour}, r.logs, Options{IDs: r.ids, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Markers: func(context.Context, int64, int16, bool, []TopicPartition) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.markers = append(r.markers, marker{})
			return nil
		}})
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	pid, e0, err := c.InitProducerID(ctx, "slow", 1000, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddPartitions("slow", pid, e0, []TopicPartition{tp0})(ctx); err != nil {
		t.Fatal(err)
	}
	// The loop's ticker is the clock's only waiter once it runs.
	testwait.Until(t, 10*time.Second, "the timeout loop's ticker", func() bool { return clk.Waiters() == 1 })
	clk.Advance(time.Hour - time.Second)
	if in, _ := c.Describe("slow"); in.State != kmsg.TransactionStateOngoing {
		t.Fatalf("state %v before the loop's first tick", in.State)
	}
	clk.Advance(time.Second) // the tick: the transaction is an hour past its 1 s timeout
	testwait.Until(t, 10*time.Second, "the loop to abort the timed-out transaction", func() bool {
		in, _ := c.Describe("slow")
		c.mu.Lock()
		busy := c.txns["slow"].done != nil
		c.mu.Unlock()
		return in.State == kmsg.TransactionStateCompleteAbort && !busy
	})
	if in, _ := c.Describe("slow"); in.Epoch != e0+1 {
		t.Fatalf("epoch %d after the timeout abort, want %d", in.Epoch, e0+1)
	}
	if r.markerCount() != 1 {
		t.Fatalf("%d marker writes, want the abort's one", r.markerCount())
	}
}
