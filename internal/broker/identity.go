package broker

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/controller"
	"holdfast/internal/datadir"
	"holdfast/internal/raft"
)

// A node's identity lives in its data directory (internal/datadir): the
// cluster it belongs to, its node id, and the id of this incarnation of the
// directory. A single node makes its cluster at once. A node of a cluster
// with a new directory learns its cluster from its peers (joinCluster): the
// metadata voters form a new cluster only when all of them are up with new
// directories; otherwise the node joins the cluster a peer has, and unless
// its directory is one the cluster was formed with it is a replaced disk —
// every Raft group it opens starts by catching up, without voting (rejoin).

func init() { onStart(rankStorage-10, "identity", (*Broker).startIdentity) }

func (b *Broker) startIdentity() error {
	id, err := datadir.Open(b.cfg.FS, b.cfg.DataDir, b.cfg.NodeID)
	if err != nil {
		return err
	}
	if !id.Formatted() && len(b.cfg.Peers) == 0 {
		// A single node: its own cluster (the one its metadata already
		// names, for a directory from before identities).
		cid, err := controller.StoredClusterID(filepath.Join(b.cfg.DataDir, "meta"), b.cfg.FS)
		if err != nil {
			return err
		}
		if cid == "" {
			cid = datadir.NewUUID().String()
		}
		id.ClusterID = cid
		if err := datadir.Write(b.cfg.FS, b.cfg.DataDir, id); err != nil {
			return err
		}
	}
	b.ident = id
	b.log.Info("data directory", "dir", b.cfg.DataDir, "node", id.NodeID, "directory_id", id.DirectoryID.String(), "cluster_id", id.ClusterID)
	return nil
}

// raftIdentity is what the Raft transport tells peers about this node.
func (b *Broker) raftIdentity() raft.NodeIdentity {
	out := raft.NodeIdentity{Directory: b.ident.DirectoryID}
	if u, err := datadir.ParseUUID(b.ident.ClusterID); err == nil {
		out.Cluster = u
	}
	if len(b.ident.Bootstrap) > 0 {
		out.Bootstrap = map[uint64][16]byte{}
		for n, d := range b.ident.Bootstrap {
			out.Bootstrap[uint64(n)] = d
		}
	}
	return out
}

// joinCluster gives a node of a cluster whose directory has no cluster yet
// its cluster, waiting as long as it takes (logging why every few seconds).
func (b *Broker) joinCluster(h *raft.Host) error {
	if b.ident.Formatted() {
		return nil
	}
	voters := slices.Sorted(maps.Keys(b.cfg.Peers))
	var last time.Time
	var deadline time.Time
	if b.cfg.JoinTimeout > 0 {
		deadline = time.Now().Add(b.cfg.JoinTimeout)
	}
	for {
		var id datadir.Identity
		var ok bool
		var why string
		if b.brokerOnly() {
			id, ok, why = b.joinThroughBrokers()
		} else {
			heard := map[int32]datadir.Peer{}
			for n, pi := range h.PeerIdentities() {
				if time.Since(pi.Seen) > 10*time.Second {
					continue
				}
				p := datadir.Peer{DirectoryID: pi.Directory}
				if pi.Cluster != ([16]byte{}) {
					p.ClusterID = datadir.UUID(pi.Cluster).String()
				}
				for v, d := range pi.Bootstrap {
					if p.Bootstrap == nil {
						p.Bootstrap = map[int32]datadir.UUID{}
					}
					p.Bootstrap[int32(v)] = d
				}
				heard[int32(n)] = p
			}
			id, ok, why = datadir.Join(b.ident, voters, heard)
		}
		if ok {
			if err := datadir.Write(b.cfg.FS, b.cfg.DataDir, id); err != nil {
				return err
			}
			b.ident = id
			h.SetIdentity(b.raftIdentity())
			if id.BootstrapMember() {
				b.log.Info("formed the cluster", "cluster_id", id.ClusterID, "voters", datadir.FormatVoters(id.Bootstrap))
			} else {
				b.log.Warn("joined the cluster with a new data directory: every replica catches up before it votes",
					"cluster_id", id.ClusterID, "directory_id", id.DirectoryID.String())
			}
			return nil
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return fmt.Errorf("no cluster to form or join within %v: %s", b.cfg.JoinTimeout, why)
		}
		if time.Since(last) > 5*time.Second {
			b.log.Warn("waiting to form or join the cluster", "why", why)
			last = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// joinThroughBrokers asks the --join brokers which cluster they are: a
// broker-only node never forms a cluster.
func (b *Broker) joinThroughBrokers() (datadir.Identity, bool, string) {
	cl, err := b.nodeClient(b.cfg.Join, kgo.DialTimeout(2*time.Second))
	if err != nil {
		return b.ident, false, err.Error()
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return b.ident, false, fmt.Sprintf("asking --join brokers %v for the cluster: %v", b.cfg.Join, err)
	}
	if md.ClusterID == nil || *md.ClusterID == "" {
		return b.ident, false, "the --join brokers have no cluster id yet"
	}
	id := b.ident
	id.ClusterID, id.Bootstrap = *md.ClusterID, nil
	return id, true, ""
}

// replicaRejoins reports whether this node's replica of partition p of t
// must catch up before it votes: the partition was assigned to another
// directory of this node (a replaced disk) or, with no record, this
// directory did not form the cluster.
func (b *Broker) replicaRejoins(t controller.Topic, p int32) bool {
	rec := t.ReplicaDir(p, b.cfg.NodeID)
	if rec == "" {
		return !b.ident.BootstrapMember()
	}
	return rec != b.ident.DirectoryID.String()
}
