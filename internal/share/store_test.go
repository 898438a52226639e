package share

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"holdfast/internal/testwait"
)

// memLog is a Log in memory.
type memLog struct{ batches [][]byte }

func (l *memLog) Append(b []byte) (int64, error) {
	l.batches = append(l.batches, append([]byte(nil), b...))
	return int64(len(l.batches)), nil
}
func (l *memLog) WaitCommitted(context.Context, int64) error { return nil }
func (l *memLog) Scan(fn func([]byte) error) error {
	for _, b := range l.batches {
		if err := fn(b); err != nil {
			return err
		}
	}
	return nil
}

func loadedStore(t *testing.T, lg *memLog) *Store {
	t.Helper()
	s := NewStore([]Log{lg}, func(string) int32 { return 0 }, slog.Default())
	s.LoadPartition(0)
	testwait.Until(t, 5*time.Second, "the store to load", func() bool { return s.Loaded("g") })
	return s
}

func TestStoreFencingAndReplay(t *testing.T) {
	ctx := context.Background()
	lg := &memLog{}
	s := loadedStore(t, lg)
	k := Key{Group: "g", TopicID: [16]byte{9}, Partition: 1}
	if _, found, err := s.Read(k, 3); err != nil || found {
		t.Fatalf("read of nothing: found %v err %v", found, err)
	}
	if s.HasState("g") {
		t.Fatal("a read created state")
	}
	snap := Snapshot{LeaderEpoch: 3, StartOffset: 10, Batches: []Batch{{First: 12, Last: 13, State: Acknowledged, Count: 1}}}
	if err := s.Write(ctx, k, snap); err != nil {
		t.Fatal(err)
	}
	// A newer leader reads: the old one is fenced.
	if _, _, err := s.Read(k, 4); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, k, snap); !errors.Is(err, ErrFencedLeaderEpoch) {
		t.Fatalf("write of an older leader: %v", err)
	}
	if _, _, err := s.Read(k, 3); !errors.Is(err, ErrFencedLeaderEpoch) {
		t.Fatalf("read of an older leader: %v", err)
	}
	snap.LeaderEpoch, snap.StartOffset = 4, 14
	snap.Batches = nil
	if err := s.Write(ctx, k, snap); err != nil {
		t.Fatal(err)
	}
	// An admin reset fences the leader's state epoch.
	if err := s.Reset(ctx, k, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, k, snap); !errors.Is(err, ErrFencedStateEpoch) {
		t.Fatalf("write after a reset: %v", err)
	}
	// Replay gives the last state.
	r := loadedStore(t, lg)
	got, found, err := r.Read(k, 5)
	want := Snapshot{StateEpoch: 1, LeaderEpoch: 5, StartOffset: 2}
	if err != nil || !found || !reflect.DeepEqual(got, want) {
		t.Fatalf("after replay: %+v %v %v, want %+v", got, found, err, want)
	}
	// Delete: tombstones, gone after replay too.
	if err := r.Delete(ctx, "g", nil); err != nil {
		t.Fatal(err)
	}
	if r.HasState("g") || len(r.Groups()) != 0 {
		t.Fatal("state left after Delete")
	}
	if r2 := loadedStore(t, lg); r2.HasState("g") {
		t.Fatal("state back after replaying the tombstone")
	}
	// Another node's partition: not the coordinator.
	r.UnloadPartition(0)
	if _, _, err := r.Read(k, 9); !errors.Is(err, ErrNotCoordinator) {
		t.Fatalf("read on an unloaded partition: %v", err)
	}
}
