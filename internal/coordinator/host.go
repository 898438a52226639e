// Package coordinator hosts this node's share of the group and
// transaction coordinators. The coordinator of group G is the Raft leader
// of __consumer_offsets partition p(G), and that of transactional id T the
// leader of __transaction_state partition p(T), as in Kafka. Every node
// builds both coordinators with all partitions unowned (NOT_COORDINATOR);
// a watcher loads a partition's state when this node comes to lead it and
// drops it when it stops (leadership.go); from the election until the load
// ends its keys answer COORDINATOR_LOAD_IN_PROGRESS, as Kafka's do. The
// internal topics are created through the controller at first need, and
// the creation answers once every partition has a leader (find.go);
// transaction markers go to each partition's leader (markers.go).
package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"

	"holdfast/internal/clock"
	"holdfast/internal/cluster"
	"holdfast/internal/group"
	"holdfast/internal/metadata"
	"holdfast/internal/replica"
	"holdfast/internal/share"
	"holdfast/internal/topicconfig"
	"holdfast/internal/txn"
)

// Config is the coordinators' configuration (Kafka's group.*, offsets.*
// and transaction.* broker configs).
type Config struct {
	NodeID int32
	Groups group.Config
	Txn    txn.Config
	// Share is share-group membership's config (group.share.*); Topic,
	// Partition and Now are filled in here.
	Share share.GroupsConfig
	// OffsetsTopicPartitions is offsets.topic.num.partitions (default
	// 50); an existing __consumer_offsets keeps its count.
	OffsetsTopicPartitions int32
	// OffsetsTopicSegmentBytes and TxnTopicSegmentBytes are
	// offsets.topic.segment.bytes and transaction.state.log.segment.bytes:
	// small, so that the active segment rolls and the cleaner gets to it.
	OffsetsTopicSegmentBytes int64
	TxnTopicSegmentBytes     int64
	Logger                   *slog.Logger
	// Clock drives the watchers' retries and awaitLeaders' polls (nil:
	// the wall clock).
	Clock clock.Clock
	// PlantStaleLoad plants a bug for the whole-node simulation's own
	// test (brokertest's sim_test.go): a partition this node stops
	// leading is not unloaded, so two nodes coordinate it. Never set it
	// anywhere else.
	PlantStaleLoad bool
}

// Host is this node's coordinators.
type Host struct {
	cfg      Config
	log      *slog.Logger
	meta     *metadata.Store
	node     *cluster.Node
	replicas *replica.Manager

	groups *group.Coordinator
	txn    *txn.Coordinator
	// shareState is the durable share-partition state, and shareGroups
	// share-group membership, of the groups this node coordinates: both
	// over __consumer_offsets' partitions, loaded with them.
	shareState  *share.Store
	shareGroups *share.Groups
	// ids hands out producer ids from blocks the controller committed to
	// this node (cluster/producerids.go).
	ids *txn.BlockAllocator
	// topicMu serializes this node's creations of the internal topics
	// (find.go).
	topicMu sync.Mutex
	stops   []func()
	clk     clock.Clock

	// loadMu guards loaded: per internal topic, the term in which each
	// partition is loaded here, 0 if not (Loaded).
	loadMu sync.Mutex
	loaded map[string][]uint64
}

// Start builds both coordinators over the internal topics' partitions on
// this node and starts watching their leadership.
func Start(cfg Config, meta *metadata.Store, node *cluster.Node, replicas *replica.Manager) *Host {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Host{cfg: cfg, log: cfg.Logger, meta: meta, node: node, replicas: replicas,
		clk: clock.OrReal(cfg.Clock), loaded: map[string][]uint64{}}
	h.ids = txn.NewBlockAllocator(node.ReserveProducerIDs)
	h.ids.SetFloor(node.ProducerIDFloor)

	n := h.partitions(metadata.OffsetsTopic, cfg.OffsetsTopicPartitions, 50)
	glogs := make([]group.Log, n)
	for i := range glogs {
		glogs[i] = internalLog{h: h, topic: metadata.OffsetsTopic, index: int32(i)}
	}
	h.groups = group.New(cfg.Groups, glogs, group.Options{
		Logger: h.log.With("component", "groups"),
		Clock:  h.clk,
		Partitions: func(topic string) int32 {
			if t, ok := meta.Topic(topic); ok {
				return t.Partitions
			}
			return -1
		},
		Unowned: true,
		Leading: h.leading(metadata.OffsetsTopic),
		Topic: func(name string) (group.TopicInfo, bool) {
			t, ok := meta.Topic(name)
			return group.TopicInfo{Name: t.Name, ID: t.ID, Partitions: t.Partitions}, ok
		},
		Topics: func() []group.TopicInfo {
			ts := meta.Topics()
			out := make([]group.TopicInfo, 0, len(ts))
			for _, t := range ts {
				out = append(out, group.TopicInfo{Name: t.Name, ID: t.ID, Partitions: t.Partitions})
			}
			return out
		},
	})
	// Kafka removes a deleted topic's committed offsets from every group
	// (GroupCoordinator.onPartitionsDeleted): this node, as it applies the
	// deletion, from the groups it coordinates.
	node.OnTopicDeleted(func(t metadata.Topic) { h.groups.TopicDeleted(t.Name) })
	slogs := make([]share.Log, n)
	for i := range slogs {
		slogs[i] = glogs[i]
	}
	nparts := int(n)
	partitionFor := func(g string) int32 { return group.PartitionFor(g, nparts) }
	h.shareState = share.NewStore(slogs, partitionFor, h.log.With("component", "share-state"))
	scfg := cfg.Share
	scfg.Partition = partitionFor
	scfg.Topic = func(name string) (share.TopicInfo, bool) {
		t, ok := meta.Topic(name)
		return share.TopicInfo{Name: t.Name, ID: t.ID, Partitions: t.Partitions}, ok
	}
	h.shareGroups = share.NewGroups(scfg)
	// One watcher loads a __consumer_offsets partition's groups and share
	// state together (share membership starts afresh on every load).
	h.watch(metadata.OffsetsTopic, n, func(p int32) {
		h.groups.LoadPartition(p)
		h.shareGroups.UnloadPartition(p)
		h.shareState.LoadPartition(p)
	}, func(p int32) {
		h.groups.UnloadPartition(p)
		h.shareGroups.UnloadPartition(p)
		h.shareState.UnloadPartition(p)
	})

	n = h.partitions(metadata.TransactionTopic, cfg.Txn.StatePartitions, txn.DefaultConfig().StatePartitions)
	tlogs := make([]txn.Log, n)
	for i := range tlogs {
		tlogs[i] = internalLog{h: h, topic: metadata.TransactionTopic, index: int32(i)}
	}
	h.txn = txn.New(cfg.Txn, tlogs, txn.Options{
		Logger:  h.log.With("component", "transactions"),
		NextID:  h.ids.Next,
		Markers: h.writeMarkersEverywhere,
		Unowned: true,
		Leading: h.leading(metadata.TransactionTopic),
		Clock:   h.clk,
	})
	h.watch(metadata.TransactionTopic, n, h.txn.LoadPartition, h.txn.UnloadPartition)
	return h
}

