package tiered_test

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/s3test"
	"holdfast/internal/tiered"
	"holdfast/internal/wire"
)

// objectStore is a real S3-compatible server run as a process: versitygw
// with its POSIX backend (internal/s3test; installed by .ci/run, pinned
// there).
type objectStore struct {
	*s3test.Server
	dir, addr string
}

const testBucket = s3test.Bucket

// startObjectStore starts versitygw on a free port. Without the binary the
// test is skipped, except under CI (CI=true), where that is a failure.
func startObjectStore(t *testing.T) *objectStore {
	t.Helper()
	srv := s3test.Start(t, "")
	return &objectStore{Server: srv, dir: srv.Dir, addr: srv.Addr}
}

// start starts the server again after kill, on the same address and
// directory.
func (s *objectStore) start() { s.Restart() }

// kill stops the server with SIGKILL, as a crash.
func (s *objectStore) kill() { s.Kill() }

// objects counts the segment objects in the bucket.
func (s *objectStore) objects() int { return len(s.segmentObjects()) }

// segmentObjects lists the names of the segment objects in the bucket.
func (s *objectStore) segmentObjects() []string {
	var names []string
	for _, k := range s.SegmentObjects() {
		names = append(names, path.Base(k))
	}
	return names
}

// hasBase reports whether the bucket holds a segment object at offset base.
func (s *objectStore) hasBase(base int64) bool {
	prefix := fmt.Sprintf("%020d-", base)
	for _, n := range s.segmentObjects() {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

func (s *objectStore) config() tiered.Config {
	return tiered.Config{Enabled: true, Bucket: testBucket, Prefix: "cluster-a", Endpoint: "http://" + s.addr,
		Region: "us-east-1", PathStyle: true, TaskInterval: 50 * time.Millisecond, RetryBackoffMax: 200 * time.Millisecond}
}

func withTiered(s *objectStore) func(*broker.Config, *wire.Limits) {
	return func(c *broker.Config, _ *wire.Limits) { c.Tiered = s.config() }
}

func strp(s string) *string { return &s }

// tieredTopic: tiny segments (a few batches each) and a local tier of one
// byte, so every uploaded segment leaves the local disk at once.
func tieredTopic() map[string]*string {
	return map[string]*string{
		"remote.storage.enable": strp("true"),
		"segment.bytes":         strp("4096"),
		"local.retention.bytes": strp("1"),
	}
}

// listOffset asks node n for ListOffsets' special timestamp ts.
func listOffset(t *testing.T, n *brokertest.Node, topic string, ts int64) int64 {
	t.Helper()
	off, err := offsetAt(n, topic, ts)
	if err != nil {
		t.Fatalf("list offsets %d: %v", ts, err)
	}
	return off
}

func offsetAt(n *brokertest.Node, topic string, ts int64) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, ts, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := n.Request(req)
	if err != nil {
		return 0, err
	}
	p := resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	return p.Offset, kerr.ErrorForCode(p.ErrorCode)
}

// produce writes records [from, to) of topic, 20 to a batch, acks=all.
func produce(t *testing.T, cl *kgo.Client, topic string, from, to int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := from; i < to; {
		var batch []*kgo.Record
		for ; i < to && len(batch) < 20; i++ {
			batch = append(batch, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "record-%06d-%s", i, strings.Repeat("x", 60))})
		}
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

// consumeAll reads topic from its start and checks that it holds exactly
// records [from, want), in order.
func consumeAll(t *testing.T, n *brokertest.Node, topic string, want, from int, seeds ...string) (epochs map[int64]int32) {
	t.Helper()
	cl := n.Client(kgo.SeedBrokers(append([]string{n.Addr}, seeds...)...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := from
	epochs = map[int64]int32{}
	for got < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records: %v", got, want, ctx.Err())
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch: %v", e.Err)
		}
		for _, r := range fs.Records() {
			if r.Offset != int64(got) {
				t.Fatalf("record at offset %d, want %d", r.Offset, got)
			}
			if w := fmt.Sprintf("record-%06d-", got); !strings.HasPrefix(string(r.Value), w) {
				t.Fatalf("offset %d holds %q, want %s...", r.Offset, r.Value, w)
			}
			epochs[r.Offset] = r.LeaderEpoch
			got++
		}
	}
	return epochs
}

// TestTieredReadBackAfterLocalDelete: a tiered topic with a one-byte
// local tier loses its local segments once they are uploaded, and a
// consumer still reads every record from offset 0, the old ones from the
// object store; ListOffsets tells the remote log start (-2), the local
// one (-4) and the highest offset in the remote log (-5).
func TestTieredReadBackAfterLocalDelete(t *testing.T) {
	s := startObjectStore(t)
	n := brokertest.Start(t, withTiered(s))
	const topic, records = "tiered", 1000
	n.CreateTopic(topic, 1, tieredTopic())
	produce(t, n.Client(), topic, 0, records)

	brokertest.Await(t, "the local tier to delete uploaded segments", func() error {
		if local := listOffset(t, n, topic, -4); local < records/2 {
			return fmt.Errorf("local log start %d", local)
		}
		return nil
	})
	if earliest := listOffset(t, n, topic, -2); earliest != 0 {
		t.Fatalf("earliest offset %d, want 0 (the remote log start)", earliest)
	}
	local, tieredEnd := listOffset(t, n, topic, -4), listOffset(t, n, topic, -5)
	if tieredEnd < local-1 || tieredEnd >= records {
		t.Fatalf("latest tiered offset %d with the local log starting at %d", tieredEnd, local)
	}
	if s.objects() == 0 {
		t.Fatal("no segment objects in the bucket")
	}
	consumeAll(t, n, topic, records, 0)

	// DeleteRecords below the local log start moves the remote log start
	// (committed first), and the objects wholly below it go.
	if !s.hasBase(0) {
		t.Fatal("no segment object at offset 0")
	}
	before := s.segmentObjects()
	const cut = 300 // past the first segment (4096 bytes hold fewer records)
	dr, err := n.Admin().DeleteRecords(context.Background(), kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: cut}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := dr.Lookup(topic, 0); !ok || r.Err != nil || r.LowWatermark != cut {
		t.Fatalf("delete records: %+v", r)
	}
	if earliest := listOffset(t, n, topic, -2); earliest != cut {
		t.Fatalf("earliest offset %d after deleting records below %d", earliest, cut)
	}
	consumeAll(t, n, topic, records, cut)
	brokertest.Await(t, "the segment object below the new start to be deleted", func() error {
		if s.hasBase(0) {
			return fmt.Errorf("the object of offset 0 is still there: %v", s.segmentObjects())
		}
		return nil
	})
	after := s.segmentObjects()
	for _, o := range before {
		if !strings.HasPrefix(o, fmt.Sprintf("%020d-", 0)) && !slices.Contains(after, o) {
			t.Fatalf("%s, at or above the first segment, is gone: %v", o, after)
		}
	}

	// Deleting the topic deletes its objects (once no upload is under
	// way: one racing the deletion may leave its object behind).
	passes := n.B.TieredStats().Passes.Load()
	brokertest.Await(t, "every closed segment uploaded", func() error {
		if st := n.B.TieredStats(); st.Passes.Load() < passes+2 || st.CopyLagSegments.Load() > 0 {
			return fmt.Errorf("%d segments not uploaded yet", st.CopyLagSegments.Load())
		}
		return nil
	})
	if _, err := n.Admin().DeleteTopics(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	brokertest.Await(t, "the deleted topic's objects to go", func() error {
		if got := s.segmentObjects(); len(got) > 0 {
			return fmt.Errorf("objects left: %v", got)
		}
		return nil
	})
}

// TestTieredObjectStoreKilledMidUpload: the object store is killed -9
// while the leader uploads, the producer keeps writing (nothing waits for
// the store), and once the store is back every record is still read from
// offset 0 after the local tier deleted what was uploaded.
func TestTieredObjectStoreKilledMidUpload(t *testing.T) {
	s := startObjectStore(t)
	n := brokertest.Start(t, withTiered(s))
	const topic, records = "tiered-kill", 1200
	n.CreateTopic(topic, 1, tieredTopic())
	cl := n.Client()
	produce(t, cl, topic, 0, records/3)
	brokertest.Await(t, "the first uploads", func() error {
		if local := listOffset(t, n, topic, -4); local == 0 {
			return errors.New("nothing uploaded yet")
		}
		return nil
	})
	s.kill()
	produce(t, cl, topic, records/3, records) // the store is down: produce must not wait for it
	brokertest.Await(t, "the store's absence counted", func() error {
		if st := n.B.TieredStats(); st.CopyErrors.Load() == 0 || !st.StoreDown.Load() {
			return errors.New("no failed upload counted yet")
		}
		return nil
	})
	stuck := listOffset(t, n, topic, -5)
	s.start()
	brokertest.Await(t, "uploads to resume", func() error {
		if got := listOffset(t, n, topic, -5); got <= stuck || got < records/2 {
			return fmt.Errorf("latest tiered offset %d (was %d when the store went down)", got, stuck)
		}
		return nil
	})
	consumeAll(t, n, topic, records, 0)
	if st := n.B.TieredStats(); st.StoreDown.Load() || st.FetchRequests.Load() == 0 {
		t.Errorf("after recovery: store down %v, remote fetches %d", st.StoreDown.Load(), st.FetchRequests.Load())
	}
}

// TestTieredConfigs: Kafka's names, defaults and sources in
// DescribeConfigs, and its refusals: remote storage on a compacted topic,
// and on any topic while the broker has it off.
func TestTieredConfigs(t *testing.T) {
	off := brokertest.Start(t)
	ctx := context.Background()
	adm := off.Admin()
	refused := func(adm *kadm.Client, topic string, configs map[string]*string, msg string) {
		t.Helper()
		resp, err := adm.CreateTopics(ctx, 1, 1, configs, topic)
		if err != nil {
			t.Fatal(err)
		}
		r, err := resp.On(topic, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(r.Err, kerr.InvalidConfig) || r.ErrMessage != msg {
			t.Fatalf("creating %s: %v %q, want INVALID_CONFIG %q", topic, r.Err, r.ErrMessage, msg)
		}
	}
	refused(adm, "refused", map[string]*string{"remote.storage.enable": strp("true")},
		"Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.")

	s := startObjectStore(t)
	n := brokertest.Start(t, withTiered(s))
	adm = n.Admin()
	refused(adm, "compacted", map[string]*string{"remote.storage.enable": strp("true"), "cleanup.policy": strp("compact")},
		"Remote log storage is unsupported for the compacted topics")
	refused(adm, "local-over-total", map[string]*string{"remote.storage.enable": strp("true"), "retention.ms": strp("1000"), "local.retention.ms": strp("2000")},
		"Invalid value 2000 for configuration local.retention.ms: Value must not be more than retention.ms property value: 1000")
	n.CreateTopic("described", 1, map[string]*string{"remote.storage.enable": strp("true"), "local.retention.ms": strp("60000")})
	rcs, err := adm.DescribeTopicConfigs(ctx, "described")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On("described", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"remote.storage.enable": {"true", "DYNAMIC_TOPIC_CONFIG"},
		"local.retention.ms":    {"60000", "DYNAMIC_TOPIC_CONFIG"},
		"local.retention.bytes": {"-2", "DEFAULT_CONFIG"},
	}
	for _, c := range rc.Configs {
		if w, ok := want[c.Key]; ok {
			if c.MaybeValue() != w[0] || c.Source.String() != w[1] {
				t.Errorf("%s = %s (%s), want %s (%s)", c.Key, c.MaybeValue(), c.Source, w[0], w[1])
			}
			delete(want, c.Key)
		}
	}
	if len(want) > 0 {
		t.Errorf("not described: %v", want)
	}
}

// leaderOf returns the running node that leads partition 0 of topic, and
// the partition's replicas.
func leaderOf(t *testing.T, nodes []*brokertest.Node, topic string) (leader *brokertest.Node, replicas []int32) {
	t.Helper()
	brokertest.Await(t, "a leader of "+topic, func() error {
		for _, n := range nodes {
			if n.B == nil {
				continue
			}
			md, err := n.Metadata(topic)
			if err != nil {
				return err
			}
			p := md.Topics[0].Partitions[0]
			for _, l := range nodes {
				if l.B != nil && l.Cfg.NodeID == p.Leader {
					if _, err := offsetAt(l, topic, -1); err != nil {
						return err
					}
					leader, replicas = l, p.Replicas
					return nil
				}
			}
			return fmt.Errorf("leader %d is not running", p.Leader)
		}
		return errors.New("no node running")
	})
	return leader, replicas
}

// awaitTiered waits until the leader of topic has records [0, upTo) in
// the remote log and none of them below upTo/2 on its local disk, with
// the remote log still starting at 0.
func awaitTiered(t *testing.T, nodes []*brokertest.Node, topic string, upTo int64) *brokertest.Node {
	t.Helper()
	var leader *brokertest.Node
	brokertest.Await(t, fmt.Sprintf("offsets below %d in the remote log", upTo), func() error {
		leader, _ = leaderOf(t, nodes, topic)
		end, err := offsetAt(leader, topic, -5)
		if err != nil {
			return err
		}
		local, err := offsetAt(leader, topic, -4)
		if err != nil {
			return err
		}
		if end < upTo-1 || local < upTo/2 {
			return fmt.Errorf("node %d: latest tiered %d, local log start %d", leader.Cfg.NodeID, end, local)
		}
		return nil
	})
	if earliest := listOffset(t, leader, topic, -2); earliest != 0 {
		t.Fatalf("node %d: earliest offset %d, want 0", leader.Cfg.NodeID, earliest)
	}
	return leader
}

// TestTieredThreeNodesLeaderMovesAndDiskReplaced: on three nodes, the
// remote log outlives its leaders. The first leader uploads, then its
// disk is replaced (stopped, emptied); the next leader continues the same
// remote log; the replaced node comes back empty, catches up from a
// snapshot that says only where the local log starts, is elected leader
// again (preferred replica) and continues the remote log from the
// manifest it received with the entries after the snapshot. Every record
// is read from offset 0 at the end.
func TestTieredThreeNodesLeaderMovesAndDiskReplaced(t *testing.T) {
	s := startObjectStore(t)
	nodes := brokertest.NewCluster(t, 3, withTiered(s)).Nodes
	const topic = "tiered3"
	brokertest.CreateClusterTopic(t, nodes, topic, 1, 3, tieredTopic())
	cl := nodes[0].Client(kgo.SeedBrokers(brokertest.Addrs(nodes)...))
	produce(t, cl, topic, 0, 500)
	awaitTiered(t, nodes, topic, 480)

	// Replace the disk of the preferred replica (the leader, or not).
	_, replicas := leaderOf(t, nodes, topic)
	preferred := nodes[replicas[0]-1]
	preferred.Wipe()
	produce(t, cl, topic, 500, 1000)
	if l := awaitTiered(t, nodes, topic, 960); l == preferred {
		t.Fatal("the wiped node leads")
	}

	// It comes back empty: every replica's log starts past 0 by now, so
	// it catches up from a snapshot. Then it leads again.
	preferred.Restart()
	brokertest.Await(t, "the preferred replica to lead", func() error {
		res, err := nodes[replicas[1]-1].Admin().ElectLeaders(context.Background(), kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {0: {}}})
		if err != nil {
			return err
		}
		if r, ok := res[topic][0]; ok && r.Err != nil && !errors.Is(r.Err, kerr.ElectionNotNeeded) {
			return r.Err
		}
		if l, _ := leaderOf(t, nodes, topic); l != preferred {
			return fmt.Errorf("node %d leads, want %d", l.Cfg.NodeID, preferred.Cfg.NodeID)
		}
		return nil
	})
	produce(t, cl, topic, 1000, 1500)
	if l := awaitTiered(t, nodes, topic, 1440); l != preferred {
		t.Fatalf("node %d leads, want %d", l.Cfg.NodeID, preferred.Cfg.NodeID)
	}
	epochs := consumeAll(t, preferred, topic, 1500, 0, brokertest.Addrs(nodes)...)

	// OffsetForLeaderEpoch of the first leader's epoch, which the new
	// leader's local epoch cache never held (it starts at 960): the
	// remote log's epochs answer, the epoch ends where the next began.
	first := epochs[0]
	next := int64(-1)
	for off := int64(0); off < 1500; off++ {
		if epochs[off] != first {
			next = off
			break
		}
	}
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.LeaderEpoch, rp.CurrentLeaderEpoch = 0, first, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := preferred.Request(req)
	if err != nil {
		t.Fatal(err)
	}
	got := resp.(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
	if got.ErrorCode != 0 || got.LeaderEpoch != first || got.EndOffset != next {
		t.Fatalf("OffsetForLeaderEpoch(%d) = epoch %d end %d code %d, want epoch %d end %d", first, got.LeaderEpoch, got.EndOffset, got.ErrorCode, first, next)
	}
}

// TestTieredTotalRetention: retention.bytes counts the remote and the
// local log; the oldest remote segments leave the manifest (the remote log
// start rises), their objects are deleted, and a consumer from the start
// reads exactly what is left.
func TestTieredTotalRetention(t *testing.T) {
	s := startObjectStore(t)
	n := brokertest.Start(t, withTiered(s))
	const topic, records = "tiered-retention", 3000
	configs := tieredTopic()
	configs["retention.bytes"] = strp("20000") // about five segments
	n.CreateTopic(topic, 1, configs)
	produce(t, n.Client(), topic, 0, records)
	passes := n.B.TieredStats().Passes.Load()
	var earliest int64
	brokertest.Await(t, "total retention to move the remote log start", func() error {
		earliest = listOffset(t, n, topic, -2)
		if local := listOffset(t, n, topic, -4); earliest == 0 || local < records/2 {
			return fmt.Errorf("earliest %d, local log start %d", earliest, local)
		}
		if got := s.objects(); got > 7 {
			return fmt.Errorf("%d segment objects", got)
		}
		// The copy lag of a pass begun after the last record: 0 once
		// every closed segment is uploaded.
		if st := n.B.TieredStats(); st.Passes.Load() < passes+2 || st.CopyLagSegments.Load() > 0 {
			return fmt.Errorf("%d segments not uploaded yet", st.CopyLagSegments.Load())
		}
		return nil
	})
	// Nothing is produced any more and every closed segment is uploaded:
	// the total, and so the start, stay.
	earliest = listOffset(t, n, topic, -2)
	if latest := listOffset(t, n, topic, -5); latest <= earliest {
		t.Fatalf("remote log [%d, %d]", earliest, latest)
	}
	consumeAll(t, n, topic, records, int(earliest))
}

// TestTieredReadCommittedSkipsAborted: transactions, half of them
// aborted, go to the remote log; once the local tier deleted them, a
// read_committed consumer from offset 0 reads exactly the committed
// records: each segment's aborted transactions travel with it (its .index
// object) and come back with the fetch.
func TestTieredReadCommittedSkipsAborted(t *testing.T) {
	s := startObjectStore(t)
	n := brokertest.Start(t, withTiered(s))
	const topic, txns, perTxn = "tiered-txn", 10, 60
	n.CreateTopic(topic, 1, tieredTopic())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pr := n.Client(kgo.TransactionalID("tiered-txn"), kgo.DefaultProduceTopic(topic))
	var want []string
	for k := 0; k < txns; k++ {
		if err := pr.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		commit := k%2 == 0
		var batch []*kgo.Record
		for i := 0; i < perTxn; i++ {
			v := fmt.Sprintf("txn-%02d-%03d-commit=%v-%s", k, i, commit, strings.Repeat("y", 40))
			batch = append(batch, &kgo.Record{Value: []byte(v)})
			if commit {
				want = append(want, v)
			}
		}
		if err := pr.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := pr.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	end := listOffset(t, n, topic, -1)
	brokertest.Await(t, "the local tier to delete uploaded segments", func() error {
		if local := listOffset(t, n, topic, -4); local < end/2 {
			return fmt.Errorf("local log start %d of %d", local, end)
		}
		return nil
	})
	cl := n.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var got []string
	for len(got) < len(want) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d committed records: %v", len(got), len(want), ctx.Err())
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch: %v", e.Err)
		}
		for _, r := range fs.Records() {
			got = append(got, string(r.Value))
		}
	}
	if !slices.Equal(got, want) {
		for i := range got {
			if i >= len(want) || got[i] != want[i] {
				t.Fatalf("record %d: %.30q, want %.30q (%d read, %d committed)", i, got[i], want[min(i, len(want)-1)], len(got), len(want))
			}
		}
	}
}
