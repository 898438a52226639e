package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/testwait"
	"holdfast/internal/wire"
)

// startGroups starts a broker whose group timeouts suit tests: sessions of
// a few hundred milliseconds are allowed and the initial rebalance delay is
// short.
func startGroups(t testing.TB, delay time.Duration) *brokertest.Node {
	return brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
		c.Groups.InitialRebalanceDelay = delay
		c.Groups.MinSessionTimeout = 100 * time.Millisecond
	})
}

func gctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// produceN writes n records with values "0".."n-1" spread over the topic's
// partitions and returns once all are acknowledged.
func produceN(t testing.TB, n *brokertest.Node, topic string, from, count int) {
	t.Helper()
	cl := n.Client(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	var recs []*kgo.Record
	for i := from; i < from+count; i++ {
		recs = append(recs, &kgo.Record{Value: []byte(strconv.Itoa(i))})
	}
	if err := cl.ProduceSync(gctx(t, 20*time.Second), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cl.Close()
}

// consumer is one kgo group member whose polled records are collected.
type consumer struct {
	cl     *kgo.Client
	mu     sync.Mutex
	seen   map[string]int // value -> times delivered
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *consumer) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.seen {
		n += v
	}
	return n
}

func groupOpts(group, topic string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(600 * time.Millisecond),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.RebalanceTimeout(3 * time.Second),
		kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.AutoCommitInterval(100 * time.Millisecond),
	}
}

func startConsumer(t testing.TB, n *brokertest.Node, opts ...kgo.Opt) *consumer {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(n.Addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &consumer{cl: cl, seen: map[string]int{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				c.mu.Lock()
				c.seen[string(r.Value)]++
				c.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { c.stop() })
	return c
}

// stop ends polling and closes the client (a clean leave for dynamic
// members; static members close without leaving).
func (c *consumer) stop() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	<-c.done
	c.cl.Close()
	c.cancel = nil
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, d, what, cond)
}

// describe returns the group as the broker reports it.
func describe(t testing.TB, n *brokertest.Node, group string) kadm.DescribedGroup {
	t.Helper()
	gs, err := n.Admin().DescribeGroups(gctx(t, 5*time.Second), group)
	if err != nil {
		t.Fatalf("describe %s: %v", group, err)
	}
	return gs[group]
}

// waitStable waits until the group is Stable with members members that
// together own partitions partitions.
func waitStable(t testing.TB, n *brokertest.Node, group string, members, partitions int) kadm.DescribedGroup {
	t.Helper()
	var g kadm.DescribedGroup
	// 45 s: under CI's load a join round can take several rebalance
	// timeouts; a group that settles returns at once.
	waitFor(t, 45*time.Second, fmt.Sprintf("%s stable with %d members", group, members), func() bool {
		gs, err := n.Admin().DescribeGroups(gctx(t, 5*time.Second), group)
		if kerr.IsRetriable(err) || errors.Is(err, context.DeadlineExceeded) {
			// The coordinator's partition is still opening or electing
			// (__consumer_offsets is created by the consumers' first
			// lookup): an application asks again, so does this wait.
			return false
		}
		if err != nil {
			t.Fatalf("describe %s: %v", group, err)
		}
		g = gs[group]
		if g.Err != nil {
			return false // not joined yet (GROUP_ID_NOT_FOUND), or loading
		}
		if g.State != "Stable" || len(g.Members) != members {
			return false
		}
		total := 0
		for _, m := range g.Members {
			a, ok := m.Assigned.AsConsumer()
			if !ok {
				return false
			}
			for _, tp := range a.Topics {
				total += len(tp.Partitions)
			}
		}
		return total == partitions
	})
	return g
}

func assigned(m kadm.DescribedGroupMember) map[int32]bool {
	out := map[int32]bool{}
	if a, ok := m.Assigned.AsConsumer(); ok {
		for _, t := range a.Topics {
			for _, p := range t.Partitions {
				out[p] = true
			}
		}
	}
	return out
}

