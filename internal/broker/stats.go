package broker

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/raft"
	"holdfast/internal/share"
	"holdfast/internal/storage"
	"holdfast/internal/tiered"
)

// PartitionLog returns the log of a partition open on this node, nil if it
// is not (for tests and tools: what a replica holds, byte for byte).
func (b *Broker) PartitionLog(topic string, partition int32) *storage.Log {
	if p := b.replicas.Get(topic, partition); p != nil {
		return p.Log()
	}
	return nil
}

// PartitionStats is what the broker shows of one partition it holds: the
// offsets that say how much is written, committed and on disk, and its
// replication state as this node sees it.
type PartitionStats struct {
	Topic         string
	Partition     int32
	Internal      bool // __consumer_offsets, __transaction_state
	LogStart      int64
	LogEnd        int64
	HighWatermark int64
	Durable       int64 // every offset below is fsynced
	SizeBytes     int64 // bytes of record batches in the log's segments
	Segments      int

	Leader   int32 // -1: none known
	IsLeader bool  // this node leads it
	Epoch    int32
	Replicas int
	// ISR is the in-sync replicas the leader counts (meaningful where
	// IsLeader); MinISR the topic's min.insync.replicas.
	ISR    int
	MinISR int32
	// FollowerLag is, where this node leads, each other replica's
	// distance from the log end in records (its Raft match offset):
	// Kafka's follower-side FetcherLagMetrics ConsumerLag, seen from the
	// leader, which is where Holdfast knows it.
	FollowerLag []ReplicaLag
	// Remote is the partition's remote log and upload lag as this node
	// sees them, for a topic with remote storage on (nil otherwise):
	// DescribeLogDirs has no field for them (not in Kafka's schema, nor
	// in KIP-405), so they are in the metrics and the console.
	Remote *tiered.PartitionRemote
}

// ReplicaLag is one follower's lag behind its leader.
type ReplicaLag struct {
	Replica int32
	Records int64
}

// UnderReplicated is Kafka's UnderReplicatedPartitions test, for a
// partition this node leads: fewer in-sync replicas than replicas.
func (p PartitionStats) UnderReplicated() bool { return p.IsLeader && p.ISR < p.Replicas }

// UnderMinISR is Kafka's UnderMinIsrPartitionCount test: a led partition
// whose acks=all writes are refused with NOT_ENOUGH_REPLICAS.
func (p PartitionStats) UnderMinISR() bool { return p.IsLeader && int32(p.ISR) < p.MinISR }

// PartitionStats lists every partition this node holds.
func (b *Broker) PartitionStats() []PartitionStats {
	var out []PartitionStats
	for _, t := range b.meta.Topics() {
		minISR := b.topicMinInsyncReplicas(t)
		for i := int32(0); i < t.Partitions; i++ {
			p := b.replicas.Get(t.Name, i)
			if p == nil {
				continue
			}
			ps := PartitionStats{
				Topic: t.Name, Partition: i, Internal: t.Internal,
				LogStart: p.LogStartOffset(), LogEnd: p.LogEndOffset(),
				HighWatermark: p.HighWatermark(), Durable: p.DurableOffset(),
				SizeBytes: p.Log().Size(), Segments: p.Log().Segments(),
				MinISR: minISR, Leader: -1, Epoch: p.LeaderEpoch(),
			}
			mp := b.partitionMetadata(t, i)
			ps.Leader, ps.Replicas, ps.ISR = mp.Leader, len(mp.Replicas), len(mp.ISR)
			ps.IsLeader = p.IsLeader()
			if b.tiered != nil {
				if r, ok := b.tiered.Remote(p); ok {
					ps.Remote = &r
				}
			}
			if ps.IsLeader && ps.Replicas > 1 {
				if st, err := p.RaftStatus(); err == nil && st.State == raft.StateLeader {
					for _, r := range st.Replicas {
						if r.ID != st.Node {
							ps.FollowerLag = append(ps.FollowerLag, ReplicaLag{Replica: int32(r.ID), Records: max(ps.LogEnd-r.MatchOffset, 0)})
						}
					}
				}
			}
			out = append(out, ps)
		}
	}
	return out
}

// ClusterStats is the cluster-wide state this node reports: the
// controller's counts, as Kafka's KafkaController metrics.
type ClusterStats struct {
	NodeID            int32
	Controller        bool // this node is the active controller
	Brokers           int  // registered
	FencedBrokers     int
	Topics            int
	Partitions        int // of every topic, internal ones included
	OfflinePartitions int // controller only: partitions with no live leader
}

