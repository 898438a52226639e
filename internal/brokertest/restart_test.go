package brokertest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/wire"
)

// metadataCount counts the Metadata requests a franz-go client sends.
type metadataCount struct{ n atomic.Int64 }

func (m *metadataCount) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.Metadata) && err == nil {
		m.n.Add(1)
	}
}

// TestClusterRestartMetadataNamesLeaders: after the whole cluster stops as
// `holdfast serve` stops it (every broker fences itself first) and starts
// again, the first Metadata a client sends to each node once it serves
// names a leader for every partition and lists every broker. Before, every
// broker restarted fenced and stayed so until its first heartbeat an
// interval (2 s) later, and the Raft groups were still electing: every
// partition answered LEADER_NOT_AVAILABLE, and franz-go then waited out
// its 5 s metadata min age before asking again. A franz-go producer with
// default settings then acknowledges a record in every partition; its
// time and Metadata requests are logged, never asserted. The nodes' hold
// (MetadataStartupHold) is raised far above any election on a loaded
// machine, and the test's own client waits for it, so what is asserted
// does not depend on timing.
func TestClusterRestartMetadataNamesLeaders(t *testing.T) {
	const parts = 30
	c := NewCluster(t, 3, func(cfg *broker.Config, _ *wire.Limits) {
		cfg.MetadataStartupHold = time.Minute
	})
	c.CreateTopic("restart", parts, 3, nil)
	produceAll := func(what string) (time.Duration, int64) {
		t.Helper()
		var mc metadataCount
		cl := c.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.WithHooks(&mc))
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var recs []*kgo.Record
		for p := range int32(parts) {
			recs = append(recs, &kgo.Record{Topic: "restart", Partition: p, Value: []byte(what + strconv.Itoa(int(p)))})
		}
		start := time.Now()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return time.Since(start), mc.n.Load()
	}
	produceAll("a")

	// Stop as serve does on SIGTERM: fence, then close.
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = n.B.FenceForShutdown(ctx) // the last ones may find no quorum
		})
	}
	wg.Wait()
	for _, n := range c.Nodes {
		n.Stop()
	}
	startTogether(t, c.Nodes)

	// Every node serves now: its first answer names the leaders.
	for _, n := range c.Nodes {
		md, err := firstMetadata(n, "restart")
		if err != nil {
			t.Fatalf("node %d: %v", n.Cfg.NodeID, err)
		}
		if len(md.Brokers) != len(c.Nodes) {
			t.Errorf("node %d: Metadata lists %d brokers, want %d (the others still fenced)", n.Cfg.NodeID, len(md.Brokers), len(c.Nodes))
		}
		if len(md.Topics) != 1 || len(md.Topics[0].Partitions) != parts {
			t.Fatalf("node %d: Metadata of the topic: %+v", n.Cfg.NodeID, md.Topics)
		}
		bad := 0
		var first error
		for _, mp := range md.Topics[0].Partitions {
			if mp.ErrorCode != 0 || mp.Leader < 0 {
				bad++
				if first == nil {
					first = fmt.Errorf("partition %d: leader %d, %v", mp.Partition, mp.Leader, kerr.ErrorForCode(mp.ErrorCode))
				}
			}
		}
		if bad > 0 {
			t.Errorf("node %d: the first Metadata after the restart has %d of %d partitions without a leader (%v)", n.Cfg.NodeID, bad, parts, first)
		}
	}
	took, mds := produceAll("b")
	t.Logf("after the whole-cluster restart: a record in each of %d partitions acknowledged in %v with %d Metadata requests", parts, took, mds)
}

// firstMetadata asks n alone for topic's metadata, with a client that
// waits for an answer held up to the node's MetadataStartupHold.
func firstMetadata(n *Node, topic string) (*kmsg.MetadataResponse, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr), kgo.RequestTimeoutOverhead(2*time.Minute))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return req.RequestWith(ctx, cl.SeedBrokers()[0])
}
