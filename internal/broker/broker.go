// Package broker turns Kafka requests into responses. Each API lives in its
// own file (produce.go, fetch.go, ...) and registers its handler and served
// versions in an init function; this file holds the Broker, the dispatch and
// the shared helpers.
package broker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/clock"
	"holdfast/internal/cluster"
	"holdfast/internal/coordinator"
	"holdfast/internal/datadir"
	"holdfast/internal/group"
	"holdfast/internal/metadata"
	"holdfast/internal/quota"
	"holdfast/internal/raft"
	"holdfast/internal/replica"
	"holdfast/internal/share"
	"holdfast/internal/storage"
	"holdfast/internal/tiered"
	"holdfast/internal/txn"
	"holdfast/internal/wire"
)

// The log cleaner's config and figures (internal/replica), named here
// with the rest of the broker's config.
type (
	CleanerConfig    = replica.CleanerConfig
	CleanerStats     = replica.CleanerStats
	CleanerPartition = replica.CleanerPartition
)

// DefaultCleanerConfig is Kafka's log.cleaner.* defaults.
func DefaultCleanerConfig() CleanerConfig { return replica.DefaultCleanerConfig() }

// Config is the broker's configuration. Kafka's broker config names are in
// the comments; cmd/holdfast maps flags and HOLDFAST_* variables onto it.
type Config struct {
	NodeID         int32  // node.id
	DataDir        string // log.dirs
	AdvertisedHost string // advertised.listeners host
	AdvertisedPort int32  // advertised.listeners port
	Rack           string // broker.rack
	// FetchSessionSlots is max.incremental.fetch.session.cache.slots:
	// how many fetch sessions this broker keeps (default 1,000; 0: none).
	FetchSessionSlots int
	// ReplicaSelector is replica.selector.class: "" (consumers read from
	// the leader, Kafka's default) or RackAwareReplicaSelector, which sends
	// a consumer with client.rack to an in-sync replica in its rack
	// (KIP-392, replicaselector.go).
	ReplicaSelector string
	// ConfigOrigins says where each static setting was set, by every
	// broker config name it sets (--retention is log.retention.ms,
	// log.retention.minutes and log.retention.hours): DescribeConfigs
	// reports those as STATIC_BROKER_CONFIG, with the origin as the
	// synonym, and every other one (all of them, for a broker built in
	// process) as DEFAULT_CONFIG.
	ConfigOrigins map[string]ConfigOrigin

	AutoCreateTopics       bool  // auto.create.topics.enable (default true)
	NumPartitions          int32 // num.partitions (default 1)
	OffsetsTopicPartitions int32 // offsets.topic.num.partitions (default 50)

	// Groups is the group coordinator's config (group.* and offsets.*).
	Groups group.Config
	// Txn is the transaction coordinator's config (transaction.*).
	Txn txn.Config
	// Share is the share groups' config (group.share.*, KIP-932).
	Share ShareConfig

	// RetentionCheckInterval is log.retention.check.interval.ms (default 5
	// minutes): how often retention runs over every log (state.go).
	RetentionCheckInterval time.Duration

	// MetadataSnapshot says when the metadata is snapshotted
	// (metadata.log.max.record.bytes.between.snapshots,
	// metadata.log.max.snapshot.interval.ms): between snapshots the
	// metadata Raft log is the record, and a restart replays at most
	// this much of it (internal/metadata/snapshot.go).
	MetadataSnapshot metadata.SnapshotPolicy

	// LogDefaults are the topic config defaults (log.segment.bytes,
	// log.retention.ms, message.max.bytes, log.flush policy ...).
	LogDefaults storage.Config
	// LogCleaner is the log cleaner's config (log.cleaner.*, cleaner.go);
	// the zero value means DefaultCleanerConfig.
	LogCleaner CleanerConfig
	// LogScrubBytesPerSecond is log.scrub.bytes.per.second: how fast the
	// background scrubber reads logs to check their CRCs
	// (replica/scrub.go); 0: off (Kafka has no scrubber).
	LogScrubBytesPerSecond int64
	// StartupSyncOpens: a node with more replicas than this listens
	// before they are open and opens them in the background
	// (replica.Config.StartupOpenSync; 0: 1,000; -1: always).
	StartupSyncOpens int
	// LogNoReadChecks is log.verify.reads=false: partition logs hand
	// bytes to consumers and followers without checking their CRCs first
	// (Kafka's behaviour: a corrupt replica keeps serving the bad batch,
	// which every client refuses). The default checks them once.
	LogNoReadChecks bool
	// OffsetsTopicSegmentBytes and TxnTopicSegmentBytes are
	// offsets.topic.segment.bytes and transaction.state.log.segment.bytes
	// (100 MiB): the segment size the internal topics are created with,
	// small so that their active segment rolls and the cleaner gets to
	// them.
	OffsetsTopicSegmentBytes int64
	TxnTopicSegmentBytes     int64

	// The cluster (cluster.go); all zero on a single node, a cluster of
	// one. Peers maps every node id (this one included) to its Raft
	// address.
	Peers      map[int32]string
	RaftListen string // default: this node's entry in Peers
	// A node whose id is not in Peers is a broker-only node: Peers is the
	// controller quorum (metadata voters), RaftListen is required (and
	// advertised to the others in its registration), and Join lists Kafka
	// addresses of running brokers to register through.
	Join []string
	// JoinTimeout bounds how long a node with a new data directory waits
	// to form or join its cluster (identity.go); 0 waits as long as it
	// takes, as a replaced node whose up-to-date peers are down must.
	JoinTimeout time.Duration
	// DefaultReplicationFactor is default.replication.factor: 0 means 1
	// on a single node, min(3, nodes) in a cluster.
	DefaultReplicationFactor int16
	// Leadership (cluster/leaders.go). AutoLeaderRebalance is
	// auto.leader.rebalance.enable (default true): every
	// LeaderImbalanceCheckInterval (leader.imbalance.check.interval.seconds,
	// default 300 s) a node hands partitions back to their preferred
	// replica when that broker's share of partitions it does not lead
	// exceeds LeaderImbalancePerBrokerPct
	// (leader.imbalance.per.broker.percentage, default 10).
	AutoLeaderRebalance          bool
	LeaderImbalanceCheckInterval time.Duration
	LeaderImbalancePerBrokerPct  int
	// ControlledShutdown is controlled.shutdown.enable (default true):
	// Close first moves every leadership this node holds to a caught-up
	// replica, waiting at most ControlledShutdownMaxWait (default 5 s).
	ControlledShutdown        bool
	ControlledShutdownMaxWait time.Duration
	// BrokerHeartbeatInterval (broker.heartbeat.interval.ms, default 2 s)
	// is how often a broker heartbeats the controller; the controller
	// fences a broker it has not heard from for BrokerSessionTimeout
	// (broker.session.timeout.ms, default 9 s). Zero means the default.
	BrokerHeartbeatInterval time.Duration
	BrokerSessionTimeout    time.Duration
	// ReplicaLagMax is replica.lag.time.max.ms (default 30 s): a follower
	// not caught up to its leader's log end for this long leaves the ISR
	// (raft.Config.ReplicaLagMax). Zero means the default.
	ReplicaLagMax time.Duration
	// MetadataStartupHold bounds how long a Metadata answer naming no
	// leader for some partition waits for one in the first moments after
	// the node started (cluster.Node.StartupHold); zero means the default
	// (1 s, an election timeout). Tests raise it so that what they assert
	// does not depend on how fast a loaded machine elects.
	MetadataStartupHold time.Duration

	// Quotas are the client quotas' windows (quota.window.num,
	// quota.window.size.seconds, controller.quota.*); the zero value is
	// Kafka's defaults. The quotas themselves are in the metadata.
	Quotas quota.Config

	// Security is listeners, authorization and this node's credentials
	// (security.go); the zero value is the unsecured single listener.
	Security SecurityConfig

	Logger *slog.Logger
	FS     storage.FS // nil: the OS filesystem (with DirectIO: storage.OSFSDirectIO), with MaxOpenFiles
	// MaxOpenFiles (log.max.open.files) bounds the descriptors of data
	// files (segments, indexes, checkpoints) held open at once when FS is
	// nil: idle files are closed and reopened on use (storage.CachedFS),
	// and the descriptors left stay for connections. 0: no bound.
	// `holdfast serve` derives it from the open-file limit
	// (DescriptorBudget).
	MaxOpenFiles int
	// (The node's own files - Raft journal, metadata log and snapshots -
	// are outside the budget: few, and needed to keep the node running.)
	// MaxBrokerPartitions (max.broker.partitions) refuses a CreateTopics
	// or CreatePartitions that would give a broker more partition
	// replicas (POLICY_VIOLATION). 0: no limit (the default, as Kafka's).
	MaxBrokerPartitions int
	// MemoryLimit sets Go's soft memory limit for the process
	// (runtime/debug.SetMemoryLimit, memlimit.go): MemoryLimitDerived
	// derives it from the replicas this node holds and follows them; a
	// positive value is that many bytes; 0 leaves the process's limit
	// alone (tests, embedders: the limit is process-wide). `holdfast
	// serve` derives it unless told otherwise or GOMEMLIMIT is set.
	MemoryLimit int64
	// DirectIO (log.direct.io): partition logs write a sync cycle's large
	// write-outs with O_DIRECT, past the page cache (docs/storage.md).
	DirectIO bool
	// LogJournal (log.journal.enable): the node's data journal
	// (storage/datajournal.go): one write and one fdatasync per sync cycle
	// for the logs whose new bytes are all buffered; segments written
	// behind. Off by default. Whatever it says, a journal an earlier run
	// left is replayed at start-up, before any log opens.
	LogJournal bool
	// RaftSoloPath (raft.solo.path.enable): a group whose only member is
	// this node (every partition of an RF=1 topic, all of a single node's)
	// takes proposed batches without etcd raft's per-entry work, committing
	// each once its sync cycle made it durable (internal/raft/solo.go).
	RaftSoloPath bool
	// DirectIOCacheBytes (log.direct.io.cache.bytes): with DirectIO, the
	// process's read cache of newly written segment bytes (0: the default,
	// storage.DefaultReadCacheBytes; negative: none).
	DirectIOCacheBytes int64
	// Tiered is tiered storage (remote.log.storage.*, internal/tiered);
	// off unless Tiered.Enabled, as in Kafka.
	Tiered tiered.Config
	// RaftFaults, when set, is the Raft transport's fault seam (cut or
	// delay links between nodes): for in-process clusters in tests and
	// `holdfast lab`. nil: none.
	RaftFaults *raft.Faults
	// RaftNetwork, when set, carries the Raft traffic between in-process
	// nodes in memory instead of TCP (raft.MemNetwork): for the whole-node
	// simulation and tests. nil: TCP.
	RaftNetwork *raft.MemNetwork
	// Dialer, when set, connects this node's own Kafka clients to the
	// other nodes (heartbeats to the controller, forwarded requests)
	// instead of TCP: in-process clusters on an in-memory network
	// (brokertest.PipeNet). Not with TLS inter-broker listeners. nil: TCP.
	Dialer func(ctx context.Context, network, host string) (net.Conn, error)
	// Clock drives the control plane's periodic loops (cluster, replica,
	// coordinator, txn, share, tiered and the broker's own:
	// internal/clock); nil: the wall clock.
	Clock clock.Clock
	// RaftClock drives the Raft host's tick, heartbeats and waits; nil:
	// the wall clock (not Clock: faking the control plane's time leaves
	// Raft electing leaders). The simulation may set both to one clock.
	RaftClock clock.Clock
	// RaftTickInterval is the Raft tick (0: 100 ms): for in-process
	// clusters in tests that wait for elections. Not a Kafka setting.
	RaftTickInterval time.Duration
	// PlantStaleCoordinator plants a bug for the whole-node simulation's
	// own test (coordinator.Config.PlantStaleLoad). Tests only.
	PlantStaleCoordinator bool
	// PlantFencedLeader plants another (cluster.Config.PlantFencedLeader:
	// a broker fenced for shutdown keeps its leaderships). Tests only.
	PlantFencedLeader bool
	// PlacementRand, if set, replaces math/rand where replicas are placed
	// (cluster.Config.PlacementRand): the seeded simulation. nil: random.
	PlacementRand func(n int) int
}

