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

func TestFakeTimerStopReset(t *testing.T) {
	start := time.Unix(0, 0)
	f := NewFake(start)
	tm := f.NewTimer(10 * time.Millisecond)
	f.Advance(10 * time.Millisecond)
	// Fired and not read: Stop reports it inactive and drains it.
	if tm.Stop() {
		t.Fatal("Stop of a fired timer reported it active")
	}
	select {
	case <-tm.C:
		t.Fatal("a stale time after Stop")
	default:
	}
	// Reset re-arms it, from now.
	if tm.Reset(5 * time.Millisecond) {
		t.Fatal("Reset of a stopped timer reported it active")
	}
	f.Advance(4 * time.Millisecond)
	select {
	case <-tm.C:
		t.Fatal("fired early after Reset")
	default:
	}
	f.Advance(time.Millisecond)
	if at := <-tm.C; !at.Equal(start.Add(15 * time.Millisecond)) {
		t.Fatalf("fired at %v", at)
	}
	// Reset of an armed timer moves it; Stop then Reset keeps one entry.
	tm.Reset(10 * time.Millisecond)
	if !tm.Reset(20 * time.Millisecond) {
		t.Fatal("Reset of an armed timer reported it inactive")
	}
	tm.Stop()
	tm.Reset(20 * time.Millisecond)
	if f.Waiters() != 1 {
		t.Fatalf("waiters %d", f.Waiters())
	}
	f.Advance(19 * time.Millisecond)
	select {
	case <-tm.C:
		t.Fatal("fired at the first Reset's time")
	default:
	}
	f.Advance(time.Millisecond)
	<-tm.C
	f.Advance(time.Second)
	select {
	case <-tm.C:
		t.Fatal("a one-shot timer fired twice")
	default:
	}
}

func TestFakeAfterFunc(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	ran := make(chan time.Time, 2)
	f.AfterFunc(time.Second, func() { ran <- f.Now() })
	stopped := f.AfterFunc(time.Second, func() { ran <- time.Time{} })
	if !stopped.Stop() {
		t.Fatal("Stop of an armed AfterFunc reported it inactive")
	}
	f.Advance(999 * time.Millisecond)
	select {
	case <-ran:
		t.Fatal("ran early")
	default:
	}
	f.Advance(time.Millisecond)
	if at := <-ran; at.IsZero() {
		t.Fatal("the stopped function ran")
	}
	select {
	case <-ran:
		t.Fatal("the stopped function ran")
	default:
	}
}

func TestRealTimer(t *testing.T) {
	c := Real()
	tm := c.NewTimer(time.Millisecond)
	<-tm.C
	done := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(done) })
	<-done
	if c.AfterFunc(time.Hour, func() {}).Stop() != true {
		t.Fatal("Stop of an armed AfterFunc reported it inactive")
	}
}
