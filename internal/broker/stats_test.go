package broker_test

import (
	"fmt"
	"testing"

	"holdfast/internal/broker"
)

func statsOf(n interface {
	PartitionStats() []broker.PartitionStats
}, topic string) (broker.PartitionStats, bool) {
	for _, p := range n.PartitionStats() {
		if p.Topic == topic && p.Partition == 0 {
			return p, true
		}
	}
	return broker.PartitionStats{}, false
}

// TestClusterReplicationStats stops a follower of an RF=3 partition with
// min.insync.replicas=3: its leader reports it under-replicated and under
// min ISR and counts an ISR shrink; back, an expand. What metrics and the
// console show comes from here.
func TestClusterReplicationStats(t *testing.T) {
	nodes := startCluster(t, 3)
	three := "3"
	createClusterTopic(t, nodes, "urp", 1, 3, map[string]*string{"min.insync.replicas": &three})
	var leader *broker.Broker
	var leaderID int32
	awaitCluster(t, "the leader counts 3 in-sync replicas", func() error {
		for _, n := range nodes {
			if p, ok := statsOf(n.B, "urp"); ok && p.IsLeader {
				if p.ISR != 3 || p.Replicas != 3 || p.UnderReplicated() || p.UnderMinISR() {
					return fmt.Errorf("leader %d: %+v", n.Cfg.NodeID, p)
				}
				leader, leaderID = n.B, n.Cfg.NodeID
				return nil
			}
		}
		return fmt.Errorf("no leader yet")
	})
	// The stats loop samples every second: let it see the full ISR.
	seenAt := leader.ReplicationEvents().Samples
	awaitCluster(t, "two samples of the full ISR", func() error {
		if p, _ := statsOf(leader, "urp"); p.ISR != 3 {
			t.Fatalf("ISR changed with every node up: %+v", p)
		}
		if ev := leader.ReplicationEvents(); ev.Samples < seenAt+2 {
			return fmt.Errorf("%+v", ev)
		}
		return nil
	})
	if leader.ReplicationEvents().LeaderElections == 0 {
		t.Error("the leader counted no election")
	}
	var follower int
	for i, n := range nodes {
		if n.Cfg.NodeID != leaderID {
			follower = i
			break
		}
	}
	before := leader.ReplicationEvents()
	nodes[follower].Stop()
	awaitCluster(t, "the leader sees the partition under-replicated", func() error {
		p, _ := statsOf(leader, "urp")
		if !p.IsLeader {
			t.Fatalf("node %d lost leadership: %+v", leaderID, p)
		}
		if !p.UnderReplicated() || !p.UnderMinISR() || p.ISR != 2 {
			return fmt.Errorf("%+v", p)
		}
		if leader.ReplicationEvents().IsrShrinks <= before.IsrShrinks {
			return fmt.Errorf("no ISR shrink counted: %+v", leader.ReplicationEvents())
		}
		return nil
	})
	nodes[follower].Restart()
	awaitCluster(t, "the follower back in sync", func() error {
		p, _ := statsOf(leader, "urp")
		if p.UnderReplicated() || p.ISR != 3 {
			return fmt.Errorf("%+v", p)
		}
		if leader.ReplicationEvents().IsrExpands <= before.IsrExpands {
			return fmt.Errorf("no ISR expand counted: %+v", leader.ReplicationEvents())
		}
		return nil
	})
	offline := 0
	for _, n := range nodes {
		cs := n.B.ClusterStats()
		offline += cs.OfflinePartitions
		if cs.Controller && cs.Brokers != 3 {
			t.Errorf("controller counts %d brokers", cs.Brokers)
		}
	}
	if offline != 0 {
		t.Errorf("%d partitions offline with every node up", offline)
	}
}
