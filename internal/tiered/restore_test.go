package tiered_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

// TestTieredRestoreAfterEveryDiskLost: a tiered topic of two partitions
// uploads its closed segments; the node stops and its data directory is
// deleted (every disk lost). A fresh node on the same bucket creates the
// topic with remote.storage.restore.from naming the old topic only: it
// gets the old partition count from the objects, every uploaded record
// is read back from offset 0 in order, and new records continue after the
// restored offsets (none reused), uploaded under the new topic id. The
// records that were not uploaded yet (the active segments) are lost, and
// counted.
func TestTieredRestoreAfterEveryDiskLost(t *testing.T) {
	s := startObjectStore(t)
	const topic, parts = "restored", 2
	uploaded := uploadThenLoseEveryDisk(t, s, topic)
	fresh := brokertest.Start(t, withTiered(s))
	ad := fresh.Admin()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Not a tiered topic: refused.
	if resp, err := ad.CreateTopics(ctx, -1, 1, map[string]*string{"remote.storage.restore.from": strp(topic)}, topic); err != nil || resp.Error() == nil {
		t.Fatalf("restore without remote.storage.enable: %v %v", resp, err)
	}
	configs := tieredTopic()
	configs["remote.storage.restore.from"] = strp(topic)
	resp, err := ad.CreateTopics(ctx, -1, 1, configs, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	ct := resp[topic]
	if ct.NumPartitions != parts {
		t.Fatalf("restored topic has %d partitions, the objects %d", ct.NumPartitions, parts)
	}
	// The restore configs are the topic's for good.
	ar, err := ad.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "remote.storage.restore.from", Value: strp("other")}}, topic)
	if err == nil && (len(ar) != 1 || ar[0].Err == nil) {
		t.Fatalf("changing remote.storage.restore.from after creation: %+v", ar)
	}
	// A full replacement (AlterConfigs) that leaves them out keeps them.
	var full []kadm.AlterConfig
	for k, v := range tieredTopic() {
		full = append(full, kadm.AlterConfig{Name: k, Value: v})
	}
	if ar, err := ad.AlterTopicConfigsState(ctx, full, topic); err != nil || len(ar) != 1 || ar[0].Err != nil {
		t.Fatalf("alter configs: %+v %v", ar, err)
	}
	rc, err := ad.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := rc.On(topic, nil); err != nil {
		t.Fatal(err)
	} else if from := configValue(c, "remote.storage.restore.from"); !strings.HasPrefix(from, topic+"-") {
		t.Fatalf("remote.storage.restore.from is %q after AlterConfigs", from)
	}

	for p := int32(0); p < parts; p++ {
		brokertest.Await(t, "the restored manifest to commit", func() error {
			if e, err := partOffsetErr(fresh, topic, p, -2); err != nil || e != 0 {
				return fmt.Errorf("partition %d: earliest offset %d (%v)", p, e, err)
			}
			return nil
		})
		if latest := partOffset(t, fresh, topic, p, -1); latest != uploaded[p] {
			t.Fatalf("partition %d: the restored log ends at %d, the objects at %d", p, latest, uploaded[p])
		}
		consumePart(t, fresh, topic, p, 0, int(uploaded[p]))
	}

	// New records continue after the restored offsets.
	cl2 := fresh.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	const more = 300
	for p := int32(0); p < parts; p++ {
		r := &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "record-%06d-%s", uploaded[p], strings.Repeat("x", 60))}
		if err := cl2.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if r.Offset != uploaded[p] {
			t.Fatalf("partition %d: a new record at offset %d, want %d (after the restored ones)", p, r.Offset, uploaded[p])
		}
		producePart(t, cl2, topic, p, int(uploaded[p])+1, int(uploaded[p])+more)
	}
	// They are uploaded under the new topic id; the old objects stay
	// where they are and keep serving the restored offsets.
	newDir := topic + "-" + base64.RawURLEncoding.EncodeToString(ct.ID[:])
	brokertest.Await(t, "uploads under the new topic id", func() error {
		_, err := os.Stat(filepath.Join(s.dir, testBucket, "cluster-a", newDir, "0"))
		return err
	})
	for p := int32(0); p < parts; p++ {
		consumePart(t, fresh, topic, p, 0, int(uploaded[p])+more)
	}
}

const restoreRecords = 600

