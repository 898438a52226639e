// Package share implements KIP-932 share groups ("queues for Kafka"): the
// membership and assignment of a share group (groups.go, on the group
// coordinator), the share-partition state machine that hands records out
// under acquisition locks (this file, on each partition's leader), share
// sessions (session.go), and the durable share-partition state kept in
// the group's __consumer_offsets partition (store.go, on the group
// coordinator). docs/groups.md ("Share groups") describes the design.
package share

import (
	"errors"
	"time"
)

// Record states, Kafka's RecordState values (they are persisted).
const (
	Available    int8 = 0
	Acquired     int8 = 1
	Acknowledged int8 = 2
	Archived     int8 = 4
)

// Acknowledge types on the wire (ShareFetch/ShareAcknowledge).
const (
	AckGap     int8 = 0
	AckAccept  int8 = 1
	AckRelease int8 = 2
	AckReject  int8 = 3
	AckRenew   int8 = 4
)

// Errors of the state machine; the broker maps them onto Kafka codes.
var (
	// ErrInvalidRecordState: an acknowledgement of an offset this member
	// does not hold (never acquired, acquired by another member, its lock
	// expired, or already acknowledged): INVALID_RECORD_STATE.
	ErrInvalidRecordState = errors.New("share: record is not acquired by this member")
	// ErrInvalidRequest: a malformed acknowledgement batch.
	ErrInvalidRequest = errors.New("share: invalid acknowledgement batch")
)

// Settings are one share partition's limits, from the group's configs.
type Settings struct {
	LockDuration       time.Duration // share.record.lock.duration.ms
	DeliveryCountLimit int16         // share.delivery.count.limit
	MaxInFlight        int64         // share.partition.max.record.locks
}

// rec is one offset of the in-flight window.
type rec struct {
	state    int8
	count    int16 // delivery count
	member   string
	deadline time.Time
}

// Batch is a persisted range of offsets in one state (Kafka's
// PersisterStateBatch).
type Batch struct {
	First, Last int64
	State       int8
	Count       int16
}

// Snapshot is a share partition's durable state: the share-partition
// start offset (SPSO) and the window's offsets that are not simply
// "available, never delivered". Acquired offsets are stored as available
// with their delivery count: after a failover they are delivered again.
type Snapshot struct {
	StateEpoch  int32
	LeaderEpoch int32
	StartOffset int64
	Batches     []Batch
}

// Partition is one share partition (group, topic, partition) on the
// partition's leader: the window [start, end) of offsets handed out at
// least once, one rec per offset. The caller serializes access.
type Partition struct {
	start int64
	recs  []rec // recs[i] is offset start+i; len(recs) == end-start
	// acquired counts offsets in state Acquired (for the expiry scan).
	acquired int
	// dirty: the durable state differs from the last snapshot written.
	dirty bool
}

// NewPartition is a share partition starting at start with no history.
func NewPartition(start int64) *Partition { return &Partition{start: start} }

// FromSnapshot rebuilds a share partition from its durable state.
func FromSnapshot(s Snapshot) *Partition {
	p := &Partition{start: s.StartOffset}
	for _, b := range s.Batches {
		if b.Last < p.start || b.First > b.Last {
			continue
		}
		first := max(b.First, p.start)
		for p.end() <= b.Last {
			p.recs = append(p.recs, rec{})
		}
		st := b.State
		if st == Acquired {
			st = Available
		}
		for o := first; o <= b.Last; o++ {
			p.recs[o-p.start] = rec{state: st, count: b.Count}
		}
	}
	p.advance()
	return p
}

// Start is the share-partition start offset (SPSO).
func (p *Partition) Start() int64 { return p.start }

// end is the share-partition end offset (SPEO): one past the last offset
// ever handed out.
func (p *Partition) end() int64 { return p.start + int64(len(p.recs)) }

// End is the share-partition end offset.
func (p *Partition) End() int64 { return p.end() }

// Acquired is how many offsets are locked by some member.
func (p *Partition) Acquired() int { return p.acquired }

// Dirty reports whether the durable state changed since the last
// Snapshot.
func (p *Partition) Dirty() bool { return p.dirty }

