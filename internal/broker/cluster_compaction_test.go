package broker_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/records"
)

// batchHead is what Raft cares for in a batch: its place and term.
type batchHead struct {
	base  int64
	delta int32
	epoch int32
}

// replicaView reads a replica's own log below upTo: the headers of its
// batches and the view of a consumer reading its data records from the
// start.
func replicaView(t *testing.T, n *brokertest.Node, topic string, upTo int64) ([]batchHead, map[string]string, int) {
	t.Helper()
	l := n.B.PartitionLog(topic, 0)
	if l == nil {
		t.Fatalf("node %d: no log", n.Cfg.NodeID)
	}
	var heads []batchHead
	var recs []kvRec
	prevEnd := int64(-1)
	err := l.Scan(l.StartOffset(), func(h records.Header, b []byte) error {
		if h.BaseOffset >= upTo {
			return nil
		}
		if prevEnd >= 0 && h.BaseOffset != prevEnd {
			return fmt.Errorf("batch at %d after one ending at %d: a Raft entry is missing", h.BaseOffset, prevEnd)
		}
		prevEnd = h.LastOffset() + 1
		heads = append(heads, batchHead{h.BaseOffset, h.LastOffsetDelta, h.PartitionLeaderEpoch})
		if h.IsControl() {
			return nil
		}
		return records.Each(b, func(r records.Record) {
			recs = append(recs, kvRec{r.Offset, string(r.Key), string(r.Value), r.Value == nil})
		})
	})
	if err != nil {
		t.Fatalf("node %d: %v", n.Cfg.NodeID, err)
	}
	return heads, liveView(recs), len(recs)
}

// leaderOfRunning asks the running nodes for topic's leader.
func leaderOfRunning(t *testing.T, nodes []*brokertest.Node, topic string) *brokertest.Node {
	t.Helper()
	var leader *brokertest.Node
	awaitCluster(t, "a running leader of "+topic, func() error {
		for _, n := range nodes {
			if n.B == nil {
				continue
			}
			l, _, _, err := leaderOf(n, topic)
			if err != nil {
				return err
			}
			if leader = nodeByID(nodes, l); leader == nil || leader.B == nil {
				return fmt.Errorf("leader %d not running", l)
			}
			return nil
		}
		return fmt.Errorf("no node running")
	})
	return leader
}

// sameCommitted waits until every running replica of topic-0 has the same
// high watermark, at least want, and returns it.
func sameCommitted(t *testing.T, nodes []*brokertest.Node, topic string, want int64) int64 {
	t.Helper()
	var hw int64
	awaitCluster(t, "every replica caught up", func() error {
		var hws []int64
		for _, n := range nodes {
			if n.B == nil {
				continue
			}
			for _, s := range n.B.PartitionStats() {
				if s.Topic == topic && s.Partition == 0 {
					hws = append(hws, s.HighWatermark)
				}
			}
		}
		if len(hws) == 0 || slices.Min(hws) != slices.Max(hws) || hws[0] < want {
			return fmt.Errorf("high watermarks %v, want all at %d or more", hws, want)
		}
		hw = hws[0]
		return nil
	})
	return hw
}

