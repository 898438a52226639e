// Package brokertest starts real in-process Holdfast brokers on free
// loopback ports for integration tests, and restarts them on the same data
// directory and port.
package brokertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/freeport"
	"holdfast/internal/metadata"
	"holdfast/internal/raft"
	"holdfast/internal/wire"
)

// Node is one running broker.
type Node struct {
	t      testing.TB
	Cfg    broker.Config
	Limits wire.Limits
	Addr   string // host:port clients bootstrap from

	// Listeners are the node's named listeners (StartListeners); Addrs
	// their host:port by name. Start has none: one default listener.
	Listeners []*wire.Listener
	Addrs     map[string]string

	B   *broker.Broker
	srv *wire.Server
	ln  net.Listener
	// hook sees each new broker and server before the server serves.
	hook func(*broker.Broker, *wire.Server)
	lns  []net.Listener
	// pipes, if set, is the in-memory network the node listens on and
	// its clients dial (NewMemCluster).
	pipes *PipeNet
}

// ClientOpts are the options a Kafka client of this node needs (the
// in-memory dialer of a NewMemCluster's node; none otherwise).
func (n *Node) ClientOpts() []kgo.Opt {
	if n.pipes == nil {
		return nil
	}
	return []kgo.Opt{kgo.Dialer(n.pipes.Dial)}
}