// DefaultScrubBytesPerSecond is log.scrub.bytes.per.second's default: a
// terabyte of logs is checked in about three days, at a small fraction of
// a disk's bandwidth.
const DefaultScrubBytesPerSecond = 4 << 20

// DefaultConfig is what `holdfast serve` runs with no flags.
func DefaultConfig() Config {
	return Config{
		NodeID:                   1,
		DataDir:                  "./data",
		AdvertisedHost:           "localhost",
		AdvertisedPort:           9092,
		AutoCreateTopics:         true,
		NumPartitions:            1,
		FetchSessionSlots:        DefaultFetchSessionSlots,
		OffsetsTopicPartitions:   50,
		Groups:                   group.DefaultConfig(),
		Txn:                      txn.DefaultConfig(),
		Share:                    DefaultShareConfig(),
		RetentionCheckInterval:   5 * time.Minute,
		MetadataSnapshot:         metadata.DefaultSnapshotPolicy,
		LogDefaults:              storage.DefaultConfig(),
		LogCleaner:               DefaultCleanerConfig(),
		LogScrubBytesPerSecond:   DefaultScrubBytesPerSecond,
		OffsetsTopicSegmentBytes: 100 << 20,
		// Tests run with the journal on where this is set (README).
		LogJournal: os.Getenv("HOLDFAST_TEST_LOG_JOURNAL") == "1",
		// On (round 18: 0.66-0.83x the CPU per record at 1,000
		// partitions, docs/benchmarks.md); tests run with it off where
		// HOLDFAST_TEST_RAFT_SOLO=0.
		RaftSoloPath:            os.Getenv("HOLDFAST_TEST_RAFT_SOLO") != "0",
		TxnTopicSegmentBytes:    100 << 20,
		BrokerHeartbeatInterval: cluster.DefaultHeartbeatInterval,
		BrokerSessionTimeout:    cluster.DefaultSessionTimeout,

		AutoLeaderRebalance:          true,
		LeaderImbalanceCheckInterval: 300 * time.Second,
		LeaderImbalancePerBrokerPct:  10,
		ControlledShutdown:           true,
		ControlledShutdownMaxWait:    5 * time.Second,
	}
}

