// Package clock is the control plane's time: the periodic loops above Raft
// (the coordinators' retries, the controller's reassignment and leader
// balance, registration, the replicas' repair, retention and log-start
// passes) take their tickers from a Clock instead of the time package, so
// that a test or the whole-node simulation can drive them. Production uses
// Real; Fake moves only when told.
package clock

import (
	"slices"
	"sync"
	"time"
)

// Clock makes tickers and timers and tells the time.
type Clock interface {
	Now() time.Time
	// NewTicker is time.NewTicker's: a tick every d on C, ticks dropped
	// while the reader is behind.
	NewTicker(d time.Duration) *Ticker
	// After is time.After's.
	After(d time.Duration) <-chan time.Time
	// NewTimer is time.NewTimer's: one time on C after d, unless stopped.
	NewTimer(d time.Duration) *Timer
	// AfterFunc is time.AfterFunc's: f in its own goroutine after d,
	// unless stopped; the Timer's C is nil.
	AfterFunc(d time.Duration, f func()) *Timer
}

// Timer is a timer of a Clock.
type Timer struct {
	C     <-chan time.Time
	stop  func() bool
	reset func(time.Duration) bool
}

// Stop is time.Timer's: false if the timer had already fired or been
// stopped. As with Go 1.23's timers, no stale time is received from C
// after Stop or Reset returns.
func (t *Timer) Stop() bool { return t.stop() }

// Reset is time.Timer's: the timer fires d from now; false if it had
// already fired or been stopped.
func (t *Timer) Reset(d time.Duration) bool { return t.reset(d) }

// Ticker is a ticker of a Clock.
type Ticker struct {
	C    <-chan time.Time
	stop func()
}

// Stop turns the ticker off; no tick is sent after it returns.
func (t *Ticker) Stop() { t.stop() }

// Real is the wall clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTicker(d time.Duration) *Ticker {
	t := time.NewTicker(d)
	return &Ticker{C: t.C, stop: t.Stop}
}

func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func (realClock) NewTimer(d time.Duration) *Timer {
	t := time.NewTimer(d)
	return &Timer{C: t.C, stop: t.Stop, reset: t.Reset}
}

func (realClock) AfterFunc(d time.Duration, f func()) *Timer {
	t := time.AfterFunc(d, f)
	return &Timer{stop: t.Stop, reset: t.Reset}
}

// OrReal is c, or Real if c is nil (a Config left zero).
func OrReal(c Clock) Clock {
	if c == nil {
		return Real()
	}
	return c
}

// Fake is a Clock that moves only by Advance: every ticker and timer due
// by then fires, in deadline order (ties in creation order), so a run
// driven by one goroutine repeats exactly.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	seq     uint64
	waiters []*fakeWaiter
}

type fakeWaiter struct {
	seq    uint64
	at     time.Time
	every  time.Duration // 0: a one-shot timer
	c      chan time.Time
	f      func() // AfterFunc's: run in its own goroutine instead of a send on c
	closed bool
}

// NewFake returns a Fake clock at start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) add(d, every time.Duration) *fakeWaiter {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	w := &fakeWaiter{seq: f.seq, at: f.now.Add(d), every: every, c: make(chan time.Time, 1)}
	f.waiters = append(f.waiters, w)
	return w
}

func (f *Fake) NewTicker(d time.Duration) *Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	w := f.add(d, d)
	return &Ticker{C: w.c, stop: func() {
		f.mu.Lock()
		w.closed = true
		f.mu.Unlock()
	}}
}

func (f *Fake) After(d time.Duration) <-chan time.Time { return f.add(d, 0).c }

func (f *Fake) NewTimer(d time.Duration) *Timer {
	w := f.add(d, 0)
	return &Timer{C: w.c, stop: func() bool { return f.stopTimer(w) }, reset: func(d time.Duration) bool { return f.resetTimer(w, d) }}
}

func (f *Fake) AfterFunc(d time.Duration, fn func()) *Timer {
	w := f.add(d, 0)
	f.mu.Lock()
	w.f = fn
	f.mu.Unlock()
	return &Timer{stop: func() bool { return f.stopTimer(w) }, reset: func(d time.Duration) bool { return f.resetTimer(w, d) }}
}

// stopTimer disarms w and drains a time it sent and nobody read (Go
// 1.23's Stop: nothing stale is received after it).
func (f *Fake) stopTimer(w *fakeWaiter) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	active := !w.closed
	w.closed = true
	select {
	case <-w.c:
	default:
	}
	return active
}

// resetTimer re-arms w to fire d from now.
func (f *Fake) resetTimer(w *fakeWaiter, d time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	active := !w.closed
	select {
	case <-w.c:
	default:
	}
	if w.closed {
		// It goes back in (Advance may have dropped it from the list),
		// behind every waiter made before now for the same instant.
		f.seq++
		w.seq = f.seq
		w.closed = false
		if !slices.Contains(f.waiters, w) {
			f.waiters = append(f.waiters, w)
		}
	}
	w.at = f.now.Add(d)
	return active
}

// Waiters is the number of tickers and timers not yet stopped or fired:
// a test waits for a loop to have set its ticker before advancing.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, w := range f.waiters {
		if !w.closed {
			n++
		}
	}
	return n
}

// Advance moves the clock by d, firing what falls due on the way.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	end := f.now.Add(d)
	for {
		f.waiters = slices.DeleteFunc(f.waiters, func(w *fakeWaiter) bool { return w.closed })
		var next *fakeWaiter
		for _, w := range f.waiters {
			if !w.at.After(end) && (next == nil || w.at.Before(next.at) || w.at.Equal(next.at) && w.seq < next.seq) {
				next = w
			}
		}
		if next == nil {
			break
		}
		f.now = next.at
		if next.f != nil {
			go next.f()
		} else {
			select {
			case next.c <- next.at:
			default: // the reader is behind: the tick is dropped, as time.Ticker's
			}
		}
		if next.every > 0 {
			next.at = next.at.Add(next.every)
		} else {
			next.closed = true
		}
	}
	f.now = end
}
