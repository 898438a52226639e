package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
)

// startGroupCluster is startCluster with a small __consumer_offsets (fewer
// Raft groups to elect on a small machine) and no initial rebalance delay.
func startGroupCluster(t *testing.T, n int) []*brokertest.Node {
	t.Helper()
	return startCluster(t, n, func(c *broker.Config) {
		c.OffsetsTopicPartitions = 4
		c.Groups.InitialRebalanceDelay = 0
		c.Txn.StatePartitions = 4
	})
}

// groupMember consumes in a group and commits synchronously after each
// poll, recording every value it reads.
type groupMember struct {
	cl       *kgo.Client
	mu       sync.Mutex
	seen     map[int]int
	assigned int
	errs     []error
}

func startMember(t *testing.T, seeds []string, topic, group string) *groupMember {
	t.Helper()
	m := &groupMember{seen: map[int]int{}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryTimeout(90*time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			m.mu.Lock()
			m.assigned += len(a[topic])
			m.mu.Unlock()
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, r map[string][]int32) {
			m.mu.Lock()
			m.assigned -= len(r[topic])
			m.mu.Unlock()
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) {
			m.mu.Lock()
			m.assigned -= len(l[topic])
			m.mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	m.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			// A bounded poll keeps the loop (and so the commit retry
			// below) turning when no records come.
			pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			fs := cl.PollFetches(pctx)
			pcancel()
			recs := fs.Records()
			m.mu.Lock()
			fs.EachError(func(_ string, _ int32, err error) {
				if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
					m.errs = append(m.errs, err)
				}
			})
			for _, r := range recs {
				v, err := strconv.Atoi(string(r.Value))
				if err != nil {
					m.errs = append(m.errs, err)
					continue
				}
				m.seen[v]++
			}
			m.mu.Unlock()
			// Commit what was polled. A commit that fails (the
			// coordinator moving) is retried on the next turn even
			// when no new record arrives; a record whose commit never
			// lands may be read again after a rebalance (at least
			// once), never skipped.
			_ = cl.CommitUncommittedOffsets(ctx)
		}
	}()
	return m
}

