package txn

import (
	"context"
	"fmt"
	"sync"
)

// ReserveFunc reserves a block of producer ids [start, start+n) that nobody
// else will ever be given, and returns only once that is durable (in a
// cluster: committed through the metadata log).
type ReserveFunc func(ctx context.Context) (start, n int64, err error)

// BlockAllocator hands out producer ids from reserved blocks (cluster
// mode). The next block is reserved in the background once the current one
// is 90% used, as Kafka's brokers prefetch, so an InitProducerId rarely
// waits for the controller. Ids of a block not used up before a restart
// are skipped: ids are plentiful, reuse is not allowed.
type BlockAllocator struct {
	reserve ReserveFunc

	mu       sync.Mutex
	next     int64 // next id of the current block
	end      int64 // end of the current block
	size     int64 // of the current block
	spare    [2]int64
	hasSpare bool
	fetching chan struct{} // closed when the reservation in flight ends
	lastErr  error
	floor    func() int64 // ids below are not handed out (nil: none)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewBlockAllocator returns an allocator over reserve and starts reserving
// its first block.
func NewBlockAllocator(reserve ReserveFunc) *BlockAllocator {
	a := &BlockAllocator{reserve: reserve}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.mu.Lock()
	a.fetchLocked()
	a.mu.Unlock()
	return a
}

// SetFloor makes Next skip the ids below floor() (the producer id floor of
// the cluster's metadata: a restored topic's producers keep theirs).
func (a *BlockAllocator) SetFloor(floor func() int64) {
	a.mu.Lock()
	a.floor = floor
	a.mu.Unlock()
}

// Close stops a reservation in flight.
func (a *BlockAllocator) Close() {
	a.cancel()
	a.wg.Wait()
}

// fetchLocked starts reserving the next block unless one is in flight or
// already reserved.
func (a *BlockAllocator) fetchLocked() {
	if a.fetching != nil || a.hasSpare || a.ctx.Err() != nil {
		return
	}
	done := make(chan struct{})
	a.fetching = done
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		start, n, err := a.reserve(a.ctx)
		a.mu.Lock()
		defer a.mu.Unlock()
		if err == nil && n <= 0 {
			err = fmt.Errorf("txn: empty producer id block at %d", start)
		}
		a.lastErr = err
		if err == nil {
			a.spare, a.hasSpare = [2]int64{start, start + n}, true
		}
		a.fetching = nil
		close(done)
	}()
}

// Next returns a producer id never handed out before, waiting for a block
// if needed (bounded by ctx).
func (a *BlockAllocator) Next(ctx context.Context) (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		if a.floor != nil && a.next < a.end {
			a.next = min(max(a.next, a.floor()), a.end)
		}
		if a.next < a.end {
			id := a.next
			a.next++
			if a.end-a.next <= a.size/10 {
				a.fetchLocked() // prefetch once 90% of the block is used
			}
			return id, nil
		}
		if a.hasSpare {
			a.next, a.end = a.spare[0], a.spare[1]
			a.size = a.end - a.next
			a.hasSpare = false
			a.fetchLocked()
			continue
		}
		a.fetchLocked()
		wait := a.fetching
		if wait == nil {
			return 0, fmt.Errorf("txn: producer id allocator closed")
		}
		a.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			a.mu.Lock()
			return 0, fmt.Errorf("txn: waiting for a producer id block: %w (last error: %v)", ctx.Err(), a.lastErr)
		}
		a.mu.Lock()
		if a.lastErr != nil && !a.hasSpare {
			return 0, fmt.Errorf("txn: reserving producer ids: %w", a.lastErr)
		}
	}
}
