// Package clustertest runs nodes' cluster layer in-process, without the
// Kafka broker on top: the Raft host, the metadata store and log, and the
// partition replicas, started and stopped in the order broker.New and
// Broker.Close use (internal/broker/start.go). Start runs a cluster of
// one (its only voter, no Raft port, no socket at all); StartCluster
// several voters over the Raft transport on loopback. A test of
// internal/cluster or internal/coordinator built on it runs in
// milliseconds to seconds and fails only on what it asserts.
//
// Without brokers there is no Kafka listener: a node that is not the
// controller cannot send BrokerRegistration, BrokerHeartbeat or
// AlterPartition (cluster.Config.Dial fails). StartCluster registers
// every node through the controller as BrokerRegistration would, and
// sessions last minutes unless an option says otherwise.
package clustertest

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/cluster"
	"holdfast/internal/freeport"
	"holdfast/internal/metadata"
	"holdfast/internal/replica"
	"holdfast/internal/storage"
	"holdfast/internal/testwait"
)

// Node is one in-process node's cluster layer.
type Node struct {
	Dir      string
	Cluster  *cluster.Node
	Meta     *metadata.Store
	Replicas *replica.Manager
	Syncer   *storage.Syncer

	t       testing.TB
	cfg     cluster.Config
	rcfg    replica.Config
	running bool
}

// Option changes a node's cluster or replica configuration before it
// starts.
type Option func(*cluster.Config, *replica.Config)

// ErrNoBroker is what a node's Dial answers: clustertest runs no Kafka
// listener.
var ErrNoBroker = errors.New("clustertest: no Kafka listener (no broker in this test)")

