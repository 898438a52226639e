package coordinator_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
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
	"holdfast/internal/share"
	"holdfast/internal/testwait"
	"holdfast/internal/txn"
)

const testPartitions = 4

// startHost starts the coordinators over a cluster of one, in-process
// (clustertest: no broker, no sockets), as broker.startCoordinators does.
func startHost(t *testing.T, opts ...clustertest.Option) (*clustertest.Node, *coordinator.Host) {
	t.Helper()
	n := clustertest.Start(t, opts...)
	h := newHost(n)
	t.Cleanup(func() { h.Close() })
	return n, h
}

func newHost(n *clustertest.Node) *coordinator.Host {
	tc := txn.DefaultConfig()
	tc.StatePartitions = testPartitions
	return coordinator.Start(coordinator.Config{
		NodeID: 1, Groups: group.DefaultConfig(), Txn: tc, OffsetsTopicPartitions: testPartitions,
		Share:                    share.GroupsConfig{SessionTimeout: 45 * time.Second, HeartbeatInterval: 5 * time.Second, MaxSize: 200},
		OffsetsTopicSegmentBytes: 1 << 20, TxnTopicSegmentBytes: 2 << 20,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, n.Meta, n.Cluster, n.Replicas)
}

func wantUnavailable(t *testing.T, a coordinator.Answer, why string) {
	t.Helper()
	if a.Code != kerr.CoordinatorNotAvailable.Code || a.Node != -1 || !strings.Contains(a.Msg, why) {
		t.Fatalf("answer %+v, want COORDINATOR_NOT_AVAILABLE %q", a, why)
	}
}

// TestFindCreatesTheInternalTopics: the first FindCoordinator of each key
// type creates its internal topic (compacted, its own segment size, the
// configured partitions) and answers only once the key's coordinator is
// loaded here; Locate never creates.
func TestFindCreatesTheInternalTopics(t *testing.T) {
	n, h := startHost(t)
	for _, c := range []struct {
		typ     int8
		topic   string
		segment string
	}{
		{coordinator.KeyGroup, metadata.OffsetsTopic, "1048576"},
		{coordinator.KeyTransaction, metadata.TransactionTopic, "2097152"},
	} {
		wantUnavailable(t, h.Locate(c.typ, "k", "PLAINTEXT"), "does not exist yet")
		if _, ok := n.Meta.Topic(c.topic); ok {
			t.Fatalf("Locate created %s", c.topic)
		}
		a := h.Find(c.typ, "k", false, "PLAINTEXT")
		if a.Code != 0 || a.Node != 1 || a.Host != "127.0.0.1" || a.Port != 9092 {
			t.Fatalf("Find(%d): %+v", c.typ, a)
		}
		tp, ok := n.Meta.Topic(c.topic)
		if !ok || !tp.Internal || tp.Partitions != testPartitions || tp.Configs["cleanup.policy"] != "compact" || tp.Configs["segment.bytes"] != c.segment {
			t.Fatalf("%s: %+v", c.topic, tp)
		}
		// Every key gets the same answer now, without creating anything.
		gen := n.Meta.Generation()
		for _, key := range []string{"a", "b", "c", "d", "e"} {
			if a := h.Locate(c.typ, key, "PLAINTEXT"); a.Code != 0 || a.Node != 1 {
				t.Fatalf("Locate(%d, %s): %+v", c.typ, key, a)
			}
		}
		if n.Meta.Generation() != gen {
			t.Fatal("Locate changed the metadata")
		}
	}
	// Find answered once the partitions were led and loaded.
	for p := range int32(testPartitions) {
		if !h.Groups().Loaded(p) || !h.Txn().Loaded(p) {
			t.Fatalf("partition %d: groups loaded %v, txn loaded %v", p, h.Groups().Loaded(p), h.Txn().Loaded(p))
		}
	}
	if !h.GroupsLoaded() {
		t.Fatal("GroupsLoaded false after Find")
	}
	for _, g := range []string{"g1", "another group", ""} {
		if got, want := h.OffsetsPartition(g), group.PartitionFor(g, testPartitions); got != want {
			t.Fatalf("OffsetsPartition(%q) = %d, want %d", g, got, want)
		}
	}
}

// TestLocateRefusals: the coordinator's node is no answer while it is
// fenced, lacks the client's listener, or the topic's partition count is
// not the one the coordinators were built with.
func TestLocateRefusals(t *testing.T) {
	n, h := startHost(t, func(c *cluster.Config, _ *replica.Config) {
		c.Self.Listeners = []metadata.Endpoint{
			{Name: "EXTERNAL", Host: "ext.example", Port: 19092, Protocol: "PLAINTEXT"},
			{Name: "INTERNAL", Host: "10.0.0.1", Port: 9093, Protocol: "PLAINTEXT"},
		}
	})
	if a := h.Find(coordinator.KeyGroup, "g", false, "EXTERNAL"); a.Code != 0 || a.Host != "ext.example" || a.Port != 19092 {
		t.Fatalf("EXTERNAL: %+v", a)
	}
	if a := h.Locate(coordinator.KeyGroup, "g", "INTERNAL"); a.Code != 0 || a.Host != "10.0.0.1" || a.Port != 9093 {
		t.Fatalf("INTERNAL: %+v", a)
	}
	wantUnavailable(t, h.Locate(coordinator.KeyGroup, "g", "OTHER"), "has no OTHER listener")

	ctx := context.Background()
	if err := n.Cluster.Propose(ctx, metadata.Command{Op: metadata.OpFence, IDs: []int32{1}}); err != nil {
		t.Fatal(err)
	}
	// A fenced leader is no leader (replica.State), or, if State still
	// names it, the answer says fenced: no client is sent to it.
	if a := h.Locate(coordinator.KeyGroup, "g", "EXTERNAL"); !strings.Contains(a.Msg, "has no leader") {
		wantUnavailable(t, a, "fenced")
	} else {
		wantUnavailable(t, a, "has no leader")
	}
	if err := n.Cluster.Propose(ctx, metadata.Command{Op: metadata.OpUnfence, IDs: []int32{1}}); err != nil {
		t.Fatal(err)
	}
	if a := h.Locate(coordinator.KeyGroup, "g", "EXTERNAL"); a.Code != 0 {
		t.Fatalf("after unfencing: %+v", a)
	}
	if _, err := n.Cluster.AddPartitions(metadata.OffsetsTopic, testPartitions+1, nil); err != nil {
		t.Fatal(err)
	}
	wantUnavailable(t, h.Locate(coordinator.KeyGroup, "g", "EXTERNAL"), "partition count changed")
	// The transaction coordinator's topic is another matter.
	if a := h.Find(coordinator.KeyTransaction, "tx", false, "EXTERNAL"); a.Code != 0 {
		t.Fatalf("transaction coordinator: %+v", a)
	}
}

// TestProducerIDsFromBlocks: InitProducerId's ids are distinct across
// blocks and across a restart of the node (each block committed through
// the metadata log before use).
func TestProducerIDsFromBlocks(t *testing.T) {
	n, h := startHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := map[int64]bool{}
	take := func(h *coordinator.Host, k int) {
		t.Helper()
		for range k {
			id, err := h.NextProducerID(ctx)
			if err != nil || id < 0 || seen[id] {
				t.Fatalf("NextProducerID: %d %v (seen %v)", id, err, seen[id])
			}
			seen[id] = true
			if !n.Meta.ProducerIDIssued(id) {
				t.Fatalf("id %d handed out before its block was committed", id)
			}
		}
	}
	take(h, int(txn.IDBlock)+3) // past the first block
	h.Close()
	n.Stop()
	n.Restart()
	h2 := newHost(n)
	defer h2.Close()
	take(h2, 10)
}

// TestCommittedOffsetsSurviveRestartAndTopicDeletion: offsets committed
// through the group coordinator are replayed from __consumer_offsets after
// a restart, and removed when their topic is deleted (the deletion hook
// Start registers on the cluster node).
func TestCommittedOffsetsSurviveRestartAndTopicDeletion(t *testing.T) {
	n, h := startHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{"kept", "dropped"} {
		if _, err := n.Cluster.CreateTopic(ctx, name, 1, -1, nil, nil, false, true); err != nil {
			t.Fatal(err)
		}
	}
	if a := h.Find(coordinator.KeyGroup, "g", false, "PLAINTEXT"); a.Code != 0 {
		t.Fatalf("Find: %+v", a)
	}
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version, commit.Group, commit.Generation = 8, "g", -1
	for i, name := range []string{"kept", "dropped"} {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = name
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 0, int64(10*(i+1))
		rt.Partitions = append(rt.Partitions, rp)
		commit.Topics = append(commit.Topics, rt)
	}
	resp := h.Groups().OffsetCommit(commit)(ctx).(*kmsg.OffsetCommitResponse)
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				t.Fatalf("commit %s: %v", rt.Topic, kerr.ErrorForCode(rp.ErrorCode))
			}
		}
	}
	fetch := func(h *coordinator.Host) map[string]int64 {
		t.Helper()
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version, req.Group = 7, "g"
		out := map[string]int64{}
		r := h.Groups().OffsetFetch(req)(ctx).(*kmsg.OffsetFetchResponse)
		if r.ErrorCode != 0 {
			t.Fatalf("fetch: %v", kerr.ErrorForCode(r.ErrorCode))
		}
		for _, rt := range r.Topics {
			for _, rp := range rt.Partitions {
				if rp.Offset >= 0 {
					out[rt.Topic] = rp.Offset
				}
			}
		}
		return out
	}
	if got := fetch(h); got["kept"] != 10 || got["dropped"] != 20 {
		t.Fatalf("committed: %v", got)
	}
	h.Close()
	n.Stop()
	n.Restart()
	h = newHost(n)
	defer h.Close()
	// After the restart the coordinator loads its partitions as this node
	// leads them again.
	p := group.PartitionFor("g", testPartitions)
	testwait.Until(t, 10*time.Second, "g's partition loaded after the restart", func() bool { return h.Groups().Loaded(p) })
	if got := fetch(h); got["kept"] != 10 || got["dropped"] != 20 {
		t.Fatalf("after restart: %v", got)
	}
	if _, err := n.Cluster.DeleteTopic("dropped"); err != nil {
		t.Fatal(err)
	}
	if got := fetch(h); got["kept"] != 10 || len(got) != 1 {
		t.Fatalf("after deleting dropped: %v", got)
	}
}
