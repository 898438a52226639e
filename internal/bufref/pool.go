package bufref

import (
	"math/bits"
	"os"
	"sync/atomic"
)

// Pool keeps buffers given back for reuse, in power-of-two size classes
// from 1<<MinClass to 1<<MaxClass bytes: each class a bounded free list,
// all of them together at most MaxBytes. A buffer that finds its class or
// the pool full is left to the garbage collector, as is one of a capacity
// that is not a class's. The wire's request frames and Raft's received
// messages each have one.
type Pool struct {
	minClass, maxClass int
	maxBytes           int64
	free               []chan []byte // by class - minClass
	pooled             atomic.Int64  // bytes in the free lists
	recycled           atomic.Int64  // buffers put back (Recycled)
	poison             atomic.Bool
}

// NewPool returns a pool of the classes minClass..maxClass, perClass free
// buffers each, maxBytes in all. Its poisoning is on if the environment
// says HOLDFAST_POISON_FRAMES=1 (a test's child process).
func NewPool(minClass, maxClass, perClass int, maxBytes int64) *Pool {
	p := &Pool{minClass: minClass, maxClass: maxClass, maxBytes: maxBytes}
	for range maxClass - minClass + 1 {
		p.free = append(p.free, make(chan []byte, perClass))
	}
	p.poison.Store(os.Getenv("HOLDFAST_POISON_FRAMES") == "1")
	return p
}

// SetPoison makes Put overwrite every buffer it is given (tests): a holder
// that still reads a buffer after giving it back (a broken ownership rule)
// then reads garbage that fails a batch's CRC at once, not a later user's
// valid bytes.
func (p *Pool) SetPoison(on bool) { p.poison.Store(on) }

// Class is the smallest class holding n bytes; ok is false above the
// largest.
func (p *Pool) Class(n int) (class int, ok bool) {
	c := p.minClass
	if n > 1<<p.minClass {
		c = bits.Len(uint(n - 1))
	}
	return c, c <= p.maxClass
}

// Pooled reports whether b's capacity is exactly a class's (Put keeps it).
func (p *Pool) Pooled(b []byte) bool {
	c, ok := p.Class(cap(b))
	return ok && cap(b) == 1<<c
}

// TryGet returns a free buffer of n's class, empty, only if the pool has
// one (it allocates nothing).
func (p *Pool) TryGet(n int) ([]byte, bool) {
	c, ok := p.Class(n)
	if !ok {
		return nil, false
	}
	select {
	case b := <-p.free[c-p.minClass]:
		p.pooled.Add(-int64(cap(b)))
		return b[:0], true
	default:
		return nil, false
	}
}

// Get returns an empty buffer of capacity at least n (not zeroed): a free
// one of n's class, else a new one of the class's capacity, else (above
// the largest class) of n.
func (p *Pool) Get(n int) []byte {
	if b, ok := p.TryGet(n); ok {
		return b
	}
	if c, ok := p.Class(n); ok {
		return make([]byte, 0, 1<<c)
	}
	return make([]byte, 0, n)
}

// Put offers b back to the pool.
func (p *Pool) Put(b []byte) {
	if p.poison.Load() {
		b = b[:cap(b)]
		if len(b) > 0 {
			b[0] = 0xdb
			for n := 1; n < len(b); n *= 2 {
				copy(b[n:], b[:n])
			}
		}
	}
	if !p.Pooled(b) {
		return
	}
	c, _ := p.Class(cap(b))
	if p.pooled.Add(int64(cap(b))) > p.maxBytes {
		p.pooled.Add(-int64(cap(b)))
		return
	}
	select {
	case p.free[c-p.minClass] <- b[:0]:
		p.recycled.Add(1)
	default:
		p.pooled.Add(-int64(cap(b)))
	}
}

// Recycled is how many buffers went back to the free lists since the pool
// was made (tests: a test of who may still read a buffer must see buffers
// reused, or it tests nothing).
func (p *Pool) Recycled() int64 { return p.recycled.Load() }
