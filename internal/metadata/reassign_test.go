package metadata

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"holdfast/internal/storage"
)

// TestReassignCommands walks a partition through start, refusal of bad
// targets, completion, a second move and its cancellation, across a
// reopen of the metadata file.
func TestReassignCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	s := open(t, storage.OSFS(), dir)
	end := int64(0)
	apply := func(c Command) (Topic, error) {
		t.Helper()
		end++
		return s.Apply(end, c)
	}
	for id := int32(1); id <= 4; id++ {
		if _, err := apply(Command{Op: OpRegister, Broker: &BrokerInfo{ID: id, Host: "h", Port: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	tp := Topic{Name: "t", ID: [16]byte{1}, Partitions: 2, Replicas: [][]int32{{1, 2, 3}, {2, 3, 1}}}
	if _, err := apply(Command{Op: OpCreateTopic, Topic: &tp}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd  Command
		want error
	}{
		{Command{Op: OpReassign, Name: "t", Partition: 0, Target: []int32{}}, ErrInvalidAssignment},
		{Command{Op: OpReassign, Name: "t", Partition: 0, Target: []int32{2, 2, 4}}, ErrInvalidAssignment},
		{Command{Op: OpReassign, Name: "t", Partition: 0, Target: []int32{2, 3, 9}}, ErrInvalidAssignment},
		{Command{Op: OpReassign, Name: "t", Partition: 2, Target: []int32{2, 3, 4}}, ErrUnknownPartition},
		{Command{Op: OpReassign, Name: "u", Partition: 0, Target: []int32{2, 3, 4}}, ErrUnknownTopic},
		{Command{Op: OpReassign, Name: "t", Partition: 0}, ErrNoReassignment},
		{Command{Op: OpReassignDone, Name: "t", Partition: 0, Target: []int32{2, 3, 4}}, ErrStaleReassignFinish},
	} {
		if _, err := apply(c.cmd); !errors.Is(err, c.want) {
			t.Fatalf("%+v: %v, want %v", c.cmd, err, c.want)
		}
	}
	got, err := apply(Command{Op: OpReassign, Name: "t", Partition: 0, Target: []int32{2, 3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	r, ok := got.Reassignment(0)
	if !ok || !slices.Equal(got.Replicas[0], []int32{2, 3, 4, 1}) || !slices.Equal(r.Adding(), []int32{4}) || !slices.Equal(r.Removing(), []int32{1}) {
		t.Fatalf("during the move: replicas %v, %+v adding %v removing %v", got.Replicas[0], r, r.Adding(), r.Removing())
	}
	if !slices.Equal(got.InitialReplicas(0), []int32{1, 2, 3}) || !slices.Equal(got.InitialReplicas(1), []int32{2, 3, 1}) {
		t.Fatalf("initial voters %v %v", got.InitialReplicas(0), got.InitialReplicas(1))
	}
	if _, err := apply(Command{Op: OpReassign, Name: "t", Partition: 0, Target: []int32{1, 2, 4}}); !errors.Is(err, ErrReassignInProgress) {
		t.Fatalf("second target while moving: %v", err)
	}
	if _, err := apply(Command{Op: OpUnregister, BrokerID: 4}); !errors.Is(err, ErrBrokerInUse) {
		t.Fatalf("unregister a broker holding a replica: %v", err)
	}
	closeStore(t, s)
	s = open(t, storage.OSFS(), dir) // the ongoing move is persisted
	if _, err := apply(Command{Op: OpReassignDone, Name: "t", Partition: 0, Target: []int32{4, 3, 2}}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Topic("t")
	if _, ok := got.Reassignment(0); ok || !slices.Equal(got.Replicas[0], []int32{2, 3, 4}) || !slices.Equal(got.InitialReplicas(0), []int32{1, 2, 3}) {
		t.Fatalf("after the move: %+v", got)
	}

	// Cancel: the original set becomes the target; completing the old
	// target is refused, completing the original is accepted.
	if _, err := apply(Command{Op: OpReassign, Name: "t", Partition: 1, Target: []int32{4, 3, 1}}); err != nil {
		t.Fatal(err)
	}
	got, err = apply(Command{Op: OpReassign, Name: "t", Partition: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := got.Reassignment(1); !slices.Equal(r.Target, []int32{2, 3, 1}) || !slices.Equal(got.Replicas[1], []int32{4, 3, 1, 2}) {
		t.Fatalf("cancelled: %+v, replicas %v", r, got.Replicas[1])
	}
	if _, err := apply(Command{Op: OpReassignDone, Name: "t", Partition: 1, Target: []int32{4, 3, 1}}); !errors.Is(err, ErrStaleReassignFinish) {
		t.Fatalf("completing a cancelled target: %v", err)
	}
	if _, err := apply(Command{Op: OpReassignDone, Name: "t", Partition: 1, Target: []int32{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Topic("t")
	if len(got.Reassigning) != 0 || !slices.Equal(got.Replicas[1], []int32{2, 3, 1}) {
		t.Fatalf("after the cancel: %+v", got)
	}
	if _, err := apply(Command{Op: OpReassign, Name: "t", Partition: 0, Target: []int32{2, 3, 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(Command{Op: OpReassignDone, Name: "t", Partition: 0, Target: []int32{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(Command{Op: OpUnregister, BrokerID: 4}); err != nil {
		t.Fatalf("unregister an unused broker: %v", err)
	}
	if _, ok := s.Broker(4); ok {
		t.Fatal("broker 4 still registered")
	}
}
