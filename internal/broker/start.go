package broker

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"holdfast/internal/cluster"
	"holdfast/internal/coordinator"
	"holdfast/internal/metadata"
	"holdfast/internal/preraft"
	"holdfast/internal/quota"
	"holdfast/internal/raft"
	"holdfast/internal/replica"
	"holdfast/internal/share"
	"holdfast/internal/storage"
)

// The broker's start-up sequence (New) and its steps; Close undoes them
// newest first.

// New opens (or creates) the node's state under cfg.DataDir and starts it,
// in this order (Close undoes it in reverse):
//
//  1. checkSecurity: listener defaults, and can this node reach the others;
//  2. lockDataDir: one process per data directory;
//  3. openCluster: the Raft host and this node's identity (cluster.Open);
//  4. startStorage: the syncer, the metadata store (its snapshot, then the
//     metadata log's committed entries after it: cluster.OpenMetadata),
//     every replica;
//  5. cluster.Start: follow the metadata log, register, the controller's
//     loops (a single node is registered when it returns; a node with a new
//     data directory has caught up with the metadata log); then tiered
//     storage's task, when it is on (tiered.go);
//  6. startSecurity: ACLs into the authorizer, bootstrap SCRAM users;
//  7. startCoordinators: the group and transaction coordinators;
//  8. cluster.StartBalancing: preferred-leader balance;
//  9. startStats: the metrics' periodic figures; startLeaderISR: the
//     leaders' in-sync sets for Metadata (leaderisr.go).
func New(cfg Config) (*Broker, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// The partitions' data files hold descriptors through a bounded cache
	// (MaxOpenFiles: the idle ones are closed and reopened on use,
	// storage/fdcache.go); the node's own files (Raft journal, metadata
	// log and snapshots) do not: they are few, and a full cache must not
	// stop the node's Raft.
	dataFS := cfg.FS
	if cfg.FS == nil {
		cfg.FS = storage.OSFSBudget(cfg.DirectIO, 0)
		dataFS = storage.CachedFS(cfg.FS, cfg.MaxOpenFiles)
	}
	// This broker's own read cache (two brokers in one process share
	// none); it holds anything only with direct I/O.
	cacheBytes := int64(storage.DefaultReadCacheBytes)
	if cfg.DirectIO && cfg.DirectIOCacheBytes != 0 {
		cacheBytes = max(cfg.DirectIOCacheBytes, 0)
	}
	if len(cfg.Peers) == 0 {
		// A single node is a cluster of one: its only voter, with no Raft
		// port (nobody to talk to), on exactly the replicated path.
		cfg.Peers = map[int32]string{cfg.NodeID: ""}
	}
	if err := checkReplicaSelector(cfg.ReplicaSelector); err != nil {
		return nil, err
	}
	b := &Broker{cfg: cfg, log: cfg.Logger, quotas: quota.New(cfg.Quotas), dataFS: dataFS, readCache: storage.NewReadCache(cacheBytes)}
	b.fetchSessions.init(cfg.FetchSessionSlots)
	held := int64(0)
	if cfg.DirectIO {
		held = cacheBytes // the read cache fills to its budget and stays
	}
	b.startMemoryLimit(held)
	steps := []struct {
		name string
		fn   func() error
	}{
		{"security config", b.checkSecurity},
		{"data directory lock", b.lockDataDir},
		{"cluster", b.openCluster},
		{"storage", b.startStorage},
		{"cluster metadata", b.startClusterMeta},
		{"tiered storage", b.startTiered},
		{"security", b.startSecurity},
		{"coordinators", b.startCoordinators},
		{"leadership", b.startLeadership},
		{"stats", b.startStats},
		{"leaders' ISR", b.startLeaderISR},
		{"connection gate", b.startConnectionGate},
	}
	for _, s := range steps {
		if err := s.fn(); err != nil {
			b.Close()
			return nil, fmt.Errorf("starting %s: %w", s.name, err)
		}
	}
	return b, nil
}

