package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/testwait"
	"holdfast/internal/wire"
)

// KIP-932 share groups: the protocol driven by hand (exact acquisition,
// acknowledgement, lock-timeout and delivery-count semantics, and what a
// restart or failover keeps), and franz-go's share consumer end to end.

// shareTestConfig shortens the share-group timers for tests.
func shareTestConfig(c *broker.Config, _ *wire.Limits) {
	c.Share.SessionTimeout = 5 * time.Second
	c.Share.HeartbeatInterval = 200 * time.Millisecond
}

// setGroupConfigs sets group configs with IncrementalAlterConfigs.
func setGroupConfigs(t testing.TB, cl *kgo.Client, group string, kvs ...string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for i := 0; i < len(kvs); i += 2 {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = kvs[i], kmsg.StringPtr(kvs[i+1])
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(gctx(t, 20*time.Second), cl)
	if err != nil {
		t.Fatalf("IncrementalAlterConfigs: %v", err)
	}
	if err := kerr.ErrorForCode(resp.Resources[0].ErrorCode); err != nil {
		t.Fatalf("IncrementalAlterConfigs: %v", err)
	}
}

// shareMember drives one share-group member by hand.
type shareMember struct {
	t      testing.TB
	cl     *kgo.Client
	group  string
	id     string
	epochs map[int32]int32 // share-session epoch per broker
}

func newShareMember(t testing.TB, cl *kgo.Client, group, id string) *shareMember {
	return &shareMember{t: t, cl: cl, group: group, id: id, epochs: map[int32]int32{}}
}

// join heartbeats until the coordinator answers, and returns the
// assignment.
func (m *shareMember) join(topics ...string) map[[16]byte][]int32 {
	m.t.Helper()
	var out map[[16]byte][]int32
	brokertest.Await(m.t, "share group join", func() error {
		req := kmsg.NewPtrShareGroupHeartbeatRequest()
		req.GroupID, req.MemberID, req.MemberEpoch, req.SubscribedTopicNames = m.group, m.id, 0, topics
		resp, err := req.RequestWith(gctx(m.t, 10*time.Second), m.cl)
		if err != nil {
			return err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		if resp.Assignment == nil || resp.MemberEpoch <= 0 {
			return fmt.Errorf("no assignment (epoch %d)", resp.MemberEpoch)
		}
		out = map[[16]byte][]int32{}
		for _, tp := range resp.Assignment.TopicPartitions {
			out[tp.TopicID] = tp.Partitions
		}
		return nil
	})
	return out
}

type ackRange struct {
	first, last int64
	typ         int8
}

// fetch sends a ShareFetch for partition p of topic id to broker node,
// with acks, and returns the partition's answer.
func (m *shareMember) fetch(node int32, id [16]byte, p int32, acks []ackRange, maxWait time.Duration) kmsg.ShareFetchResponseTopicPartition {
	m.t.Helper()
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID = &m.group, &m.id
	req.ShareSessionEpoch = m.epochs[node]
	req.MaxWaitMillis, req.MinBytes, req.MaxRecords, req.BatchSize = int32(maxWait.Milliseconds()), 1, 500, 500
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = id
	rp := kmsg.NewShareFetchRequestTopicPartition()
	rp.Partition, rp.PartitionMaxBytes = p, 1<<20
	for _, a := range acks {
		rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{FirstOffset: a.first, LastOffset: a.last, AcknowledgeTypes: []int8{a.typ}})
	}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(gctx(m.t, maxWait+20*time.Second), m.cl.Broker(int(node)))
	if err != nil {
		m.t.Fatalf("ShareFetch: %v", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		m.t.Fatalf("ShareFetch (epoch %d): %v", req.ShareSessionEpoch, err)
	}
	m.epochs[node]++
	for _, t := range resp.Topics {
		for _, x := range t.Partitions {
			if x.Partition == p {
				return x
			}
		}
	}
	return kmsg.NewShareFetchResponseTopicPartition()
}

// ack sends a ShareAcknowledge and returns the partition's error.
func (m *shareMember) ack(node int32, id [16]byte, p int32, acks []ackRange) error {
	m.t.Helper()
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID, req.MemberID = &m.group, &m.id
	req.ShareSessionEpoch = m.epochs[node]
	rt := kmsg.NewShareAcknowledgeRequestTopic()
	rt.TopicID = id
	rp := kmsg.NewShareAcknowledgeRequestTopicPartition()
	rp.Partition = p
	for _, a := range acks {
		rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch{FirstOffset: a.first, LastOffset: a.last, AcknowledgeTypes: []int8{a.typ}})
	}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(gctx(m.t, 20*time.Second), m.cl.Broker(int(node)))
	if err != nil {
		m.t.Fatalf("ShareAcknowledge: %v", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		m.t.Fatalf("ShareAcknowledge: %v", err)
	}
	m.epochs[node]++
	return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
}

// acquired flattens a fetch's acquired ranges: offset -> delivery count.
func acquired(p kmsg.ShareFetchResponseTopicPartition) map[int64]int16 {
	out := map[int64]int16{}
	for _, a := range p.AcquiredRecords {
		for o := a.FirstOffset; o <= a.LastOffset; o++ {
			out[o] = a.DeliveryCount
		}
	}
	return out
}

func offsetsOf(m map[int64]int16) []int64 {
	var out []int64
	for o := range m {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

func span(first, last int64) []int64 {
	var out []int64
	for o := first; o <= last; o++ {
		out = append(out, o)
	}
	return out
}

// describeSPSO is the share-partition start offset DescribeShareGroupOffsets
// reports.
func describeSPSO(t testing.TB, cl *kgo.Client, group, topic string, p int32) int64 {
	t.Helper()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rg.GroupID = group
	rg.Topics = []kmsg.DescribeShareGroupOffsetsRequestGroupTopic{{Topic: topic, Partitions: []int32{p}}}
	req.Groups = append(req.Groups, rg)
	var spso int64
	brokertest.Await(t, "DescribeShareGroupOffsets", func() error {
		resp, err := req.RequestWith(gctx(t, 10*time.Second), cl)
		if err != nil {
			return err
		}
		g := resp.Groups[0]
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			return err
		}
		rp := g.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
			return err
		}
		spso = rp.StartOffset
		return nil
	})
	return spso
}

func TestShareGroupProtocol(t *testing.T) {
	n := brokertest.Start(t, shareTestConfig, func(c *broker.Config, _ *wire.Limits) {
		c.Share.DeliveryCountLimit = 3
	})
	n.CreateTopic("sq", 1, nil)
	produceN(t, n, "sq", 0, 10)
	cl := n.Client()
	setGroupConfigs(t, cl, "sg", "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "1000")

	m := newShareMember(t, cl, "sg", "m1")
	asg := m.join("sq")
	md, err := n.Metadata("sq")
	if err != nil {
		t.Fatal(err)
	}
	id := md.Topics[0].TopicID
	if !slices.Equal(asg[id], []int32{0}) {
		t.Fatalf("assignment %v, want sq/0", asg)
	}
	node := n.Cfg.NodeID

	// Everything is acquired once.
	got := acquired(m.fetch(node, id, 0, nil, 5*time.Second))
	if want := span(0, 9); !slices.Equal(offsetsOf(got), want) || got[0] != 1 {
		t.Fatalf("first fetch acquired %v, want 0-9 with delivery count 1", got)
	}
	// Accept 0-2, release 3-4, reject 5: 3-4 come back at once, count 2.
	p := m.fetch(node, id, 0, []ackRange{{0, 2, 1}, {3, 4, 2}, {5, 5, 3}}, 5*time.Second)
	if p.AcknowledgeErrorCode != 0 {
		t.Fatalf("acknowledge: %v", kerr.ErrorForCode(p.AcknowledgeErrorCode))
	}
	got = acquired(p)
	if !slices.Equal(offsetsOf(got), []int64{3, 4}) || got[3] != 2 {
		t.Fatalf("after release acquired %v, want 3-4 with delivery count 2", got)
	}
	// An offset already accepted cannot be acknowledged again, and
	// nothing of a failed batch applies.
	if err := m.ack(node, id, 0, []ackRange{{0, 0, 1}}); !errors.Is(err, kerr.InvalidRecordState) {
		t.Fatalf("acknowledging an accepted offset: %v, want INVALID_RECORD_STATE", err)
	}
	if err := m.ack(node, id, 0, []ackRange{{3, 3, 1}}); err != nil {
		t.Fatalf("accept 3: %v", err)
	}
	// 4 and 6-9 are not acknowledged: their locks run out and they are
	// delivered again (4 a third time, 6-9 a second).
	got = acquired(m.fetch(node, id, 0, nil, 10*time.Second))
	if !slices.Equal(offsetsOf(got), []int64{4, 6, 7, 8, 9}) || got[4] != 3 || got[6] != 2 {
		t.Fatalf("after lock timeout acquired %v, want 4 (count 3), 6-9 (count 2)", got)
	}
	// 4 reached share.delivery.count.limit (3): released, it is archived.
	p = m.fetch(node, id, 0, []ackRange{{4, 4, 2}, {6, 6, 1}}, 100*time.Millisecond)
	if p.AcknowledgeErrorCode != 0 {
		t.Fatalf("acknowledge: %v", kerr.ErrorForCode(p.AcknowledgeErrorCode))
	}
	if got = acquired(p); len(got) != 0 {
		t.Fatalf("acquired %v, want nothing (4 archived, 7-9 still locked)", got)
	}
	if spso := describeSPSO(t, cl, "sg", "sq", 0); spso != 7 {
		t.Fatalf("SPSO %d, want 7 (0-6 accepted, rejected or archived)", spso)
	}

	// A restart keeps what was acknowledged; 7-9, in flight, come again.
	n.Restart()
	cl = n.Client()
	m = newShareMember(t, cl, "sg", "m2")
	m.join("sq")
	var all map[int64]int16
	brokertest.Await(t, "in-flight records redelivered after a restart", func() error {
		all = acquired(m.fetch(node, id, 0, nil, 5*time.Second))
		if len(all) == 0 {
			return errors.New("nothing acquired yet")
		}
		return nil
	})
	if !slices.Equal(offsetsOf(all), []int64{7, 8, 9}) {
		t.Fatalf("after restart acquired %v, want 7-9", all)
	}
	if spso := describeSPSO(t, cl, "sg", "sq", 0); spso != 7 {
		t.Fatalf("SPSO after restart %d, want 7", spso)
	}
}

// shareConsumer is a franz-go share consumer that accepts what it reads,
// except that it releases values divisible by releaseEvery on their first
// delivery and rejects values divisible by rejectEvery.
type shareConsumer struct {
	cl      *kgo.Client
	mu      sync.Mutex
	accept  map[int]int // value -> times accepted
	reject  map[int]bool
	redeliv map[int]int32 // value -> highest delivery count seen
	cancel  context.CancelFunc
	done    chan struct{}
}

func startShareConsumer(t testing.TB, seeds []string, group, topic string, releaseEvery, rejectEvery int) *shareConsumer {
	t.Helper()
	c := &shareConsumer{accept: map[int]int{}, reject: map[int]bool{}, redeliv: map[int]int32{}, done: make(chan struct{})}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic),
		kgo.FetchMaxWait(500*time.Millisecond), kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryTimeout(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			for _, r := range fs.Records() {
				v, _ := strconv.Atoi(string(r.Value))
				c.mu.Lock()
				c.redeliv[v] = max(c.redeliv[v], r.DeliveryCount())
				switch {
				case rejectEvery > 0 && v%rejectEvery == 0:
					r.Ack(kgo.AckReject)
					c.reject[v] = true
				case releaseEvery > 0 && v%releaseEvery == 0 && r.DeliveryCount() == 1:
					r.Ack(kgo.AckRelease)
				default:
					r.Ack(kgo.AckAccept)
					c.accept[v]++
				}
				c.mu.Unlock()
			}
		}
	}()
	t.Cleanup(c.stop)
	return c
}

func (c *shareConsumer) stop() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	<-c.done
	c.cl.Close()
	c.cancel = nil
}