// uploadThenLoseEveryDisk: one node writes restoreRecords records to
// each of two partitions of a tiered topic, waits until every closed
// segment is uploaded, stops and loses its data directory. It returns
// how many records of each partition the bucket holds, and logs the
// records lost (those not yet uploaded: the active segments).
func uploadThenLoseEveryDisk(t *testing.T, s *objectStore, topic string) [2]int64 {
	t.Helper()
	const parts = 2
	n := brokertest.Start(t, withTiered(s))
	n.CreateTopic(topic, parts, tieredTopic())
	cl := n.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := int32(0); p < parts; p++ {
		producePart(t, cl, topic, p, 0, restoreRecords)
	}
	passes := n.B.TieredStats().Passes.Load()
	brokertest.Await(t, "every closed segment uploaded", func() error {
		if st := n.B.TieredStats(); st.Passes.Load() < passes+2 || st.CopyLagSegments.Load() > 0 {
			return fmt.Errorf("%d segments not uploaded yet", st.CopyLagSegments.Load())
		}
		return nil
	})
	var uploaded [parts]int64
	lost := 0
	for p := int32(0); p < parts; p++ {
		uploaded[p] = partOffset(t, n, topic, p, -5) + 1 // latest tiered
		if uploaded[p] <= 0 || uploaded[p] > restoreRecords {
			t.Fatalf("partition %d: %d records uploaded of %d", p, uploaded[p], restoreRecords)
		}
		lost += restoreRecords - int(uploaded[p])
	}
	// The durability lab's row: records lost = those not yet uploaded.
	t.Logf("every disk lost: %d of %d records were uploaded, %d (the active segments) were not and are lost",
		int(uploaded[0]+uploaded[1]), parts*restoreRecords, lost)
	n.Stop()
	if err := os.RemoveAll(n.Cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	return uploaded
}

// TestTieredRestoreThreeReplicas: the restore into a new cluster of
// three nodes, three replicas a partition: every replica's group starts
// at the restored offset; once the leader of partition 0 stops, the new
// leader serves the restored records from the object store (the manifest
// is in the group's log) and the new ones from its disk, at the same
// offsets.
func TestTieredRestoreThreeReplicas(t *testing.T) {
	s := startObjectStore(t)
	const topic = "restored3"
	uploaded := uploadThenLoseEveryDisk(t, s, topic)
	nodes := brokertest.NewCluster(t, 3, withTiered(s)).Nodes
	configs := tieredTopic()
	configs["remote.storage.restore.from"] = strp(topic)
	brokertest.CreateClusterTopic(t, nodes, topic, 2, 3, configs)
	seeds := brokertest.Addrs(nodes)
	cl := nodes[0].Client(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	const more = 200
	for p := int32(0); p < 2; p++ {
		producePart(t, cl, topic, p, int(uploaded[p]), int(uploaded[p])+more)
	}
	md, err := nodes[0].Metadata(topic)
	if err != nil {
		t.Fatal(err)
	}
	var leader *brokertest.Node
	for _, mp := range md.Topics[0].Partitions {
		if mp.Partition == 0 {
			leader = nodes[mp.Leader-1]
		}
	}
	leader.Stop()
	var rest []*brokertest.Node
	for _, n := range nodes {
		if n != leader {
			rest = append(rest, n)
		}
	}
	brokertest.Await(t, "a new leader with the restored remote log", func() error {
		for _, n := range rest {
			if e, err := partOffsetErr(n, topic, 0, -2); err == nil && e == 0 {
				return nil
			}
		}
		return fmt.Errorf("no node answers earliest offset 0 for partition 0")
	})
	consumePart(t, rest[0], topic, 0, 0, int(uploaded[0])+more, brokertest.Addrs(rest)...)

	// The old cluster's producer is known to the new leader, a replica
	// that applied the restored producer state as a follower.
	newPID, _, err := cl.ProducerID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	brokertest.Await(t, "the restored producer on the new leader", func() error {
		for _, n := range rest {
			dp := kmsg.NewPtrDescribeProducersRequest()
			dt := kmsg.NewDescribeProducersRequestTopic()
			dt.Topic, dt.Partitions = topic, []int32{0}
			dp.Topics = append(dp.Topics, dt)
			resp, err := n.Request(dp)
			if err != nil {
				continue
			}
			pp := resp.(*kmsg.DescribeProducersResponse).Topics[0].Partitions[0]
			if pp.ErrorCode != 0 {
				continue
			}
			for _, ps := range pp.ActiveProducers {
				if ps.ProducerID != newPID && ps.LastSequence == int32(uploaded[0]-1) {
					return nil
				}
			}
			return fmt.Errorf("node %d: producers %+v, want the old cluster's with last sequence %d", n.Cfg.NodeID, pp.ActiveProducers, uploaded[0]-1)
		}
		return errors.New("no node leads partition 0")
	})
}

func configValue(rc kadm.ResourceConfig, name string) string {
	for _, c := range rc.Configs {
		if c.Key == name && c.Value != nil {
			return *c.Value
		}
	}
	return ""
}

// TestTieredRestorePendingManifest: between the restored topic's
// creation and its manifest's commit (here held back by a task interval
// of an hour) the partition's old offsets exist but cannot be read: the
// earliest offset answers OFFSET_NOT_AVAILABLE (retriable) and a fetch
// from 0 answers nothing, not OFFSET_OUT_OF_RANGE, so that no consumer
// resets past the restored records. A restart in that window leaves the
// restore to the next pass, which commits it; then everything is read.
// Without the pending checks the fetch answers OFFSET_OUT_OF_RANGE.
func TestTieredRestorePendingManifest(t *testing.T) {
	s := startObjectStore(t)
	const topic = "restored-pending"
	uploaded := uploadThenLoseEveryDisk(t, s, topic)
	fresh := brokertest.Start(t, withTiered(s), func(c *broker.Config, _ *wire.Limits) { c.Tiered.TaskInterval = time.Hour })
	configs := tieredTopic()
	configs["remote.storage.restore.from"] = strp(topic)
	fresh.CreateTopic(topic, -1, configs)
	brokertest.Await(t, "the restored partition to lead", func() error {
		_, err := partOffsetErr(fresh, topic, 0, -1)
		return err
	})
	if off, err := partOffsetErr(fresh, topic, 0, -2); !errors.Is(err, kerr.OffsetNotAvailable) {
		t.Fatalf("earliest offset before the restored manifest: %d, %v; want OFFSET_NOT_AVAILABLE", off, err)
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 10, 1, 1<<20
	req.SessionID, req.SessionEpoch = 0, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 0, 0, 1<<20, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := fresh.Request(brokertest.Pin(req, 10))
	if err != nil {
		t.Fatal(err)
	}
	if fp := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]; fp.ErrorCode != 0 || len(fp.RecordBatches) != 0 {
		t.Fatalf("fetch from 0 before the restored manifest: %v, %d bytes; want nothing yet", kerr.ErrorForCode(fp.ErrorCode), len(fp.RecordBatches))
	}
	fresh.Cfg.Tiered.TaskInterval = 50 * time.Millisecond
	fresh.Restart()
	for p := int32(0); p < 2; p++ {
		consumePart(t, fresh, topic, p, 0, int(uploaded[p]))
	}
}

// producePart writes records [from, to) to partition p, 20 to a batch.
func producePart(t *testing.T, cl *kgo.Client, topic string, p int32, from, to int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := from; i < to; {
		var batch []*kgo.Record
		for ; i < to && len(batch) < 20; i++ {
			batch = append(batch, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "record-%06d-%s", i, strings.Repeat("x", 60))})
		}
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

// consumePart reads partition p from offset from and checks that it
// holds exactly records [from, want), in order.
func consumePart(t *testing.T, n *brokertest.Node, topic string, p int32, from, want int, seeds ...string) {
	t.Helper()
	cl := n.Client(kgo.SeedBrokers(append([]string{n.Addr}, seeds...)...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(int64(from))}}))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for got := from; got < want; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("partition %d: consumed up to %d of %d: %v", p, got, want, ctx.Err())
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch: %v", e.Err)
		}
		for _, r := range fs.Records() {
			if r.Offset != int64(got) {
				t.Fatalf("partition %d: record at offset %d, want %d", p, r.Offset, got)
			}
			if w := fmt.Sprintf("record-%06d-", got); !strings.HasPrefix(string(r.Value), w) {
				t.Fatalf("partition %d: offset %d holds %.20q, want %s...", p, r.Offset, r.Value, w)
			}
			got++
		}
	}
}

