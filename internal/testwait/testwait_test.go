package testwait

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestPoll: a condition that holds at once is checked once; one that
// holds later is seen; one that never holds gives up at the timeout,
// with pauses that grow (a handful of checks, not one per millisecond).
// In a synctest bubble: the timeouts pass on the fake clock at once.
func TestPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		if !Poll(time.Second, func() bool { n++; return true }) || n != 1 {
			t.Fatalf("immediate: %d checks", n)
		}
		start := time.Now()
		n = 0
		if !Poll(time.Minute, func() bool { n++; return time.Since(start) >= 300*time.Millisecond }) {
			t.Fatal("a condition that holds after 300 ms was not seen")
		}
		if n > 15 {
			t.Fatalf("%d checks for 300 ms", n)
		}
		n = 0
		start = time.Now()
		if Poll(2*time.Second, func() bool { n++; return false }) {
			t.Fatal("a condition that never holds was reported held")
		}
		if d := time.Since(start); d != 2*time.Second || n > 40 {
			t.Fatalf("gave up after %v and %d checks", d, n)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if PollContext(ctx, time.Hour, func() bool { return false }) {
			t.Fatal("held with a done context")
		}
	})
}

// fakeTB records a Fatalf instead of stopping the test.
type fakeTB struct {
	testing.TB
	failed atomic.Value
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed.Store(format)
}

func TestUntilAndFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTB{TB: t}
		For(f, time.Second, "never", func() error { return errors.New("nope") })
		if f.failed.Load() == nil {
			t.Fatal("For did not fail")
		}
		g := &fakeTB{TB: t}
		i := 0
		Until(g, time.Second, "third time", func() bool { i++; return i == 3 })
		if g.failed.Load() != nil || i != 3 {
			t.Fatalf("Until: failed %v after %d checks", g.failed.Load(), i)
		}
	})
}
