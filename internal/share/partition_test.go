package share

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

var testSettings = Settings{LockDuration: time.Second, DeliveryCountLimit: 2, MaxInFlight: 8}

func spans(bs ...[2]int64) []BatchSpan {
	var out []BatchSpan
	for _, b := range bs {
		out = append(out, BatchSpan{First: b[0], Last: b[1]})
	}
	return out
}

func TestPartitionAcquireAcknowledge(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPartition(0)
	// Batch-optimized: a whole batch even past maxRecords; the window is
	// capped at MaxInFlight offsets.
	got := p.Acquire("a", spans([2]int64{0, 4}, [2]int64{5, 11}), 0, 12, 3, false, testSettings, now)
	if want := []Range{{0, 4, 1}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("acquire = %v, want %v", got, want)
	}
	got = p.Acquire("b", spans([2]int64{5, 11}), 5, 12, 100, false, testSettings, now)
	if want := []Range{{5, 7, 1}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("acquire past the in-flight limit = %v, want %v", got, want)
	}
	// Strict mode stops at maxRecords inside a batch.
	q := NewPartition(0)
	if got := q.Acquire("a", spans([2]int64{0, 9}), 0, 10, 4, true, testSettings, now); !reflect.DeepEqual(got, []Range{{0, 3, 1}}) {
		t.Fatalf("strict acquire = %v", got)
	}
	// Another member's offsets cannot be acknowledged; a failing batch
	// changes nothing.
	if err := p.Acknowledge("b", 0, 0, []int8{AckAccept}, testSettings, now); !errors.Is(err, ErrInvalidRecordState) {
		t.Fatalf("ack of another member's offset: %v", err)
	}
	if err := p.Acknowledge("a", 0, 5, []int8{AckAccept}, testSettings, now); !errors.Is(err, ErrInvalidRecordState) {
		t.Fatalf("ack spanning members: %v", err)
	}
	if err := p.Acknowledge("a", 0, 1, []int8{AckAccept, AckReject}, testSettings, now); err != nil {
		t.Fatal(err)
	}
	if p.Start() != 2 {
		t.Fatalf("SPSO %d, want 2", p.Start())
	}
	if err := p.Acknowledge("a", 2, 4, []int8{AckRelease}, testSettings, now); err != nil {
		t.Fatal(err)
	}
	// Released offsets come back with delivery count 2, then are archived
	// when released again (limit 2).
	got = p.Acquire("a", spans([2]int64{0, 4}, [2]int64{5, 11}), 2, 12, 10, false, testSettings, now)
	if want := []Range{{2, 4, 2}, {8, 9, 1}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("reacquire = %v, want %v", got, want)
	}
	if err := p.Acknowledge("a", 2, 4, []int8{AckRelease}, testSettings, now); err != nil {
		t.Fatal(err)
	}
	if st, _ := p.State(3); st != Acknowledged || p.Start() != 5 {
		t.Fatalf("offset 3 state %d, SPSO %d: want archived below the SPSO 5", st, p.Start())
	}
	// Locks run out.
	if n := p.Expire(now.Add(2*time.Second), testSettings); n != 5 {
		t.Fatalf("expired %d, want 5", n)
	}
	if st, c := p.State(6); st != Available || c != 1 {
		t.Fatalf("offset 6: state %d count %d", st, c)
	}
	// The snapshot round trip keeps states and counts; acquired offsets
	// come back available.
	p.Acquire("c", spans([2]int64{5, 11}), 5, 12, 1, true, testSettings, now)
	snap := p.Snapshot()
	r := FromSnapshot(snap)
	for o := int64(0); o < 14; o++ {
		ws, wc := p.State(o)
		if ws == Acquired {
			ws = Available
		}
		if gs, gc := r.State(o); gs != ws || gc != wc {
			t.Fatalf("offset %d after snapshot: %d/%d, want %d/%d", o, gs, gc, ws, wc)
		}
	}
	v, err := decodeValue(encodeValue(snap))
	if err != nil || !reflect.DeepEqual(v, snap) {
		t.Fatalf("value round trip: %v %+v vs %+v", err, v, snap)
	}
	k := Key{Group: "g", TopicID: [16]byte{1, 2}, Partition: 7}
	if got, err := decodeKey(encodeKey(k)); err != nil || got != k {
		t.Fatalf("key round trip: %v %+v", err, got)
	}
}

func TestPartitionHoles(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPartition(0)
	// Offsets 3-4 and 8 are in no batch (a compacted log): archived.
	got := p.Acquire("a", spans([2]int64{0, 2}, [2]int64{5, 7}, [2]int64{9, 9}), 0, 10, 100, false, Settings{LockDuration: time.Second, DeliveryCountLimit: 5, MaxInFlight: 100}, now)
	if want := []Range{{0, 2, 1}, {5, 7, 1}, {9, 9, 1}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("acquire = %v, want %v", got, want)
	}
	if err := p.Acknowledge("a", 0, 2, []int8{AckAccept}, testSettings, now); err != nil {
		t.Fatal(err)
	}
	if p.Start() != 5 {
		t.Fatalf("SPSO %d, want 5 (3-4 archived)", p.Start())
	}
}

func TestPartitionRenew(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewPartition(0)
	p.Acquire("a", spans([2]int64{0, 1}), 0, 2, 10, false, testSettings, now)
	if err := p.Acknowledge("a", 0, 0, []int8{AckRenew}, testSettings, now.Add(900*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	// At 1.5 s offset 1's lock ran out, offset 0's (renewed at 0.9 s) not.
	if n := p.Expire(now.Add(1500*time.Millisecond), testSettings); n != 1 {
		t.Fatalf("expired %d, want 1", n)
	}
	if st, _ := p.State(0); st != Acquired {
		t.Fatalf("renewed offset is in state %d", st)
	}
	// A renewed offset is still the member's to accept.
	if err := p.Acknowledge("a", 0, 0, []int8{AckAccept}, testSettings, now.Add(1600*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if p.Start() != 1 {
		t.Fatalf("SPSO %d, want 1", p.Start())
	}
}
