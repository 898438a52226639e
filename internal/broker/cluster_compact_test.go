package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
)

// logStarts is each live node's log start offset of topic-0 (-1: not open).
func logStarts(nodes []*brokertest.Node, topic string) []int64 {
	var out []int64
	for _, n := range nodes {
		start := int64(-1)
		for _, s := range n.B.PartitionStats() {
			if s.Topic == topic && s.Partition == 0 {
				start = s.LogStart
			}
		}
		out = append(out, start)
	}
	return out
}

// awaitLogStart waits until every node's log start is want.
func awaitLogStart(t *testing.T, nodes []*brokertest.Node, topic string, want int64) {
	t.Helper()
	awaitCluster(t, fmt.Sprintf("log start %d on every replica", want), func() error {
		for _, s := range logStarts(nodes, topic) {
			if s != want {
				return fmt.Errorf("log starts %v", logStarts(nodes, topic))
			}
		}
		return nil
	})
}

func deleteRecords(t *testing.T, nodes []*brokertest.Node, topic string, at int64) kadm.DeleteRecordsResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadmClient(t, addrs(nodes)).DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: at}}})
	if err != nil {
		t.Fatalf("delete records: %v", err)
	}
	r, ok := resp.Lookup(topic, 0)
	if !ok {
		t.Fatalf("delete records: no answer for %s-0", topic)
	}
	return r
}

// TestClusterDeleteRecords: DeleteRecords on a replicated partition moves
// the log start on every replica to the same offset; it survives a
// follower's restart and a failover; -1 means the high watermark, beyond
// it is OFFSET_OUT_OF_RANGE.
func TestClusterDeleteRecords(t *testing.T) {
	nodes := startCluster(t, 3, func(*broker.Config) {})
	const topic = "deleted"
	seg := "1024"
	createClusterTopic(t, nodes, topic, 1, len(nodes), map[string]*string{"segment.bytes": &seg})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RetryTimeout(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < 30; i++ { // many batches over many segments
		produceRange(t, cl, topic, i*10, 10)
	}

	if r := deleteRecords(t, nodes, topic, 1<<40); !errors.Is(r.Err, kerr.OffsetOutOfRange) {
		t.Fatalf("delete beyond the high watermark: %v (low watermark %d)", r.Err, r.LowWatermark)
	}
	r := deleteRecords(t, nodes, topic, 100)
	if r.Err != nil || r.LowWatermark != 100 {
		t.Fatalf("delete before 100: low watermark %d, %v", r.LowWatermark, r.Err)
	}
	awaitLogStart(t, nodes, topic, 100)

	// A follower restarted from its data dir keeps the start (and Raft
	// accepts the log: its front moved through Compact).
	leader, _, _, err := leaderOf(nodes[0], topic)
	if err != nil {
		t.Fatal(err)
	}
	var follower *brokertest.Node
	for _, n := range nodes {
		if n.Cfg.NodeID != leader {
			follower = n
		}
	}
	follower.Restart()
	awaitCluster(t, "the restarted follower back in the ISR", func() error {
		_, _, isr, err := leaderOf(nodeByID(nodes, leader), topic)
		if err != nil {
			return err
		}
		if len(isr) != 3 {
			return fmt.Errorf("isr %v", isr)
		}
		return nil
	})
	awaitLogStart(t, nodes, topic, 100)
	produceRange(t, cl, topic, 300, 10)

	// The leader goes; the new one deletes everything so far (-1).
	nodeByID(nodes, leader).Stop()
	var rest []*brokertest.Node
	for _, n := range nodes {
		if n.Cfg.NodeID != leader {
			rest = append(rest, n)
		}
	}
	awaitCluster(t, "a new leader", func() error {
		l, _, _, err := leaderOf(rest[0], topic)
		if err == nil && l == leader {
			err = errors.New("still the old leader")
		}
		return err
	})
	produceRange(t, cl, topic, 310, 10)
	var hw int64
	for _, s := range rest[0].B.PartitionStats() {
		if s.Topic == topic {
			hw = s.HighWatermark
		}
	}
	r = deleteRecords(t, rest, topic, -1)
	if r.Err != nil || r.LowWatermark < hw {
		t.Fatalf("delete -1: low watermark %d (high watermark was %d), %v", r.LowWatermark, hw, r.Err)
	}
	awaitLogStart(t, rest, topic, r.LowWatermark)

	// The old leader comes back with its old start and catches up to the
	// new one from the markers in the log.
	nodeByID(nodes, leader).Restart()
	awaitLogStart(t, nodes, topic, r.LowWatermark)
	produceRange(t, cl, topic, 320, 10)
	consumeFrom(t, addrs(nodes), topic, 320, 10)
}

// consumeFrom reads partition 0 from its start and checks it holds exactly
// the values from..from+n-1.
func consumeFrom(t *testing.T, seeds []string, topic string, from, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %v, want %d records from %d", got, n, from)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	for i, v := range got {
		if v != fmt.Sprint(from+i) {
			t.Fatalf("consumed %v, want %d records from %d", got, n, from)
		}
	}
}

// TestClusterRetention: retention.bytes on a replicated partition is
// decided by the leader and applied on every replica alike; a restarted
// replica still opens its Raft log.
func TestClusterRetention(t *testing.T) {
	nodes := startCluster(t, 3, func(c *broker.Config) { c.RetentionCheckInterval = 100 * time.Millisecond })
	const topic = "retained"
	seg, keep := "1024", "4096"
	createClusterTopic(t, nodes, topic, 1, len(nodes), map[string]*string{"segment.bytes": &seg, "retention.bytes": &keep})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RetryTimeout(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < 60; i++ {
		produceRange(t, cl, topic, i*10, 10)
	}
	var start int64
	awaitCluster(t, "retention on every replica", func() error {
		s := logStarts(nodes, topic)
		if s[0] <= 0 || s[0] != s[1] || s[1] != s[2] {
			return fmt.Errorf("log starts %v", s)
		}
		start = s[0]
		return nil
	})
	t.Logf("log start %d on every replica", start)
	for _, n := range nodes {
		n.Restart()
	}
	produceRange(t, cl, topic, 600, 10)
	awaitCluster(t, "equal log starts after restarts", func() error {
		s := logStarts(nodes, topic)
		if s[0] < start || s[0] != s[1] || s[1] != s[2] {
			return fmt.Errorf("log starts %v", s)
		}
		return nil
	})
}