// ClusterStats reports the controller's view (counts are zero elsewhere,
// so summing them over nodes gives the cluster's).
func (b *Broker) ClusterStats() ClusterStats {
	cs := ClusterStats{NodeID: b.cfg.NodeID, Brokers: b.RegisteredBrokers()}
	topics := b.meta.Topics()
	cs.Controller = b.cluster.IsController()
	cs.FencedBrokers = len(b.meta.FencedBrokers())
	if !cs.Controller {
		return cs
	}
	for _, t := range topics {
		cs.Topics++
		cs.Partitions += int(t.Partitions)
		for i := int32(0); i < t.Partitions; i++ {
			mp := b.partitionMetadata(t, i)
			if mp.Leader < 0 || mp.ErrorCode == kerr.LeaderNotAvailable.Code || mp.ErrorCode == kerr.KafkaStorageError.Code {
				cs.OfflinePartitions++
			}
		}
	}
	return cs
}

// Summary is the start-up line's attributes: what this node holds, in a
// few numbers rather than a line per partition.
func (b *Broker) Summary() []any {
	var topics, parts, internal int
	for _, t := range b.meta.Topics() {
		if t.Internal {
			internal += int(t.Partitions)
			continue
		}
		topics++
		parts += int(t.Partitions)
	}
	return []any{"topics", topics, "partitions", parts, "internal_partitions", internal, "brokers", b.RegisteredBrokers(), "cluster_id", b.meta.ClusterID()}
}

// ReplicationEvents counts changes the stats loop saw (sampled every
// second, so a change undone within the second is not counted).
type ReplicationEvents struct {
	IsrShrinks, IsrExpands int64 // in-sync replica set of a led partition got smaller / larger
	LeaderElections        int64 // this node became leader of a partition
	Samples                int64 // sampling passes so far
}

// ReplicationEvents returns the counters.
func (b *Broker) ReplicationEvents() ReplicationEvents {
	s := &b.stats
	return ReplicationEvents{IsrShrinks: s.shrinks.Load(), IsrExpands: s.expands.Load(), LeaderElections: s.elections.Load(), Samples: s.samples.Load()}
}

// statsState is the stats loop's memory: the last ISR size and leader
// epoch of each partition this node led.
type statsState struct {
	shrinks, expands, elections atomic.Int64
	samples                     atomic.Int64
	mu                          sync.Mutex
	led                         map[topicPartition]*ledSample
	pass                        uint64 // sampling passes, for ledSample.seen
	// What the last pass saw of the whole node: while neither moved, a
	// pass would find what it found (every ledSample holds).
	allChanges, allMetaGen uint64
	buf                    []uint64 // scratch for replica.Manager.InSyncCount
}

// ledSample is what the last pass saw of a partition this node led.
type ledSample struct {
	epoch int32 // the leader epoch it led at
	isr   int   // in-sync replicas, as Metadata reports them
	seen  uint64
	// What isr was derived from: while neither the Raft group nor the
	// metadata changed (a quiesced group), it holds.
	raftChanges, metaGen uint64
}

const statsInterval = time.Second

func (b *Broker) startStats() error {
	stop := goLoop(func(stop <-chan struct{}) {
		tick := b.clk().NewTicker(statsInterval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				b.sampleReplication()
			}
		}
	})
	b.closers = append(b.closers, func() error { stop(); return nil })
	return nil
}

// sampleReplication counts ISR shrinks and expands of the partitions this
// node leads, and the partitions it newly leads. It walks the replicas open
// here and asks the Raft progress (replica.InSyncCount, not a Status with
// its copies) only of a leader whose group or the metadata changed since
// the last pass: on an idle node with many partitions, whose groups are
// quiesced, a pass reads a few counters per partition and allocates
// nothing but the list of replicas.
func (b *Broker) sampleReplication() {
	s := &b.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.led == nil {
		s.led = map[topicPartition]*ledSample{}
	}
	metaGen := b.meta.Generation()
	all := b.replicas.AllRaftChanges() // before reading what it covers
	if s.pass > 0 && all == s.allChanges && metaGen == s.allMetaGen {
		// No group changed, none came or went, the metadata is the same:
		// an idle node with 10,000 partitions walked them all each second
		// to find nothing.
		s.samples.Add(1)
		return
	}
	s.allChanges, s.allMetaGen = all, metaGen
	s.pass++
	for _, p := range b.replicas.Partitions() {
		if !p.IsLeader() {
			continue
		}
		k := topicPartition{p.Topic(), p.Index()}
		ls := s.led[k]
		epoch := p.LeaderEpoch()
		changes := b.replicas.RaftChanges(p) // before reading what it covers
		var n int
		if ls != nil && ls.raftChanges == changes && ls.metaGen == metaGen {
			n = ls.isr
		} else {
			n, s.buf = b.replicas.InSyncCount(p, s.buf)
		}
		switch {
		case ls == nil:
			s.elections.Add(1)
			s.led[k] = &ledSample{epoch: epoch, isr: n, seen: s.pass, raftChanges: changes, metaGen: metaGen}
			continue
		case ls.epoch != epoch:
			s.elections.Add(1)
			ls.epoch = epoch
		}
		switch {
		case n < ls.isr:
			s.shrinks.Add(1)
		case n > ls.isr:
			s.expands.Add(1)
		}
		ls.isr, ls.seen, ls.raftChanges, ls.metaGen = n, s.pass, changes, metaGen
	}
	s.samples.Add(1)
	for k, ls := range s.led {
		if ls.seen != s.pass {
			delete(s.led, k)
		}
	}
}

