package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/cluster"
	"holdfast/internal/clustertest"
	"holdfast/internal/coordinator"
	"holdfast/internal/group"
	"holdfast/internal/metadata"
	"holdfast/internal/replica"
	"holdfast/internal/testwait"
)

// loadedOn lists the nodes whose group coordinator has partition p of
// __consumer_offsets loaded.
func loadedOn(hosts map[int32]*coordinator.Host, p int32) []int32 {
	var out []int32
	for id, h := range hosts {
		if h.Groups().Loaded(p) {
			out = append(out, id)
		}
	}
	return out
}

// TestCoordinatorFailover: on three nodes, each __consumer_offsets
// partition is loaded by exactly one coordinator, its leader's; when that
// node hands its leaderships over, the new leader loads the partition
// (the offsets committed before are there) and the old one unloads it.
func TestCoordinatorFailover(t *testing.T) {
	nodes := clustertest.StartCluster(t, 3, func(c *cluster.Config, _ *replica.Config) {
		c.ControlledShutdown, c.ControlledShutdownMaxWait = true, 20*time.Second
	})
	hosts := map[int32]*coordinator.Host{}
	for _, n := range nodes {
		h := newHost(n)
		t.Cleanup(func() { h.Close() })
		hosts[n.ID()] = h
	}
	ctrl := clustertest.Controller(t, nodes)
	// The controller creates the topic (elsewhere Find forwards to it,
	// which needs a broker).
	if a := hosts[ctrl.ID()].Find(coordinator.KeyGroup, "g", false, "PLAINTEXT"); a.Code != 0 {
		t.Fatalf("Find: %+v", a)
	}
	p := group.PartitionFor("g", testPartitions)
	exactlyOne := func() (int32, bool) {
		on := loadedOn(hosts, p)
		if len(on) != 1 {
			return 0, false
		}
		return on[0], true
	}
	var owner int32
	testwait.Until(t, 30*time.Second, "partition p loaded on exactly one node", func() bool {
		var ok bool
		owner, ok = exactlyOne()
		return ok
	})
	// Every node locates the same coordinator: the loaded one.
	for _, h := range hosts {
		testwait.Until(t, 10*time.Second, "every node to name the coordinator", func() bool {
			a := h.Locate(coordinator.KeyGroup, "g", "PLAINTEXT")
			return a.Code == 0 && a.Node == owner
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version, commit.Group, commit.Generation = 8, "g", -1
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = 0, 42
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: metadata.OffsetsTopic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{rp}}}
	resp := hosts[owner].Groups().OffsetCommit(commit)(ctx).(*kmsg.OffsetCommitResponse)
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("commit on the coordinator: %v", kerr.ErrorForCode(code))
	}
	// A node that does not coordinate g says so.
	for id, h := range hosts {
		if id == owner {
			continue
		}
		if code := h.Groups().OffsetCommit(commit)(ctx).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.NotCoordinator.Code {
			t.Fatalf("commit on node %d: %v, want NOT_COORDINATOR", id, kerr.ErrorForCode(code))
		}
		break
	}
	// The coordinator's node hands its leaderships over.
	for _, n := range nodes {
		if n.ID() == owner {
			n.Cluster.HandOver()
		}
	}
	var next int32
	testwait.Until(t, 30*time.Second, "the partition loaded on exactly one other node", func() bool {
		var ok bool
		next, ok = exactlyOne()
		return ok && next != owner
	})
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Version = 8
	fetch.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "g", Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: metadata.OffsetsTopic, Partitions: []int32{0}}}}}
	fr := hosts[next].Groups().OffsetFetch(fetch)(ctx).(*kmsg.OffsetFetchResponse)
	if g := fr.Groups[0]; g.ErrorCode != 0 || g.Topics[0].Partitions[0].Offset != 42 {
		t.Fatalf("the offset on the new coordinator (node %d): %+v", next, g)
	}
	if a := hosts[owner].Locate(coordinator.KeyGroup, "g", "PLAINTEXT"); a.Code != 0 || a.Node != next {
		t.Fatalf("the old coordinator names %+v, want node %d", a, next)
	}
}