// TestClusterCompactionChangelog is the changelog test on a 3-node
// cluster (RF=3), with the leader stopped while the cleaners work: every
// replica cleans its own log and keeps every batch in its place (the Raft
// index of every entry stays), the replicas agree on the view, franz-go,
// sarama, kafka-go and kcat read exactly the model from whichever replica
// leads, and a replica added from scratch gets the compacted log.
func TestClusterCompactionChangelog(t *testing.T) {
	nodes := startCluster(t, 3, fastCleaner, noAutoBalance, func(c *broker.Config) {
		// Slow enough that a pass is likely running when the leader stops.
		c.LogCleaner.IOMaxBytesPerSecond = 4 << 20
	})
	const topic = "replicated-changelog"
	createClusterTopic(t, nodes, topic, 1, 3, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"), "segment.bytes": kadm.StringPtr("131072"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.01"), "delete.retention.ms": kadm.StringPtr("100"),
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RetryTimeout(90*time.Second), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// Small batches: most of them end up empty, kept for their Raft index.
	log := writeChangelogChunks(t, cl, topic, 50_000, 1000, 1, nil, 100)
	old := leaderOfRunning(t, nodes, topic)
	awaitCluster(t, "the leader cleaning", func() error {
		if s := old.B.CleanerStats(); s.Runs == 0 {
			return fmt.Errorf("no pass yet")
		}
		return nil
	})
	t.Logf("stopping leader %d while it cleans (stats %+v)", old.Cfg.NodeID, old.B.CleanerStats())
	old.Stop()
	log = writeChangelogChunks(t, cl, topic, 50_000, 1000, 2, log, 100)
	old.Restart()
	hw := sameCommitted(t, nodes, topic, log.last+1)

	// Every replica cleaned; the leader also removed the tombstones (every
	// replica had them), the followers keep theirs until they lead.
	leader := leaderOfRunning(t, nodes, topic)
	compactedEverywhere(t, []*brokertest.Node{leader}, topic, true)
	cleaned := compactedEverywhere(t, nodes, topic, false)
	var ref []batchHead
	for _, n := range nodes {
		heads, view, nrecs := replicaView(t, n, topic, hw)
		if len(view) != len(log.want) {
			t.Fatalf("node %d: %d live keys, want %d", n.Cfg.NodeID, len(view), len(log.want))
		}
		for k, v := range log.want {
			if view[k] != v {
				t.Fatalf("node %d: %s = %q, want %q", n.Cfg.NodeID, k, view[k], v)
			}
		}
		t.Logf("node %d: %d batches, %d records of 100000 left, %d bytes", n.Cfg.NodeID, len(heads), nrecs, n.B.PartitionLog(topic, 0).Size())
		empty := emptyBatches(t, n, topic, hw)
		t.Logf("node %d: %d empty batches", n.Cfg.NodeID, empty)
		if empty < len(heads)/2 {
			t.Fatalf("node %d: %d of %d batches empty: the test does not exercise empty batches", n.Cfg.NodeID, empty, len(heads))
		}
		// Raft's view of the log is the same everywhere: the same batches
		// at the same offsets with the same terms.
		if ref == nil {
			ref = heads
		} else if !slices.Equal(ref, heads) {
			t.Fatalf("node %d: %d batches differ from another replica's %d", n.Cfg.NodeID, len(heads), len(ref))
		}
	}

	// Each replica in turn leads and serves the compacted view.
	seen := map[int32]bool{}
	for round := 0; round < 3; round++ {
		leader = leaderOfRunning(t, nodes, topic)
		seen[leader.Cfg.NodeID] = true
		seeds := []string{leader.Addr}
		checkCompacted(t, fmt.Sprintf("franz-go from leader %d", leader.Cfg.NodeID), consumeFranz(t, addrs(nodes), topic, log.last), log.want, cleaned, false)
		if round == 0 {
			checkCompacted(t, "sarama", consumeSarama(t, seeds, topic, log.last), log.want, cleaned, false)
			checkCompacted(t, "kafka-go", consumeKafkaGo(t, seeds, topic, log.last), log.want, cleaned, false)
			if recs := consumeKcat(t, leader.Addr, topic); recs != nil {
				checkCompacted(t, "kcat", recs, log.want, cleaned, false)
			}
		}
		if round == 2 {
			break
		}
		// Hand leadership on: stop the leader; another takes over with its
		// own cleaned log; the old one comes back and catches up.
		leader.Stop()
		leaderOfRunning(t, nodes, topic)
		leader.Restart()
		sameCommitted(t, nodes, topic, hw)
	}
	if len(seen) < 2 {
		t.Fatalf("only node(s) %v led", seen)
	}

	// A replica from scratch: node 4 joins and replaces node 1; it gets
	// the leader's compacted log, batch for batch (Raft's Entries() read
	// the leader's cleaned and empty batches). Its own cleaner is off, so
	// what it holds is what it received.
	n4 := startBrokerOnly(t, nodes, 4, func(c *broker.Config) { c.LogCleaner.Enable = false })
	adm := kadmClient(t, addrs(nodes))
	target := []int32{2, 3, 4}
	if err := alter(t, adm, topic, target); err != nil {
		t.Fatalf("reassign: %v", err)
	}
	all := append(slices.Clone(nodes), n4)
	replicasEverywhere(t, all, topic, target)
	moved := []*brokertest.Node{nodes[1], nodes[2], n4}
	sameCommitted(t, moved, topic, hw)
	heads, view, nrecs := replicaView(t, n4, topic, hw)
	if !slices.Equal(heads, ref[len(ref)-len(heads):]) || len(heads) != len(ref) {
		t.Fatalf("node 4: %d batches, the others %d", len(heads), len(ref))
	}
	for k, v := range log.want {
		if view[k] != v {
			t.Fatalf("node 4: %s = %q, want %q", k, view[k], v)
		}
	}
	if nrecs > 30_000 || emptyBatches(t, n4, topic, hw) < len(heads)/2 {
		t.Fatalf("node 4 holds %d records of 100000 in %d batches, %d empty: it did not get the compacted log", nrecs, len(heads), emptyBatches(t, n4, topic, hw))
	}
	t.Logf("node 4, caught up from scratch with its cleaner off: %d batches (%d empty), %d records", len(heads), emptyBatches(t, n4, topic, hw), nrecs)
}

// emptyBatches counts the batches without records below upTo.
func emptyBatches(t *testing.T, n *brokertest.Node, topic string, upTo int64) int {
	t.Helper()
	c := 0
	err := n.B.PartitionLog(topic, 0).ScanHeaders(0, func(h records.Header) error {
		if h.BaseOffset < upTo && h.NumRecords == 0 {
			c++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
