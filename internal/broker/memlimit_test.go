package broker_test

import (
	"context"
	"fmt"
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
	// 100,000 replicas: 64 MiB + 800,000 KiB, under the 10 KiB each.
	if got := broker.DerivedMemoryLimit(100_000, 0); got > 100_000*10<<10 {
		t.Fatalf("100,000 replicas: %d bytes, over 10 KiB each", got)
	}
}

// TestMemoryLimitFollowsReplicas: a broker with the derived memory limit
// sets the process's limit (what the Go runtime reports) to the limit of
// the replicas it holds, raises it as a topic's replicas open, lowers it
// when the topic is deleted, and puts the process's limit back when it
// closes; a fixed limit is set as given.
func TestMemoryLimitFollowsReplicas(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.MemoryLimit = broker.MemoryLimitDerived })
	runtimeLimit := func(want int64) func() error {
		return func() error {
			got, derived := n.B.MemoryLimit()
			if rt := debug.SetMemoryLimit(-1); got != want || rt != want || !derived {
				return fmt.Errorf("broker's limit %d (derived %v), the runtime's %d; want %d", got, derived, rt, want)
			}
			return nil
		}
	}
	empty := broker.DerivedMemoryLimit(0, 0)
	brokertest.Await(t, "the empty node's limit", runtimeLimit(empty))
	// 600 replicas are more than a step (4 MiB / 8 KiB = 512) above it.
	const parts = 600
	n.CreateTopic("many", parts, nil)
	brokertest.Await(t, "the limit of 600 replicas", runtimeLimit(broker.DerivedMemoryLimit(parts, 0)))
	if broker.DerivedMemoryLimit(parts, 0) <= empty {
		t.Fatalf("600 replicas' limit %d is not above the empty node's %d", broker.DerivedMemoryLimit(parts, 0), empty)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.Admin().DeleteTopics(ctx, "many"); err != nil {
		t.Fatal(err)
	}
	brokertest.Await(t, "the limit back at the empty node's", runtimeLimit(empty))
	n.Stop()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("after the broker closed the process's limit is %d, want %d as before", got, before)
	}

	const fixed = 3 << 30
	f := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.MemoryLimit = fixed })
	if got, derived := f.B.MemoryLimit(); got != fixed || derived || debug.SetMemoryLimit(-1) != fixed {
		t.Fatalf("fixed limit: broker %d (derived %v), runtime %d; want %d", got, derived, debug.SetMemoryLimit(-1), fixed)
	}
	f.Stop()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Fatalf("after the fixed-limit broker closed the process's limit is %d, want %d", got, before)
	}
}