func TestGroupFranzGoSharesPartitionsExactlyOnce(t *testing.T) {
	n := startGroups(t, 300*time.Millisecond)
	n.CreateTopic("share", 6, nil)
	var cs []*consumer
	for i := 0; i < 3; i++ {
		// Sessions of 6 s, as the Sarama and kafka-go tests': with
		// groupOpts' 600 ms a heartbeat that late on a loaded machine
		// expires the member, whose records since its last commit are
		// delivered again to the next owner (a client's at-least-once,
		// not the broker's duplicate). No member dies here, so nothing
		// waits on the session.
		cs = append(cs, startConsumer(t, n, append(groupOpts("g-share", "share"), kgo.SessionTimeout(6*time.Second))...))
	}
	waitStable(t, n, "g-share", 3, 6)
	const total = 600
	produceN(t, n, "share", 0, total)
	distinct := func() int {
		vs := map[string]bool{}
		for _, c := range cs {
			c.mu.Lock()
			for v := range c.seen {
				vs[v] = true
			}
			c.mu.Unlock()
		}
		return len(vs)
	}
	// Every value, not a sum that a duplicate would help reach.
	waitFor(t, 30*time.Second, "all records consumed", func() bool { return distinct() >= total })
	// A negative check: the test passes with this sleep at zero. A
	// duplicate fetch would show in the members' next polls, within one
	// FetchMaxWait (200 ms) on a quiet machine.
	time.Sleep(300 * time.Millisecond)
	seen := map[string]int{}
	for i, c := range cs {
		if c.count() == 0 {
			t.Errorf("member %d consumed nothing", i)
		}
		c.mu.Lock()
		for v, k := range c.seen {
			seen[v] += k
		}
		c.mu.Unlock()
	}
	for i := 0; i < total; i++ {
		if k := seen[strconv.Itoa(i)]; k != 1 {
			t.Errorf("record %d delivered %d times", i, k)
		}
	}
}

// checkOnce fails unless values 0..total-1 were each delivered exactly once
// and every member got some.
func checkOnce(t *testing.T, total int, members []map[string]int) {
	t.Helper()
	seen := map[string]int{}
	for i, m := range members {
		if len(m) == 0 {
			t.Errorf("member %d consumed nothing", i)
		}
		for v, k := range m {
			seen[v] += k
		}
	}
	for i := 0; i < total; i++ {
		if k := seen[strconv.Itoa(i)]; k != 1 {
			t.Errorf("record %d delivered %d times", i, k)
		}
	}
}

type saramaHandler struct {
	mu   sync.Mutex
	seen map[string]int
}

func (h *saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		h.mu.Lock()
		h.seen[string(m.Value)]++
		h.mu.Unlock()
		s.MarkMessage(m, "")
	}
	return nil
}

func (h *saramaHandler) snapshot() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.seen {
		out[k] = v
	}
	return out
}

func TestGroupSaramaSharesPartitionsExactlyOnce(t *testing.T) {
	n := startGroups(t, 500*time.Millisecond)
	n.CreateTopic("sshare", 6, nil)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	// Sessions long enough that a starved client (CI runs every package
	// at once on two cores) is not expired into a rebalance loop; no
	// member here dies, so nothing waits on the session.
	cfg.Consumer.Group.Session.Timeout = 6 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Timeout = 3 * time.Second
	cfg.Consumer.MaxWaitTime = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var hs []*saramaHandler
	for i := 0; i < 3; i++ {
		cg, err := sarama.NewConsumerGroup([]string{n.Addr}, "g-sarama", cfg)
		if err != nil {
			t.Fatal(err)
		}
		h := &saramaHandler{seen: map[string]int{}}
		hs = append(hs, h)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := cg.Consume(ctx, []string{"sshare"}, h); err != nil && ctx.Err() == nil {
					time.Sleep(50 * time.Millisecond) // an application's pause before it consumes again
				}
			}
			cg.Close()
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	waitStable(t, n, "g-sarama", 3, 6)
	const total = 300
	produceN(t, n, "sshare", 0, total)
	var snaps []map[string]int
	waitFor(t, 30*time.Second, "all records consumed", func() bool {
		snaps = snaps[:0]
		s := 0
		for _, h := range hs {
			m := h.snapshot()
			snaps = append(snaps, m)
			for _, k := range m {
				s += k
			}
		}
		return s >= total
	})
	checkOnce(t, total, snaps)
}