// waitShareAccepted waits until the consumers accepted every value below
// total that is not rejected, and returns the merged counts.
func waitShareAccepted(t testing.TB, total, rejectEvery int, cs ...*shareConsumer) (accepted map[int]int, maxDC map[int]int32) {
	t.Helper()
	missing := 0
	ok := testwait.Poll(120*time.Second, func() bool {
		accepted, maxDC = map[int]int{}, map[int]int32{}
		for _, c := range cs {
			c.mu.Lock()
			for v, k := range c.accept {
				accepted[v] += k
			}
			for v, d := range c.redeliv {
				maxDC[v] = max(maxDC[v], d)
			}
			c.mu.Unlock()
		}
		missing = 0
		for v := 0; v < total; v++ {
			if (rejectEvery == 0 || v%rejectEvery != 0) && accepted[v] == 0 {
				missing++
			}
		}
		return missing == 0
	})
	if !ok {
		t.Fatalf("%d of %d values never accepted", missing, total)
	}
	return accepted, maxDC
}

func checkShareSemantics(t testing.TB, total, releaseEvery, rejectEvery int, accepted map[int]int, maxDC map[int]int32) {
	t.Helper()
	for v := 0; v < total; v++ {
		switch {
		case v%rejectEvery == 0:
			if accepted[v] > 0 {
				t.Errorf("value %d was rejected but accepted later", v)
			}
		case v%releaseEvery == 0:
			if maxDC[v] < 2 {
				t.Errorf("value %d was released on its first delivery but its delivery count reached only %d", v, maxDC[v])
			}
		}
	}
}

