package group

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/testwait"
)

// TestLeadingUnownedPartitionIsLoading: a partition this node leads but
// has not loaded yet (elected, the load not started: the watcher waits
// for the new leader to settle) answers COORDINATOR_LOAD_IN_PROGRESS, as
// Kafka's coordinator does while it loads, not NOT_COORDINATOR, which
// sends the client to look again for the node FindCoordinator just named.
func TestLeadingUnownedPartitionIsLoading(t *testing.T) {
	var leading atomic.Bool
	c := New(DefaultConfig(), []Log{&memLog{}}, Options{Unowned: true, Leading: func(int32) bool { return leading.Load() }})
	t.Cleanup(func() { c.Close() })
	check := func(what string, want, wantList int16) {
		t.Helper()
		if got := c.Unavailable("g"); got != want {
			t.Fatalf("%s: %v, want %v", what, kerr.ErrorForCode(got), kerr.ErrorForCode(want))
		}
		list := c.ListGroups(kmsg.NewPtrListGroupsRequest())(context.Background()).(*kmsg.ListGroupsResponse)
		if list.ErrorCode != wantList {
			t.Fatalf("%s: ListGroups answered %v, want %v", what, kerr.ErrorForCode(list.ErrorCode), kerr.ErrorForCode(wantList))
		}
	}
	check("led elsewhere", kerr.NotCoordinator.Code, 0)
	leading.Store(true)
	check("led here, not loaded", kerr.CoordinatorLoadInProgress.Code, kerr.CoordinatorLoadInProgress.Code)
	c.LoadPartition(0)
	testwait.Until(t, 10*time.Second, "partition 0 loaded", func() bool { return c.Loaded(0) })
	check("loaded", 0, 0)
	c.UnloadPartition(0)
	leading.Store(false)
	check("led elsewhere again", kerr.NotCoordinator.Code, 0)
}
