package broker_test

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/testwait"
	"holdfast/internal/wire"
)

// workloadResult is everything a client can see of the differential
// workload: equal on one node and on a cluster, or Holdfast's cluster is
// not Kafka-exact.
type workloadResult struct {
	Produced        map[string]int64   // record label -> offset the ack named
	Earliest        map[int32]int64    // ListOffsets earliest (log start)
	Latest          map[int32]int64    // ListOffsets latest (high watermark)
	Stable          map[int32]int64    // ListOffsets latest, read_committed (last stable offset)
	ByTime          map[string]int64   // ListOffsets by timestamp
	EpochEnd        map[int32]int64    // OffsetForLeaderEpoch of the current epoch: its end offset
	Committed       map[int32]int64    // the group's committed offsets
	ReadCommitted   map[int32][]string // offset:key:value under read_committed
	ReadUncommitted map[int32][]string
}

const diffTopic, diffGroup = "diff", "diff-group"

// diffTS is record i's timestamp: fixed, so ListOffsets by time compares.
func diffTS(i int) time.Time { return time.UnixMilli(1_700_000_000_000 + int64(i)*1000) }

// runWorkload runs the differential workload against seeds; change runs
// between its steps (a leader change on a cluster).
func runWorkload(t *testing.T, seeds []string, rf int, change func(step string)) workloadResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res := workloadResult{Produced: map[string]int64{}, Earliest: map[int32]int64{}, Latest: map[int32]int64{}, Stable: map[int32]int64{},
		ByTime: map[string]int64{}, EpochEnd: map[int32]int64{}, Committed: map[int32]int64{},
		ReadCommitted: map[int32][]string{}, ReadUncommitted: map[int32][]string{}}
	adm := kadmClient(t, seeds)
	if r, err := adm.CreateTopics(ctx, 2, int16(rf), nil, diffTopic); err != nil || r.Error() != nil {
		t.Fatalf("create: %v %v", err, r.Error())
	}
	brokertest.Await(t, "the topic's leaders", func() error {
		_, err := adm.ListEndOffsets(ctx, diffTopic)
		return err
	})
	seq := 0
	rec := func(p int32, label string) *kgo.Record {
		seq++
		return &kgo.Record{Partition: p, Key: []byte(fmt.Sprintf("k%d", seq%3)), Value: []byte(label), Timestamp: diffTS(seq)}
	}
	client := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(diffTopic),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RetryTimeout(90 * time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	idem := func(prefix string, n int) {
		cl := client()
		for i := range n {
			for p := int32(0); p < 2; p++ {
				label := fmt.Sprintf("%s-p%d-%d", prefix, p, i)
				r := rec(p, label)
				if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatalf("produce %s: %v", label, err)
				}
				res.Produced[label] = r.Offset
			}
		}
	}
	idem("idem", 6)
	change("after idempotent produce")

	txc := client(kgo.TransactionalID("diff-txn"))
	for i, end := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort, kgo.TryCommit} {
		if err := txc.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var rs []*kgo.Record
		for p := int32(0); p < 2; p++ {
			for j := range 2 {
				rs = append(rs, rec(p, fmt.Sprintf("txn%d-p%d-%d", i, p, j)))
			}
		}
		if err := txc.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("transaction %d: %v", i, err)
		}
		for _, r := range rs {
			res.Produced[string(r.Value)] = r.Offset
		}
		if err := txc.EndTransaction(ctx, end); err != nil {
			t.Fatalf("end transaction %d: %v", i, err)
		}
	}
	change("after transactions")

	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: diffTopic, Partition: 0, At: 4, LeaderEpoch: -1})
	offs.Add(kadm.Offset{Topic: diffTopic, Partition: 1, At: 9, LeaderEpoch: -1})
	// kadm's CommitOffsets resolves topic ids with a Metadata request
	// first, and when that request fails (on the connection to a node that
	// just restarted) it reports UNKNOWN_TOPIC_OR_PARTITION without sending
	// the commit; DeleteRecords right after a leader change can meet
	// LEADER_NOT_AVAILABLE. Retriable in Kafka's error table: an application
	// retries them, and so does the test (and logs it).
	retry := func(what string, fn func() error) {
		t.Helper()
		testwait.For(t, 30*time.Second, what, func() error {
			err := fn()
			if err != nil && !kerr.IsRetriable(err) {
				t.Fatalf("%s: %v", what, err)
			}
			if err != nil {
				t.Logf("%s: %v (retriable: retrying)", what, err)
			}
			return err
		})
	}
	retry("commit offsets", func() error {
		r, err := adm.CommitOffsets(ctx, diffGroup, offs)
		if err != nil {
			return err
		}
		return r.Error()
	})
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: diffTopic, Partition: 0, At: 3})
	retry("delete records", func() error {
		r, err := adm.DeleteRecords(ctx, del)
		if err != nil {
			return err
		}
		return r.Error()
	})
	change("after DeleteRecords")
	idem("late", 2)

	// lookup asks again while a partition answers a retriable error
	// (NOT_LEADER_OR_FOLLOWER right after a leader change: kadm hands
	// partition errors back, a client retries them), as an application
	// would; any other error fails the test.
	lookup := func(list func() (kadm.ListedOffsets, error), into map[int32]int64) {
		t.Helper()
		testwait.For(t, 30*time.Second, "list offsets", func() error {
			lo, err := list()
			if err != nil {
				t.Fatal(err)
			}
			var retry error
			lo.Each(func(o kadm.ListedOffset) {
				switch {
				case o.Err == nil:
					into[o.Partition] = o.Offset
				case kerr.IsRetriable(o.Err):
					retry = o.Err
				default:
					t.Fatalf("list offsets %d: %v", o.Partition, o.Err)
				}
			})
			if retry != nil {
				t.Logf("list offsets: %v (retriable: retrying)", retry)
			}
			return retry
		})
	}
	lookup(func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, diffTopic) }, res.Earliest)
	lookup(func() (kadm.ListedOffsets, error) { return adm.ListEndOffsets(ctx, diffTopic) }, res.Latest)
	lookup(func() (kadm.ListedOffsets, error) { return adm.ListCommittedOffsets(ctx, diffTopic) }, res.Stable)
	for _, at := range []int{1, 5, 14, 20, seq + 5} {
		m := map[int32]int64{}
		lookup(func() (kadm.ListedOffsets, error) {
			return adm.ListOffsetsAfterMilli(ctx, diffTS(at).UnixMilli(), diffTopic)
		}, m)
		for p, o := range m {
			res.ByTime[fmt.Sprintf("t%d-p%d", at, p)] = o
		}
	}
	// OffsetForLeaderEpoch of each partition's current epoch: its end
	// (asked again, with fresh metadata, on a retriable error).
	testwait.For(t, 30*time.Second, "OffsetForLeaderEpoch", func() error {
		md, err := adm.Metadata(ctx, diffTopic)
		if err != nil {
			t.Fatal(err)
		}
		epochs := map[int32]int32{}
		for _, p := range md.Topics[diffTopic].Partitions {
			epochs[p.Partition] = p.LeaderEpoch
		}
		ofe, err := adm.OffsetForLeaderEpoch(ctx, map[string]map[int32]int32{diffTopic: epochs})
		if err != nil {
			t.Fatal(err)
		}
		var retry error
		for _, ps := range ofe {
			for p, o := range ps {
				switch {
				case o.Err == nil:
					res.EpochEnd[p] = o.EndOffset
				case kerr.IsRetriable(o.Err):
					retry = o.Err
				default:
					t.Fatalf("OffsetForLeaderEpoch %d: %v", p, o.Err)
				}
			}
		}
		if retry != nil {
			t.Logf("OffsetForLeaderEpoch: %v (retriable: retrying)", retry)
		}
		return retry
	})
	fo, err := adm.FetchOffsets(ctx, diffGroup)
	if err != nil || fo.Error() != nil {
		t.Fatalf("fetch offsets: %v %v", err, fo.Error())
	}
	fo.Each(func(o kadm.OffsetResponse) { res.Committed[o.Partition] = o.At })

	read := func(level kgo.IsolationLevel, into map[int32][]string) {
		cl := client(kgo.ConsumeTopics(diffTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(level),
			kgo.FetchMaxWait(200*time.Millisecond))
		idle := 0
		for idle < 3 && ctx.Err() == nil {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			fs := cl.PollFetches(pctx)
			pcancel()
			if len(fs.Records()) == 0 {
				idle++
				continue
			}
			idle = 0
			fs.EachRecord(func(r *kgo.Record) {
				into[r.Partition] = append(into[r.Partition], fmt.Sprintf("%d:%s:%s", r.Offset, r.Key, r.Value))
			})
		}
	}
	read(kgo.ReadCommitted(), res.ReadCommitted)
	read(kgo.ReadUncommitted(), res.ReadUncommitted)
	return res
}

