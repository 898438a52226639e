package share

import (
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"holdfast/internal/clock"
	"holdfast/internal/testwait"
)

// TestExpiryOnTheClock: the expiry loop and the acquisition locks run on
// ManagerConfig.Clock. On a fake clock an hour's lock runs out when the
// clock passes the hour (to the loop's next tick), not before, and the
// released records go to the next member. On the wall clock (before the
// clock seam) the lock would have held for an hour.
func TestExpiryOnTheClock(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	lg := &dataLog{}
	lg.append(t, 4)
	per := &memPersister{}
	m := NewManager(ManagerConfig{Persister: per, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Settings: func(string) GroupSettings {
			return GroupSettings{Settings: Settings{LockDuration: time.Hour, DeliveryCountLimit: 5, MaxInFlight: 100}, AutoReset: "earliest"}
		}})
	t.Cleanup(m.Close)
	testwait.Until(t, 10*time.Second, "the expiry loop's ticker on the clock", func() bool { return clk.Waiters() == 1 })
	acquire(t, m, lg, "a", 100)
	clk.Advance(time.Hour - expireEvery)
	if f := acquire(t, m, lg, "b", 100); len(f.Acquired) != 0 {
		t.Fatalf("b acquired %v while a's lock holds", f.Acquired)
	}
	avail := m.Available(testKey)
	// Past the hour, a tick at a time (a tick the loop has not read yet
	// is dropped by the next, as with time.Ticker): the loop expires the
	// lock and wakes the fetches (the Acquire below would expire it too:
	// the wait is for the loop's doing).
	testwait.Until(t, 10*time.Second, "the expiry loop to release a's lock", func() bool {
		select {
		case <-avail:
			return true
		default:
			clk.Advance(expireEvery)
			return false
		}
	})
	testwait.Until(t, 10*time.Second, "the expiry counted", func() bool { return m.Stats().LockTimeouts == 4 })
	if f := acquire(t, m, lg, "b", 100); !reflect.DeepEqual(f.Acquired, []Range{{0, 3, 2}}) {
		t.Fatalf("b acquired %v after a's lock ran out", f.Acquired)
	}
}