func TestGroupKafkaGoSharesPartitionsExactlyOnce(t *testing.T) {
	n := startGroups(t, 500*time.Millisecond)
	n.CreateTopic("kgshare", 6, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := make([]map[string]int, 3)
	for i := range seen {
		seen[i] = map[string]int{}
		r := kafkago.NewReader(kafkago.ReaderConfig{
			Brokers:           []string{n.Addr},
			GroupID:           "g-kafkago",
			Topic:             "kgshare",
			MinBytes:          1,
			MaxBytes:          1 << 20,
			MaxWait:           200 * time.Millisecond,
			SessionTimeout:    6 * time.Second, // as the Sarama test's
			HeartbeatInterval: 100 * time.Millisecond,
			RebalanceTimeout:  3 * time.Second,
			JoinGroupBackoff:  100 * time.Millisecond,
			CommitInterval:    100 * time.Millisecond,
			StartOffset:       kafkago.FirstOffset,
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				seen[i][string(m.Value)]++
				mu.Unlock()
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	waitStable(t, n, "g-kafkago", 3, 6)
	const total = 300
	produceN(t, n, "kgshare", 0, total)
	waitFor(t, 30*time.Second, "all records consumed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		s := 0
		for _, m := range seen {
			for _, k := range m {
				s += k
			}
		}
		return s >= total
	})
	mu.Lock()
	defer mu.Unlock()
	checkOnce(t, total, seen)
}

func TestGroupMemberJoinsAndKilledMemberPartitionsMove(t *testing.T) {
	n := startGroups(t, 200*time.Millisecond)
	n.CreateTopic("move", 6, nil)
	a := startConsumer(t, n, groupOpts("g-move", "move")...)
	waitStable(t, n, "g-move", 1, 6)
	_, genA := a.cl.GroupMetadata()

	// A second (static) member joins: the group rebalances and splits.
	b := startConsumer(t, n, append(groupOpts("g-move", "move"), kgo.InstanceID("b"))...)
	g := waitStable(t, n, "g-move", 2, 6)
	for _, m := range g.Members {
		if len(assigned(m)) == 0 {
			t.Fatalf("member %s got nothing after the join", m.MemberID)
		}
	}
	if _, gen := a.cl.GroupMetadata(); gen <= genA {
		t.Fatalf("generation %d after a join, was %d", gen, genA)
	}
	bID, _ := b.cl.GroupMetadata()

	// b dies without leaving (a static member's close sends no
	// LeaveGroup): after its session times out, a owns everything.
	b.stop()
	g = waitStable(t, n, "g-move", 1, 6)
	for _, m := range g.Members {
		if m.MemberID == bID {
			t.Fatalf("dead member %s still in the group", bID)
		}
	}
	produceN(t, n, "move", 0, 60)
	waitFor(t, 20*time.Second, "survivor consumes every partition", func() bool { return a.count() >= 60 })
}

func TestGroupStaticMemberRestartKeepsAssignment(t *testing.T) {
	n := startGroups(t, 200*time.Millisecond)
	n.CreateTopic("static", 6, nil)
	// A long session so the restart happens well inside it.
	opts := func(id string) []kgo.Opt {
		return append(groupOpts("g-static", "static"), kgo.InstanceID(id), kgo.SessionTimeout(10*time.Second), kgo.HeartbeatInterval(200*time.Millisecond))
	}
	// a first, so a leads: a restarted static leader gets SkipAssignment
	// (KIP-814) and franz-go then balances anyway and rejoins when its own
	// plan differs from the old assignment - a client's choice, as
	// against Kafka, not what this test is about.
	a := startConsumer(t, n, opts("a")...)
	waitStable(t, n, "g-static", 1, 6)
	b := startConsumer(t, n, opts("b")...)
	g := waitStable(t, n, "g-static", 2, 6)
	_, genBefore := a.cl.GroupMetadata()
	var before map[int32]bool
	for _, m := range g.Members {
		if m.InstanceID != nil && *m.InstanceID == "b" {
			before = assigned(m)
		}
	}
	oldID, _ := b.cl.GroupMetadata()
	b.stop()
	b2 := startConsumer(t, n, opts("b")...)
	waitFor(t, 20*time.Second, "restarted static member rejoins", func() bool {
		id, _ := b2.cl.GroupMetadata()
		return id != "" && id != oldID
	})
	g = waitStable(t, n, "g-static", 2, 6)
	for _, m := range g.Members {
		if m.InstanceID != nil && *m.InstanceID == "b" {
			after := assigned(m)
			if fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("static member's assignment changed: %v -> %v", before, after)
			}
		}
	}
	if _, gen := a.cl.GroupMetadata(); gen != genBefore {
		t.Fatalf("generation moved %d -> %d: the restart caused a rebalance", genBefore, gen)
	}
}

// consumeManual polls with a group member that commits only what the
// caller says, until want records arrived; it returns them in order per
// partition. The client is closed on return (leaving the group).
func consumeManual(t *testing.T, n *brokertest.Node, group, topic string, want int, onRecord func(cl *kgo.Client, r *kgo.Record)) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(n.Addr), kgo.DisableAutoCommit()}, groupOpts(group, topic)...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := gctx(t, 30*time.Second)
	var got []*kgo.Record
	for len(got) < want {
		fs := cl.PollRecords(ctx, want-len(got))
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d", len(got), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got = append(got, r)
			if onRecord != nil {
				onRecord(cl, r)
			}
		})
	}
	return got
}