// partOffset asks n for ListOffsets' special timestamp ts of partition p.
func partOffset(t *testing.T, n *brokertest.Node, topic string, p int32, ts int64) int64 {
	t.Helper()
	off, err := partOffsetErr(n, topic, p, ts)
	if err != nil {
		t.Fatalf("list offsets %d of partition %d: %v", ts, p, err)
	}
	return off
}

func partOffsetErr(n *brokertest.Node, topic string, p int32, ts int64) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p, ts, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := n.Request(req)
	if err != nil {
		return 0, err
	}
	sp := resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	return sp.Offset, kerr.ErrorForCode(sp.ErrorCode)
}

// TestTieredRestoreKeepsPartitionCount: a topic whose last partitions
// never closed a segment comes back with every partition (the uploads
// record the count); before, a restore without a count made it only as
// large as the highest partition with objects.
func TestTieredRestoreKeepsPartitionCount(t *testing.T) {
	s := startObjectStore(t)
	const topic, parts = "restorecount", 3
	n := brokertest.Start(t, withTiered(s))
	n.CreateTopic(topic, parts, tieredTopic())
	cl := n.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	producePart(t, cl, topic, 0, 0, restoreRecords) // partitions 1 and 2 stay empty
	brokertest.Await(t, "partition 0 uploaded", func() error {
		if e := partOffset(t, n, topic, 0, -5); e < 0 {
			return fmt.Errorf("latest tiered offset %d", e)
		}
		return nil
	})
	n.Stop()
	if err := os.RemoveAll(n.Cfg.DataDir); err != nil {
		t.Fatal(err)
	}

	fresh := brokertest.Start(t, withTiered(s))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	configs := tieredTopic()
	configs["remote.storage.restore.from"] = strp(topic)
	resp, err := fresh.Admin().CreateTopics(ctx, -1, 1, configs, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if got := resp[topic].NumPartitions; got != parts {
		t.Fatalf("restored topic has %d partitions, the uploads recorded %d", got, parts)
	}
	for p := int32(1); p < parts; p++ {
		brokertest.Await(t, "an empty restored partition", func() error {
			if e, err := partOffsetErr(fresh, topic, p, -1); err != nil || e != 0 {
				return fmt.Errorf("partition %d: latest offset %d (%v)", p, e, err)
			}
			return nil
		})
	}
}
