// Package testwait is how tests wait: for a condition, never for a fixed
// time. A test that sleeps "long enough" is slow on a quiet machine and
// flaky on a loaded one; one that waits for the state it needs is neither.
//
// For and Until check the condition at once and then again after a pause
// that starts at a millisecond and doubles up to 100 ms (a condition that
// holds soon costs almost nothing; one that takes seconds costs a few
// dozen checks), until it holds or the timeout passes. Where the code
// under test offers a channel or a callback to wait on, a test should use
// that instead.
package testwait

import (
	"context"
	"testing"
	"time"
)

// Pacing of the checks.
const (
	firstPause = time.Millisecond
	maxPause   = 100 * time.Millisecond
)

// Poll calls ok until it returns true or timeout passes and reports
// whether ok held. For loops that decide for themselves what a timeout
// means.
func Poll(timeout time.Duration, ok func() bool) bool {
	return PollContext(context.Background(), timeout, ok)
}

// PollContext is Poll that also stops when ctx ends.
func PollContext(ctx context.Context, timeout time.Duration, ok func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pause := firstPause
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		if ok() {
			return true
		}
		t.Reset(pause)
		select {
		case <-ctx.Done():
			return ok() // one last look: it may have held as the time ran out
		case <-t.C:
		}
		pause = min(2*pause, maxPause)
	}
}

// Until waits for cond, failing tb (Fatalf) after timeout with what.
func Until(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Poll(timeout, cond) {
		tb.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// For waits until fn returns nil, failing tb (Fatalf) after timeout with
// what and fn's last error.
func For(tb testing.TB, timeout time.Duration, what string, fn func() error) {
	tb.Helper()
	var last error
	if !Poll(timeout, func() bool { last = fn(); return last == nil }) {
		tb.Fatalf("timed out after %v waiting for %s: %v", timeout, what, last)
	}
}
