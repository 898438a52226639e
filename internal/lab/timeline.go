package lab

import (
	"sync"
	"time"
)

// A row's timeline: what happened when (the faults injected, and the steps
// around them: a new leader, a restart), and how many records had been
// acknowledged over the row's time. The console charts it: the
// acknowledgements' curve with the faults on it shows what each fault did
// to the producer (acks=0 sails through a dropped connection, acks=all
// stalls until the new leader).

// Event is one thing that happened in a row.
type Event struct {
	At    float64 `json:"at"`    // seconds from the row's start
	What  string  `json:"what"`  // what happened, e.g. "leader 2 killed"
	Fault bool    `json:"fault"` // an injected fault (else a step of the scenario)
}

// Point is the count of records acknowledged at a moment of a row.
type Point struct {
	At    float64 `json:"at"`    // seconds from the row's start
	Acked int64   `json:"acked"` // records acknowledged so far
}

// Bounds on a timeline: points are thinned (every other one dropped, the
// sampling interval doubled) when there would be more.
const (
	maxEvents      = 32
	maxPoints      = 400
	sampleInterval = 50 * time.Millisecond
)

// timeline records a row's events and acknowledgements; timed makes one
// per row and copies it into the row when the row ends.
type timeline struct {
	start time.Time

	mu     sync.Mutex
	events []Event
	points []Point
	every  time.Duration
	stop   chan struct{}
	done   chan struct{}
}

func newTimeline() *timeline {
	return &timeline{start: time.Now(), every: sampleInterval}
}

func (t *timeline) since() float64 {
	return float64(time.Since(t.start).Microseconds()) / 1e6
}

// mark records an event now.
func (t *timeline) mark(what string, fault bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.events) < maxEvents {
		t.events = append(t.events, Event{At: t.since(), What: what, Fault: fault})
	}
}

// follow samples acked (a producer run's count) until the row ends; a
// second call is ignored.
func (t *timeline) follow(acked func() int64) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stop != nil {
		return
	}
	t.stop, t.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(t.done)
		for {
			t.sample(acked())
			t.mu.Lock()
			every := t.every
			t.mu.Unlock()
			select {
			case <-t.stop:
				t.sample(acked())
				return
			case <-time.After(every):
			}
		}
	}()
}

func (t *timeline) sample(n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.points) >= maxPoints {
		kept := t.points[:0]
		for i, p := range t.points {
			if i%2 == 0 {
				kept = append(kept, p)
			}
		}
		t.points = kept
		t.every *= 2
	}
	t.points = append(t.points, Point{At: t.since(), Acked: n})
}

// end stops the sampling and fills r's timeline.
func (t *timeline) end(r *Row) {
	t.mu.Lock()
	stop, done := t.stop, t.done
	t.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r.Events = append([]Event(nil), t.events...)
	r.Acks = append([]Point(nil), t.points...)
}