// openCluster starts the Raft host and takes this node's identity from
// its data directory (or the cluster it forms or joins).
func (b *Broker) openCluster() error {
	sc := b.cfg.Security
	var rtls *raft.TransportTLS
	if sc.RaftTLS {
		// Mutual TLS with this node's certificate: a node without one
		// from the cluster's CA cannot take part (checkSecurity made sure
		// both stores are there), and a peer speaks only for the node its
		// certificate names.
		rtls = &raft.TransportTLS{Server: sc.NodeTLS.MutualServerConfig(), Client: sc.NodeTLS.ClientConfig, NodeOf: sc.RaftMapper.CertNode}
	}
	c := b.cfg
	node, err := cluster.Open(cluster.Config{
		NodeID: c.NodeID, DataDir: c.DataDir, Peers: c.Peers, RaftListen: c.RaftListen,
		Join: c.Join, JoinTimeout: c.JoinTimeout, DefaultReplicationFactor: c.DefaultReplicationFactor,
		MaxBrokerPartitions: c.MaxBrokerPartitions,
		AutoLeaderRebalance: c.AutoLeaderRebalance, LeaderImbalanceCheckInterval: c.LeaderImbalanceCheckInterval,
		LeaderImbalancePerBrokerPct: c.LeaderImbalancePerBrokerPct,
		ControlledShutdown:          c.ControlledShutdown, ControlledShutdownMaxWait: c.ControlledShutdownMaxWait,
		PlantFencedLeader: c.PlantFencedLeader, PlacementRand: c.PlacementRand,
		BrokerHeartbeatInterval: c.BrokerHeartbeatInterval, BrokerSessionTimeout: c.BrokerSessionTimeout,
		StartupHold: c.MetadataStartupHold, ReplicaLagMax: c.ReplicaLagMax, RaftSoloPath: c.RaftSoloPath,
		Self: b.selfInfo(), InterBrokerListener: sc.InterBrokerListener,
		RaftTLS: rtls, RaftFaults: c.RaftFaults, RaftNetwork: c.RaftNetwork, Dial: b.nodeClient, OnSecurityChange: b.securityApplied,
		OnQuotaChange: b.quotasApplied,
		FS:            c.FS, Logger: b.log, Clock: c.Clock, RaftClock: c.RaftClock, RaftTickInterval: c.RaftTickInterval, ReadCache: b.readCache,
	})
	if err != nil {
		return err
	}
	b.cluster, b.ident = node, node.Identity()
	b.closers = append(b.closers, node.Close) // idempotent
	return nil
}

// startClusterMeta follows the metadata log (cluster.Node.Start). A single
// node is registered when it returns; its bootstrap SCRAM users are then
// committed before anyone can try them.
func (b *Broker) startClusterMeta() error {
	if err := b.cluster.Start(b.meta, b.replicas, b.syncer); err != nil {
		return err
	}
	b.quotasApplied() // what was committed before this start
	if b.cluster.SingleNode() && len(b.cfg.Security.BootstrapScram) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.bootstrapScram(ctx); err != nil {
			return fmt.Errorf("creating the bootstrap SCRAM users: %w", err)
		}
	}
	return nil
}

// startLeadership starts preferred-leader balancing; on Close, first of
// all, the node hands its leaderships over (controlled shutdown) while the
// coordinators and metadata loops still run.
func (b *Broker) startLeadership() error {
	b.cluster.StartBalancing()
	b.closers = append(b.closers, func() error { b.cluster.HandOver(); return nil })
	return nil
}

// HandOver moves this node's leaderships to caught-up replicas
// (controlled shutdown, when on) and stops preferred-leader balancing. A
// stop calls it before it closes the Kafka listeners and connections, so
// that what the clients have in flight here, and what they send next, is
// answered NOT_LEADER_OR_FOLLOWER naming the new leader (KIP-951) and
// they move at once; with the connections closed first, they waited for
// a metadata refresh instead (issue 26: a SIGTERM rolling restart cost as
// much as kill -9). Close runs it again, finding nothing left to move.
func (b *Broker) HandOver() { b.cluster.HandOver() }

// FenceForShutdown asks the controller to fence this broker before it
// stops (see cluster.Node.FenceForShutdown).
func (b *Broker) FenceForShutdown(ctx context.Context) error { return b.cluster.FenceForShutdown(ctx) }

// FencedBrokers are the brokers this node's metadata has fenced so far.
func (b *Broker) FencedBrokers() []int32 { return b.meta.FencedBrokers() }

// Close stops every subsystem, newest first.
func (b *Broker) Close() error {
	var first error
	for i := len(b.closers) - 1; i >= 0; i-- {
		if err := b.closers[i](); err != nil && first == nil {
			first = err
		}
	}
	b.closers = nil
	return first
}

// Config returns the configuration the broker runs with.
func (b *Broker) Config() Config { return b.cfg }