// Snapshot is the durable state now; it clears Dirty.
func (p *Partition) Snapshot() Snapshot {
	p.dirty = false
	s := Snapshot{StartOffset: p.start}
	for i := 0; i < len(p.recs); {
		r := p.recs[i]
		st := r.state
		if st == Acquired {
			st = Available
		}
		j := i + 1
		for j < len(p.recs) {
			n := p.recs[j]
			nst := n.state
			if nst == Acquired {
				nst = Available
			}
			if nst != st || n.count != r.count {
				break
			}
			j++
		}
		if st != Available || r.count != 0 {
			s.Batches = append(s.Batches, Batch{First: p.start + int64(i), Last: p.start + int64(j-1), State: st, Count: r.count})
		}
		i = j
	}
	return s
}

// advance moves the SPSO past acknowledged and archived offsets.
func (p *Partition) advance() {
	n := 0
	for n < len(p.recs) && (p.recs[n].state == Acknowledged || p.recs[n].state == Archived) {
		n++
	}
	if n > 0 {
		p.recs = append(p.recs[:0:0], p.recs[n:]...)
		p.start += int64(n)
		p.dirty = true
	}
}

// SetStart moves the SPSO to off (the log start moved past it, or an
// admin altered it): offsets below are dropped, and a start beyond the
// window leaves an empty window there.
func (p *Partition) SetStart(off int64) {
	switch {
	case off <= p.start:
		if off < p.start && len(p.recs) == 0 {
			p.start, p.dirty = off, true
		}
		return
	case off >= p.end():
		for _, r := range p.recs {
			if r.state == Acquired {
				p.acquired--
			}
		}
		p.recs = nil
	default:
		for _, r := range p.recs[:off-p.start] {
			if r.state == Acquired {
				p.acquired--
			}
		}
		p.recs = append(p.recs[:0:0], p.recs[off-p.start:]...)
	}
	p.start, p.dirty = off, true
}

// Range is an acquired range of offsets with its delivery count.
type Range struct {
	First, Last int64
	Count       int16
}

// HasAvailable reports whether an offset of the window could be acquired
// now, or the window may grow below hw.
func (p *Partition) HasAvailable(hw int64, s Settings) bool {
	for _, r := range p.recs {
		if r.state == Available {
			return true
		}
	}
	return p.end() < hw && p.end()-p.start < s.MaxInFlight
}

// FirstAvailable is the lowest offset that may be acquired: the first
// available offset of the window, else the window's end.
func (p *Partition) FirstAvailable() int64 {
	for i, r := range p.recs {
		if r.state == Available {
			return p.start + int64(i)
		}
	}
	return p.end()
}

// BatchSpan is a stored batch's offsets as the log reader found them.
type BatchSpan struct{ First, Last int64 }

// Acquire locks, for member, up to maxRecords offsets of the batches
// found in the log (spans, in offset order, from the reader's position
// from): available offsets of the window first, then new offsets past
// its end, up to hw and at most s.MaxInFlight offsets of window. strict
// is KIP-1206's record-limit mode; otherwise whole batches are taken, so
// more than maxRecords may be acquired (batch-optimized mode). Offsets of
// the window that no batch covers (a compacted log's holes) are archived.
// It returns the acquired ranges in offset order.
func (p *Partition) Acquire(member string, spans []BatchSpan, from, hw int64, maxRecords int, strict bool, s Settings, now time.Time) []Range {
	var out []Range
	taken := 0
	add := func(o int64, count int16) {
		if n := len(out); n > 0 && out[n-1].Last == o-1 && out[n-1].Count == count {
			out[n-1].Last = o
			return
		}
		out = append(out, Range{First: o, Last: o, Count: count})
	}
	deadline := now.Add(s.LockDuration)
	next := max(from, p.start) // offsets below next were covered by an earlier span
	for _, b := range spans {
		if taken >= maxRecords {
			break
		}
		// A hole before this batch: offsets no batch holds.
		for o := next; o < b.First && o < p.end(); o++ {
			if r := &p.recs[o-p.start]; r.state == Available {
				r.state, p.dirty = Archived, true
			}
		}
		for o := max(b.First, next); o <= b.Last && o < hw; o++ {
			if taken >= maxRecords && (strict || o == b.First) {
				break
			}
			if o >= p.end() {
				if p.end()-p.start >= s.MaxInFlight {
					break
				}
				for p.end() < o { // a hole past the window's end
					p.recs = append(p.recs, rec{state: Archived})
					p.dirty = true
				}
				p.recs = append(p.recs, rec{})
			}
			r := &p.recs[o-p.start]
			if r.state != Available {
				continue
			}
			r.count++
			r.state, r.member, r.deadline = Acquired, member, deadline
			p.acquired++
			taken++
			add(o, r.count)
		}
		next = max(next, b.Last+1)
	}
	p.advance()
	return out
}