func commit(t *testing.T, cl *kgo.Client, r *kgo.Record, next int64) {
	t.Helper()
	err := cl.CommitRecords(gctx(t, 10*time.Second), &kgo.Record{Topic: r.Topic, Partition: r.Partition, Offset: next - 1, LeaderEpoch: r.LeaderEpoch})
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func TestGroupResumeFromCommittedOffsetsAfterBrokerRestart(t *testing.T) {
	n := startGroups(t, 0)
	n.CreateTopic("resume", 1, nil)
	produceN(t, n, "resume", 0, 100)
	first := consumeManual(t, n, "g-resume", "resume", 40, nil)
	commit(t, kgoClient(t, n, "g-resume"), first[len(first)-1], first[len(first)-1].Offset+1)

	n.Restart()
	produceN(t, n, "resume", 100, 50)
	rest := consumeManual(t, n, "g-resume", "resume", 110, nil)
	if rest[0].Offset != first[len(first)-1].Offset+1 {
		t.Fatalf("resumed at offset %d, committed %d", rest[0].Offset, first[len(first)-1].Offset+1)
	}
	all := append(first, rest...)
	for i, r := range all {
		if string(r.Value) != strconv.Itoa(i) {
			t.Fatalf("record %d is %q: skipped or duplicated", i, r.Value)
		}
	}
	// The offsets are in __consumer_offsets, not just memory: a second
	// restart with no consumer in between still reports them.
	n.Restart()
	offs, err := n.Admin().FetchOffsets(gctx(t, 10*time.Second), "g-resume")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := offs.Lookup("resume", 0); o.At != 40 {
		t.Fatalf("committed offset after restart %d, want 40 (rest was never committed)", o.At)
	}
}

// kgoClient is a plain group-less client used for explicit commits on
// behalf of a group (generation -1 commits to an empty group).
func kgoClient(t *testing.T, n *brokertest.Node, group string) *kgo.Client {
	return n.Client(kgo.ConsumerGroup(group), kgo.DisableAutoCommit())
}

// TestGroupAtMostOnceTrap shows why offsets are committed after processing:
// commit-then-crash loses the record, process-then-commit redelivers it.
func TestGroupAtMostOnceTrap(t *testing.T) {
	n := startGroups(t, 0)
	n.CreateTopic("trap", 1, nil)
	produceN(t, n, "trap", 0, 2)
	adm := n.Admin()
	ctx := gctx(t, 20*time.Second)

	// Commit before processing, then crash before processing: record 0 is
	// never processed by anyone.
	processed := map[string]bool{}
	got := consumeManual(t, n, "g-amo", "trap", 1, nil)
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: "trap", Partition: 0, At: got[0].Offset + 1, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "g-amo", os); err != nil {
		t.Fatal(err)
	}
	// (crash: processing never happens)
	got = consumeManual(t, n, "g-amo", "trap", 1, nil)
	processed[string(got[0].Value)] = true
	if processed["0"] || !processed["1"] {
		t.Fatalf("commit-before-process: processed %v; record 0 should be lost", processed)
	}

	// Process, then crash before committing: record 0 comes back.
	got = consumeManual(t, n, "g-alo", "trap", 1, nil)
	first := string(got[0].Value)
	// (crash: the commit never happens)
	got = consumeManual(t, n, "g-alo", "trap", 1, nil)
	if first != "0" || string(got[0].Value) != "0" {
		t.Fatalf("process-then-commit: got %q then %q, want record 0 redelivered", first, got[0].Value)
	}
}