// Broker serves the Kafka APIs of one node.
type Broker struct {
	cfg    Config
	dataFS storage.FS       // the partitions' files: cfg.FS, or with the MaxOpenFiles budget
	ident  datadir.Identity // identity.go
	log    *slog.Logger
	syncer *storage.Syncer
	// readCache: this broker's read cache of direct-I/O writes
	// (storage/readcache.go, log.direct.io.cache.bytes).
	readCache *storage.ReadCache
	// memLimit follows the replicas held with the process's memory limit
	// (Config.MemoryLimit derived); nil otherwise.
	memLimit *memoryLimit
	meta     *metadata.Store
	// replicas are this node's partition replicas (internal/replica).
	replicas *replica.Manager
	// coord hosts this node's group and transaction coordinators;
	// groups is coord.Groups(), which most group handlers use.
	coord  *coordinator.Host
	groups *group.Coordinator
	// share is this node's share partitions (as partition leader) and
	// share sessions (KIP-932, sharefetch.go).
	share *share.Manager
	// cluster is this node's membership and the controller's behaviour
	// (internal/cluster), on a single node too (a cluster of one).
	cluster *cluster.Node
	// tiered is tiered storage (tiered.go); nil when it is off.
	tiered  *tiered.Manager
	alterMu sync.Mutex // serializes IncrementalAlterConfigs' read-modify-write
	// fetchSessions are the consumers' KIP-227 fetch sessions.
	fetchSessions fetchSessions
	// quotas measures clients against the client quotas (quotas.go).
	quotas *quota.Manager
	// nodeAddrs are the other nodes' addresses, exempt from the per-IP
	// connection limits on the inter-broker listener (connquota.go).
	nodeAddrs nodeAddrs

	// stats counts replication events for metrics (stats.go).
	stats statsState
	// leaderISR: what other nodes report as the ISR of the partitions
	// they lead, for this node's Metadata answers (leaderisr.go).
	leaderISR leaderISRCache

	// closers run in reverse order on Close; each subsystem that New starts
	// registers its own.
	closers []func() error
}