// FsyncLatency is the storage's fsync (or syncfs) durations.
func (b *Broker) FsyncLatency() storage.HistogramSnapshot { return b.syncer.Latency() }

// SegmentWrites is the bytes this broker's partition and metadata logs
// were written, with O_DIRECT and through the page cache.
func (b *Broker) SegmentWrites() storage.WriteStats { return b.syncer.SegmentWrites() }

// JournalStats counts the data journal's work (zero when it is off).
func (b *Broker) JournalStats() storage.JournalStats { return b.syncer.Journal().Stats() }

// ReadCacheStats is this broker's read cache's counters
// (log.direct.io.cache.bytes).
func (b *Broker) ReadCacheStats() storage.ReadCacheStats { return b.readCache.Stats() }

// GroupLag is a consumer group's position in one partition.
type GroupLag struct {
	Group     string
	Topic     string
	Partition int32
	Members   int
	Committed int64
	// Lag is the records between the committed offset and the high
	// watermark (what the group has yet to consume); -1 if the partition is
	// not open here.
	Lag int64
}

// GroupLags lists the committed offsets of every group this node
// coordinates, with their lag.
func (b *Broker) GroupLags() []GroupLag {
	if b.groups == nil {
		return nil
	}
	var out []GroupLag
	for _, o := range b.groups.CommittedOffsets() {
		gl := GroupLag{Group: o.Group, Topic: o.Topic, Partition: o.Partition, Members: o.Members, Committed: o.Offset, Lag: -1}
		if p := b.replicas.Get(o.Topic, o.Partition); p != nil {
			gl.Lag = max(p.HighWatermark()-o.Offset, 0)
		}
		out = append(out, gl)
	}
	return out
}

// TopicName is the name of the topic with this id (Fetch v13+ names topics
// by id only).
func (b *Broker) TopicName(id [16]byte) (string, bool) {
	t, ok := b.meta.TopicByID(id)
	return t.Name, ok
}

// ReplicationStats is this node's view of its Raft groups.
type ReplicationStats struct {
	Groups       int   // Raft groups on this node (partition replicas and the metadata group)
	FailedGroups int   // groups stopped by a failure, not yet repaired (repair.go)
	Repairs      int64 // replicas discarded after a storage failure and reopened to catch up
	// RepairsDeferred: repairs of replicas failed for a full disk put
	// off until it has room.
	RepairsDeferred int64
	Corruptions     int64 // corrupt data found in this node's logs (each replica is rebuilt)
	Scrubbed        int64 // bytes the scrubber checked (log.scrub.bytes.per.second)
}

// RaftActivity counts this node's Raft groups that are quiesced and those
// that still tick, by role (raft.Host.Activity).
func (b *Broker) RaftActivity() raft.Activity { return b.cluster.Host().Activity() }

// RaftTransportStats reports the Raft transport's counters, refused
// connections by reason among them.
func (b *Broker) RaftTransportStats() raft.TransportStats { return b.cluster.Host().TransportStats() }

// ReplicationStats reports this node's Raft groups.
func (b *Broker) ReplicationStats() ReplicationStats {
	out := ReplicationStats{Repairs: b.replicas.Repairs(), RepairsDeferred: b.replicas.RepairsDeferred(), Corruptions: b.replicas.Corruptions(), Scrubbed: b.replicas.ScrubbedBytes()}
	for _, g := range b.cluster.Host().Groups() {
		out.Groups++
		if st, err := b.cluster.Host().Status(g); err == nil && st.Failed != "" {
			out.FailedGroups++
		}
	}
	return out
}

// KickCleaner makes idle log cleaner threads look for work now (tests).
func (b *Broker) KickCleaner() { b.replicas.KickCleaner() }

// CleanerStats returns the log cleaner's figures.
func (b *Broker) CleanerStats() CleanerStats { return b.replicas.CleanerStats() }

// ShareStats reports this node's share partitions and sessions (KIP-932).
func (b *Broker) ShareStats() share.Stats {
	if b.share == nil {
		return share.Stats{}
	}
	return b.share.Stats()
}

// RaftGroupFailures is how many of this node's Raft groups failed since it
// started (raft.Host.Failures: a storage error, or an entry that cannot be
// stored); a replica's repair brings them back, so tests that must see none
// ask this.
func (b *Broker) RaftGroupFailures() uint64 { return b.cluster.Host().Failures() }