// TestClusterConsumerGroup: two members of a franz-go consumer group share
// a 6-partition RF=3 topic on a 3-node cluster and read it exactly once,
// committing as they go. The broker leading the group's __consumer_offsets
// partition (the coordinator) stops; the members find the new coordinator,
// which replayed the partition, and go on from the committed offsets: no
// record skipped, none of the committed ones read again.
func TestClusterConsumerGroup(t *testing.T) {
	nodes := startGroupCluster(t, 3)
	const topic, group = "orders", "billing"
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	adm := kadmClient(t, addrs(nodes))
	createClusterTopic(t, nodes, topic, 6, 3, nil)

	members := []*groupMember{startMember(t, addrs(nodes), topic, group), startMember(t, addrs(nodes), topic, group)}
	// Produce only once both members hold partitions, so no rebalance
	// hands over uncommitted records in the first phase.
	awaitCluster(t, "both members assigned", func() error {
		total := 0
		for i, m := range members {
			m.mu.Lock()
			a := m.assigned
			m.mu.Unlock()
			if a == 0 {
				return fmt.Errorf("member %d has no partitions", i)
			}
			total += a
		}
		if total != 6 {
			return fmt.Errorf("%d partitions assigned", total)
		}
		return nil
	})

	pcl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RetryTimeout(90*time.Second), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	const n = 600
	produceRange(t, pcl, topic, 0, n)
	seenAll := func(upTo int) error {
		got := map[int]int{}
		for _, m := range members {
			m.mu.Lock()
			for v, c := range m.seen {
				got[v] += c
			}
			m.mu.Unlock()
		}
		for v := 0; v < upTo; v++ {
			if got[v] == 0 {
				return fmt.Errorf("value %d not read yet (%d distinct read)", v, len(got))
			}
		}
		return nil
	}
	awaitCluster(t, "the first records read", func() error { return seenAll(n) })
	awaitCluster(t, "the first records committed", func() error { return committedToEnd(ctx, t, nodes, topic, group) })
	for v := 0; v < n; v++ {
		total := 0
		for _, m := range members {
			m.mu.Lock()
			total += m.seen[v]
			m.mu.Unlock()
		}
		if total != 1 {
			t.Fatalf("value %d read %d times before failover", v, total)
		}
	}

	fc := adm.FindGroupCoordinators(ctx, group)
	if err := fc.Error(); err != nil {
		t.Fatalf("find coordinator: %v", err)
	}
	var coord int32 = -1
	for _, c := range fc {
		coord = c.NodeID
	}
	old := nodeByID(nodes, coord)
	if old == nil {
		t.Fatalf("coordinator %d is not a node", coord)
	}
	old.Stop()
	var rest []*brokertest.Node
	for _, nd := range nodes {
		if nd != old {
			rest = append(rest, nd)
		}
	}

	produceRange(t, pcl, topic, n, n)
	awaitCluster(t, "every record read after the coordinator stopped", func() error { return seenAll(2 * n) })
	for v := 0; v < n; v++ {
		total := 0
		for _, m := range members {
			m.mu.Lock()
			total += m.seen[v]
			m.mu.Unlock()
		}
		if total != 1 {
			t.Fatalf("committed value %d read %d times: offsets were lost in the failover", v, total)
		}
	}
	awaitCluster(t, "every record committed at the new coordinator", func() error {
		return committedToEnd(ctx, t, rest, topic, group)
	})
	fc = kadmClient(t, addrs(rest)).FindGroupCoordinators(ctx, group)
	for _, c := range fc {
		if c.Err != nil || c.NodeID == coord {
			t.Fatalf("coordinator after failover: node %d, err %v", c.NodeID, c.Err)
		}
	}
	for i, m := range members {
		m.mu.Lock()
		if len(m.errs) > 0 {
			t.Logf("member %d fetch errors (retried): %v", i, m.errs)
		}
		m.mu.Unlock()
	}
}

// committedToEnd checks that group's committed offset on every partition
// of topic is the partition's end offset (every record read and committed),
// as the cluster's current coordinator answers. Offsets are compared to the
// end, not counted: a Raft leader's empty entry also takes an offset.
func committedToEnd(ctx context.Context, t *testing.T, nodes []*brokertest.Node, topic, group string) error {
	t.Helper()
	adm := kadmClient(t, addrs(nodes))
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(cctx, topic)
	if err != nil {
		return err
	}
	offs, err := adm.FetchOffsets(cctx, group)
	if err != nil {
		return err
	}
	var errs []error
	ends.Each(func(e kadm.ListedOffset) {
		if e.Err != nil {
			errs = append(errs, e.Err)
			return
		}
		o, ok := offs.Lookup(topic, e.Partition)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("partition %d: nothing committed", e.Partition))
		case o.Err != nil:
			errs = append(errs, fmt.Errorf("partition %d: %w", e.Partition, o.Err))
		case o.At != e.Offset:
			errs = append(errs, fmt.Errorf("partition %d: committed %d, end %d", e.Partition, o.At, e.Offset))
		}
	})
	return errors.Join(errs...)
}

