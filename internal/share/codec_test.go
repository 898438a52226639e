package share

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// The state records' encoding: a round trip for every shape, and a clear
// refusal (never a panic) of every truncation or bad length.
func TestStateCodec(t *testing.T) {
	for _, k := range []Key{{}, {Group: "g", TopicID: [16]byte{1, 2, 3}, Partition: 7}, {Group: strings.Repeat("x", 300), Partition: -1}} {
		got, err := decodeKey(encodeKey(k))
		if err != nil || got != k {
			t.Errorf("key %+v: %+v %v", k, got, err)
		}
	}
	snaps := []Snapshot{
		{},
		{StateEpoch: 3, LeaderEpoch: -1, StartOffset: 1 << 40},
		{StateEpoch: 1, LeaderEpoch: 9, StartOffset: 5, Batches: []Batch{{5, 9, Acknowledged, 1}, {10, 10, Archived, 5}, {11, 20, Available, 2}}},
	}
	for _, s := range snaps {
		got, err := decodeValue(encodeValue(s))
		if err != nil || !reflect.DeepEqual(got, s) {
			t.Errorf("value %+v: %+v %v", s, got, err)
		}
	}
	key := encodeKey(Key{Group: "g", Partition: 1})
	for i := range len(key) {
		if _, err := decodeKey(key[:i]); err == nil {
			t.Errorf("key cut to %d bytes decoded", i)
		}
	}
	val := encodeValue(snaps[2])
	for i := range len(val) {
		if _, err := decodeValue(val[:i]); err == nil {
			t.Errorf("value cut to %d bytes decoded", i)
		}
	}
	bad := append([]byte(nil), val...)
	bad[1] = 1 // an unknown value version
	if _, err := decodeValue(bad); err == nil {
		t.Error("value of version 1 decoded")
	}
}

// TestStoreListResetDelete: the admin view of a group's share state, a
// reset's new state epoch, a partial delete, and a snapshot over the
// batch limit refused before anything is written.
func TestStoreListResetDelete(t *testing.T) {
	ctx := context.Background()
	lg := &memLog{}
	s := loadedStore(t, lg)
	keys := []Key{{"g", [16]byte{2}, 0}, {"g", [16]byte{1}, 1}, {"g", [16]byte{1}, 0}, {"h", [16]byte{1}, 0}}
	for i, k := range keys {
		if err := s.Write(ctx, k, Snapshot{LeaderEpoch: 1, StartOffset: int64(10 * i)}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.List("g")
	if err != nil || len(list) != 3 || list[0].Key != keys[2] || list[1].Key != keys[1] || list[2].Key != keys[0] || list[2].StartOffset != 0 || list[1].StartOffset != 10 {
		t.Fatalf("List(g) = %+v %v", list, err)
	}
	if err := s.Reset(ctx, keys[1], 99); err != nil {
		t.Fatal(err)
	}
	list, _ = s.List("g")
	if list[1].StartOffset != 99 || list[1].StateEpoch != 1 || list[1].LeaderEpoch != 1 {
		t.Fatalf("after reset: %+v", list[1])
	}
	if err := s.Delete(ctx, "g", func(k Key) bool { return k.TopicID == [16]byte{1} }); err != nil {
		t.Fatal(err)
	}
	if list, _ = s.List("g"); len(list) != 1 || list[0].Key != keys[0] {
		t.Fatalf("after a partial delete: %+v", list)
	}
	if g := s.Groups(); !reflect.DeepEqual(g, []string{"g", "h"}) {
		t.Fatalf("Groups = %v", g)
	}
	n := len(lg.batches)
	if err := s.Write(ctx, keys[0], Snapshot{LeaderEpoch: 1, Batches: make([]Batch, maxBatches+1)}); err == nil || n != len(lg.batches) {
		t.Fatalf("oversized snapshot: %v, %d batches appended", err, len(lg.batches)-n)
	}
	// The replayed store agrees.
	r := loadedStore(t, lg)
	if list, _ := r.List("g"); len(list) != 1 || list[0].Key != keys[0] {
		t.Fatalf("replayed: %+v", list)
	}
	if !r.HasState("h") {
		t.Fatal("replayed store lost h")
	}
}
