package broker

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"time"

	"holdfast/internal/controller"
	"holdfast/internal/partition"
	"holdfast/internal/storage"
	"holdfast/internal/topicconfig"
	"holdfast/internal/txn"
)

func init() { onStart(rankStorage, "storage", (*Broker).startStorage) }

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
	if b.singleNode() {
		if err := b.singleNodeAdopt(); err != nil {
			return err
		}
	}

	b.parts = partition.NewManager(b.cfg.DataDir, storage.Options{FS: b.cfg.FS, Syncer: b.syncer, Logger: b.log})
	b.closers = append(b.closers, b.parts.Close)

	// Finish deletions a crash interrupted before opening anything, so no
	// deleted data is ever served again.
	for _, d := range meta.Deleting() {
		if err := b.finishPendingDelete(d.Name); err != nil {
			return err
		}
	}
	for _, t := range meta.Topics() {
		if err := b.openPartitions(t, 0); err != nil {
			return err
		}
	}
	b.log.Info("storage open", "cluster_id", meta.ClusterID(), "topics", len(meta.Topics()), "dir", b.cfg.DataDir)

	stop := goLoop(b.retentionLoop)
	b.closers = append(b.closers, func() error { stop(); return nil })
	return nil
}

// retentionLoop applies retention.ms / retention.bytes to every open log
// every log.retention.check.interval.ms, as Kafka's log manager does.
func (b *Broker) retentionLoop(stop <-chan struct{}) {
	every := b.cfg.RetentionCheckInterval
	if every <= 0 {
		every = 5 * time.Minute
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			b.enforceRetention()
		}
	}
}

// enforceRetention runs one retention pass over every open partition of
// every topic whose cleanup.policy includes delete. A compact-only topic
// (__consumer_offsets) keeps its segments whatever their age: the log
// cleaner (cleaner.go) keeps it to the latest record per key instead.
func (b *Broker) enforceRetention() {
	for _, t := range b.meta.Topics() {
		if !cleanupDeletes(topicconfig.Value(b.cfg.LogDefaults, t.Configs, "cleanup.policy")) {
			continue
		}
		for i := int32(0); i < t.Partitions; i++ {
			p := b.parts.Get(t.Name, i)
			if p == nil {
				continue
			}
			b.replicatedRetention(t.Name, p, partitionGroup(t.ID, i))
		}
	}
}

// cleanupDeletes reports whether a cleanup.policy list includes delete.
func cleanupDeletes(policy string) bool {
	for _, p := range strings.Split(policy, ",") {
		if strings.TrimSpace(p) == "delete" {
			return true
		}
	}
	return false
}

// replicatedRetention is retention on a Raft log: only the leader decides,
// from its own segments and clock, and replicates the new log start
// (cluster_compact.go); followers never cut their logs by themselves.
func (b *Broker) replicatedRetention(topic string, p *partition.Partition, group uint64) {
	if !b.leadsGroup(group) {
		return
	}
	point, err := p.Log().RetentionPoint()
	if err != nil {
		if !errors.Is(err, storage.ErrClosed) {
			b.log.Warn("retention", "topic", topic, "partition", p.Index(), "err", err)
		}
		return
	}
	// Only committed offsets may be compacted away.
	commit, err := b.cluster.host.CommitOffset(group)
	if err != nil {
		return
	}
	point = min(point, commit)
	if point <= p.LogStartOffset() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.replicateLogStart(ctx, p, group, point); err != nil {
		b.log.Warn("retention", "topic", topic, "partition", p.Index(), "offset", point, "err", err)
		return
	}
	b.log.Info("retention moved the log start", "topic", topic, "partition", p.Index(), "log_start_offset", p.LogStartOffset())
}

// singleNodeAdopt brings a single node's data directory from before a
// single node was a cluster of one onto the one path: its topics get this
// node as their only replica, and producer ids continue after the ones its
// local counter handed out. Its topics are marked PreRaft: their partition
// logs, whose batches carry no Raft term, become their groups' committed
// history (raft.GroupConfig.AdoptPreRaft).
func (b *Broker) singleNodeAdopt() error {
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
