package brokertest_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

// TestClusterControlledShutdownHints: a node that stops hands its
// leaderships over while its listener still answers (Broker.HandOver,
// which serve runs before it closes the listeners, as Node.Stop does
// here): a produce sent to it then is answered NOT_LEADER_OR_FOLLOWER
// naming the new leader and its endpoint (KIP-951), so the client moves
// without asking Metadata first. An idempotent producer writing through
// the stops loses and duplicates nothing; its worst latency across a
// plain stop of the leader is logged (docs/faults.md), not asserted.
func TestClusterControlledShutdownHints(t *testing.T) {
	c := brokertest.NewCluster(t, 3, func(cfg *broker.Config, _ *wire.Limits) {
		cfg.ControlledShutdown = true
	})
	const topic = "handover"
	createLedBy(t, c, topic, 1)
	// franz-go's default MetadataMinAge (5 s): a client that must ask
	// Metadata after a NOT_LEADER_OR_FOLLOWER without a hint may wait that.
	cl := c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic), kgo.RetryTimeout(60*time.Second))
	produce(t, cl, 0, 10)

	// A producer that keeps writing, one record at a time, through the
	// stops.
	var (
		mu    sync.Mutex
		next  = 10
		worst time.Duration
		perr  error
	)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			i := next
			mu.Unlock()
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}).FirstErr()
			cancel()
			mu.Lock()
			if err != nil {
				perr = err
				mu.Unlock()
				return
			}
			next, worst = i+1, max(worst, time.Since(start))
			mu.Unlock()
		}
	}()
	waitNext := func(n int) {
		brokertest.Await(t, fmt.Sprintf("the producer past %d", n), func() error {
			mu.Lock()
			defer mu.Unlock()
			if perr != nil {
				t.Fatalf("produce: %v", perr)
			}
			if next < n {
				return fmt.Errorf("at %d", next)
			}
			return nil
		})
	}
	waitNext(30)

	n1 := c.Node(1)
	n1.B.HandOver()
	newLeader, _ := c.AwaitLeader(topic, 0, 1)
	pa := rawProduce(n1, topic, 10*time.Second, "sent-after-the-handover")
	if pa.err != nil {
		t.Fatal(pa.err)
	}
	if pa.code != kerr.NotLeaderForPartition.Code || pa.leader != newLeader || !pa.endpoint {
		t.Fatalf("the stopping node answered %v naming leader %d (endpoint %v), want NOT_LEADER_OR_FOLLOWER naming %d with its endpoint",
			kerr.ErrorForCode(pa.code), pa.leader, pa.endpoint, newLeader)
	}
	n1.Stop()
	n1.Start()
	c.AwaitInSync(topic, 0)

	// A plain stop of the leader now: how long the producer waits.
	mu.Lock()
	at := next
	worst = 0
	mu.Unlock()
	waitNext(at + 10)
	leader, _ := c.AwaitLeader(topic, 0)
	c.Node(leader).Stop()
	mu.Lock()
	at = next
	mu.Unlock()
	waitNext(at + 20)
	close(stop)
	<-done
	t.Logf("node %d led %s/0 and stopped (controlled shutdown); the producer's worst latency across the stop: %v", leader, topic, worst)
	c.Node(leader).Start()
	c.AwaitInSync(topic, 0)
	for _, n := range c.Nodes {
		brokertest.Await(t, fmt.Sprintf("node %d's log to hold every acknowledged record once", n.Cfg.NodeID), func() error {
			return holdsExactly(n, topic, next)
		})
	}
}
