// Package bufref counts the holders of a pooled buffer, so that it goes
// back to its pool only when the last of them let go.
//
// A produce request's frame is one: the request's records are proposed to
// Raft as they lie in the frame (etcd raft shares a proposal's bytes,
// third_party/etcd-raft/PATCHES.md), so after the reply the frame may still
// be read by Raft's messages to a slow follower, the store's recent entries
// and the apply of committed entries. Each such holder takes a reference
// (Retain) and gives it back (Release) when it no longer reads the bytes;
// the buffer is put back by the Release that brings the count to zero.
//
// A reference that is never released only costs the pool a buffer (the
// garbage collector takes it as before); a release too early is the bug
// this package exists to avoid, so a count below zero panics.
package bufref

import (
	"sync/atomic"
	"unsafe"
)

// Ref is a counted reference to buf. The zero Ref is not valid: use New.
type Ref struct {
	n   atomic.Int32
	buf []byte // immutable after New (Holds reads it without a lock)
	put func([]byte)
}

// New returns a Ref to buf held once (by the caller); put gets buf back
// when the count reaches zero.
func New(buf []byte, put func([]byte)) *Ref {
	r := &Ref{buf: buf, put: put}
	r.n.Store(1)
	return r
}

// Retain adds a holder. Only a holder may call it (the count is above
// zero), so the buffer cannot be on its way back to the pool.
func (r *Ref) Retain() {
	if r.n.Add(1) <= 1 {
		panic("bufref: Retain of a released buffer")
	}
}

// Release gives one holder's reference back; the last one puts the buffer
// back.
func (r *Ref) Release() {
	switch n := r.n.Add(-1); {
	case n == 0:
		if r.put != nil {
			r.put(r.buf)
		}
	case n < 0:
		panic("bufref: Release of a released buffer")
	}
}

// Holds reports whether b starts inside the buffer (b is a slice of it).
func (r *Ref) Holds(b []byte) bool {
	if len(b) == 0 || cap(r.buf) == 0 {
		return false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(r.buf[:1])))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= base && p < base+uintptr(cap(r.buf))
}

// Count is the number of holders (tests).
func (r *Ref) Count() int32 { return r.n.Load() }
