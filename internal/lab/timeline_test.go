package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestTimeline: events are kept in order up to maxEvents; a nil timeline
// (a row outside timed) ignores marks; the acknowledgement curve ends at
// the count the row finished with.
func TestTimeline(t *testing.T) {
	var none *timeline
	none.mark("ignored", true)
	none.follow(func() int64 { return 1 })

	tl := newTimeline()
	for i := range maxEvents + 5 {
		tl.mark(strings.Repeat("e", i+1), i%2 == 0)
	}
	var acked atomic.Int64
	tl.follow(acked.Load)
	tl.follow(func() int64 { return -99 }) // a second call is ignored
	for i := range 20 {
		acked.Store(int64(i * 10))
	}
	acked.Store(1234)
	var r Row
	tl.end(&r)
	if len(r.Events) != maxEvents || r.Events[0].What != "e" || !r.Events[0].Fault || r.Events[1].Fault {
		t.Fatalf("events: %d, first %+v", len(r.Events), r.Events[0])
	}
	for i := 1; i < len(r.Events); i++ {
		if r.Events[i].At < r.Events[i-1].At {
			t.Fatalf("events out of order: %+v", r.Events)
		}
	}
	if len(r.Acks) < 2 || r.Acks[len(r.Acks)-1].Acked != 1234 {
		t.Fatalf("acks %+v: want a last point at 1234", r.Acks)
	}
	for _, p := range r.Acks {
		if p.Acked < 0 {
			t.Fatalf("the second follow sampled: %+v", r.Acks)
		}
	}
	// The row's copy is its own.
	r.Events[0].What = "changed"
	if tl.events[0].What != "e" {
		t.Fatal("end shares the timeline's events")
	}
}

// TestTimelineThinning: past maxPoints every other point goes and the
// sampling slows down, so a long row's curve stays bounded and spans the
// whole row.
func TestTimelineThinning(t *testing.T) {
	tl := newTimeline()
	for i := range 3 * maxPoints {
		tl.sample(int64(i))
	}
	var r Row
	tl.end(&r)
	if len(r.Acks) > maxPoints || len(r.Acks) < maxPoints/2 {
		t.Fatalf("%d points after %d samples", len(r.Acks), 3*maxPoints)
	}
	if r.Acks[0].Acked != 0 || r.Acks[len(r.Acks)-1].Acked != 3*maxPoints-1 {
		t.Fatalf("curve from %d to %d", r.Acks[0].Acked, r.Acks[len(r.Acks)-1].Acked)
	}
	if !slices.IsSortedFunc(r.Acks, func(a, b Point) int { return int(a.Acked - b.Acked) }) {
		t.Fatal("points out of order")
	}
	if tl.every <= sampleInterval {
		t.Fatalf("sampling interval %v after thinning", tl.every)
	}
}

// TestResultJudge: a result is OK only with rows, all passing; Decode
// reads back what a run writes.
func TestResultJudge(t *testing.T) {
	var empty Result
	empty.Judge()
	if empty.OK {
		t.Fatal("a result without rows is OK")
	}
	res := Result{Records: 10, Seconds: 3, Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Rows: []Row{
		{Scenario: "s", Setting: "a", Default: true, Expect: ExpectNothing, Injected: true, Acked: 10, Fault: "cut",
			Events: []Event{{At: 0.5, What: "cut", Fault: true}}, Acks: []Point{{At: 1, Acked: 10}}},
		{Scenario: "s", Setting: "b", Expect: ExpectLoss, Injected: true, Acked: 10, Lost: 2},
	}}
	res.Judge()
	if !res.OK || res.Rows[0].Profile != "holdfast" || res.Rows[1].Profile != "kafka" {
		t.Fatalf("judged: %+v", res)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(strings.NewReader(string(b)))
	if err != nil || !back.OK || len(back.Rows) != 2 || !back.Started.Equal(res.Started) || back.Rows[0].Events[0] != res.Rows[0].Events[0] {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	// One failing row fails the result, whatever the file said.
	res.Rows[1].Lost = 0
	b, _ = json.Marshal(res)
	if back, err = Decode(strings.NewReader(string(b))); err != nil || back.OK || back.Rows[1].Pass {
		t.Fatalf("a row that lost nothing under loss: %+v %v", back, err)
	}
}

func TestClip(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{strings.Repeat("a", 40), strings.Repeat("a", 40)},
		{strings.Repeat("a", 41), strings.Repeat("a", 40) + "..."},
		// A rune across byte 40 is not cut in half.
		{strings.Repeat("a", 39) + "é" + "z", strings.Repeat("a", 39) + "..."},
	} {
		if got := clip(c.in); got != c.want {
			t.Errorf("clip(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestScenariosAndRun: every scenario is named once and titled; Run
// refuses an unknown name before starting anything and lists the known
// ones.
func TestScenariosAndRun(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Scenarios() {
		if s.Name == "" || s.Title == "" || s.run == nil || seen[s.Name] {
			t.Fatalf("scenario %+v", s)
		}
		seen[s.Name] = true
	}
	_, err := Run(context.Background(), Config{Scenarios: []string{"acks0-drop", "no-such"}, Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), `no scenario "no-such"`) || !strings.Contains(err.Error(), "bit-flip") {
		t.Fatalf("unknown scenario: %v", err)
	}
}

// TestTimed: a row run through timed gets its duration, its timeline and
// its error; failedAll marks every row.
func TestTimed(t *testing.T) {
	var lines []string
	e := &env{scenario: "s", cfg: Config{Progress: func(l string) { lines = append(lines, l) }}}
	r := e.timed(Row{Setting: "x"}, func(r *Row) error {
		r.mark("step", false)
		r.Acked = 5
		return errors.New("broke")
	})
	if r.Error != "broke" || r.Acked != 5 || len(r.Events) != 1 || r.Events[0].What != "step" || r.Seconds <= 0 || r.tl != nil {
		t.Fatalf("timed row %+v", r)
	}
	if len(lines) != 1 || lines[0] != "s / x" {
		t.Fatalf("progress %q", lines)
	}
	rows := failedAll([]Row{{Setting: "a"}, {Setting: "b"}}, errors.New("no cluster"))
	for _, r := range rows {
		r.judge()
		if r.Pass || r.Verdict != "ERROR: no cluster" {
			t.Fatalf("failed row %+v", r)
		}
	}
}

// TestTimelineConcurrent: a scenario marks events from several
// goroutines while the sampler runs (the race detector's case); every
// mark up to maxEvents is kept, and the curve never goes down.
func TestTimelineConcurrent(t *testing.T) {
	tl := newTimeline()
	var acked atomic.Int64
	tl.follow(acked.Load)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 6 {
				tl.mark(fmt.Sprintf("g%d-%d", g, i), g == 0)
				acked.Add(1)
			}
		})
	}
	wg.Wait()
	var r Row
	tl.end(&r)
	if len(r.Events) != 24 {
		t.Fatalf("%d events, want 24", len(r.Events))
	}
	for i := 1; i < len(r.Acks); i++ {
		if r.Acks[i].Acked < r.Acks[i-1].Acked || r.Acks[i].At < r.Acks[i-1].At {
			t.Fatalf("curve goes back: %+v", r.Acks)
		}
	}
	if last := r.Acks[len(r.Acks)-1].Acked; last != 24 {
		t.Fatalf("last point %d, want 24", last)
	}
}
