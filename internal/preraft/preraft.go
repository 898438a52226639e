// Package preraft adopts a single node's data directory written before a
// single node ran as a one-voter cluster (issue 28), onto the one path.
// It is the index of that adoption: the steps are here or name the hook
// they need in a lower package, and all of it goes at once, in
// Holdfast RemovedIn.
//
// A pre-Raft directory has no identity file (holdfast.format), a
// metadata snapshot (meta/cluster.json) whose topics name no replicas, a
// producer-ids file, and partition logs whose batches carry leader epoch
// 0 (no Raft term). On its first start as a single node:
//
//  1. ClusterID: the node keeps the cluster id its old metadata names
//     (cluster/identity.go calls it before writing the identity).
//  2. AdoptMetadata: its topics get this node as their only replica and
//     are marked metadata.Topic.PreRaft; producer ids continue after the
//     old counter (metadata.Store.AdoptSingleNode, snapshotted at once:
//     the metadata log never held these topics). The broker calls it in
//     its start-up, after the metadata is open.
//  3. Each PreRaft partition opens with raft.GroupConfig.AdoptPreRaft
//     (passed down by replica/manager.go and partition/replica.go): its
//     group, with no Raft state yet, takes the log as its committed
//     history (raft/host.go adoptLog) instead of refusing it.
//
// Removal (in RemovedIn): delete this package and the hooks it names
// (metadata.StoredClusterID, Store.AdoptSingleNode, Topic.PreRaft,
// raft.GroupConfig.AdoptPreRaft and adoptLog, partition.Replication's
// AdoptPreRaft), and have datadir.Open refuse a directory without an
// identity that holds meta/cluster.json with ErrLegacy, as it refuses the
// format before Kafka-exact offsets. A user upgrades through the last
// release before it.
package preraft

import (
	"log/slog"
	"path/filepath"

	"holdfast/internal/metadata"
	"holdfast/internal/storage"
	"holdfast/internal/txn"
)

// RemovedIn is the release that removes the adoption of pre-Raft data
// directories.
const RemovedIn = "1.0"

// ClusterID returns the cluster id the metadata of a pre-Raft single
// node's data directory names, "" if there is none (a new directory).
func ClusterID(fs storage.FS, dataDir string) (string, error) {
	return metadata.StoredClusterID(filepath.Join(dataDir, "meta"), fs)
}

// producerIDsFile is where a single node counted producer ids before it
// was a cluster of one.
const producerIDsFile = "producer-ids"

// AdoptMetadata turns a pre-Raft single node's metadata into a one-voter
// cluster's (step 2 above): node, in directory dirID, becomes the only
// replica of every topic that names none, and producer ids continue after
// the ones its local counter handed out. Nothing changes on a directory
// adopted before or never pre-Raft.
func AdoptMetadata(meta *metadata.Store, fs storage.FS, dataDir string, node int32, dirID string, log *slog.Logger) error {
	ids, err := txn.OpenIDAllocator(fs, filepath.Join(dataDir, producerIDsFile))
	if err != nil {
		return err
	}
	next := ids.Limit()
	changed, err := meta.AdoptSingleNode(node, dirID, next)
	if err != nil {
		return err
	}
	if changed {
		log.Info("adopted a single node's metadata from before it was a one-voter cluster", "topics", len(meta.Topics()), "next_producer_id", next,
			"removed_in", RemovedIn)
	}
	return nil
}