var errCode = func(code int16) error { return kerr.ErrorForCode(code) }

// raw sends req to the node and returns the response.
func raw[R kmsg.Response](t *testing.T, cl *kgo.Client, req kmsg.Request) R {
	t.Helper()
	resp, err := cl.Request(gctx(t, 10*time.Second), req)
	if err != nil {
		t.Fatalf("%T: %v", req, err)
	}
	return resp.(R)
}

func wantCode(t *testing.T, what string, got int16, want *kerr.Error) {
	t.Helper()
	var wantCode int16
	if want != nil {
		wantCode = want.Code
	}
	if got != wantCode {
		t.Errorf("%s: got %v, want %v", what, errCode(got), want)
	}
}

func joinReq(group, member string, instance *string, protocols ...string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group = group
	req.MemberID = member
	req.InstanceID = instance
	req.SessionTimeoutMillis = 30000
	req.RebalanceTimeoutMillis = 1000
	req.ProtocolType = "consumer"
	for _, p := range protocols {
		req.Protocols = append(req.Protocols, kmsg.JoinGroupRequestProtocol{Name: p, Metadata: []byte{0, 0, 0, 0, 0, 0}})
	}
	return req
}

// TestGroupErrorCodes drives the protocol by hand and checks Kafka's error
// code for each bad request, and that other groups are not disturbed.
func TestGroupErrorCodes(t *testing.T) {
	n := startGroups(t, 0)
	n.CreateTopic("codes", 2, nil)
	cl := n.Client()

	// KIP-394: the first join gets an id and MEMBER_ID_REQUIRED.
	j := raw[*kmsg.JoinGroupResponse](t, cl, joinReq("g", "", nil, "range"))
	wantCode(t, "first join", j.ErrorCode, kerr.MemberIDRequired)
	id := j.MemberID
	j = raw[*kmsg.JoinGroupResponse](t, cl, joinReq("g", id, nil, "range"))
	wantCode(t, "second join", j.ErrorCode, nil)
	if j.LeaderID != id || j.Generation != 1 || len(j.Members) != 1 {
		t.Fatalf("join: leader %q gen %d members %d", j.LeaderID, j.Generation, len(j.Members))
	}
	wantCode(t, "join unknown member", raw[*kmsg.JoinGroupResponse](t, cl, joinReq("g", "nobody", nil, "range")).ErrorCode, kerr.UnknownMemberID)
	wantCode(t, "join empty group id", raw[*kmsg.JoinGroupResponse](t, cl, joinReq("", "", nil, "range")).ErrorCode, kerr.InvalidGroupID)
	bad := joinReq("g", "", nil, "roundrobin")
	wantCode(t, "no common protocol", raw[*kmsg.JoinGroupResponse](t, cl, bad).ErrorCode, kerr.InconsistentGroupProtocol)
	bad = joinReq("g2", "", nil, "range")
	bad.SessionTimeoutMillis = 10
	wantCode(t, "session timeout too small", raw[*kmsg.JoinGroupResponse](t, cl, bad).ErrorCode, kerr.InvalidSessionTimeout)

	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.MemberID, sync.Generation = "g", id, 99
	wantCode(t, "sync stale generation", raw[*kmsg.SyncGroupResponse](t, cl, sync).ErrorCode, kerr.IllegalGeneration)
	sync.Generation = 1
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: id, MemberAssignment: []byte("a")}}
	s := raw[*kmsg.SyncGroupResponse](t, cl, sync)
	wantCode(t, "leader sync", s.ErrorCode, nil)
	if string(s.MemberAssignment) != "a" {
		t.Fatalf("assignment %q", s.MemberAssignment)
	}

	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation = "g", id, 1
	wantCode(t, "heartbeat", raw[*kmsg.HeartbeatResponse](t, cl, hb).ErrorCode, nil)
	hb.Generation = 0
	wantCode(t, "heartbeat stale generation", raw[*kmsg.HeartbeatResponse](t, cl, hb).ErrorCode, kerr.IllegalGeneration)
	hb.Generation, hb.MemberID = 1, "nobody"
	wantCode(t, "heartbeat unknown member", raw[*kmsg.HeartbeatResponse](t, cl, hb).ErrorCode, kerr.UnknownMemberID)

	commit := func(group, member string, gen int32, topic string, md string) int16 {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.MemberID, req.Generation = group, member, gen
		p := kmsg.NewOffsetCommitRequestTopicPartition()
		p.Partition, p.Offset, p.Metadata = 0, 5, &md
		req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{p}}}
		return raw[*kmsg.OffsetCommitResponse](t, cl, req).Topics[0].Partitions[0].ErrorCode
	}
	wantCode(t, "member commit", commit("g", id, 1, "codes", ""), nil)
	wantCode(t, "commit stale generation", commit("g", id, 7, "codes", ""), kerr.IllegalGeneration)
	wantCode(t, "commit unknown member", commit("g", "nobody", 1, "codes", ""), kerr.UnknownMemberID)
	wantCode(t, "simple commit to a live group", commit("g", "", -1, "codes", ""), kerr.UnknownMemberID)
	wantCode(t, "commit unknown topic", commit("g", id, 1, "nope", ""), kerr.UnknownTopicOrPartition)
	wantCode(t, "commit huge metadata", commit("g", id, 1, "codes", string(make([]byte, 5000))), kerr.OffsetMetadataTooLarge)
	wantCode(t, "simple commit", commit("simple", "", -1, "codes", "m"), nil)
	wantCode(t, "commit for a group that does not exist", commit("ghost", "m", 3, "codes", ""), kerr.IllegalGeneration)

	// A second member's join puts the group into a rebalance: the first
	// member's heartbeat says so.
	j2 := raw[*kmsg.JoinGroupResponse](t, cl, joinReq("g", "", nil, "range"))
	wantCode(t, "second member first join", j2.ErrorCode, kerr.MemberIDRequired)
	cl2 := n.Client()
	joined := make(chan *kmsg.JoinGroupResponse, 1)
	go func() {
		resp, err := cl2.Request(context.Background(), joinReq("g", j2.MemberID, nil, "range"))
		if err != nil {
			joined <- nil
			return
		}
		joined <- resp.(*kmsg.JoinGroupResponse)
	}()
	waitFor(t, 10*time.Second, "rebalance to start", func() bool { return describe(t, n, "g").State == "PreparingRebalance" })
	hb.MemberID = id
	wantCode(t, "heartbeat during rebalance", raw[*kmsg.HeartbeatResponse](t, cl, hb).ErrorCode, kerr.RebalanceInProgress)
	// The first member never rejoins: after the rebalance timeout it is
	// dropped and the second completes the join alone.
	r2 := <-joined
	if r2 == nil || r2.ErrorCode != 0 || r2.Generation != 2 || r2.LeaderID != j2.MemberID {
		t.Fatalf("second member's join: %+v", r2)
	}

	// Static membership: a newer incarnation fences the old member id.
	inst := "i1"
	sj := raw[*kmsg.JoinGroupResponse](t, cl, joinReq("static", "", &inst, "range"))
	wantCode(t, "static join", sj.ErrorCode, nil)
	sj2 := raw[*kmsg.JoinGroupResponse](t, cl, joinReq("static", "", &inst, "range"))
	wantCode(t, "static rejoin", sj2.ErrorCode, nil)
	hb = kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation, hb.InstanceID = "static", sj.MemberID, sj.Generation, &inst
	wantCode(t, "fenced static member", raw[*kmsg.HeartbeatResponse](t, cl, hb).ErrorCode, kerr.FencedInstanceID)

	// Deleting: unknown, non-empty and empty groups.
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{"ghost", "g", "simple"}
	d := raw[*kmsg.DeleteGroupsResponse](t, cl, del)
	wantCode(t, "delete unknown group", d.Groups[0].ErrorCode, kerr.GroupIDNotFound)
	wantCode(t, "delete live group", d.Groups[1].ErrorCode, kerr.NonEmptyGroup)
	wantCode(t, "delete empty group", d.Groups[2].ErrorCode, nil)
	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = "simple"
	wantCode(t, "offset delete in a deleted group", raw[*kmsg.OffsetDeleteResponse](t, cl, od).ErrorCode, kerr.GroupIDNotFound)

	lg := kmsg.NewPtrListGroupsRequest()
	lg.StatesFilter = []string{"Stable", "CompletingRebalance"}
	l := raw[*kmsg.ListGroupsResponse](t, cl, lg)
	for _, g := range l.Groups {
		if g.Group == "simple" || g.GroupState == "Empty" {
			t.Errorf("state filter let through %s (%s)", g.Group, g.GroupState)
		}
	}

	// Group max size.
	m := startGroupsMax(t)
	mc := m.Client()
	a := raw[*kmsg.JoinGroupResponse](t, mc, joinReq("tiny", "", nil, "range"))
	raw[*kmsg.JoinGroupResponse](t, mc, joinReq("tiny", a.MemberID, nil, "range"))
	wantCode(t, "join a full group", raw[*kmsg.JoinGroupResponse](t, mc, joinReq("tiny", "", nil, "range")).ErrorCode, kerr.GroupMaxSizeReached)
}

