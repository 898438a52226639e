// Package clustertest runs one node's cluster layer in-process, without
// the Kafka broker on top: the Raft host as a cluster of one (its only
// voter, no Raft port, no listener), the metadata store and log, and the
// partition replicas, started and stopped in the order broker.New and
// Broker.Close use (internal/broker/start.go). Nothing crosses a socket,
// so a test of internal/cluster or internal/coordinator built on it runs
// in milliseconds and fails only on what it asserts.
package clustertest

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"holdfast/internal/cluster"
	"holdfast/internal/controller"
	"holdfast/internal/replica"
	"holdfast/internal/storage"
)

// Node is one in-process node's cluster layer.
type Node struct {
	Dir      string
	Cluster  *cluster.Node
	Meta     *controller.Store
	Replicas *replica.Manager
	Syncer   *storage.Syncer

	t       testing.TB
	cfg     cluster.Config
	rcfg    replica.Config
	running bool
}

// Option changes the node's cluster or replica configuration before it
// starts.
type Option func(*cluster.Config, *replica.Config)

// Start starts node 1, a cluster of one, in a temporary directory; it is
// stopped when the test ends. It returns once the node is registered in
// its own metadata (cluster.Node.Start does that for a single node).
func Start(t testing.TB, opts ...Option) *Node {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("HOLDFAST_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	n := &Node{
		Dir: dir, t: t,
		cfg: cluster.Config{
			NodeID: 1, DataDir: dir, Peers: map[int32]string{1: ""},
			Self:   controller.BrokerInfo{ID: 1, Host: "127.0.0.1", Port: 9092},
			Logger: log,
		},
		rcfg: replica.Config{NodeID: 1, DataDir: dir, LogDefaults: storage.DefaultConfig(), Logger: log},
	}
	for _, o := range opts {
		o(&n.cfg, &n.rcfg)
	}
	n.Restart()
	t.Cleanup(n.Stop)
	return n
}

// Restart starts the node again over its data directory (after Stop, or
// the first time).
func (n *Node) Restart() {
	n.t.Helper()
	if n.running {
		n.t.Fatal("clustertest: Restart of a running node")
	}
	c, err := cluster.Open(n.cfg)
	if err != nil {
		n.t.Fatalf("cluster.Open: %v", err)
	}
	n.Cluster = c
	n.Syncer = storage.NewSyncer(n.cfg.Logger)
	meta, err := controller.Open(filepath.Join(n.Dir, "meta"), storage.OSFS(), n.cfg.Logger, c.Identity().ClusterID)
	if err != nil {
		c.Close()
		n.t.Fatalf("controller.Open: %v", err)
	}
	n.Meta = meta
	if err := c.OpenMetadata(meta, n.Syncer); err != nil {
		n.t.Fatalf("OpenMetadata: %v", err)
	}
	rcfg := n.rcfg
	ident := c.Identity()
	rcfg.DirectoryID, rcfg.BootstrapMember = ident.DirectoryID.String(), ident.BootstrapMember()
	n.Replicas = replica.New(rcfg, meta, c.Host(), n.Syncer)
	if err := n.Replicas.OpenAll(); err != nil {
		n.t.Fatalf("OpenAll: %v", err)
	}
	if err := n.Replicas.Start(); err != nil {
		n.t.Fatalf("replicas.Start: %v", err)
	}
	if err := c.Start(meta, n.Replicas, n.Syncer); err != nil {
		n.t.Fatalf("cluster Start: %v", err)
	}
	n.running = true
}

// Stop stops the node in Broker.Close's order: the replicas' background
// work, the cluster node and its Raft host, the partition logs, the
// metadata store (its last snapshot), the syncer. It is idempotent.
func (n *Node) Stop() {
	if !n.running {
		return
	}
	n.running = false
	n.Cluster.HandOver()
	n.Replicas.StopBackground()
	for _, c := range []func() error{n.Cluster.Close, n.Replicas.Close, n.Meta.Close, n.Syncer.Close} {
		if err := c(); err != nil {
			n.t.Errorf("clustertest: stop: %v", err)
		}
	}
}
