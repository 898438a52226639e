package raft

import "holdfast/internal/bufref"

// Received messages are read into pooled buffers: a follower allocated a
// zeroed buffer per MsgApp (frameReader.body), which its entries' data
// then pointed into, and the garbage collector took it back once the
// store's recent entries let go (on an RF=3 cluster the followers' share
// of the CPU per record, issue 17). A buffer whose message carries batches
// is counted (bufref): the transport holds it while the frame is read and
// stepped, and the group holds it for as long as anything of Raft's may
// read the entries (group.held, receiveHeldLocked); the last release puts
// it back. A message without batches (heartbeats, responses, votes: the
// decoder copies everything but entry data) goes back at once.
//
// Buffers come from a bufref.Pool (power-of-two classes from 4 KiB to
// 8 MiB, each a bounded free list, 64 MiB in all); a smaller message
// gets an exact allocation as before (small: a pooled 4 KiB buffer kept by
// an idle group's recent entries would cost more memory than it saves CPU
// with thousands of partitions).

// recvPool: 4 KiB to 8 MiB classes, 32 free buffers each, 64 MiB in all.
var recvPool = bufref.NewPool(12, 23, 32, 64<<20)

// recvPooledMin: messages from this size are read into pooled buffers.
const recvPooledMin = 2 << 10

// SetPoisonBuffers makes a received message's buffer overwritten as it
// goes back to the pool (tests): a holder that still reads it after its
// release reads garbage that fails a batch's CRC or the log's checks at
// once, instead of a later message's valid bytes. Also on with
// HOLDFAST_POISON_FRAMES=1 (as wire.SetPoisonFrames).
func SetPoisonBuffers(on bool) { recvPool.SetPoison(on) }

// RecvBuffersRecycled is how many received messages' buffers went back to
// the pool since the process started (tests).
func RecvBuffersRecycled() int64 { return recvPool.Recycled() }

// recvPooledBuf returns a free pooled buffer of length n if the pool has
// one of n's class (it allocates nothing).
func recvPooledBuf(n int) ([]byte, bool) {
	if b, ok := recvPool.TryGet(n); ok {
		return b[:n], true
	}
	return nil, false
}

// recvBuf returns a buffer of length n (not zeroed if pooled), of a pooled
// class's capacity where n fits one (it may then go back with putRecv).
func recvBuf(n int) []byte { return recvPool.Get(n)[:n] }

// putRecv offers b back to the pool.
func putRecv(b []byte) { recvPool.Put(b) }

// recvRef counts a received message's pooled buffer (nil for one that is
// not of a pooled class).
func recvRef(b []byte) *bufref.Ref {
	if !recvPool.Pooled(b) {
		return nil
	}
	return bufref.New(b, putRecv)
}