// TestClusterTransactions: a transactional producer on a 3-node cluster
// commits, aborts and commits again over a 3-partition RF=3 topic; its
// coordinator (the leader of its __transaction_state partition) writes the
// markers on each partition's leader. read_committed sees exactly the
// committed records; read_uncommitted sees the aborted ones too.
func TestClusterTransactions(t *testing.T) {
	nodes := startGroupCluster(t, 3)
	const topic = "ledger"
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	adm := kadmClient(t, addrs(nodes))
	createClusterTopic(t, nodes, topic, 3, 3, nil)
	pcl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.TransactionalID("ledger-writer"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RetryTimeout(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	txnOf := func(prefix string, n int, commit bool) {
		t.Helper()
		if err := pcl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for i := 0; i < n; i++ {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 3), Value: []byte(prefix + strconv.Itoa(i))})
		}
		if err := pcl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", prefix, err)
		}
		if err := pcl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end transaction %s (commit %v): %v", prefix, commit, err)
		}
	}
	txnOf("committed-", 9, true)
	txnOf("aborted-", 9, false)
	txnOf("last-", 3, true) // one on each partition, after the aborted ones

	lastAt := map[int32]int64{} // offset of the "last-" record per partition
	read := func(level kgo.IsolationLevel, want int) map[string]int {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(level))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		got := map[string]int{}
		last := 0
		for last < 3 {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("reading: %v; got %v", ctx.Err(), got)
			}
			fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch: %v", err) })
			for _, r := range fs.Records() {
				got[string(r.Value)]++
				if len(r.Value) > 5 && string(r.Value[:5]) == "last-" {
					last++
					lastAt[r.Partition] = r.Offset
				}
			}
		}
		total := 0
		for _, c := range got {
			total += c
		}
		if total != want {
			t.Errorf("isolation %v: read %d records, want %d: %v", level, total, want, got)
		}
		return got
	}
	committed := read(kgo.ReadCommitted(), 12)
	for v, c := range committed {
		if c != 1 || len(v) >= 8 && v[:8] == "aborted-" {
			t.Fatalf("read_committed read %q %d times", v, c)
		}
	}
	uncommitted := read(kgo.ReadUncommitted(), 21)
	if uncommitted["aborted-0"] != 1 {
		t.Fatalf("read_uncommitted did not see the aborted records: %v", uncommitted)
	}

	// Consume-transform-produce: a group transact session reads the
	// committed records and copies them, its offsets committed in the same
	// transactions (TxnOffsetCommit at the group coordinator, markers on
	// __consumer_offsets from the transaction coordinator).
	const copyTopic = "ledger-copy"
	if resp, err := adm.CreateTopics(ctx, 3, 3, nil, copyTopic); err != nil || resp.Error() != nil {
		t.Fatalf("create topic: %v %v", err, resp.Error())
	}
	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(addrs(nodes)...), kgo.TransactionalID("ledger-copier"),
		kgo.ConsumerGroup("copier"), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RetryTimeout(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	copied := 0
	for copied < 12 {
		fs := sess.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("copying: %v after %d", ctx.Err(), copied)
		}
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			t.Fatal(err)
		}
		var out []*kgo.Record
		for _, r := range recs {
			out = append(out, &kgo.Record{Topic: copyTopic, Partition: r.Partition, Value: r.Value})
		}
		if err := sess.ProduceSync(ctx, out...).FirstErr(); err != nil {
			t.Fatalf("copy: %v", err)
		}
		ok, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			t.Fatalf("end copy transaction: %v", err)
		}
		if ok {
			copied += len(recs)
		}
	}
	if copied != 12 {
		t.Fatalf("copied %d records, want 12", copied)
	}
	offs, err := adm.FetchOffsets(ctx, "copier")
	if err != nil {
		t.Fatal(err)
	}
	// The committed offset of each partition is right after its last
	// record (the group read everything, and said so in its last
	// transaction).
	for p, at := range lastAt {
		o, ok := offs.Lookup(topic, p)
		if !ok || o.Err != nil || o.At != at+1 {
			t.Fatalf("copier's committed offset on partition %d: %+v (found %v), want %d", p, o, ok, at+1)
		}
	}
	if len(lastAt) != 3 {
		t.Fatalf("last records on %d partitions", len(lastAt))
	}
	copies := 0
	ccl, err := kgo.NewClient(kgo.SeedBrokers(addrs(nodes)...), kgo.ConsumeTopics(copyTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer ccl.Close()
	seen := map[string]bool{}
	for copies < 12 {
		fs := ccl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading copies: %v after %d", ctx.Err(), copies)
		}
		for _, r := range fs.Records() {
			copies++
			if committed[string(r.Value)] != 1 || seen[string(r.Value)] {
				t.Fatalf("copy %q: not a committed original, or copied twice", r.Value)
			}
			seen[string(r.Value)] = true
		}
	}
}
