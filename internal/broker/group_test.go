package broker_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
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
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	waitFor(t, 20*time.Second, fmt.Sprintf("%s stable with %d members", group, members), func() bool {
		g = describe(t, n, group)
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
		cs = append(cs, startConsumer(t, n, groupOpts("g-share", "share")...))
	}
	waitStable(t, n, "g-share", 3, 6)
	const total = 600
	produceN(t, n, "share", 0, total)
	waitFor(t, 30*time.Second, "all records consumed", func() bool {
		s := 0
		for _, c := range cs {
			s += c.count()
		}
		return s >= total
	})
	time.Sleep(300 * time.Millisecond) // a duplicate would show up by now
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

var _ = kerr.UnknownMemberID
var _ = kmsg.NewPtrJoinGroupRequest
