package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/brokertest"
)

// TestClusterAdminCLI runs the cluster admin commands against one 3-node
// dev cluster.
func TestClusterAdminCLI(t *testing.T) {
	dc := runDevCluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(dc.boot), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	dc.createTopic(t, kadm.NewClient(cl), "formed") // waits until the cluster formed
	b := "--bootstrap=" + dc.boot
	t.Run("replica-assignment", func(t *testing.T) { testReplicaAssignmentCLI(t, dc, cl, b) })
	t.Run("broker-config", func(t *testing.T) { testBrokerConfigCLI(t, cl, b) })
}

// testReplicaAssignmentCLI: `topic create --replica-assignment` and `topic
// add-partitions --replica-assignment` (kafka-topics.sh's syntax) place
// every partition on exactly the named brokers, the first one leading it,
// and the partitions take records; an assignment of another replication
// factor or naming an unknown broker is refused with
// INVALID_REPLICA_ASSIGNMENT, and nothing is created.
func testReplicaAssignmentCLI(t *testing.T, dc *devClusterProc, cl *kgo.Client, b string) {
	out := ok(t, "", "topic", "create", "pinned", "--replica-assignment", "3:1,2:3,1:2", b)
	if want := "created pinned (3 partitions, replication factor 2)"; !strings.Contains(out, want) {
		t.Fatalf("create: %q, want %q", out, want)
	}
	// The whole list, as kafka-topics.sh --alter takes it: the existing
	// partitions' part is left as it is.
	ok(t, "", "topic", "add-partitions", "pinned", "--partitions", "5", "--replica-assignment", "3:1,2:3,1:2,2:1,3:2", b)
	// Only the new partition's.
	ok(t, "", "topic", "add-partitions", "pinned", "--partitions", "6", "--replica-assignment", "1:3", b)
	want := [][]int32{{3, 1}, {2, 3}, {1, 2}, {2, 1}, {3, 2}, {1, 3}}
	brokertest.Await(t, "every partition on its assigned replicas and led by the first", func() error {
		got := replicasOf(t, cl, "pinned")
		if len(got) != len(want) {
			return fmt.Errorf("%d partitions, want %d", len(got), len(want))
		}
		for p := range want {
			if !slices.Equal(got[p], want[p]) {
				return fmt.Errorf("partition %d on %v, want %v", p, got[p], want[p])
			}
		}
		if bad := notPreferred(t, cl, "pinned"); bad != "" {
			return fmt.Errorf("%s", bad)
		}
		return nil
	})

	// Every partition takes a record and serves it back.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for p := range int32(len(want)) {
		r := &kgo.Record{Topic: "pinned", Partition: p, Value: fmt.Appendf(nil, "p%d", p)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce to partition %d: %v", p, err)
		}
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(dc.boot), kgo.ConsumeTopics("pinned"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[int32]string{}
	for len(seen) < len(want) {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %v of %d partitions: %v", seen, len(want), err)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[r.Partition] = string(r.Value) })
	}
	for p := range int32(len(want)) {
		if seen[p] != fmt.Sprintf("p%d", p) {
			t.Fatalf("partition %d served %q", p, seen[p])
		}
	}

	fails(t, 1, "INVALID_REPLICA_ASSIGNMENT", "topic", "add-partitions", "pinned", "--partitions", "7", "--replica-assignment", "1:2:3", b)
	fails(t, 1, "INVALID_REPLICA_ASSIGNMENT", "topic", "add-partitions", "pinned", "--partitions", "7", "--replica-assignment", "1:9", b)
	fails(t, 1, "INVALID_REPLICA_ASSIGNMENT", "topic", "create", "uneven", "--replica-assignment", "1:2,3", b)
	fails(t, 1, "INVALID_REPLICA_ASSIGNMENT", "topic", "create", "twice", "--replica-assignment", "1:1", b)
	fails(t, 2, "leave out --partitions", "topic", "create", "both", "--replica-assignment", "1:2", "--partitions", "2", b)
	fails(t, 2, "not a broker id", "topic", "create", "typo", "--replica-assignment", "1:x", b)
	fails(t, 2, "give all 7, or the 1 new ones", "topic", "add-partitions", "pinned", "--partitions", "7", "--replica-assignment", "1:2,2:3", b)
	if got := len(replicasOf(t, cl, "pinned")); got != len(want) {
		t.Fatalf("pinned has %d partitions after refused additions, want %d", got, len(want))
	}
	td, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if td.Has("uneven") || td.Has("twice") {
		t.Fatalf("a refused topic was created: %v", td.Names())
	}
}

// replicasOf is each partition's replica list in the Metadata answer.
func replicasOf(t *testing.T, cl *kgo.Client, topic string) [][]int32 {
	t.Helper()
	mt := topicMetadata(t, cl, topic)
	out := make([][]int32, len(mt.Partitions))
	for _, p := range mt.Partitions {
		if int(p.Partition) < len(out) {
			out[p.Partition] = p.Replicas
		}
	}
	return out
}

// topicMetadata is topic's part of a Metadata answer.
func topicMetadata(t *testing.T, cl *kgo.Client, topic string) kmsg.MetadataResponseTopic {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	md, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Topics) != 1 {
		t.Fatalf("metadata of %s: %d topics", topic, len(md.Topics))
	}
	return md.Topics[0]
}

// testBrokerConfigCLI: `cluster config --set` changes the cluster-wide
// defaults every node describes and topics inherit; `--broker N` one
// broker's; `--delete` takes them back; a static config is refused.
func testBrokerConfigCLI(t *testing.T, cl *kgo.Client, b string) {
	if out := ok(t, "", "cluster", "config", b); !strings.Contains(out, "no dynamic configs in the cluster-wide defaults") {
		t.Fatalf("cluster config before any change:\n%s", out)
	}
	ok(t, "", "cluster", "config", "--set", "log.retention.ms=86400000", "--set", "min.insync.replicas=2", b)
	out := ok(t, "", "cluster", "config", b)
	row(t, out, "log.retention.ms", "86400000", "dynamic_default_broker")
	row(t, out, "min.insync.replicas", "2", "dynamic_default_broker")
	ok(t, "", "topic", "create", "inherits", "--partitions", "1", "--replication-factor", "3", b)
	brokertest.Await(t, "every node to describe the inherited retention.ms", func() error {
		desc := hf(t, "", "topic", "describe", "inherits", b)
		if !strings.Contains(desc.out, "86400000") {
			return fmt.Errorf("describe:\n%s%s", desc.out, desc.err)
		}
		return nil
	})
	ok(t, "", "cluster", "config", "--broker", "2", "--set", "log.retention.ms=3600000", b)
	brokertest.Await(t, "broker 2 to describe its own log.retention.ms", func() error {
		out := ok(t, "", "cluster", "config", "--broker", "2", b)
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "log.retention.ms" {
				if f[1] != "3600000" || f[2] != "dynamic_broker" {
					return fmt.Errorf("%v", f)
				}
				return nil
			}
		}
		return fmt.Errorf("no log.retention.ms in:\n%s", out)
	})
	fails(t, 1, "INVALID_CONFIG", "cluster", "config", "--set", "log.dirs=/elsewhere", b)
	ok(t, "", "cluster", "config", "--delete", "log.retention.ms", "--delete", "min.insync.replicas", b)
	ok(t, "", "cluster", "config", "--broker", "2", "--delete", "log.retention.ms", b)
	if out := ok(t, "", "cluster", "config", b); !strings.Contains(out, "no dynamic configs") {
		t.Fatalf("cluster config after deleting them:\n%s", out)
	}
}
