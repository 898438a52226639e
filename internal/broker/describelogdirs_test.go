package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/brokertest"
)

// TestDescribeLogDirsCluster: every broker lists exactly the replicas it
// holds, with their real sizes (the bytes of their logs), no lag once
// caught up, and its disk's total and usable bytes; a topic filter narrows
// it down.
func TestDescribeLogDirsCluster(t *testing.T) {
	c := brokertest.NewCluster(t, 3)
	brokertest.CreateClusterTopic(t, c.Nodes, "dirs", 3, 2, nil)
	cl := c.Nodes[0].Client(kgo.DefaultProduceTopic("dirs"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for p := range int32(3) {
		for i := range 20 * (int(p) + 1) { // different sizes per partition
			recs = append(recs, &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "p%d-record-%d", p, i)})
		}
	}
	mustNil(t, "produce", cl.ProduceSync(adminCtx(t), recs...).FirstErr())

	md, err := c.Nodes[0].Metadata("dirs")
	mustNil(t, "metadata", err)
	holds := map[int32][]int32{} // broker -> partitions
	for _, p := range md.Topics[0].Partitions {
		for _, r := range p.Replicas {
			holds[r] = append(holds[r], p.Partition)
		}
	}
	adm := kadm.NewClient(cl)
	brokertest.Await(t, "every replica caught up and described", func() error {
		all, err := adm.DescribeAllLogDirs(adminCtx(t), nil)
		if err != nil {
			return err
		}
		for _, n := range c.Nodes {
			id := n.Cfg.NodeID
			dirs := all[id]
			if err := dirs.Error(); err != nil {
				return fmt.Errorf("broker %d: %w", id, err)
			}
			if len(dirs) != 1 {
				return fmt.Errorf("broker %d: %d dirs", id, len(dirs))
			}
			for _, d := range dirs {
				if d.Dir == "" || d.TotalBytes <= 0 || d.UsableBytes <= 0 || d.UsableBytes > d.TotalBytes {
					return fmt.Errorf("broker %d: dir %q total %d usable %d", id, d.Dir, d.TotalBytes, d.UsableBytes)
				}
				var got []int32
				for _, p := range d.Topics["dirs"] {
					got = append(got, p.Partition)
					log := n.B.PartitionLog("dirs", p.Partition)
					if log == nil || p.Size != log.Size() || p.Size == 0 {
						return fmt.Errorf("broker %d partition %d: size %d, log %v", id, p.Partition, p.Size, log)
					}
					if p.OffsetLag != 0 {
						return fmt.Errorf("broker %d partition %d: lag %d", id, p.Partition, p.OffsetLag)
					}
				}
				slices.Sort(got)
				want := slices.Clone(holds[id])
				slices.Sort(want)
				if !slices.Equal(got, want) {
					return fmt.Errorf("broker %d lists partitions %v, holds %v", id, got, want)
				}
			}
		}
		return nil
	})

	// A filter: one partition of the topic, asked of a broker that holds it.
	p0 := md.Topics[0].Partitions[0]
	var s kadm.TopicsSet
	s.Add("dirs", p0.Partition)
	dirs, err := adm.DescribeBrokerLogDirs(adminCtx(t), p0.Replicas[0], s)
	mustNil(t, "describe one", err)
	for _, d := range dirs {
		if len(d.Topics) != 1 || len(d.Topics["dirs"]) != 1 || d.Topics["dirs"][p0.Partition].Partition != p0.Partition {
			t.Fatalf("filtered: %+v", d.Topics)
		}
	}
	// An empty (non-null) topic list describes nothing but the directory.
	req := kmsg.NewPtrDescribeLogDirsRequest()
	req.Topics = []kmsg.DescribeLogDirsRequestTopic{}
	resp, err := req.RequestWith(adminCtx(t), c.Nodes[0].Client())
	mustNil(t, "empty list", err)
	if len(resp.Dirs) != 1 || len(resp.Dirs[0].Topics) != 0 {
		t.Fatalf("empty topic list: %+v", resp.Dirs)
	}
}

