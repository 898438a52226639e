package broker

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// The in-sync set of a partition is known only to its leader: it sees its
// followers' progress (replica.State). A follower, or a node without a
// replica, used to answer Metadata with every live (unfenced) replica, so
// the ISR depended on the node asked (issue 26): a replica whose log
// failed on a live node, or a follower cut from the leader but not from
// the controller, was "in sync" everywhere but on the leader.
//
// Kafka's ISR is in the metadata log (the leader proposes each change with
// AlterPartition). Here it is not; instead a node that answers for a
// partition it does not lead asks the leader: Metadata's and
// DescribeTopicPartitions' answers take the ISR from a cache of what each
// leader reported about its own partitions, filled by one Metadata request
// per leader (batched: every topic wanted from that leader) at most every
// leaderISRRefresh, and only for partitions clients asked about. An entry
// is used only while it names the leader and leader epoch this node sees
// and is younger than leaderISRFresh; otherwise the answer is the live
// replicas, as before. So every node's answer is the leader's, at most
// about a second old, and no metadata-log traffic is added. Requests from
// other nodes (the cache's own) are answered without it, so that filling
// one node's cache never makes another node ask.

const (
	leaderISRRefresh = 500 * time.Millisecond
	leaderISRFresh   = 5 * time.Second
	leaderISRTimeout = 2 * time.Second
	// leaderISRMax bounds the cache: past it, entries are dropped
	// (oldest not tracked; the whole map is cleared) and asked again.
	leaderISRMax = 200_000
)

type leaderISRKey struct {
	topic [16]byte
	part  int32
}

type leaderISREntry struct {
	leader, epoch int32
	isr           []int32
	at            time.Time
}

type leaderISRCache struct {
	mu      sync.Mutex
	entries map[leaderISRKey]leaderISREntry
	// want: per leader node, the topics (by name) to ask it about.
	want map[int32]map[string]bool
	wake chan struct{}
}

// lookup returns the ISR the leader last reported for partition i of
// t, if it is fresh and for the leader and epoch given; otherwise it asks
// for a refresh and returns false.
func (c *leaderISRCache) lookup(t metadata.Topic, i, leader, epoch int32) ([]int32, bool) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[leaderISRKey{t.ID, i}]
	if ok && e.leader == leader && e.epoch == epoch && now.Sub(e.at) < leaderISRRefresh {
		return e.isr, true
	}
	if c.want == nil {
		c.want = map[int32]map[string]bool{}
	}
	if c.want[leader] == nil {
		c.want[leader] = map[string]bool{}
	}
	c.want[leader][t.Name] = true
	select {
	case c.wake <- struct{}{}:
	default:
	}
	if ok && e.leader == leader && e.epoch == epoch && now.Sub(e.at) < leaderISRFresh {
		return e.isr, true // being refreshed; still the leader's view
	}
	return nil, false
}

// answerPartition is partitionMetadata for a client's Metadata or
// DescribeTopicPartitions: where another node leads, the ISR is the one
// that leader reports (above).
func (b *Broker) answerPartition(r *wire.Request, t metadata.Topic, i int32) kmsg.MetadataResponseTopicPartition {
	mp := b.partitionMetadata(t, i)
	if b.leaderISR.wake == nil || mp.ErrorCode != 0 || mp.Leader < 0 || mp.Leader == b.cfg.NodeID || b.forwardedBy(r) {
		return mp
	}
	isr, ok := b.leaderISR.lookup(t, i, mp.Leader, mp.LeaderEpoch)
	if !ok {
		return mp
	}
	out := make([]int32, 0, len(isr))
	for _, id := range isr {
		// Offline here (fenced, or this node's own failed replica) is
		// never in sync, whatever the last report said.
		if slices.Contains(mp.Replicas, id) && !slices.Contains(mp.OfflineReplicas, id) {
			out = append(out, id)
		}
	}
	mp.ISR = out
	return mp
}

// startLeaderISR runs the cache's refresh loop.
func (b *Broker) startLeaderISR() error {
	b.leaderISR.wake = make(chan struct{}, 1)
	stop := goLoop(func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			case <-b.leaderISR.wake:
			}
			b.refreshLeaderISR()
			select { // at most one round per leaderISRRefresh
			case <-stop:
				return
			case <-b.clk().After(leaderISRRefresh):
			}
		}
	})
	b.closers = append(b.closers, func() error { stop(); return nil })
	return nil
}

// refreshLeaderISR asks each leader with wanted topics, in parallel, and
// keeps what it reports about the partitions it leads.
func (b *Broker) refreshLeaderISR() {
	c := &b.leaderISR
	c.mu.Lock()
	want := c.want
	c.want = nil
	c.mu.Unlock()
	var wg sync.WaitGroup
	for leader, topics := range want {
		wg.Go(func() {
			req := kmsg.NewPtrMetadataRequest()
			for name := range topics {
				rt := kmsg.NewMetadataRequestTopic()
				rt.Topic = kmsg.StringPtr(name)
				req.Topics = append(req.Topics, rt)
			}
			ctx, cancel := context.WithTimeout(context.Background(), leaderISRTimeout)
			kresp, err := b.cluster.Send(ctx, leader, req)
			cancel()
			if err != nil {
				return // asked again at the next answer that wants it
			}
			resp := kresp.(*kmsg.MetadataResponse)
			now := time.Now()
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.entries == nil || len(c.entries) > leaderISRMax {
				c.entries = map[leaderISRKey]leaderISREntry{}
			}
			for _, rt := range resp.Topics {
				if rt.ErrorCode != 0 {
					continue
				}
				for _, p := range rt.Partitions {
					if p.ErrorCode != 0 || p.Leader != leader || rt.TopicID == ([16]byte{}) {
						continue // only a leader's view of its own partitions
					}
					isr := slices.Clone(p.ISR)
					slices.Sort(isr)
					c.entries[leaderISRKey{rt.TopicID, p.Partition}] = leaderISREntry{leader: leader, epoch: p.LeaderEpoch, isr: isr, at: now}
				}
			}
		})
	}
	wg.Wait()
}