// handlerFunc serves one API. It runs on the connection's reader goroutine
// in request order: it does what must be ordered and returns a Reply for the
// rest (see wire.Handler).
type handlerFunc func(b *Broker, ctx context.Context, req *wire.Request) wire.Reply

type api struct {
	min, max int16
	fn       handlerFunc
	// internal: a node-to-node API, served and advertised only on the
	// inter-broker listener, and answered only to nodes (security.go).
	internal bool
}

// apis is the handlers table (handlers.go) by key, for Versions and Handle.
var apis = map[int16]api{}

// register serves h.key at versions h.min..h.max with h.fn; the table's
// init calls it for each row. It panics on what would otherwise be found by
// a client: a key served twice, or a version kmsg cannot encode.
func register(h handler) {
	key := h.key.Int16()
	if _, dup := apis[key]; dup {
		panic(fmt.Sprintf("broker: %s registered twice", kmsg.NameForKey(key)))
	}
	if req := kmsg.RequestForKey(key); req == nil || h.max > req.MaxVersion() {
		panic(fmt.Sprintf("broker: %s v%d is beyond what kmsg encodes", kmsg.NameForKey(key), h.max))
	}
	apis[key] = api{min: h.min, max: h.max, fn: h.fn, internal: h.who == nodes}
}