// describeTopicPartitions sends one request.
func describeTopicPartitions(t *testing.T, cl *kgo.Client, limit int32, cursor *kmsg.DescribeTopicPartitionsRequestCursor, topics ...string) *kmsg.DescribeTopicPartitionsResponse {
	t.Helper()
	req := kmsg.NewPtrDescribeTopicPartitionsRequest()
	req.ResponsePartitionLimit, req.Cursor = limit, cursor
	for _, tp := range topics {
		rt := kmsg.NewDescribeTopicPartitionsRequestTopic()
		rt.Topic = tp
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(context.Background(), cl)
	mustNil(t, "DescribeTopicPartitions", err)
	return resp
}

// page renders a response as "topic:partitions...|next cursor".
func page(resp *kmsg.DescribeTopicPartitionsResponse) string {
	s := ""
	for _, tp := range resp.Topics {
		s += *tp.Topic
		if tp.ErrorCode != 0 {
			s += "!" + kerr.TypedErrorForCode(tp.ErrorCode).Message
		}
		s += ":"
		for _, p := range tp.Partitions {
			s += fmt.Sprint(p.Partition)
		}
		s += " "
	}
	if c := resp.NextCursor; c != nil {
		s += fmt.Sprintf("| %s/%d", c.Topic, c.Partition)
	}
	return s
}

// TestDescribeTopicPartitions: KIP-966's pagination, in Kafka's order and
// with Kafka's errors, and partitions that say what Metadata says.
func TestDescribeTopicPartitions(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("a", 5, nil)
	n.CreateTopic("b", 3, nil)
	n.CreateTopic("c", 1, nil)
	cl := n.Client()

	// Every topic, 4 partitions a page.
	var pages []string
	var cursor *kmsg.DescribeTopicPartitionsRequestCursor
	for range 10 {
		resp := describeTopicPartitions(t, cl, 4, cursor)
		pages = append(pages, page(resp))
		if resp.NextCursor == nil {
			break
		}
		cursor = &kmsg.DescribeTopicPartitionsRequestCursor{Topic: resp.NextCursor.Topic, Partition: resp.NextCursor.Partition}
	}
	want := []string{"a:0123 | a/4", "a:4 b:012 | c/0", "c:0 "}
	if !slices.Equal(pages, want) {
		t.Fatalf("pages %q, want %q", pages, want)
	}

	// Named topics come sorted; an unknown one is UNKNOWN_TOPIC_OR_PARTITION,
	// a bad name INVALID_TOPIC_EXCEPTION.
	resp := describeTopicPartitions(t, cl, 100, nil, "c", "zz-missing", "a", "bad/name")
	if got, want := page(resp), "a:01234 bad/name!INVALID_TOPIC_EXCEPTION: c:0 zz-missing!UNKNOWN_TOPIC_OR_PARTITION: "; got != want {
		t.Fatalf("named: %q, want %q", got, want)
	}
	md, err := n.Metadata("a")
	mustNil(t, "metadata", err)
	for i, p := range resp.Topics[0].Partitions {
		mp := md.Topics[0].Partitions[i]
		if p.LeaderID != mp.Leader || p.LeaderEpoch != mp.LeaderEpoch || !slices.Equal(p.Replicas, mp.Replicas) || !slices.Equal(p.ISR, mp.ISR) {
			t.Fatalf("partition %d: %+v, metadata %+v", i, p, mp)
		}
	}
	if resp.Topics[0].TopicID != md.Topics[0].TopicID || resp.Topics[0].AuthorizedOperations <= 0 {
		t.Fatalf("topic id %x (metadata %x), authorized operations %d", resp.Topics[0].TopicID, md.Topics[0].TopicID, resp.Topics[0].AuthorizedOperations)
	}
	// A cursor into the named list.
	resp = describeTopicPartitions(t, cl, 2, &kmsg.DescribeTopicPartitionsRequestCursor{Topic: "a", Partition: 3}, "a", "b")
	if got := page(resp); got != "a:34 | b/0" {
		t.Fatalf("from a/3: %q", got)
	}
	// A cursor topic missing from the list, or a negative partition:
	// INVALID_REQUEST on every topic.
	for _, c := range []*kmsg.DescribeTopicPartitionsRequestCursor{{Topic: "c", Partition: 0}, {Topic: "a", Partition: -1}} {
		resp := describeTopicPartitions(t, cl, 10, c, "a", "b")
		for _, tp := range resp.Topics {
			if !errors.Is(kerr.ErrorForCode(tp.ErrorCode), kerr.InvalidRequest) {
				t.Fatalf("cursor %+v: %s", c, page(resp))
			}
		}
		if len(resp.Topics) != 2 {
			t.Fatalf("cursor %+v: %s", c, page(resp))
		}
	}
}

// TestAlterReplicaLogDirsAndDescribeQuorumV2: AlterReplicaLogDirs against
// the broker's one log directory answers each partition by what the broker
// really holds (NONE where its replica is, REPLICA_NOT_AVAILABLE where it
// has none, UNKNOWN_TOPIC_OR_PARTITION for a topic nobody has), and any
// other directory LOG_DIR_NOT_FOUND. DescribeQuorum v2 names every voter's
// directory id and the voters' listeners.
func TestAlterReplicaLogDirsAndDescribeQuorumV2(t *testing.T) {
	c := brokertest.NewCluster(t, 3)
	brokertest.CreateClusterTopic(t, c.Nodes, "movedirs", 3, 1, nil)
	md, err := c.Nodes[0].Metadata("movedirs")
	mustNil(t, "metadata", err)
	holder := map[int32]int32{} // partition -> its one replica
	for _, p := range md.Topics[0].Partitions {
		holder[p.Partition] = p.Replicas[0]
	}
	n := c.Nodes[0]
	id := n.Cfg.NodeID
	dirs, err := kadm.NewClient(n.Client()).DescribeBrokerLogDirs(adminCtx(t), id, nil)
	mustNil(t, "describe log dirs", err)
	var dir string
	for d := range dirs {
		dir = d
	}
	alter := func(dir string, topic string, parts ...int32) map[int32]int16 {
		req := kmsg.NewPtrAlterReplicaLogDirsRequest()
		d := kmsg.NewAlterReplicaLogDirsRequestDir()
		d.Dir = dir
		dt := kmsg.NewAlterReplicaLogDirsRequestDirTopic()
		dt.Topic, dt.Partitions = topic, parts
		d.Topics = append(d.Topics, dt)
		req.Dirs = append(req.Dirs, d)
		kresp, err := n.Request(req)
		mustNil(t, "AlterReplicaLogDirs", err)
		out := map[int32]int16{}
		for _, rt := range kresp.(*kmsg.AlterReplicaLogDirsResponse).Topics {
			for _, rp := range rt.Partitions {
				out[rp.Partition] = rp.ErrorCode
			}
		}
		return out
	}
	got := alter(dir, "movedirs", 0, 1, 2)
	for p, h := range holder {
		want := kerr.ReplicaNotAvailable.Code
		if h == id {
			want = 0
		}
		if got[p] != want {
			t.Fatalf("partition %d (replica on %d) moved within broker %d's dir %s: %v, want %v", p, h, id, dir, kerr.ErrorForCode(got[p]), kerr.ErrorForCode(want))
		}
	}
	if got := alter(dir+"-elsewhere", "movedirs", 0); got[0] != kerr.LogDirNotFound.Code {
		t.Fatalf("unknown dir: %v", kerr.ErrorForCode(got[0]))
	}
	if got := alter(dir, "no-such-topic", 0); got[0] != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: %v", kerr.ErrorForCode(got[0]))
	}

	// DescribeQuorum v2 of the metadata quorum, from its leader.
	var resp *kmsg.DescribeQuorumResponse
	brokertest.Await(t, "the metadata quorum described by its leader", func() error {
		for _, n := range c.Nodes {
			req := kmsg.NewPtrDescribeQuorumRequest()
			rt := kmsg.NewDescribeQuorumRequestTopic()
			rt.Topic = "__cluster_metadata"
			rt.Partitions = append(rt.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
			req.Topics = append(req.Topics, rt)
			kresp, err := n.Request(req)
			if err != nil {
				return err
			}
			r := kresp.(*kmsg.DescribeQuorumResponse)
			if r.Topics[0].Partitions[0].ErrorCode == 0 {
				resp = r
				return nil
			}
		}
		return errors.New("no leader answered")
	})
	if resp.Version < 2 {
		t.Fatalf("DescribeQuorum v%d", resp.Version)
	}
	p := resp.Topics[0].Partitions[0]
	seenDirs := map[[16]byte]bool{}
	for _, v := range p.CurrentVoters {
		if v.ReplicaDirectoryID == ([16]byte{}) || seenDirs[v.ReplicaDirectoryID] {
			t.Fatalf("voter %d directory id %x", v.ReplicaID, v.ReplicaDirectoryID)
		}
		seenDirs[v.ReplicaDirectoryID] = true
	}
	addrs := map[string]bool{}
	for _, nd := range resp.Nodes {
		for _, l := range nd.Listeners {
			addrs[fmt.Sprintf("%s:%d", l.Host, l.Port)] = true
		}
	}
	if len(p.CurrentVoters) != 3 || len(resp.Nodes) != 3 {
		t.Fatalf("%d voters, %d nodes: %+v", len(p.CurrentVoters), len(resp.Nodes), resp.Nodes)
	}
	for _, n := range c.Nodes {
		if !addrs[n.Addr] {
			t.Fatalf("node %d's listener %s not among %v", n.Cfg.NodeID, n.Addr, addrs)
		}
	}
}
