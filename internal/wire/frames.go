package wire

import (
	"math/bits"
	"os"
	"sync/atomic"

	"holdfast/internal/bufref"
)

// Frame buffers are reused: a produce frame of 1 MiB allocated fresh for
// every request was zeroed by the runtime and then collected (a fifth of a
// broker's CPU under a 1 KiB-record load went to that and to the GC it
// caused). Buffers come in power-of-two size classes from 4 KiB to 8 MiB,
// each class a bounded free list, and all of them together hold at most
// maxPooledBytes; a larger frame, or one that finds its class empty, is
// allocated as before, and one that finds the pool full is left to the GC.
//
// A frame goes back to the pool only when its handler said nothing keeps
// it (Request.RecycleFrame) and its reply has been written: the request's
// []byte fields alias the frame (kmsg decodes them without copying).
const (
	minFrameClass  = 12 // 4 KiB
	maxFrameClass  = 23 // 8 MiB
	maxPooledBytes = 64 << 20
	perClass       = 64 // free buffers kept per class at most
)

var (
	framePool      [maxFrameClass + 1]chan []byte
	pooledBytes    atomic.Int64
	framesGrown    atomic.Int64 // frame buffers replaced by a larger one while reading (tests)
	framesRecycled atomic.Int64 // buffers put back in the pool (FramesRecycled)
)

func init() {
	for c := minFrameClass; c <= maxFrameClass; c++ {
		framePool[c] = make(chan []byte, perClass)
	}
}

// frameClass is the smallest class holding n bytes; ok is false above the
// largest.
func frameClass(n int) (int, bool) {
	c := minFrameClass
	if n > 1<<minFrameClass {
		c = bits.Len(uint(n - 1))
	}
	return c, c <= maxFrameClass
}

// getFrame returns an empty buffer of capacity at least n (not zeroed).
func getFrame(n int) []byte {
	c, ok := frameClass(n)
	if !ok {
		return make([]byte, 0, n)
	}
	select {
	case b := <-framePool[c]:
		pooledBytes.Add(-int64(cap(b)))
		return b[:0]
	default:
		return make([]byte, 0, 1<<c)
	}
}

// pooledFrame returns a free pooled buffer of capacity at least n, only if
// the pool has one of n's class (it allocates nothing).
func pooledFrame(n int) ([]byte, bool) {
	c, ok := frameClass(n)
	if !ok {
		return nil, false
	}
	select {
	case b := <-framePool[c]:
		pooledBytes.Add(-int64(cap(b)))
		return b[:0], true
	default:
		return nil, false
	}
}

// poisonFrames makes putFrame overwrite every buffer it is given, so that
// a holder that still reads a frame after giving it back (a broken
// ownership rule: Raft sharing a produce frame's bytes, bufref) reads
// garbage that fails a batch's CRC at once, instead of another request's
// valid bytes. Off in production; the tests that start brokers turn it on
// (SetPoisonFrames, or HOLDFAST_POISON_FRAMES=1 in a child process's
// environment).
var poisonFrames atomic.Bool

func init() { poisonFrames.Store(os.Getenv("HOLDFAST_POISON_FRAMES") == "1") }

// SetPoisonFrames turns poisonFrames on or off (tests).
func SetPoisonFrames(on bool) { poisonFrames.Store(on) }

// putFrame offers b back to the pool; buffers of a foreign capacity, and
// those over the pool's limits, are dropped.
func putFrame(b []byte) {
	if poisonFrames.Load() {
		b = b[:cap(b)]
		if len(b) > 0 {
			b[0] = 0xdb
			for n := 1; n < len(b); n *= 2 {
				copy(b[n:], b[:n])
			}
		}
	}
	c, ok := frameClass(cap(b))
	if !ok || cap(b) != 1<<c {
		return
	}
	if pooledBytes.Add(int64(cap(b))) > maxPooledBytes {
		pooledBytes.Add(-int64(cap(b)))
		return
	}
	select {
	case framePool[c] <- b[:0]:
		framesRecycled.Add(1)
	default:
		pooledBytes.Add(-int64(cap(b)))
	}
}

// FramesRecycled is how many frame buffers went back to the pool since the
// process started (tests: a test of who may still read a frame must see
// frames reused, or it tests nothing).
func FramesRecycled() int64 { return framesRecycled.Load() }

// RecycleFrame tells the server that nothing the handler or its Reply
// started refers to the request's bytes once the Reply has returned (no
// []byte of the body is kept, nothing still reads the records): the frame
// is then reused for a later request. Call it from Handle or from the
// Reply; without it the frame is left to the garbage collector, which is
// always safe.
func (r *Request) RecycleFrame() { r.recycle.Store(true) }

// FrameRef returns the count of the request's frame's holders, for a
// handler that hands the frame's bytes to something that outlives the
// reply (a produce's batches proposed to Raft): that holder Retains it
// before the handler returns (or, from a Reply, before the Reply returns)
// and Releases it when it no longer reads the bytes. The request itself is
// the first holder; its reference is released after the reply, as a frame
// was put back before, if RecycleFrame was called. So the frame goes back
// to the pool when the reply is written and every other holder let go;
// without RecycleFrame it is left to the garbage collector whatever the
// others do. Call it on the handler's goroutine (or the Reply's).
func (r *Request) FrameRef() *bufref.Ref {
	if r.ref == nil && r.frame != nil {
		r.ref = bufref.New(r.frame, putFrame)
	}
	return r.ref
}

// recycleFrame returns a request's frame to the pool if its handler
// allowed it, or gives the request's reference back if the frame has
// other holders (FrameRef). The writer calls it after the reply has
// returned.
func (r *Request) recycleFrame() {
	if r.frame != nil && r.recycle.Load() {
		if r.ref != nil {
			r.ref.Release()
		} else {
			putFrame(r.frame)
		}
		r.frame, r.ref = nil, nil
	}
}