// listen listens on addr again (a restart), on the node's network.
func (n *Node) listen(addr string) (net.Listener, error) {
	if n.pipes != nil {
		return n.pipes.Listen(addr)
	}
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ { // the old listener's port may take a moment to free
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}

// Start starts a broker with a fresh data directory; opts adjust the config.
// The broker is closed when the test ends.
func Start(t testing.TB, opts ...func(*broker.Config, *wire.Limits)) *Node {
	t.Helper()
	return StartServing(t, nil, opts...)
}

// StartServing is Start with a hook that sees the broker and its server
// before the server serves, and again after each Restart: where a test
// installs what must be in place first (metrics.New sets OnReply).
func StartServing(t testing.TB, hook func(*broker.Broker, *wire.Server), opts ...func(*broker.Config, *wire.Limits)) *Node {
	t.Helper()
	n, ln := prepare(t, nil, opts...)
	n.hook = hook
	n.start(ln)
	t.Cleanup(n.Stop)
	return n
}

// StartCluster starts n brokers that form a new cluster (node ids 1..n, all
// in --peers), each with a fresh data directory. They start concurrently:
// a new cluster forms only once every node is up.
func StartCluster(t testing.TB, n int, opts ...func(*broker.Config, *wire.Limits)) []*Node {
	t.Helper()
	return startCluster(t, n, nil, opts...)
}

// startCluster is StartCluster, on pipes if set (the Raft addresses are
// then only names: the Raft traffic must go over a raft.MemNetwork).
func startCluster(t testing.TB, n int, pipes *PipeNet, opts ...func(*broker.Config, *wire.Limits)) []*Node {
	t.Helper()
	peers := map[int32]string{}
	for i := 1; i <= n; i++ {
		if pipes != nil {
			peers[int32(i)] = pipes.Addr()
			continue
		}
		addr, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		peers[int32(i)] = addr
	}
	nodes := make([]*Node, n)
	lns := make([]net.Listener, n)
	for i := range nodes {
		id := int32(i + 1)
		nodes[i], lns[i] = prepare(t, pipes, append([]func(*broker.Config, *wire.Limits){func(c *broker.Config, _ *wire.Limits) {
			c.NodeID, c.Peers = id, peers
		}}, opts...)...)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Go(func() { errs[i] = nd.startErr(lns[i]) })
	}
	wg.Wait()
	for i, nd := range nodes {
		if nd.B != nil {
			t.Cleanup(nd.Stop)
		} else {
			lns[i].Close()
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("starting the cluster: %v", err)
	}
	return nodes
}

// prepare makes a node's config (a fresh data directory, a free port) and
// its listener, without starting it; on pipes if set.
func prepare(t testing.TB, pipes *PipeNet, opts ...func(*broker.Config, *wire.Limits)) (*Node, net.Listener) {
	// Every broker a test starts poisons the frames it puts back, so a
	// holder reading a frame after its release reads garbage (wire.poisonFrames).
	wire.SetPoisonFrames(true)
	raft.SetPoisonBuffers(true) // and the buffers of the Raft messages it receives
	cfg := broker.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.OffsetsTopicPartitions = 3 // keep start-up quick in tests
	// A node that never finds its cluster fails the test instead of
	// hanging it (a peer that could not start, say).
	cfg.JoinTimeout = time.Minute
	cfg.Logger = testLogger()
	limits := wire.DefaultLimits()
	if pipes != nil {
		cfg.Dialer = pipes.Dial
	}
	for _, o := range opts {
		o(&cfg, &limits)
	}
	var ln net.Listener
	var err error
	if pipes != nil {
		ln, err = pipes.Listen(pipes.Addr())
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	cfg.AdvertisedHost, cfg.AdvertisedPort = "127.0.0.1", int32(port)
	return &Node{t: t, Cfg: cfg, Limits: limits, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), pipes: pipes}, ln
}

func testLogger() *slog.Logger {
	if os.Getenv("HOLDFAST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func (n *Node) start(ln net.Listener) {
	n.t.Helper()
	if err := n.startErr(ln); err != nil {
		ln.Close()
		n.t.Fatalf("broker.New: %v", err)
	}
}

func (n *Node) startErr(ln net.Listener) error {
	b, err := broker.New(n.Cfg)
	if err != nil {
		return fmt.Errorf("node %d: %w", n.Cfg.NodeID, err)
	}
	n.B, n.ln = b, ln
	n.srv = wire.NewServer(b, n.Limits, n.Cfg.Logger)
	if n.hook != nil {
		n.hook(b, n.srv)
	}
	go n.srv.Serve(ln)
	return nil
}

// StartListeners starts a broker serving the given named listeners, each
// on a free loopback port, the first being the one Addr and Client use.
// setup sees the config with cfg.Security.Listeners filled in (set the
// inter-broker listener, the authorizer, ...). Closed when the test ends.
func StartListeners(t testing.TB, listeners []*wire.Listener, setup ...func(*broker.Config, *wire.Limits)) *Node {
	t.Helper()
	n, lns := prepareListeners(t, listeners, setup...)
	if err := n.startListenersErr(lns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

// StartClusterListeners starts n brokers that form one cluster (Peers on
// free ports), each serving listenersFor(id), all at once (a new cluster
// forms only when every voter is up). setup adjusts each node's config.
func StartClusterListeners(t testing.TB, n int, listenersFor func(id int32) []*wire.Listener, setup func(id int32, c *broker.Config)) []*Node {
	t.Helper()
	peers := map[int32]string{}
	for i := 1; i <= n; i++ {
		addr, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		peers[int32(i)] = addr
	}
	nodes := make([]*Node, n)
	lns := make([][]net.Listener, n)
	for i := range nodes {
		id := int32(i + 1)
		nodes[i], lns[i] = prepareListeners(t, listenersFor(id), func(c *broker.Config, _ *wire.Limits) {
			c.NodeID, c.Peers = id, peers
			setup(id, c)
		})
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Go(func() { errs[i] = nd.startListenersErr(lns[i]) })
	}
	wg.Wait()
	for _, nd := range nodes {
		if nd.B != nil {
			t.Cleanup(nd.Stop)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("starting the cluster: %v", err)
	}
	return nodes
}

func prepareListeners(t testing.TB, listeners []*wire.Listener, setup ...func(*broker.Config, *wire.Limits)) (*Node, []net.Listener) {
	t.Helper()
	wire.SetPoisonFrames(true) // as prepare
	raft.SetPoisonBuffers(true)
	cfg := broker.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.OffsetsTopicPartitions = 3
	cfg.Logger = testLogger()
	limits := wire.DefaultLimits()
	n := &Node{t: t, Limits: limits, Listeners: listeners, Addrs: map[string]string{}}
	var lns []net.Listener
	for _, l := range listeners {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		n.Addrs[l.Name] = ln.Addr().String()
		cfg.Security.Listeners = append(cfg.Security.Listeners, metadata.Endpoint{Name: l.Name, Host: "127.0.0.1", Port: int32(port), Protocol: string(l.Protocol)})
		lns = append(lns, ln)
	}
	cfg.AdvertisedHost, cfg.AdvertisedPort = "127.0.0.1", cfg.Security.Listeners[0].Port
	n.Addr = n.Addrs[listeners[0].Name]
	for _, o := range setup {
		o(&cfg, &n.Limits)
	}
	n.Cfg = cfg
	return n, lns
}

func (n *Node) startListenersErr(lns []net.Listener) error {
	b, err := broker.New(n.Cfg)
	if err != nil {
		for _, ln := range lns {
			ln.Close()
		}
		return fmt.Errorf("node %d: %w", n.Cfg.NodeID, err)
	}
	n.B, n.lns = b, lns
	n.srv = wire.NewServer(b, n.Limits, n.Cfg.Logger)
	for i, ln := range lns {
		go n.srv.ServeListener(ln, n.Listeners[i])
	}
	return nil
}

// Stop closes the listener, every connection and the broker (a clean
// shutdown). Safe to call twice.
func (n *Node) Stop() {
	if n.srv == nil {
		return
	}
	n.B.HandOver() // while the listener still answers, as serve does
	n.srv.Close()
	if err := n.B.Close(); err != nil {
		n.t.Errorf("broker close: %v", err)
	}
	n.srv, n.B = nil, nil
}

// Kill stops the broker without a controlled shutdown and ignores what
// its Close reports: with its disk cut off first (storage.CrashFS's
// PowerCut), a crash. Start starts it again.
func (n *Node) Kill() {
	if n.srv == nil {
		return
	}
	n.srv.Close()
	_ = n.B.Close() // errors expected: the disk is gone
	n.srv, n.B = nil, nil
}

// Wipe stops the broker and empties its data directory: a replaced disk.
// Restart starts it on the empty directory.
func (n *Node) Wipe() {
	n.t.Helper()
	n.Stop()
	if err := os.RemoveAll(n.Cfg.DataDir); err != nil {
		n.t.Fatal(err)
	}
}

// Restart stops the broker and starts a new one on the same data directory
// and port, as a process restart would.
func (n *Node) Restart() {
	n.t.Helper()
	n.Stop()
	if len(n.Listeners) > 0 {
		var lns []net.Listener
		for _, l := range n.Listeners {
			lns = append(lns, relisten(n.t, n.Addrs[l.Name]))
		}
		if err := n.startListenersErr(lns); err != nil {
			n.t.Fatal(err)
		}
		return
	}
	ln, err := n.listen(n.Addr)
	if err != nil {
		n.t.Fatalf("re-listen on %s: %v", n.Addr, err)
	}
	n.start(ln)
}

func relisten(t testing.TB, addr string) net.Listener {
	t.Helper()
	var err error
	for i := 0; i < 100; i++ { // the old listener's port may take a moment to free
		ln, lerr := net.Listen("tcp", addr)
		if lerr == nil {
			return ln
		}
		err = lerr
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("re-listen on %s: %v", addr, err)
	return nil
}

// Client returns a franz-go client for the node, closed at test end.
func (n *Node) Client(opts ...kgo.Opt) *kgo.Client {
	n.t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(n.Addr)}, n.ClientOpts()...), opts...)...)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(cl.Close)
	return cl
}

// Server is the node's Kafka connection server (its Stats, PerIP).
func (n *Node) Server() *wire.Server { return n.srv }

// Admin returns a kadm client for the node.
func (n *Node) Admin() *kadm.Client { return kadm.NewClient(n.Client()) }

// CreateTopic creates a topic and fails the test on error.
func (n *Node) CreateTopic(topic string, partitions int32, configs map[string]*string) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := n.Admin().CreateTopics(ctx, partitions, 1, configs, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		n.t.Fatal(fmt.Errorf("create topic %s: %w", topic, err))
	}
}
