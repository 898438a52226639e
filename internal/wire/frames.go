package wire

import (
	"sync/atomic"

	"holdfast/internal/bufref"
)

// Frame buffers are reused: a produce frame of 1 MiB allocated fresh for
// every request was zeroed by the runtime and then collected (a fifth of a
// broker's CPU under a 1 KiB-record load went to that and to the GC it
// caused). Buffers come from a bufref.Pool: power-of-two size classes from
// 4 KiB to 8 MiB, each a bounded free list, 64 MiB in all; a larger frame,
// or one that finds its class empty, is allocated as before, and one that
// finds the pool full is left to the GC.
//
// A frame goes back to the pool only when its handler said nothing keeps
// it (Request.RecycleFrame) and its reply has been written: the request's
// []byte fields alias the frame (kmsg decodes them without copying).
var (
	// framePool: 4 KiB to 8 MiB classes, 64 free buffers each, 64 MiB in all.
	framePool   = bufref.NewPool(12, 23, 64, 64<<20)
	framesGrown atomic.Int64 // frame buffers replaced by a larger one while reading (tests)
)

// getFrame returns an empty buffer of capacity at least n (not zeroed).
func getFrame(n int) []byte { return framePool.Get(n) }

// pooledFrame returns a free pooled buffer of capacity at least n, only if
// the pool has one of n's class (it allocates nothing).
func pooledFrame(n int) ([]byte, bool) { return framePool.TryGet(n) }

// putFrame offers b back to the pool.
func putFrame(b []byte) { framePool.Put(b) }

// SetPoisonFrames makes every frame put back overwritten at once (tests;
// bufref.Pool.SetPoison): a holder that still reads a frame after giving
// it back (a broken ownership rule: Raft sharing a produce frame's bytes)
// reads garbage that fails a batch's CRC at once, instead of another
// request's valid bytes. Off in production; the tests that start brokers
// turn it on (or HOLDFAST_POISON_FRAMES=1 in a child process's
// environment).
func SetPoisonFrames(on bool) { framePool.SetPoison(on) }

// FramesRecycled is how many frame buffers went back to the pool since the
// process started (tests: a test of who may still read a frame must see
// frames reused, or it tests nothing).
func FramesRecycled() int64 { return framePool.Recycled() }

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