// Versions implements wire.Handler: what listener l serves (nil: the
// default listener, which is also the inter-broker one).
func (b *Broker) Versions(l *wire.Listener, key int16) (min, max int16, ok bool) {
	a, ok := apis[key]
	if ok && a.internal && l != nil && !l.Internal {
		return 0, 0, false
	}
	return a.min, a.max, ok
}

// Handle implements wire.Handler.
func (b *Broker) Handle(ctx context.Context, req *wire.Request) wire.Reply {
	a, ok := apis[req.Key]
	if !ok { // wire only passes keys that Versions reports
		panic("broker: unregistered key reached Handle")
	}
	if a.internal && !b.fromNode(req) {
		b.log.Warn("node-to-node request refused: not from a node", "api", kmsg.NameForKey(req.Key),
			"principal", req.Principal.String(), "host", requestHost(req), "client_id", req.ClientID)
		return wire.Respond(internalDenied(req.Body))
	}
	if !a.internal && b.quotas.Enabled() {
		return b.withQuotas(ctx, a.fn, req)
	}
	return a.fn(b, ctx, req)
}

// goLoop runs loop in its own goroutine until the returned stop is called;
// stop returns once loop has. Background work (retention, leadership
// watches) is started this way so Close never leaves one running.
func goLoop(loop func(stop <-chan struct{})) (stop func()) {
	stopCh, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		loop(stopCh)
	}()
	return func() {
		close(stopCh)
		<-done
	}
}
