package txn

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// The block allocator hands out each reserved id once, moves to the next
// block (reserved ahead) when one is used up, and an Next waiting for a
// reservation that does not come ends with its context.
func TestBlockAllocator(t *testing.T) {
	var mu sync.Mutex
	next := int64(100)
	calls := 0
	a := NewBlockAllocator(func(ctx context.Context) (int64, int64, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		start := next
		next += 10 + 5 // a gap between blocks, as other brokers take theirs
		return start, 10, nil
	})
	defer a.Close()
	seen := map[int64]bool{}
	for range 35 {
		id, err := a.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatalf("id %d twice", id)
		}
		seen[id] = true
		if (id-100)%15 >= 10 {
			t.Fatalf("id %d is outside every reserved block", id)
		}
	}
	mu.Lock()
	if calls < 4 {
		t.Fatalf("%d reservations for 35 ids in blocks of 10", calls)
	}
	mu.Unlock()

	stuck := NewBlockAllocator(func(ctx context.Context) (int64, int64, error) {
		<-ctx.Done()
		return 0, 0, ctx.Err()
	})
	defer stuck.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := stuck.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next without a block: %v, want the context's deadline", err)
	}
}

// TestBlockAllocatorFloor: ids below the floor are never handed out, also
// from a block reserved before the floor rose (a topic restored from the
// object store keeps its producers' ids).
func TestBlockAllocatorFloor(t *testing.T) {
	var mu sync.Mutex
	next := int64(0)
	a := NewBlockAllocator(func(ctx context.Context) (int64, int64, error) {
		mu.Lock()
		defer mu.Unlock()
		start := next
		next += 10
		return start, 10, nil
	})
	defer a.Close()
	var floor int64
	var fmu sync.Mutex
	a.SetFloor(func() int64 { fmu.Lock(); defer fmu.Unlock(); return floor })
	if id, err := a.Next(context.Background()); err != nil || id != 0 {
		t.Fatalf("first id %d %v", id, err)
	}
	fmu.Lock()
	floor = 25 // above the held block and the one reserved ahead
	fmu.Unlock()
	for range 20 {
		id, err := a.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if id < 25 {
			t.Fatalf("id %d below the floor 25", id)
		}
	}
}