func startGroupsMax(t testing.TB) *brokertest.Node {
	return brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
		c.Groups.InitialRebalanceDelay = 0
		c.Groups.MaxSize = 1
	})
}

// BenchmarkGroupRebalance measures join-to-stable for 10 franz-go members
// over 60 partitions: from starting the members until the group is Stable
// with every partition assigned (no initial rebalance delay).
func BenchmarkGroupRebalance10x60(b *testing.B) {
	n := startGroups(b, 0)
	n.CreateTopic("bench-rebalance", 60, nil)
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		group := fmt.Sprintf("bench-%d", i)
		start := time.Now()
		var cs []*consumer
		for j := 0; j < 10; j++ {
			opts := groupOpts(group, "bench-rebalance")
			cs = append(cs, startConsumer(b, n, append(opts, kgo.SessionTimeout(10*time.Second), kgo.HeartbeatInterval(time.Second))...))
		}
		waitStable(b, n, group, 10, 60)
		total += time.Since(start)
		b.StopTimer()
		for _, c := range cs {
			c.stop()
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/rebalance")
}

// BenchmarkOffsetCommit measures one-partition offset commits acknowledged
// after fsync (flush=sync): sequential (latency) and from 16 goroutines
// (throughput, group commit).
func BenchmarkOffsetCommit(b *testing.B) {
	n := startGroups(b, 0)
	n.CreateTopic("bench-commit", 16, nil)
	adm := n.Admin()
	commitOne := func(group string, p int32, at int64) {
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: "bench-commit", Partition: p, At: at, LeaderEpoch: -1})
		resp, err := adm.CommitOffsets(context.Background(), group, os)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Run("sequential", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			commitOne("bench-seq", 0, int64(i))
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
	})
	b.Run("parallel16", func(b *testing.B) {
		var next atomicInt
		b.SetParallelism(8) // 8 x GOMAXPROCS(2) = 16 committers
		b.RunParallel(func(pb *testing.PB) {
			id := next.add()
			i := int64(0)
			for pb.Next() {
				i++
				commitOne(fmt.Sprintf("bench-par-%d", id), int32(id%16), i)
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
	})
}

type atomicInt struct {
	mu sync.Mutex
	n  int
}

func (a *atomicInt) add() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	return a.n
}
