package replica_test

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/storage"
	"holdfast/internal/wire"
)

// fullDisk is an in-memory filesystem whose free space the test sets
// (what roomToRecopy reads).
type fullDisk struct {
	*storage.CrashFS
	free atomic.Int64
}

func (d *fullDisk) FreeBytes(string) (int64, bool) { return d.free.Load(), true }

// A single node's replica that fails for a full disk stops (its group
// failed), is reported offline with KAFKA_STORAGE_ERROR (State: no other
// replica is live), and its repair is put off while the disk has no room
// (repair.go), counted in RepairsDeferred, never recopied: the other
// partition of the node keeps working.
func TestSingleReplicaFullDisk(t *testing.T) {
	disk := &fullDisk{CrashFS: storage.NewCrashFS(30)}
	disk.free.Store(math.MaxInt64)
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.FS = disk })
	n.CreateTopic("full", 1, nil)
	n.CreateTopic("fine", 1, nil)
	cl := n.Client()
	for _, topic := range []string{"full", "fine"} {
		if err := cl.ProduceSync(ctxFor(t, 5*time.Second), &kgo.Record{Topic: topic, Value: []byte("before")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	disk.free.Store(0)
	disk.InjectError(storage.OpWrite, "full-0", syscall.ENOSPC)
	// The write fails the replica's group; the broker holds the request
	// (for about 5 s), so the test does not wait for its answer.
	n.Client(kgo.DisableIdempotentWrite()).Produce(context.Background(), &kgo.Record{Topic: "full", Value: []byte("no room")}, nil)
	// The repair loop walks every repairEvery (2 s): within 5 s it has
	// seen the failure and put the recopy off.
	waitUntil(t, "the repair put off for room", func() bool { return n.B.ReplicationStats().RepairsDeferred >= 1 })
	st := n.B.ReplicationStats()
	if st.FailedGroups != 1 || st.Repairs != 0 {
		t.Fatalf("replication stats %+v: want 1 failed group, no repair", st)
	}
	md, err := n.Admin().Metadata(ctxFor(t, 5*time.Second), "full", "fine")
	if err != nil {
		t.Fatal(err)
	}
	me := n.Cfg.NodeID
	full := md.Topics["full"].Partitions[0]
	if !errors.Is(full.Err, kerr.KafkaStorageError) || full.Leader != -1 || len(full.OfflineReplicas) != 1 || full.OfflineReplicas[0] != me || len(full.ISR) != 0 {
		t.Fatalf("failed partition's metadata: %+v", full)
	}
	fine := md.Topics["fine"].Partitions[0]
	if fine.Err != nil || fine.Leader != me {
		t.Fatalf("the other partition: %+v", fine)
	}
	if err := cl.ProduceSync(ctxFor(t, 5*time.Second), &kgo.Record{Topic: "fine", Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatalf("the other partition stopped taking writes: %v", err)
	}
}
