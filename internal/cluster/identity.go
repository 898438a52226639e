package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/datadir"
	"holdfast/internal/preraft"
	"holdfast/internal/raft"
	"holdfast/internal/storage"
)

// A node's identity lives in its data directory (internal/datadir): the
// cluster it belongs to, its node id, and the id of this incarnation of the
// directory. A single node makes its cluster at once. A node of a cluster
// with a new directory learns its cluster from its peers (joinCluster): the
// metadata voters form a new cluster only when all of them are up with new
// directories; otherwise the node joins the cluster a peer has, and unless
// its directory is one the cluster was formed with it is a replaced disk —
// every Raft group it opens starts by catching up, without voting (rejoin).

// openIdentity reads the data directory's identity; a single node with a
// new directory makes its own cluster at once.
func (n *Node) openIdentity() error {
	id, err := datadir.Open(n.cfg.FS, n.cfg.DataDir, n.cfg.NodeID)
	if err != nil {
		return err
	}
	if !id.Formatted() && n.SingleNode() {
		// A single node: its own cluster (the one its metadata already
		// names, for a directory from before identities: internal/preraft),
		// formed with this directory.
		cid, err := preraft.ClusterID(n.cfg.FS, n.cfg.DataDir)
		if err != nil {
			return err
		}
		if cid == "" {
			cid = datadir.NewUUID().String()
		}
		id.ClusterID = cid
		id.Bootstrap = map[int32]datadir.UUID{id.NodeID: id.DirectoryID}
		if err := datadir.Write(n.cfg.FS, n.cfg.DataDir, id); err != nil {
			return err
		}
	}
	n.ident = id
	n.log.Info("data directory", "dir", n.cfg.DataDir, "node", id.NodeID, "directory_id", id.DirectoryID.String(), "cluster_id", id.ClusterID)
	return nil
}

// SingleNode reports whether this node is its cluster's only voter with no
// peers: `holdfast serve` without --peers.
func (n *Node) SingleNode() bool {
	return len(n.cfg.Peers) == 1 && n.cfg.Peers[n.cfg.NodeID] == "" && n.cfg.RaftListen == ""
}

// raftIdentity is what the Raft transport tells peers about this node.
func (n *Node) raftIdentity() raft.NodeIdentity {
	out := raft.NodeIdentity{Directory: n.ident.DirectoryID}
	if u, err := datadir.ParseUUID(n.ident.ClusterID); err == nil {
		out.Cluster = u
	}
	if len(n.ident.Bootstrap) > 0 {
		out.Bootstrap = map[uint64][16]byte{}
		for n, d := range n.ident.Bootstrap {
			out.Bootstrap[uint64(n)] = d
		}
	}
	return out
}

// joinCluster gives a node of a cluster whose directory has no cluster yet
// its cluster, waiting as long as it takes (logging why every few seconds).
func (n *Node) joinCluster(h *raft.Host) error {
	if n.ident.Formatted() {
		return nil
	}
	voters := slices.Sorted(maps.Keys(n.cfg.Peers))
	var last time.Time
	started := n.clk.Now()
	var deadline time.Time
	if n.cfg.JoinTimeout > 0 {
		deadline = started.Add(n.cfg.JoinTimeout)
	}
	for {
		var id datadir.Identity
		var ok bool
		var why string
		if n.BrokerOnly() {
			id, ok, why = n.joinThroughBrokers()
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
			id, ok, why = datadir.Join(n.ident, voters, heard)
		}
		if ok {
			if err := datadir.Write(n.cfg.FS, n.cfg.DataDir, id); err != nil {
				return err
			}
			n.ident = id
			h.SetIdentity(n.raftIdentity())
			if id.BootstrapMember() {
				n.log.Info("formed the cluster", "cluster_id", id.ClusterID, "voters", datadir.FormatVoters(id.Bootstrap))
			} else {
				n.log.Warn("joined the cluster with a new data directory: every replica catches up before it votes",
					"cluster_id", id.ClusterID, "directory_id", id.DirectoryID.String())
			}
			return nil
		}
		if !deadline.IsZero() && n.clk.Now().After(deadline) {
			return fmt.Errorf("no cluster to form or join within %v: %s", n.cfg.JoinTimeout, why)
		}
		if n.clk.Now().Sub(last) > 5*time.Second {
			// Nodes of a new cluster start within a second or two of
			// each other: waiting for them is normal at first, a
			// warning only when it lasts.
			level := slog.LevelInfo
			if n.clk.Now().Sub(started) > 10*time.Second {
				level = slog.LevelWarn
			}
			n.log.Log(context.Background(), level, "waiting to form or join the cluster", "why", why)
			last = n.clk.Now()
		}
		<-n.clk.After(100 * time.Millisecond)
	}
}

// joinThroughBrokers asks the --join brokers which cluster they are: a
// broker-only node never forms a cluster.
func (n *Node) joinThroughBrokers() (datadir.Identity, bool, string) {
	cl, err := n.cfg.Dial(n.cfg.Join, kgo.DialTimeout(2*time.Second))
	if err != nil {
		return n.ident, false, err.Error()
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return n.ident, false, fmt.Sprintf("asking --join brokers %v for the cluster: %v", n.cfg.Join, err)
	}
	if md.ClusterID == nil || *md.ClusterID == "" {
		return n.ident, false, "the --join brokers have no cluster id yet"
	}
	id := n.ident
	id.ClusterID, id.Bootstrap = *md.ClusterID, nil
	return id, true, ""
}

// quarantinePrefix names the directories inside a data directory that
// hold a quarantined one's former content.
const quarantinePrefix = ".quarantined-"

// quarantineDataDir moves everything in the data directory (but its lock
// and earlier quarantines) into a new directory inside it,
// .quarantined-<unix seconds>, durably, and logs why: the node then starts
// as one with a new, empty data directory (a new directory id), which the
// cluster treats as a replaced disk: every group copies its replica from
// the others and votes only once caught up. Nothing is deleted; the
// operator removes the quarantined directory once the node is back in
// sync (or keeps it to look at).
func (n *Node) quarantineDataDir(why error) error {
	fsys, dir := n.cfg.FS, n.cfg.DataDir
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return err
	}
	q := filepath.Join(dir, fmt.Sprintf("%s%d", quarantinePrefix, time.Now().Unix()))
	if err := storage.MkdirAllDurable(fsys, q); err != nil {
		return err
	}
	for _, name := range names {
		if name == storage.LockFileName || strings.HasPrefix(name, quarantinePrefix) {
			continue
		}
		if err := fsys.Rename(filepath.Join(dir, name), filepath.Join(q, name)); err != nil {
			return fmt.Errorf("cluster: quarantine %s: %w", name, err)
		}
	}
	if err := fsys.SyncDir(q); err != nil {
		return err
	}
	if err := fsys.SyncDir(dir); err != nil {
		return err
	}
	n.log.Error("the Raft journal is corrupt: this node's data directory was moved aside and the node rejoins as a replaced disk, copying every replica from the other nodes and voting only once caught up; delete the quarantined directory once it is back in sync",
		"quarantined", q, "err", why)
	return nil
}
