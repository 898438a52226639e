package clock

import (
	"testing"
	"time"
)

func TestFakeFiresInOrder(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tk := f.NewTicker(10 * time.Millisecond)
	after := f.After(25 * time.Millisecond)
	if f.Waiters() != 2 {
		t.Fatalf("waiters %d", f.Waiters())
	}
	f.Advance(9 * time.Millisecond)
	select {
	case <-tk.C:
		t.Fatal("ticked early")
	default:
	}
	f.Advance(time.Millisecond)
	if at := <-tk.C; !at.Equal(time.Unix(0, 0).Add(10 * time.Millisecond)) {
		t.Fatalf("tick at %v", at)
	}
	// Two intervals pass while the reader is away: one tick waits, the
	// other is dropped, as with time.Ticker.
	f.Advance(20 * time.Millisecond)
	<-tk.C
	select {
	case <-tk.C:
		t.Fatal("a second tick queued")
	default:
	}
	select {
	case at := <-after:
		if !at.Equal(time.Unix(0, 0).Add(25 * time.Millisecond)) {
			t.Fatalf("timer at %v", at)
		}
	default:
		t.Fatal("timer did not fire")
	}
	tk.Stop()
	f.Advance(time.Second)
	select {
	case <-tk.C:
		t.Fatal("stopped ticker ticked")
	default:
	}
	if f.Waiters() != 0 || !f.Now().Equal(time.Unix(0, 0).Add(time.Second+30*time.Millisecond)) {
		t.Fatalf("waiters %d now %v", f.Waiters(), f.Now())
	}
}

func TestRealTicks(t *testing.T) {
	c := OrReal(nil)
	tk := c.NewTicker(time.Millisecond)
	defer tk.Stop()
	<-tk.C
	<-c.After(time.Millisecond)
}