// startStorage opens the node's metadata and every partition it lists, and
// starts the retention loop. Closers run in reverse: the replicas'
// background work stops first, then the cluster node and its Raft host,
// then the partitions close (final fsyncs through the syncer), then the
// syncer.
func (b *Broker) startStorage() error {
	b.syncer = storage.NewSyncer(b.log)
	b.closers = append(b.closers, b.syncer.Close)
	// The data journal is replayed before any log under the data
	// directory opens (the metadata log included); off, it is replayed
	// and removed.
	j, err := storage.OpenDataJournal(b.cfg.DataDir, storage.JournalOptions{FS: b.cfg.FS, Logger: b.log, Disabled: !b.cfg.LogJournal})
	if err != nil {
		return fmt.Errorf("data journal: %w", err)
	}
	if j != nil {
		b.syncer.SetJournal(j)
		// Runs after the logs closed (closers run newest first): a clean
		// stop leaves nothing to replay.
		b.closers = append(b.closers, j.Close)
	}

	meta, err := metadata.Open(filepath.Join(b.cfg.DataDir, "meta"), b.cfg.FS, b.log, b.ident.ClusterID)
	if err != nil {
		return err
	}
	b.meta = meta
	meta.SetSnapshotPolicy(b.cfg.MetadataSnapshot)
	meta.SetClock(b.cfg.Clock)
	// Runs after the cluster node stopped applying (closers run newest
	// first): a last snapshot, so a clean restart replays nothing.
	b.closers = append(b.closers, meta.Close)
	// The snapshot plus the metadata log's committed entries after it,
	// before the replicas open what the metadata lists.
	if err := b.cluster.OpenMetadata(meta, b.syncer); err != nil {
		return err
	}
	if b.cluster.SingleNode() {
		// A data directory from before a single node was a cluster of
		// one (internal/preraft, removed in preraft.RemovedIn).
		if err := preraft.AdoptMetadata(meta, b.cfg.FS, b.cfg.DataDir, b.cfg.NodeID, b.ident.DirectoryID.String(), b.log); err != nil {
			return err
		}
	}

	b.replicas = replica.New(replica.Config{
		NodeID: b.cfg.NodeID, DataDir: b.cfg.DataDir,
		DirectoryID: b.ident.DirectoryID.String(), BootstrapMember: b.ident.BootstrapMember(),
		LogDefaults: b.cfg.LogDefaults, RetentionCheckInterval: b.cfg.RetentionCheckInterval, Cleaner: b.cfg.LogCleaner,
		ScrubBytesPerSecond: b.cfg.LogScrubBytesPerSecond, NoReadChecks: b.cfg.LogNoReadChecks, ReadCache: b.readCache,
		RemoteStorage: b.cfg.Tiered.Enabled, FS: b.dataFS, Logger: b.log, Clock: b.cfg.Clock,
		StartupOpenSync: b.cfg.StartupSyncOpens,
		OnReplicas:      b.memLimit.setReplicasFunc(), OnHeld: b.memLimit.holdFunc(),
	}, meta, b.cluster.Host(), b.syncer)
	b.closers = append(b.closers, b.replicas.Close)
	// Runs just before the logs close (closers run newest first): the
	// replicas' background work stops, then the cluster node with its Raft
	// host, so no group writes to a closed log. Node.Close is idempotent.
	b.closers = append(b.closers, func() error {
		b.replicas.StopBackground()
		return b.cluster.Close()
	})
	if err := b.replicas.OpenAll(); err != nil {
		return err
	}
	b.log.Info("storage open", "cluster_id", meta.ClusterID(), "topics", len(meta.Topics()), "dir", b.cfg.DataDir)
	return b.replicas.Start()
}

// The data directory is locked for the broker's lifetime (flock on
// <data-dir>/.lock, as Kafka does): two processes writing one log corrupt
// it, so a second one refuses to start and names the holder. First of all
// start-up steps, before anything under the directory is read.

func (b *Broker) lockDataDir() error {
	if !storage.IsOS(b.cfg.FS) {
		return nil // a test filesystem: nothing another process could share
	}
	l, err := storage.LockDir(b.cfg.DataDir)
	if err != nil {
		return err
	}
	b.closers = append(b.closers, l.Unlock)
	return nil
}

// startCoordinators starts this node's group and transaction coordinators
// (internal/coordinator). Their partitions load as this node comes to lead
// them; until then their groups answer NOT_COORDINATOR or
// COORDINATOR_LOAD_IN_PROGRESS, which clients retry. Transactional appends
// are verified with the coordinator before they reach a partition
// (txnverify.go); the partition's own check refuses the rest.
func (b *Broker) startCoordinators() error {
	b.replicas.SetVerifier(verifyTxnCluster)
	n := b.cfg.OffsetsTopicPartitions
	b.cfg.Share.defaults()
	b.coord = coordinator.Start(coordinator.Config{
		NodeID: b.cfg.NodeID, Groups: b.cfg.Groups, Txn: b.cfg.Txn, OffsetsTopicPartitions: n,
		Share: share.GroupsConfig{
			SessionTimeout: b.cfg.Share.SessionTimeout, HeartbeatInterval: b.cfg.Share.HeartbeatInterval,
			MaxSize: b.cfg.Share.MaxSize,
		},
		OffsetsTopicSegmentBytes: b.cfg.OffsetsTopicSegmentBytes, TxnTopicSegmentBytes: b.cfg.TxnTopicSegmentBytes,
		Logger: b.log, Clock: b.cfg.Clock, PlantStaleLoad: b.cfg.PlantStaleCoordinator,
	}, b.meta, b.cluster, b.replicas)
	b.groups = b.coord.Groups()
	b.closers = append(b.closers, b.coord.Close)
	b.share = share.NewManager(share.ManagerConfig{
		Persister:   sharePersister{b},
		Settings:    b.shareSettings,
		MaxSessions: b.cfg.Share.MaxShareSessions,
		Logger:      b.log.With("component", "share"),
		Clock:       b.cfg.Clock,
	})
	b.closers = append(b.closers, func() error { b.share.Close(); return nil })
	return nil
}
