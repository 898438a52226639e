package brokertest_test

import (
	"fmt"
	"math"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/storage"
	"holdfast/internal/wire"
)

// fullDisk is a node's filesystem whose free space the test sets (what
// the repair loop reads through statfs): the writes of one partition fail
// with ENOSPC by injection, so that the Raft journal and the other logs on
// the same filesystem keep working.
type fullDisk struct {
	*storage.CrashFS
	free atomic.Int64
}

func (d *fullDisk) FreeBytes(string) (int64, bool) { return d.free.Load(), true }

// TestClusterFullDiskWaitsForRoom: node 2's replica of an RF=3 partition
// fails for ENOSPC. It is not discarded (it stays failed, its data kept)
// nor copied again while its filesystem has no room (the repair loop puts it off, each time after a
// longer pause); recopied at once, it filled the disk again and again (41
// recopies in 70 s, issue 26). Once there is room it is recopied once and
// catches up, with every record exactly once; the partition it only
// follows on the same node keeps its leader.
func TestClusterFullDiskWaitsForRoom(t *testing.T) {
	disk := &fullDisk{CrashFS: storage.NewCrashFS(13)}
	disk.free.Store(math.MaxInt64)
	c := brokertest.NewCluster(t, 3, func(cfg *broker.Config, _ *wire.Limits) {
		cfg.ControlledShutdown = false
		if cfg.NodeID == 2 {
			cfg.FS = disk
		}
	})
	const topic, other = "full", "bystander"
	createLedBy(t, c, topic, 1)
	createLedBy(t, c, other, 3)
	_, otherEpoch := c.AwaitLeader(other, 0)
	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic), kgo.RetryTimeout(60*time.Second),
		kgo.MetadataMinAge(100*time.Millisecond))
	produce(t, cl, 0, 10)

	n2 := c.Node(2)
	disk.free.Store(0)
	disk.InjectError(storage.OpWrite, topic+"-0", syscall.ENOSPC)
	produce(t, cl, 10, 10) // committed by nodes 1 and 3
	var first broker.ReplicationStats
	brokertest.Await(t, "node 2 to put the repair off for room", func() error {
		first = n2.B.ReplicationStats()
		if first.RepairsDeferred == 0 {
			return fmt.Errorf("%+v", first)
		}
		return nil
	})
	brokertest.Await(t, "node 2 to put it off twice more", func() error {
		st := n2.B.ReplicationStats()
		if st.Repairs != first.Repairs {
			t.Fatalf("node 2 recopied its replica with no room on its disk: %+v, then %+v", first, st)
		}
		if st.FailedGroups != 1 {
			t.Fatalf("node 2's failed replica was discarded with no room on its disk: %+v", st)
		}
		if st.RepairsDeferred < first.RepairsDeferred+2 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})

	disk.ClearErrors()
	disk.free.Store(math.MaxInt64)
	brokertest.Await(t, "node 2's replica recopied and caught up", func() error {
		st := n2.B.ReplicationStats()
		if st.FailedGroups != 0 || st.Repairs != first.Repairs+1 {
			return fmt.Errorf("%+v", st)
		}
		if end := partitionEnd(n2, topic); end != 20 {
			return fmt.Errorf("node 2's log ends at %d", end)
		}
		return nil
	})
	produce(t, cl, 20, 10)
	brokertest.Await(t, "node 2's log to hold every acknowledged record once", func() error {
		return holdsExactly(n2, topic, 30)
	})
	if l, e := c.AwaitLeader(other, 0); l != 3 || e != otherEpoch {
		t.Errorf("the partition node 2 only follows changed leader: %d epoch %d, was 3 epoch %d", l, e, otherEpoch)
	}
	if st := n2.B.ReplicationStats(); st.Repairs != first.Repairs+1 {
		t.Errorf("node 2 recopied its replica %d times once there was room, want once", st.Repairs-first.Repairs)
	}
}

func partitionEnd(n *brokertest.Node, topic string) int64 {
	for _, s := range n.B.PartitionStats() {
		if s.Topic == topic && s.Partition == 0 {
			return s.LogEnd
		}
	}
	return -1
}