func TestShareGroupFranzGo(t *testing.T) {
	n := brokertest.Start(t, shareTestConfig)
	n.CreateTopic("sf", 3, nil)
	const total, releaseEvery, rejectEvery = 600, 10, 13
	setGroupConfigs(t, n.Client(), "sfg", "share.auto.offset.reset", "earliest")
	produceN(t, n, "sf", 0, total)
	seeds := []string{n.Addr}
	a := startShareConsumer(t, seeds, "sfg", "sf", releaseEvery, rejectEvery)
	b := startShareConsumer(t, seeds, "sfg", "sf", releaseEvery, rejectEvery)
	accepted, maxDC := waitShareAccepted(t, total, rejectEvery, a, b)
	checkShareSemantics(t, total, releaseEvery, rejectEvery, accepted, maxDC)

	// Both members are in the group (the second may join after the
	// first read everything), the three partitions spread over them.
	brokertest.Await(t, "ShareGroupDescribe with both members", func() error {
		req := kmsg.NewPtrShareGroupDescribeRequest()
		req.GroupIDs = []string{"sfg"}
		resp, err := req.RequestWith(gctx(t, 10*time.Second), n.Client())
		if err != nil {
			return err
		}
		g := resp.Groups[0]
		parts := 0
		for _, m := range g.Members {
			for _, tp := range m.Assignment.TopicPartitions {
				parts += len(tp.Partitions)
			}
		}
		if g.ErrorCode != 0 || g.GroupState != "Stable" || len(g.Members) != 2 || parts != 3 {
			return fmt.Errorf("error %d state %q members %d partitions %d", g.ErrorCode, g.GroupState, len(g.Members), parts)
		}
		return nil
	})
	// ListGroups shows it as a share group.
	lreq := kmsg.NewPtrListGroupsRequest()
	lreq.TypesFilter = []string{"share"}
	lresp, err := lreq.RequestWith(gctx(t, 10*time.Second), n.Client())
	if err != nil {
		t.Fatal(err)
	}
	if len(lresp.Groups) != 1 || lresp.Groups[0].Group != "sfg" || lresp.Groups[0].GroupType != "share" {
		t.Fatalf("ListGroups(share) = %+v", lresp.Groups)
	}
	a.stop()
	b.stop()
	// Every accepted value is below the SPSO (nothing left in flight).
	for p := int32(0); p < 3; p++ {
		if spso := describeSPSO(t, n.Client(), "sfg", "sf", p); spso != total/3 {
			t.Errorf("partition %d: SPSO %d, want %d", p, spso, total/3)
		}
	}
	// The empty group is deleted with its state.
	dreq := kmsg.NewPtrDeleteGroupsRequest()
	dreq.Groups = []string{"sfg"}
	dresp, err := dreq.RequestWith(gctx(t, 10*time.Second), n.Client())
	if err != nil || dresp.Groups[0].ErrorCode != 0 {
		t.Fatalf("DeleteGroups: %v %+v", err, dresp)
	}
}