// TestClusterDifferential runs one client workload - keyed idempotent
// produce, transactions committed and aborted, group offset commits,
// DeleteRecords, ListOffsets earliest/latest/read_committed/by time,
// OffsetForLeaderEpoch - against one node and against a 3-node cluster
// whose leaders change between the steps. Every client-visible result
// must be equal.
func TestClusterDifferential(t *testing.T) {
	single := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.Groups.InitialRebalanceDelay = 0 })
	want := runWorkload(t, []string{single.Addr}, 1, func(string) {})
	single.Stop()

	nodes := startCluster(t, 3, func(c *broker.Config) {
		c.OffsetsTopicPartitions = 3
		c.Txn.StatePartitions = 3
		c.Groups.InitialRebalanceDelay = 0
	})
	moved := 0
	got := runWorkload(t, addrs(nodes), 3, func(step string) {
		// A leader change: restart the leader of a partition (controlled
		// shutdown hands its leaderships over first).
		leader := partitionLeaders(t, nodes, diffTopic)[int32(moved%2)]
		moved++
		t.Logf("%s: restarting node %d, leader of partition %d", step, leader.Cfg.NodeID, (moved-1)%2)
		leader.Restart()
		awaitBrokers(t, nodes, []int32{1, 2, 3})
		partitionLeaders(t, nodes, diffTopic)
	})

	v1, v2 := reflect.ValueOf(want), reflect.ValueOf(got)
	for i := range v1.NumField() {
		name := v1.Type().Field(i).Name
		if !reflect.DeepEqual(v1.Field(i).Interface(), v2.Field(i).Interface()) {
			t.Errorf("%s differs:\n  one node: %s\n  cluster:  %s", name, show(v1.Field(i).Interface()), show(v2.Field(i).Interface()))
		}
	}
}

// show prints a map sorted by key.
func show(v any) string {
	rv := reflect.ValueOf(v)
	keys := rv.MapKeys()
	sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
	s := "{"
	for i, k := range keys {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%v=%v", k, rv.MapIndex(k))
	}
	return s + "}"
}
