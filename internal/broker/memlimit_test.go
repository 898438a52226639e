package broker_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

// TestDerivedMemoryLimit: the derived limit is the base for an empty
// node, grows by MemoryLimitPerReplica per replica and by the held
// budgets, in whole steps, and never goes below what it covers.
func TestDerivedMemoryLimit(t *testing.T) {
	base := broker.DerivedMemoryLimit(0, 0)
	if base != broker.MemoryLimitBase {
		t.Fatalf("empty node: %d, want the base %d", base, broker.MemoryLimitBase)
	}
	if got := broker.DerivedMemoryLimit(-5, -1); got != base {
		t.Fatalf("negative inputs: %d, want the base %d", got, base)
	}
	prev := base
	for _, n := range []int{1, 511, 512, 513, 10_000, 20_000, 100_000} {
		for _, held := range []int64{0, 1, 128 << 20} {
			got := broker.DerivedMemoryLimit(n, held)
			need := int64(broker.MemoryLimitBase) + int64(n)*broker.MemoryLimitPerReplica + held
			if got < need || got-need >= 4<<20 || got%(4<<20) != 0 {
				t.Fatalf("%d replicas, %d held: %d, want %d rounded up to 4 MiB", n, held, got, need)
			}
		}
		if got := broker.DerivedMemoryLimit(n, 0); got < prev {
			t.Fatalf("%d replicas: %d, below the limit of fewer replicas (%d)", n, got, prev)
		} else {
			prev = got
		}
	}
	// The live heap's floor: the live heap, as much again of what is above
	// the replicas' share (the working set), the runtime's overhead and the
	// slack, in steps; never below the derived.
	const slack = broker.MemoryLimitSlack
	for _, c := range []struct {
		derived, live, overhead int64
		replicas                int
		want                    int64
	}{
		{64 << 20, 0, 0, 0, 64 << 20},
		{64 << 20, 30 << 20, 0, 0, 76 << 20},                // 30 + 30 + 16 MiB
		{72 << 20, 55 << 20, 10 << 20, 1000, 132 << 20},     // 1,000 busy partitions: 55 + (55 - 7.8) + 10 + 16, rounded up
		{224 << 20, 127 << 20, 20 << 20, 20_000, 224 << 20}, // 20,000 idle replicas: the share covers the live heap
		{224 << 20, 200 << 20, 20 << 20, 20_000, 280 << 20}, // 200 MiB live with 20,000 replicas (156.25 MiB share): 279.75 rounded up
	} {
		got := broker.MemoryLimitFor(c.derived, c.live, c.overhead, c.replicas)
		if got != c.want {
			t.Fatalf("MemoryLimitFor(%d, %d, %d, %d) = %d, want %d", c.derived, c.live, c.overhead, c.replicas, got, c.want)
		}
		if got < c.live+c.overhead+slack {
			t.Fatalf("MemoryLimitFor(%d, %d, %d, %d) = %d leaves less than the slack above the live heap and overhead", c.derived, c.live, c.overhead, c.replicas, got)
		}
	}
	// 100,000 replicas: 64 MiB + 800,000 KiB, under the 10 KiB each.
	if got := broker.DerivedMemoryLimit(100_000, 0); got > 100_000*10<<10 {
		t.Fatalf("100,000 replicas: %d bytes, over 10 KiB each", got)
	}
}

// TestMemoryLimitFollowsReplicas: a broker with the derived memory limit
// sets the process's limit (what the Go runtime reports) to the limit of
// the replicas it holds and the live heap, follows a topic's 600 replicas
// as they open and as the topic is deleted, reads the live heap after a
// collection, and puts the process's limit back when it closes; a fixed
// limit is set as given.
func TestMemoryLimitFollowsReplicas(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.MemoryLimit = broker.MemoryLimitDerived })
	// The runtime's limit is the broker's, derived from the replicas it
	// holds (and the test process's live heap, which this test does not
	// control: MemoryLimitFor).
	runtimeLimit := func(replicas int) func() error {
		return func() error {
			s := n.B.MemoryLimit()
			rt := debug.SetMemoryLimit(-1)
			want := broker.MemoryLimitFor(broker.DerivedMemoryLimit(replicas, 0), s.Live, s.Overhead, replicas)
			if s.Bytes != want || rt != want || !s.Derived || s.Replicas != replicas || s.Held != 0 {
				return fmt.Errorf("broker's limit %+v, the runtime's %d; want %d for %d replicas", s, rt, want, replicas)
			}
			return nil
		}
	}
	brokertest.Await(t, "the empty node's limit", runtimeLimit(0))
	if n.B.MemoryLimit().Live == 0 {
		runtime.GC() // the live heap is read after each collection
		brokertest.Await(t, "a collection seen", func() error {
			if n.B.MemoryLimit().Live == 0 {
				return fmt.Errorf("no live heap read after a collection")
			}
			return nil
		})
	}
	const parts = 600
	n.CreateTopic("many", parts, nil)
	brokertest.Await(t, "the limit of 600 replicas", runtimeLimit(parts))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.Admin().DeleteTopics(ctx, "many"); err != nil {
		t.Fatal(err)
	}
	brokertest.Await(t, "the limit back at the empty node's", runtimeLimit(0))
	n.Stop()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("after the broker closed the process's limit is %d, want %d as before", got, before)
	}

	const fixed = 3 << 30
	f := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.MemoryLimit = fixed })
	if s := f.B.MemoryLimit(); s.Bytes != fixed || s.Derived || debug.SetMemoryLimit(-1) != fixed {
		t.Fatalf("fixed limit: broker %+v, runtime %d; want %d", s, debug.SetMemoryLimit(-1), fixed)
	}
	f.Stop()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("after the fixed-limit broker closed the process's limit is %d, want %d", got, before)
	}
}
