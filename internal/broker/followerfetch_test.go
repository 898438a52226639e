package broker_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/records"
	"holdfast/internal/wire"
)

// TestLeaderHints (KIP-951): a follower that answers a produce with
// NOT_LEADER_OR_FOLLOWER, or a fetch with FENCED_LEADER_EPOCH, names the
// current leader, its epoch and its endpoint.
func TestLeaderHints(t *testing.T) {
	c := brokertest.NewCluster(t, 3)
	c.CreateTopic("hints", 1, 3, nil)
	leader, epoch := c.AwaitLeader("hints", 0)
	var f *brokertest.Node
	for _, n := range c.Nodes {
		if n.Cfg.NodeID != leader {
			f = n
			break
		}
	}
	lnode := c.Node(leader)

	pr := kmsg.NewPtrProduceRequest()
	pr.Acks, pr.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "hints"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = rawBatch(t, -1, -1, -1, 1, records.CodecNone)
	rt.Partitions = append(rt.Partitions, rp)
	pr.Topics = append(pr.Topics, rt)
	resp, err := f.Request(brokertest.Pin(pr, 12)) // topics by name
	if err != nil {
		t.Fatal(err)
	}
	presp := resp.(*kmsg.ProduceResponse)
	if presp.Version < 10 {
		t.Fatalf("produce v%d: the hints need v10+", presp.Version)
	}
	sp := presp.Topics[0].Partitions[0]
	if sp.ErrorCode != kerr.NotLeaderForPartition.Code || sp.CurrentLeader.LeaderID != leader || sp.CurrentLeader.LeaderEpoch != epoch {
		t.Fatalf("produce to follower %d: code %d, current leader %+v; want NOT_LEADER_OR_FOLLOWER naming %d epoch %d",
			f.Cfg.NodeID, sp.ErrorCode, sp.CurrentLeader, leader, epoch)
	}
	checkHintedBroker(t, "produce", presp.Brokers, leader, lnode.Addr)

	fr := kmsg.NewPtrFetchRequest()
	fr.MaxWaitMillis, fr.MaxBytes = 0, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "hints"
	md, err := f.Metadata("hints")
	if err != nil {
		t.Fatal(err)
	}
	ft.TopicID = md.Topics[0].TopicID
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.CurrentLeaderEpoch, fp.PartitionMaxBytes = epoch-1, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	fr.Topics = append(fr.Topics, ft)
	// The follower's replica learns the leader's epoch from Raft, which can
	// come after the metadata that named it above: until then it serves a
	// fetch of the older epoch (code 0), as a Kafka follower that has not
	// heard of the new epoch does. Ask again until it knows.
	var fresp *kmsg.FetchResponse
	var fsp kmsg.FetchResponseTopicPartition
	brokertest.Await(t, fmt.Sprintf("follower %d to fence epoch %d", f.Cfg.NodeID, epoch-1), func() error {
		resp, err := f.Request(fr)
		if err != nil {
			t.Fatal(err)
		}
		fresp = resp.(*kmsg.FetchResponse)
		fsp = fresp.Topics[0].Partitions[0]
		if fsp.ErrorCode == 0 {
			return fmt.Errorf("fetch served")
		}
		return nil
	})
	if fresp.Version < 16 {
		t.Fatalf("fetch v%d: the endpoints need v16", fresp.Version)
	}
	if fsp.ErrorCode != kerr.FencedLeaderEpoch.Code || fsp.CurrentLeader.LeaderID != leader || fsp.CurrentLeader.LeaderEpoch != epoch {
		t.Fatalf("fetch with an old epoch from follower %d: code %d, current leader %+v; want FENCED_LEADER_EPOCH naming %d epoch %d",
			f.Cfg.NodeID, fsp.ErrorCode, fsp.CurrentLeader, leader, epoch)
	}
	var fb []kmsg.ProduceResponseBroker
	for _, b := range fresp.Brokers {
		fb = append(fb, kmsg.ProduceResponseBroker{NodeID: b.NodeID, Host: b.Host, Port: b.Port})
	}
	checkHintedBroker(t, "fetch", fb, leader, lnode.Addr)
}

func checkHintedBroker(t *testing.T, what string, brokers []kmsg.ProduceResponseBroker, id int32, addr string) {
	t.Helper()
	if len(brokers) != 1 || brokers[0].NodeID != id || fmt.Sprintf("%s:%d", brokers[0].Host, brokers[0].Port) != addr {
		t.Fatalf("%s: endpoints %+v; want node %d at %s", what, brokers, id, addr)
	}
}

// TestFollowerFetchRackAware (KIP-392): with the rack-aware selector, a
// consumer that says its rack reads a partition from the in-sync replica
// in that rack, read_committed included (a follower keeps the transaction
// state: aborted records stay hidden); a consumer without a rack reads
// from the leader.
func TestFollowerFetchRackAware(t *testing.T) {
	c := brokertest.NewCluster(t, 3, func(cfg *broker.Config, _ *wire.Limits) {
		cfg.Rack = "r" + strconv.Itoa(int(cfg.NodeID))
		cfg.ReplicaSelector = broker.RackAwareReplicaSelector
	})
	c.CreateTopic("racks", 1, 3, nil)
	leader, _ := c.AwaitLeader("racks", 0)
	c.AwaitInSync("racks", 0)
	follower := leader%3 + 1
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Committed, aborted, committed: 10 + (5 aborted) + 10 records.
	txp := c.Client(kgo.TransactionalID("racks-tx"), kgo.DefaultProduceTopic("racks"))
	for round, commit := range []bool{true, false, true} {
		n := 10
		if !commit {
			n = 5
		}
		if err := txp.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := txp.ProduceSync(ctx, kgo.StringRecord(fmt.Sprintf("%d-%d-%v", round, i, commit))).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := txp.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}

	read := func(rack string) (map[int32]int, []string) {
		var mu sync.Mutex
		from := map[int32]int{}
		hook := batchHook(func(node int32, n int) {
			mu.Lock()
			from[node] += n
			mu.Unlock()
		})
		opts := []kgo.Opt{kgo.ConsumeTopics("racks"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.WithHooks(hook)}
		if rack != "" {
			opts = append(opts, kgo.Rack(rack))
		}
		cl := c.Client(opts...)
		var got []string
		for len(got) < 20 {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("rack %q: read %d of 20 committed records: %v", rack, len(got), got)
			}
			fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		cl.Close()
		mu.Lock()
		defer mu.Unlock()
		return from, got
	}

	from, got := read("r" + strconv.Itoa(int(follower)))
	for _, v := range got {
		if v[len(v)-5:] == "false" {
			t.Fatalf("read_committed from a follower returned an aborted record %q", v)
		}
	}
	if len(got) != 20 {
		t.Fatalf("read %d records, want the 20 committed: %v", len(got), got)
	}
	if from[follower] == 0 || from[leader] != 0 {
		t.Fatalf("a consumer in rack r%d read batches from %v; want all from follower %d (leader %d)", follower, from, follower, leader)
	}
	from, _ = read("")
	if from[leader] == 0 || len(from) != 1 {
		t.Fatalf("a consumer without a rack read batches from %v; want all from leader %d", from, leader)
	}
}

type batchHook func(node int32, records int)

func (h batchHook) OnFetchBatchRead(meta kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	h(meta.NodeID, m.NumRecords)
}