// TestClusterShareGroupFailover acquires records on a partition's leader,
// acknowledges some, and stops the leader (and the group's coordinator)
// with the rest in flight: the new leader redelivers exactly those, with
// their delivery count, and never what was acknowledged.
func TestClusterShareGroupFailover(t *testing.T) {
	c := brokertest.NewCluster(t, 3, shareTestConfig)
	c.CreateTopic("sc", 1, 3, nil)
	cl := c.Client()
	leader, _ := c.AwaitLeader("sc", 0)
	// A group coordinated on another node than the partition's leader, so
	// the leader writes its state across nodes (WriteShareGroupState).
	// (If every __consumer_offsets partition is led by that node, the
	// first group is taken: leader and coordinator are then one node.)
	group, coord := "scg-0", findGroupCoordinator(t, cl, "scg-0")
	for i := 1; i < 100 && coord == leader; i++ {
		g := fmt.Sprintf("scg-%d", i)
		if n := findGroupCoordinator(t, cl, g); n != leader {
			group, coord = g, n
		}
	}
	setGroupConfigs(t, cl, group, "share.auto.offset.reset", "earliest")
	{
		pcl := c.Client(kgo.DefaultProduceTopic("sc"))
		var recs []*kgo.Record
		for i := range 20 {
			recs = append(recs, &kgo.Record{Value: []byte(strconv.Itoa(i))})
		}
		if err := pcl.ProduceSync(gctx(t, 30*time.Second), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	m := newShareMember(t, cl, group, "m1")
	asg := m.join("sc")
	var id [16]byte
	for k := range asg {
		id = k
	}
	got := acquired(m.fetch(leader, id, 0, nil, 5*time.Second))
	if !slices.Equal(offsetsOf(got), span(0, 19)) {
		t.Fatalf("acquired %v, want 0-19", offsetsOf(got))
	}
	if err := m.ack(leader, id, 0, []ackRange{{0, 9, 1}, {12, 12, 3}}); err != nil {
		t.Fatalf("acknowledge: %v", err)
	}
	// Stop the leader and the coordinator; bring the coordinator back so
	// that two of three run: the coordinator's partition may move or be
	// replayed by the same node, the data partition moves.
	c.Node(leader).Stop()
	if coord != leader {
		c.Node(coord).Stop()
		c.Node(coord).Start()
	}
	t.Logf("stopped leader %d and coordinator %d", leader, coord)
	newLeader, _ := c.AwaitLeader("sc", 0, leader)
	cl2 := c.Client()
	m2 := newShareMember(t, cl2, group, "m2")
	m2.join("sc")
	var again map[int64]int16
	brokertest.Await(t, "in-flight records redelivered by the new leader", func() error {
		req := kmsg.NewPtrMetadataRequest()
		if _, err := req.RequestWith(gctx(t, 5*time.Second), cl2); err != nil {
			return err
		}
		p := m2.fetchMaybe(newLeader, id, 0, 3*time.Second)
		if p == nil {
			return errors.New("fetch failed")
		}
		again = acquired(*p)
		if len(again) == 0 {
			return errors.New("nothing acquired yet")
		}
		return nil
	})
	want := []int64{10, 11, 13, 14, 15, 16, 17, 18, 19}
	if !slices.Equal(offsetsOf(again), want) {
		t.Fatalf("new leader acquired %v, want %v (in flight at the failover; 0-9 accepted, 12 rejected)", offsetsOf(again), want)
	}
	for o, dc := range again {
		if dc < 2 {
			t.Errorf("offset %d redelivered with delivery count %d, want 2", o, dc)
		}
	}
}

// fetchMaybe is fetch that reports a failure (nil) instead of failing
// the test, starting a new session on error.
func (m *shareMember) fetchMaybe(node int32, id [16]byte, p int32, maxWait time.Duration) *kmsg.ShareFetchResponseTopicPartition {
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID = &m.group, &m.id
	req.ShareSessionEpoch = m.epochs[node]
	req.MaxWaitMillis, req.MinBytes, req.MaxRecords, req.BatchSize = int32(maxWait.Milliseconds()), 1, 500, 500
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = id
	rp := kmsg.NewShareFetchRequestTopicPartition()
	rp.Partition, rp.PartitionMaxBytes = p, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(gctx(m.t, maxWait+20*time.Second), m.cl.Broker(int(node)))
	if err != nil || resp.ErrorCode != 0 {
		m.epochs[node] = 0
		return nil
	}
	m.epochs[node]++
	for _, t := range resp.Topics {
		for _, x := range t.Partitions {
			if x.Partition == p {
				if x.ErrorCode != 0 {
					m.epochs[node] = 0 // the next try opens a new session
					return nil
				}
				return &x
			}
		}
	}
	out := kmsg.NewShareFetchResponseTopicPartition()
	return &out
}

// findGroupCoordinator is group's coordinator node.
func findGroupCoordinator(t testing.TB, cl *kgo.Client, group string) int32 {
	t.Helper()
	var node int32
	brokertest.Await(t, "FindCoordinator", func() error {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = group
		resp, err := req.RequestWith(gctx(t, 5*time.Second), cl)
		if err != nil {
			return err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		node = resp.NodeID
		return nil
	})
	return node
}

// TestClusterShareGroupFranzGo: franz-go share consumers on a 3-node
// cluster lose nothing while the leader of a partition stops.
func TestClusterShareGroupFranzGo(t *testing.T) {
	c := brokertest.NewCluster(t, 3, shareTestConfig)
	c.CreateTopic("scf", 3, 3, nil)
	const total, releaseEvery, rejectEvery = 300, 10, 13
	setGroupConfigs(t, c.Client(), "scfg", "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "2000")
	produceValues(t, c.Addrs(), "scf", 0, total/2)
	a := startShareConsumer(t, c.Addrs(), "scfg", "scf", releaseEvery, rejectEvery)
	b := startShareConsumer(t, c.Addrs(), "scfg", "scf", releaseEvery, rejectEvery)
	leader, _ := c.AwaitLeader("scf", 0)
	c.Node(leader).Stop()
	produceValues(t, c.Addrs(), "scf", total/2, total/2)
	accepted, maxDC := waitShareAccepted(t, total, rejectEvery, a, b)
	checkShareSemantics(t, total, releaseEvery, rejectEvery, accepted, maxDC)
}

// TestShareGroupConfigsAndTypes: group configs are validated, described
// with their source, and a share group's id is not a classic group's.
func TestShareGroupConfigsAndTypes(t *testing.T) {
	n := brokertest.Start(t, shareTestConfig)
	n.CreateTopic("st", 1, nil)
	cl := n.Client()
	setGroupConfigs(t, cl, "stg", "share.record.lock.duration.ms", "5000")

	bad := func(name, value string) {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, "stg"
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = name, kmsg.StringPtr(value)
		res.Configs = append(res.Configs, c)
		req.Resources = append(req.Resources, res)
		resp, err := req.RequestWith(gctx(t, 10*time.Second), cl)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.Resources[0].ErrorCode; code != kerr.InvalidConfig.Code {
			t.Errorf("%s=%s: error %v, want INVALID_CONFIG", name, value, kerr.ErrorForCode(code))
		}
	}
	bad("share.record.lock.duration.ms", "10")
	bad("share.auto.offset.reset", "sometimes")
	bad("share.delivery.count.limit", "100")
	bad("no.such.config", "1")

	dreq := kmsg.NewPtrDescribeConfigsRequest()
	dres := kmsg.NewDescribeConfigsRequestResource()
	dres.ResourceType, dres.ResourceName = kmsg.ConfigResourceTypeGroupConfig, "stg"
	dreq.Resources = append(dreq.Resources, dres)
	dresp, err := dreq.RequestWith(gctx(t, 10*time.Second), cl)
	if err != nil || dresp.Resources[0].ErrorCode != 0 {
		t.Fatalf("DescribeConfigs: %v %+v", err, dresp)
	}
	got := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
	for _, c := range dresp.Resources[0].Configs {
		got[c.Name] = c
	}
	if c := got["share.record.lock.duration.ms"]; c.Value == nil || *c.Value != "5000" || c.Source != kmsg.ConfigSourceGroupConfig {
		t.Errorf("share.record.lock.duration.ms = %+v, want 5000 from the group config", c)
	}
	if c := got["share.auto.offset.reset"]; c.Value == nil || *c.Value != "latest" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Errorf("share.auto.offset.reset = %+v, want the default latest", c)
	}

	// The lock duration is what ShareFetch reports.
	m := newShareMember(t, cl, "stg", "m1")
	asg := m.join("st")
	var id [16]byte
	for k := range asg {
		id = k
	}
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID = &m.group, &m.id
	req.MaxRecords = 10
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = id
	rt.Partitions = []kmsg.ShareFetchRequestTopicPartition{{Partition: 0, PartitionMaxBytes: 1 << 20}}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(gctx(t, 10*time.Second), cl.Broker(int(n.Cfg.NodeID)))
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("ShareFetch: %v %+v", err, resp)
	}
	if resp.AcquisitionLockTimeoutMillis != 5000 {
		t.Errorf("AcquisitionLockTimeoutMillis %d, want 5000", resp.AcquisitionLockTimeoutMillis)
	}
	// A request at an epoch the session is not at is refused.
	req.ShareSessionEpoch = 7
	resp, err = req.RequestWith(gctx(t, 10*time.Second), cl.Broker(int(n.Cfg.NodeID)))
	if err != nil || resp.ErrorCode != kerr.InvalidShareSessionEpoch.Code {
		t.Errorf("ShareFetch at a wrong epoch: %v, code %d, want INVALID_SHARE_SESSION_EPOCH", err, resp.ErrorCode)
	}

	// One type per group id.
	jreq := kmsg.NewPtrJoinGroupRequest()
	jreq.Group, jreq.ProtocolType, jreq.SessionTimeoutMillis, jreq.RebalanceTimeoutMillis = "stg", "consumer", 10000, 10000
	jreq.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	jresp, err := jreq.RequestWith(gctx(t, 10*time.Second), cl)
	if err != nil || jresp.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Errorf("JoinGroup on a share group: %v, code %d, want INCONSISTENT_GROUP_PROTOCOL", err, jresp.ErrorCode)
	}
	creq := kmsg.NewPtrOffsetCommitRequest()
	creq.Group = "stg"
	creq.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "st", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1}}}}
	cresp, err := creq.RequestWith(gctx(t, 10*time.Second), cl)
	if err != nil || cresp.Topics[0].Partitions[0].ErrorCode != kerr.GroupIDNotFound.Code {
		t.Errorf("OffsetCommit to a share group: %v %+v, want GROUP_ID_NOT_FOUND", err, cresp)
	}
	// share.version 0 turns share groups off, as Kafka.
	if code, msg := setFeature(t, n, "share.version", 0, 2); code != 0 {
		t.Fatalf("share.version 0: %v %s", kerr.ErrorForCode(code), msg)
	}
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.GroupID, hb.MemberID, hb.SubscribedTopicNames = "stg", "m9", []string{"st"}
	hresp, err := hb.RequestWith(gctx(t, 10*time.Second), cl)
	if err != nil || hresp.ErrorCode != kerr.UnsupportedVersion.Code {
		t.Errorf("ShareGroupHeartbeat with share.version 0: %v, code %d, want UNSUPPORTED_VERSION", err, hresp.ErrorCode)
	}
	if code, msg := setFeature(t, n, "share.version", 1, 1); code != 0 {
		t.Fatalf("share.version 1: %v %s", kerr.ErrorForCode(code), msg)
	}
	// A non-empty share group is not deleted.
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{"stg"}
	delResp, err := del.RequestWith(gctx(t, 10*time.Second), cl)
	if err != nil || delResp.Groups[0].ErrorCode != kerr.NonEmptyGroup.Code {
		t.Errorf("DeleteGroups of a share group with a member: %v %+v, want NON_EMPTY_GROUP", err, delResp)
	}
}