// partitions is the partition count of an internal topic: the existing
// topic's (placement depends on it), else configured, else def.
func (h *Host) partitions(topic string, configured, def int32) int32 {
	if t, ok := h.meta.Topic(topic); ok && t.Partitions > 0 {
		return t.Partitions
	}
	if configured > 0 {
		return configured
	}
	return def
}

// Close stops the watchers, then the coordinators.
func (h *Host) Close() error {
	for i := len(h.stops) - 1; i >= 0; i-- {
		h.stops[i]()
	}
	h.stops = nil
	h.ids.Close()
	return errors.Join(h.txn.Close(), h.groups.Close())
}

// Groups is the group coordinator.
func (h *Host) Groups() *group.Coordinator { return h.groups }

// ShareState is the durable share-partition state of the groups this
// node coordinates.
func (h *Host) ShareState() *share.Store { return h.shareState }

// ShareGroups is the share groups this node coordinates.
func (h *Host) ShareGroups() *share.Groups { return h.shareGroups }

// Txn is the transaction coordinator.
func (h *Host) Txn() *txn.Coordinator { return h.txn }

// NextProducerID hands out a producer id (InitProducerId).
func (h *Host) NextProducerID(ctx context.Context) (int64, error) { return h.ids.Next(ctx) }

// GroupsLoaded reports whether the group coordinator has replayed every
// __consumer_offsets partition this node leads (readiness; start-up
// replay measurements).
func (h *Host) GroupsLoaded() bool {
	for p := 0; p < h.groups.NumPartitions(); p++ {
		if lg := h.replicas.Get(metadata.OffsetsTopic, int32(p)); lg != nil && lg.IsLeader() && !h.groups.Loaded(int32(p)) {
			return false
		}
	}
	return true
}

// OffsetsPartition is the __consumer_offsets partition of group g, or -1
// while the topic does not exist.
func (h *Host) OffsetsPartition(g string) int32 {
	t, ok := h.meta.Topic(metadata.OffsetsTopic)
	if !ok || t.Partitions <= 0 {
		return -1
	}
	return group.PartitionFor(g, int(t.Partitions))
}

// internalConfigs are the topic configs an internal topic is created with.
func (h *Host) internalConfigs(topic string) map[string]string {
	if topic == metadata.OffsetsTopic {
		return topicconfig.Internal(h.cfg.OffsetsTopicSegmentBytes)
	}
	return topicconfig.Internal(h.cfg.TxnTopicSegmentBytes)
}

// noteLoads records that partition i of topic is loaded here in term
// (0: unloaded), for Loaded.
func (h *Host) noteLoads(topic string, i int32, term uint64) {
	h.loadMu.Lock()
	defer h.loadMu.Unlock()
	ts := h.loaded[topic]
	if int(i) >= len(ts) {
		ts = append(ts, make([]uint64, int(i)+1-len(ts))...)
		h.loaded[topic] = ts
	}
	ts[i] = term
}

// Loaded is, per partition of an internal topic, the Raft term in which
// this node's coordinator loaded it, 0 for one it does not coordinate:
// what the watcher acted on, for checks across nodes (at most one node
// coordinates a partition once leadership is quiet).
func (h *Host) Loaded(topic string) []uint64 {
	h.loadMu.Lock()
	defer h.loadMu.Unlock()
	return slices.Clone(h.loaded[topic])
}
