package broker_test

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/storage"
)

func partitionEnd(n *brokertest.Node, topic string) int64 {
	for _, s := range n.B.PartitionStats() {
		if s.Topic == topic && s.Partition == 0 {
			return s.LogEnd
		}
	}
	return -1
}

// TestClusterReplicaStorageFailure: one replica's fsyncs start failing. Its
// Raft group stops on that node only (the partition stays available on the
// other two), the repair loop discards the replica's data and reopens it
// empty once the disk works again, and it catches up: every record is
// there, exactly once, and the node reports the repair.
func TestClusterReplicaStorageFailure(t *testing.T) {
	disk := storage.NewCrashFS(7)
	nodes := startCluster(t, 3, func(c *broker.Config) {
		if c.NodeID == 2 {
			c.FS = disk
		}
	})
	const topic = "failing"
	createClusterTopic(t, nodes, topic, 1, 3, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produceRange(t, cl, topic, 0, 100)
	n2 := nodeByID(nodes, 2)

	disk.InjectError(storage.OpSync, topic+"-0", syscall.EIO)
	produceRange(t, cl, topic, 100, 100) // committed by the other two
	awaitCluster(t, "node 2's replica to fail", func() error {
		if st := n2.B.ReplicationStats(); st.FailedGroups == 0 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	produceRange(t, cl, topic, 200, 100)
	disk.ClearErrors()
	awaitCluster(t, "node 2's replica repaired and caught up", func() error {
		st := n2.B.ReplicationStats()
		if st.FailedGroups != 0 || st.Repairs == 0 {
			return fmt.Errorf("%+v", st)
		}
		if end := partitionEnd(n2, topic); end != 300 {
			return fmt.Errorf("node 2's log ends at %d", end)
		}
		return nil
	})
	produceRange(t, cl, topic, 300, 100)
	consumeExactly(t, addrs(nodes), topic, 400)
	// Only node 2 can serve now: it has every record.
	for _, n := range nodes {
		if n != n2 {
			n.Stop()
		}
	}
	n2.Restart()
	for _, n := range nodes {
		if n != n2 {
			n.Restart()
		}
	}
	consumeExactly(t, []string{n2.Addr}, topic, 400)
}
