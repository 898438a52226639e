package broker

import (
	"log/slog"
	"testing"
)

// TestMemoryLimitSteps: the derived limit is set when first made, again
// only when the replicas or held budgets move it by a step, and close
// puts back the limit found.
func TestMemoryLimitSteps(t *testing.T) {
	const found = 1 << 40
	cur := int64(found)
	var sets []int64
	set := func(n int64) int64 {
		prev := cur
		if n >= 0 {
			cur = n
			sets = append(sets, n)
		}
		return prev
	}
	m := newMemoryLimit(0, set, slog.New(slog.DiscardHandler))
	for i := 1; i <= 1000; i++ {
		m.setReplicas(i) // one open after another
	}
	m.hold(8 << 20) // a cleaner's offset map
	for i := 999; i >= 0; i-- {
		m.setReplicas(i)
	}
	want := []int64{DerivedMemoryLimit(0, 0), DerivedMemoryLimit(1, 0), DerivedMemoryLimit(513, 0),
		DerivedMemoryLimit(1000, 8<<20), DerivedMemoryLimit(512, 8<<20), DerivedMemoryLimit(0, 8<<20)}
	if len(sets) != len(want) {
		t.Fatalf("limits set %v, want %v", sets, want)
	}
	for i := range want {
		if sets[i] != want[i] {
			t.Fatalf("limits set %v, want %v", sets, want)
		}
	}
	// The live heap's floor raises it and lets it down again.
	m.setLive(100<<20, 4<<20)
	m.setLive(10<<20, 4<<20)
	want = append(want, 220<<20, DerivedMemoryLimit(0, 8<<20)) // 100 + 100 (no replicas: all of it the working set) + 4 + 16
	if len(sets) != len(want) || sets[len(sets)-2] != want[len(want)-2] || sets[len(sets)-1] != want[len(want)-1] {
		t.Fatalf("limits set %v, want %v", sets, want)
	}
	if m.limit() != cur {
		t.Fatalf("limit() %d, the runtime's %d", m.limit(), cur)
	}
	m.close()
	if cur != found {
		t.Fatalf("after close the limit is %d, want the %d found", cur, found)
	}
	m.setReplicas(5000) // a late report after close sets nothing
	if cur != found {
		t.Fatalf("a report after close set the limit to %d", cur)
	}
}
