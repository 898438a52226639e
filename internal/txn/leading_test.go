package txn

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/testwait"
)

// TestLeadingUnownedPartitionIsLoading: a __transaction_state partition
// this node leads but has not loaded yet answers
// COORDINATOR_LOAD_IN_PROGRESS, as Kafka's coordinator does while it
// loads, not NOT_COORDINATOR, which sends the producer to look again for
// the node FindCoordinator just named.
func TestLeadingUnownedPartitionIsLoading(t *testing.T) {
	r := newRig(t)
	var leading atomic.Bool
	c := New(DefaultConfig(), r.logs[:1], Options{IDs: r.ids, Unowned: true,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Markers: func(context.Context, int64, int16, bool, []TopicPartition) error { return nil },
		Leading: func(int32) bool { return leading.Load() }})
	t.Cleanup(func() { c.Close() })
	init := func() error {
		_, _, err := c.InitProducerID(context.Background(), "tx", 60000, -1, -1)
		return err
	}
	check := func(what string, want error) {
		t.Helper()
		if err := init(); !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
	}
	check("led elsewhere", kerr.NotCoordinator)
	leading.Store(true)
	check("led here, not loaded", kerr.CoordinatorLoadInProgress)
	c.LoadPartition(0)
	testwait.Until(t, 10*time.Second, "partition 0 loaded", func() bool { return c.Loaded(0) })
	if err := init(); err != nil {
		t.Fatalf("loaded: %v", err)
	}
	c.UnloadPartition(0)
	leading.Store(false)
	check("led elsewhere again", kerr.NotCoordinator)
}
