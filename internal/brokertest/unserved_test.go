package brokertest_test

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/storage"
	"holdfast/internal/wire"
)

// TestClusterFailedReplicaNamesLeader: node 2 leads an RF=3 partition
// when its disk starts failing for it (fsync and open: the repair loop
// cannot bring the replica back). The other two elect a leader and carry
// on. Node 2's Metadata names that leader, as Raft tells node 2 (the new
// leader's heartbeats still reach it), lists node 2 in offline_replicas
// and leaves it out of the ISR; before, it answered leader -1 with
// KAFKA_STORAGE_ERROR, and kadm's ListOffsets through it failed. Every
// node answers the same ISR, the leader's. Admin calls through node 2
// alone work.
func TestClusterFailedReplicaNamesLeader(t *testing.T) {
	disk := storage.NewCrashFS(11)
	c := brokertest.NewCluster(t, 3, func(cfg *broker.Config, _ *wire.Limits) {
		cfg.ControlledShutdown = false
		if cfg.NodeID == 2 {
			cfg.FS = disk
		}
	})
	const topic = "unserved"
	createLedBy(t, c, topic, 2)
	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic), kgo.RetryTimeout(60*time.Second),
		kgo.MetadataMinAge(100*time.Millisecond))
	produce(t, cl, 0, 10)

	disk.InjectError(storage.OpSync, topic+"-0", syscall.EIO)
	disk.InjectError(storage.OpOpen, topic+"-0", syscall.EIO)
	produce(t, cl, 10, 10) // node 2 fails; the others elect and commit
	leader, _ := c.AwaitLeader(topic, 0, 2)

	n2 := c.Node(2)
	brokertest.Await(t, "node 2 to name the leader and itself offline", func() error {
		md, err := n2.Metadata(topic)
		if err != nil {
			return err
		}
		p := md.Topics[0].Partitions[0]
		switch {
		case !slices.Contains(p.OfflineReplicas, 2):
			return fmt.Errorf("node 2's replica not failed yet: offline %v", p.OfflineReplicas)
		case p.ErrorCode != 0 || p.Leader != leader:
			return fmt.Errorf("node 2 answers leader %d (%v), offline %v; the leader is %d", p.Leader, kerr.ErrorForCode(p.ErrorCode), p.OfflineReplicas, leader)
		case slices.Contains(p.ISR, 2):
			return fmt.Errorf("node 2 lists itself in sync: %v", p.ISR)
		}
		return nil
	})

	// Every node's answer has the leader's ISR, without node 2. The third
	// node listed node 2 in sync (it is not fenced: only its replica
	// failed), as every follower listed every unfenced replica (issue 26).
	brokertest.Await(t, "every node to answer the leader's ISR", func() error {
		var first []int32
		for id := int32(1); id <= 3; id++ {
			md, err := c.Node(id).Metadata(topic)
			if err != nil {
				return err
			}
			p := md.Topics[0].Partitions[0]
			isr := slices.Sorted(slices.Values(p.ISR))
			switch {
			case p.ErrorCode != 0 || p.Leader != leader || slices.Contains(isr, 2):
				return fmt.Errorf("node %d answers leader %d (%v), ISR %v; the leader is %d", id, p.Leader, kerr.ErrorForCode(p.ErrorCode), isr, leader)
			case id > 1 && !slices.Equal(isr, first):
				return fmt.Errorf("node %d answers ISR %v, node 1 %v", id, isr, first)
			}
			first = isr
		}
		return nil
	})

	// A client that knows node 2 only.
	adm := kadm.NewClient(n2.Client())
	defer adm.Close()
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup(topic, 0); o.Err != nil || o.Offset != 20 {
		t.Fatalf("end offset through node 2: %d, %v", o.Offset, o.Err)
	}
	disk.ClearErrors()
}
