package raft

import (
	"math/bits"
	"os"
	"sync/atomic"

	"holdfast/internal/bufref"
)

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
// Buffers come in power-of-two classes from 4 KiB to 8 MiB, each a bounded
// free list, all of them together at most recvPoolBytes; a smaller message
// gets an exact allocation as before (small: a pooled 4 KiB buffer kept by
// an idle group's recent entries would cost more memory than it saves CPU
// with thousands of partitions).
const (
	recvMinClass  = 12 // 4 KiB
	recvMaxClass  = 23 // 8 MiB
	recvPoolBytes = 64 << 20
	recvPerClass  = 32
	// recvPooledMin: messages from this size are read into pooled buffers.
	recvPooledMin = 2 << 10
)

var (
	recvPool      [recvMaxClass + 1]chan []byte
	recvPooled    atomic.Int64 // bytes in the free lists
	recvRecycled  atomic.Int64 // buffers put back (tests: the reuse must happen)
	poisonRecvBuf atomic.Bool
)

func init() {
	for c := recvMinClass; c <= recvMaxClass; c++ {
		recvPool[c] = make(chan []byte, recvPerClass)
	}
	poisonRecvBuf.Store(os.Getenv("HOLDFAST_POISON_FRAMES") == "1")
}

// SetPoisonBuffers makes a received message's buffer overwritten as it
// goes back to the pool (tests): a holder that still reads it after its
// release reads garbage that fails a batch's CRC or the log's checks at
// once, instead of a later message's valid bytes. Also on with
// HOLDFAST_POISON_FRAMES=1 (as wire.SetPoisonFrames).
func SetPoisonBuffers(on bool) { poisonRecvBuf.Store(on) }

// RecvBuffersRecycled is how many received messages' buffers went back to
// the pool since the process started (tests).
func RecvBuffersRecycled() int64 { return recvRecycled.Load() }

func recvClass(n int) (int, bool) {
	c := recvMinClass
	if n > 1<<recvMinClass {
		c = bits.Len(uint(n - 1))
	}
	return c, c <= recvMaxClass
}

// recvPooledBuf returns a free pooled buffer of length n if the pool has
// one of n's class (it allocates nothing).
func recvPooledBuf(n int) ([]byte, bool) {
	c, ok := recvClass(n)
	if !ok {
		return nil, false
	}
	select {
	case b := <-recvPool[c]:
		recvPooled.Add(-int64(cap(b)))
		return b[:n], true
	default:
		return nil, false
	}
}

// recvBuf returns a buffer of length n (not zeroed if pooled) and whether
// it is of a pooled class (then it may go back with putRecv).
func recvBuf(n int) []byte {
	if b, ok := recvPooledBuf(n); ok {
		return b
	}
	if c, ok := recvClass(n); ok {
		return make([]byte, n, 1<<c)
	}
	return make([]byte, n)
}

// putRecv offers b back to the pool; buffers of a foreign capacity, and
// those over the pool's limits, are left to the garbage collector.
func putRecv(b []byte) {
	if poisonRecvBuf.Load() {
		b = b[:cap(b)]
		if len(b) > 0 {
			b[0] = 0xdb
			for n := 1; n < len(b); n *= 2 {
				copy(b[n:], b[:n])
			}
		}
	}
	c, ok := recvClass(cap(b))
	if !ok || cap(b) != 1<<c {
		return
	}
	if recvPooled.Add(int64(cap(b))) > recvPoolBytes {
		recvPooled.Add(-int64(cap(b)))
		return
	}
	select {
	case recvPool[c] <- b[:0]:
		recvRecycled.Add(1)
	default:
		recvPooled.Add(-int64(cap(b)))
	}
}

// recvRef counts a received message's pooled buffer (nil for one that is
// not of a pooled class).
func recvRef(b []byte) *bufref.Ref {
	if c, ok := recvClass(cap(b)); !ok || cap(b) != 1<<c {
		return nil
	}
	return bufref.New(b, putRecv)
}
