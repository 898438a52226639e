package broker

import (
	"path/filepath"

	"holdfast/internal/controller"
	"holdfast/internal/replica"
	"holdfast/internal/storage"
	"holdfast/internal/txn"
)

// startStorage opens the node's metadata and every partition it lists, and
// starts the retention loop. Closers run in reverse: retention stops first,
// then the partitions close (final fsyncs through the syncer), then the
// syncer.
func (b *Broker) startStorage() error {
	b.syncer = storage.NewSyncer(b.log)
	b.closers = append(b.closers, b.syncer.Close)

	meta, err := controller.Open(filepath.Join(b.cfg.DataDir, "meta"), b.cfg.FS, b.log, b.ident.ClusterID)
	if err != nil {
		return err
	}
	b.meta = meta
	if b.cluster.SingleNode() {
		if err := b.singleNodeAdopt(); err != nil {
			return err
		}
	}

	b.replicas = replica.New(replica.Config{
		NodeID: b.cfg.NodeID, DataDir: b.cfg.DataDir,
		DirectoryID: b.ident.DirectoryID.String(), BootstrapMember: b.ident.BootstrapMember(),
		LogDefaults: b.cfg.LogDefaults, RetentionCheckInterval: b.cfg.RetentionCheckInterval, Cleaner: b.cfg.LogCleaner,
		FS: b.cfg.FS, Logger: b.log,
	}, meta, b.cluster.Host(), b.syncer)
	b.closers = append(b.closers, b.replicas.Close)
	if err := b.replicas.OpenAll(); err != nil {
		return err
	}
	b.log.Info("storage open", "cluster_id", meta.ClusterID(), "topics", len(meta.Topics()), "dir", b.cfg.DataDir)
	return b.replicas.Start()
}

// singleNodeAdopt brings a single node's data directory from before a
// single node was a cluster of one onto the one path: its topics get this
// node as their only replica, and producer ids continue after the ones its
// local counter handed out. Its topics are marked PreRaft: their partition
// logs, whose batches carry no Raft term, become their groups' committed
// history (raft.GroupConfig.AdoptPreRaft).
func (b *Broker) singleNodeAdopt() error {
	// Where a single node counted producer ids before it was a cluster of
	// one.
	const producerIDsFile = "producer-ids"
	next := int64(0)
	path := filepath.Join(b.cfg.DataDir, producerIDsFile)
	ids, err := txn.OpenIDAllocator(b.cfg.FS, path)
	if err != nil {
		return err
	}
	next = ids.Limit()
	changed, err := b.meta.AdoptSingleNode(b.cfg.NodeID, b.ident.DirectoryID.String(), next)
	if err != nil {
		return err
	}
	if changed {
		b.log.Info("adopted a single node's metadata from before it was a one-voter cluster", "topics", len(b.meta.Topics()), "next_producer_id", next)
	}
	return nil
}