func testLogger(id int32) *slog.Logger {
	if os.Getenv("HOLDFAST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", id)
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newNode(t testing.TB, id int32, peers map[int32]string, opts []Option) *Node {
	dir := t.TempDir()
	log := testLogger(id)
	n := &Node{
		Dir: dir, t: t,
		cfg: cluster.Config{
			NodeID: id, DataDir: dir, Peers: peers, JoinTimeout: time.Minute,
			Self:                 metadata.BrokerInfo{ID: id, Host: "127.0.0.1", Port: 9091 + id},
			BrokerSessionTimeout: 5 * time.Minute,
			Dial:                 func([]string, ...kgo.Opt) (*kgo.Client, error) { return nil, ErrNoBroker },
			OnSecurityChange:     func() {},
			Logger:               log,
		},
		rcfg: replica.Config{NodeID: id, DataDir: dir, LogDefaults: storage.DefaultConfig(), Logger: log},
	}
	for _, o := range opts {
		o(&n.cfg, &n.rcfg)
	}
	return n
}

// Start starts node 1, a cluster of one, in a temporary directory; it is
// stopped when the test ends. It returns once the node is registered in
// its own metadata (cluster.Node.Start does that for a single node).
func Start(t testing.TB, opts ...Option) *Node {
	t.Helper()
	n := newNode(t, 1, map[int32]string{1: ""}, opts)
	n.Restart()
	t.Cleanup(n.Stop)
	return n
}

// StartCluster starts nodes 1..size, every one a metadata voter, over
// the Raft transport on loopback ports; they are stopped when the test
// ends. It returns once every node is registered and every node's
// metadata lists them all.
func StartCluster(t testing.TB, size int, opts ...Option) []*Node {
	t.Helper()
	peers := map[int32]string{}
	for i := 1; i <= size; i++ {
		addr, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		peers[int32(i)] = addr
	}
	nodes := make([]*Node, size)
	for i := range nodes {
		nodes[i] = newNode(t, int32(i+1), peers, opts)
		t.Cleanup(nodes[i].Stop)
	}
	// A new cluster forms once every voter is up: start them together.
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = n.start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	Register(t, nodes)
	return nodes
}

// Controller is the node that leads the metadata group, waiting for one
// to be elected.
func Controller(t testing.TB, nodes []*Node) *Node {
	t.Helper()
	var ctrl *Node
	testwait.Until(t, 30*time.Second, "a controller elected", func() bool {
		for _, n := range nodes {
			if n.running && n.Cluster.IsController() {
				ctrl = n
				return true
			}
		}
		return false
	})
	return ctrl
}

// Register commits every running node's registration through the
// controller (what BrokerRegistration does with a broker) and waits
// until every running node's metadata lists them all.
func Register(t testing.TB, nodes []*Node) {
	t.Helper()
	var err error
	testwait.For(t, 30*time.Second, "every node registered and listed everywhere", func() error {
		ctrl := Controller(t, nodes)
		for _, n := range nodes {
			if !n.running {
				continue
			}
			me := n.cfg.Self
			me.DirID = n.Cluster.Identity().DirectoryID.String()
			if cur, ok := ctrl.Meta.Broker(me.ID); ok && cur.Equal(me) {
				continue
			}
			if err = ctrl.Cluster.Propose(t.Context(), metadata.Command{Op: metadata.OpRegister, Broker: &me}); err != nil {
				return err // the controller may be changing: again
			}
		}
		if !allListed(nodes) {
			return errors.New("not every node lists every broker yet")
		}
		return nil
	})
}

func allListed(nodes []*Node) bool {
	want := 0
	for _, n := range nodes {
		if n.running {
			want++
		}
	}
	for _, n := range nodes {
		if n.running && len(n.Meta.Brokers()) < want {
			return false
		}
	}
	return true
}

// DefaultSessions keeps Kafka's broker session and heartbeat defaults
// (9 s, 2 s) instead of clustertest's minutes-long sessions.
func DefaultSessions(c *cluster.Config, _ *replica.Config) { c.BrokerSessionTimeout = 0 }

// ID is the node's id.
func (n *Node) ID() int32 { return n.cfg.NodeID }

// Running reports whether the node is started.
func (n *Node) Running() bool { return n.running }

// Restart starts the node again over its data directory (after Stop, or
// the first time).
func (n *Node) Restart() {
	n.t.Helper()
	if err := n.start(); err != nil {
		n.t.Fatal(err)
	}
}

func (n *Node) start() error {
	if n.running {
		return errors.New("clustertest: start of a running node")
	}
	c, err := cluster.Open(n.cfg)
	if err != nil {
		return fmt.Errorf("node %d: cluster.Open: %w", n.cfg.NodeID, err)
	}
	n.Cluster = c
	n.Syncer = storage.NewSyncer(n.cfg.Logger)
	meta, err := metadata.Open(filepath.Join(n.Dir, "meta"), storage.OSFS(), n.cfg.Logger, c.Identity().ClusterID)
	if err != nil {
		c.Close()
		return fmt.Errorf("node %d: metadata.Open: %w", n.cfg.NodeID, err)
	}
	n.Meta = meta
	if err := c.OpenMetadata(meta, n.Syncer); err != nil {
		return fmt.Errorf("node %d: OpenMetadata: %w", n.cfg.NodeID, err)
	}
	rcfg := n.rcfg
	ident := c.Identity()
	rcfg.DirectoryID, rcfg.BootstrapMember = ident.DirectoryID.String(), ident.BootstrapMember()
	n.Replicas = replica.New(rcfg, meta, c.Host(), n.Syncer)
	if err := n.Replicas.OpenAll(); err != nil {
		return fmt.Errorf("node %d: OpenAll: %w", n.cfg.NodeID, err)
	}
	if err := n.Replicas.Start(); err != nil {
		return fmt.Errorf("node %d: replicas.Start: %w", n.cfg.NodeID, err)
	}
	if err := c.Start(meta, n.Replicas, n.Syncer); err != nil {
		return fmt.Errorf("node %d: cluster Start: %w", n.cfg.NodeID, err)
	}
	n.running = true
	return nil
}

// Stop stops the node in Broker.Close's order: leadership handed over
// (controlled shutdown), the replicas' background work, the cluster node
// and its Raft host, the partition logs, the metadata store (its last
// snapshot), the syncer. It is idempotent.
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