// Acknowledge applies one acknowledgement batch of member: types has one
// entry for the whole range, or one per offset. Accept acknowledges, Gap
// and Reject archive, Release makes the offsets available again (archived
// once their delivery count reached the limit), Renew extends the lock.
// Every offset must be acquired by member, else nothing changes.
func (p *Partition) Acknowledge(member string, first, last int64, types []int8, s Settings, now time.Time) error {
	if first > last || len(types) == 0 || (len(types) != 1 && int64(len(types)) != last-first+1) {
		return ErrInvalidRequest
	}
	for _, t := range types {
		if t < AckGap || t > AckRenew {
			return ErrInvalidRequest
		}
	}
	if first < p.start || last >= p.end() {
		return ErrInvalidRecordState
	}
	for o := first; o <= last; o++ {
		r := p.recs[o-p.start]
		if r.state != Acquired || r.member != member {
			return ErrInvalidRecordState
		}
	}
	for o := first; o <= last; o++ {
		t := types[0]
		if len(types) > 1 {
			t = types[o-first]
		}
		r := &p.recs[o-p.start]
		switch t {
		case AckRenew:
			r.deadline = now.Add(s.LockDuration)
			continue
		case AckAccept:
			r.state = Acknowledged
		case AckGap, AckReject:
			r.state = Archived
		case AckRelease:
			p.release(r, s)
		}
		if r.state != Acquired {
			p.acquired--
			r.member, r.deadline = "", time.Time{}
		}
		p.dirty = true
	}
	p.advance()
	return nil
}

// release makes an acquired offset available again, or archives it if it
// was delivered s.DeliveryCountLimit times.
func (p *Partition) release(r *rec, s Settings) {
	if r.count >= s.DeliveryCountLimit {
		r.state = Archived
	} else {
		r.state = Available
	}
}

// Expire releases the offsets whose acquisition lock ran out; it returns
// how many.
func (p *Partition) Expire(now time.Time, s Settings) int {
	if p.acquired == 0 {
		return 0
	}
	n := 0
	for i := range p.recs {
		r := &p.recs[i]
		if r.state == Acquired && !now.Before(r.deadline) {
			p.release(r, s)
			r.member, r.deadline = "", time.Time{}
			p.acquired--
			n++
		}
	}
	if n > 0 {
		p.dirty = true
		p.advance()
	}
	return n
}

// ReleaseMember releases every offset member holds (its share session
// closed); it returns how many.
func (p *Partition) ReleaseMember(member string, s Settings) int {
	if p.acquired == 0 {
		return 0
	}
	n := 0
	for i := range p.recs {
		r := &p.recs[i]
		if r.state == Acquired && r.member == member {
			// A release on close does not count as a delivery that failed
			// for the limit's sake beyond the one already counted.
			p.release(r, s)
			r.member, r.deadline = "", time.Time{}
			p.acquired--
			n++
		}
	}
	if n > 0 {
		p.dirty = true
		p.advance()
	}
	return n
}

// NextDeadline is the earliest acquisition-lock deadline (zero if none).
func (p *Partition) NextDeadline() time.Time {
	var d time.Time
	if p.acquired == 0 {
		return d
	}
	for _, r := range p.recs {
		if r.state == Acquired && (d.IsZero() || r.deadline.Before(d)) {
			d = r.deadline
		}
	}
	return d
}

// State is the state and delivery count of offset o (for tests and
// describe); offsets below the SPSO are reported Acknowledged.
func (p *Partition) State(o int64) (state int8, count int16) {
	switch {
	case o < p.start:
		return Acknowledged, 0
	case o >= p.end():
		return Available, 0
	}
	r := p.recs[o-p.start]
	return r.state, r.count
}
