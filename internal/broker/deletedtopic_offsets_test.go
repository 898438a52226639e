package broker_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/brokertest"
	"holdfast/internal/testwait"
)

// committedOffsets is a group's committed offsets as "topic/partition" -> offset,
// read with OffsetFetch (all topics).
func committedOffsets(ctx context.Context, adm *kadm.Client, group string) (map[string]int64, error) {
	resp, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	if err := resp.Error(); err != nil {
		return nil, err
	}
	out := map[string]int64{}
	resp.Each(func(o kadm.OffsetResponse) { out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.At })
	return out, nil
}

func commitSimple(t *testing.T, adm *kadm.Client, group string, offs map[string]map[int32]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var os kadm.Offsets
	for topic, ps := range offs {
		for p, at := range ps {
			os.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
		}
	}
	resp, err := adm.CommitOffsets(ctx, group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("commit for %s: %v", group, err)
	}
}

// expectGroupOffsets waits until each group's committed offsets are want's (a
// nil map: the group is not listed by ListGroups at all).
func expectGroupOffsets(t *testing.T, adm *kadm.Client, want map[string]map[string]int64) {
	t.Helper()
	brokertest.Await(t, "committed offsets after the topic deletion", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		listed, err := adm.ListGroups(ctx)
		if err != nil {
			return err
		}
		for g, w := range want {
			_, isListed := listed[g]
			if w == nil {
				if isListed {
					return fmt.Errorf("group %s is still listed", g)
				}
				continue
			}
			if !isListed {
				return fmt.Errorf("group %s is not listed", g)
			}
			got, err := committedOffsets(ctx, adm, g)
			if err != nil {
				return fmt.Errorf("fetch offsets of %s: %w", g, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(w) {
				return fmt.Errorf("group %s has %v, want %v", g, got, w)
			}
		}
		return nil
	})
}

func deleteTopicAdm(t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := adm.DeleteTopics(ctx, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete %s: %v", topic, err)
	}
}

// TestDeletedTopicOffsetsRemoved: as in Kafka (onPartitionsDeleted),
// deleting a topic removes its committed offsets from every group, and a
// group left with no members and no offsets is gone; other topics'
// offsets stay, the removal survives a restart, and a topic re-created
// with the same name starts with no offsets and keeps the new ones.
func TestDeletedTopicOffsetsRemoved(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("del-a", 2, nil)
	n.CreateTopic("del-b", 1, nil)
	adm := n.Admin()
	commitSimple(t, adm, "g-both", map[string]map[int32]int64{"del-a": {0: 5, 1: 7}, "del-b": {0: 3}})
	commitSimple(t, adm, "g-only-a", map[string]map[int32]int64{"del-a": {0: 1}})
	expectGroupOffsets(t, adm, map[string]map[string]int64{
		"g-both":   {"del-a/0": 5, "del-a/1": 7, "del-b/0": 3},
		"g-only-a": {"del-a/0": 1},
	})

	deleteTopicAdm(t, adm, "del-a")
	after := map[string]map[string]int64{
		"g-both":   {"del-b/0": 3},
		"g-only-a": nil,
	}
	expectGroupOffsets(t, adm, after)

	n.Restart()
	adm = n.Admin()
	expectGroupOffsets(t, adm, after)

	// The same name again: a new topic, whose commits are kept.
	n.CreateTopic("del-a", 1, nil)
	commitSimple(t, adm, "g-both", map[string]map[int32]int64{"del-a": {0: 9}})
	expectGroupOffsets(t, adm, map[string]map[string]int64{
		"g-both":   {"del-a/0": 9, "del-b/0": 3},
		"g-only-a": nil,
	})
}

// TestClusterDeletedTopicOffsetsRemoved: on three nodes, where the
// groups' coordinators are spread over the nodes that lead their
// __consumer_offsets partitions, each removes the deleted topic's offsets
// from its own groups as it applies the deletion.
func TestClusterDeletedTopicOffsetsRemoved(t *testing.T) {
	nodes := startGroupCluster(t, 3)
	brokertest.CreateClusterTopic(t, nodes, "cdel-a", 2, 3, nil)
	brokertest.CreateClusterTopic(t, nodes, "cdel-b", 1, 3, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokertest.Addrs(nodes)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	before := map[string]map[string]int64{}
	after := map[string]map[string]int64{}
	// Enough groups to land on every __consumer_offsets partition (4).
	for i := range 8 {
		g := fmt.Sprintf("cg-%d", i)
		commitSimple(t, adm, g, map[string]map[int32]int64{"cdel-a": {0: 5, 1: int64(i)}, "cdel-b": {0: 3}})
		before[g] = map[string]int64{"cdel-a/0": 5, "cdel-a/1": int64(i), "cdel-b/0": 3}
		after[g] = map[string]int64{"cdel-b/0": 3}
		g = fmt.Sprintf("cg-only-a-%d", i)
		commitSimple(t, adm, g, map[string]map[int32]int64{"cdel-a": {0: 1}})
		before[g] = map[string]int64{"cdel-a/0": 1}
		after[g] = nil
	}
	expectGroupOffsets(t, adm, before)
	// COORDINATOR_NOT_AVAILABLE is retriable (an offsets partition's
	// leadership moving, as leader balancing does): asked again, as
	// clients do.
	coordinators := map[int32]bool{}
	testwait.For(t, 30*time.Second, "every group's coordinator", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		clear(coordinators)
		for _, fc := range adm.FindGroupCoordinators(ctx, slices.Collect(maps.Keys(before))...) {
			if fc.Err != nil {
				return fmt.Errorf("find coordinator of %s: %w", fc.Name, fc.Err)
			}
			coordinators[fc.NodeID] = true
		}
		return nil
	})
	if len(coordinators) < 2 {
		t.Fatalf("every group on node(s) %v: the test needs them spread", coordinators)
	}
	deleteTopicAdm(t, adm, "cdel-a")
	expectGroupOffsets(t, adm, after)
}
