package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/datadir"
	"holdfast/internal/freeport"
	"holdfast/internal/raft"
	"holdfast/internal/storage"
	"holdfast/internal/tiered"
	"holdfast/internal/wire"
)

// cluster is a Holdfast cluster in this process: real brokers on loopback
// ports, each with its own data directory, joined by the Raft transport
// through a fault seam (raft.Faults) that can cut links between nodes.
type cluster struct {
	dir    string
	log    *slog.Logger
	faults *raft.Faults
	nodes  []*node
}

type node struct {
	id   int32
	addr string // Kafka listener
	cfg  broker.Config
	fs   *storage.CrashFS // nil: the OS filesystem under cfg.DataDir

	mu  sync.Mutex
	b   *broker.Broker
	srv *wire.Server
}

type clusterOptions struct {
	nodes int
	// crashFS puts every node's data on a storage.CrashFS (in memory; a
	// power loss keeps only what was fsynced) instead of the disk.
	crashFS bool
	flush   storage.FlushPolicy // the brokers' log.flush policy (default: sync)
	// noReadChecks: log.verify.reads=false and no scrubber (Kafka's
	// behaviour: bytes go out unchecked).
	noReadChecks bool
	// tiered: tiered storage on, with this object store (tiered.go).
	tiered *tiered.Config
}

// startCluster starts a new cluster under dir: node ids 1..n, started
// together (a new cluster forms once every node is up).
func startCluster(ctx context.Context, dir string, log *slog.Logger, o clusterOptions) (*cluster, error) {
	c := &cluster{dir: dir, log: log, faults: raft.NewFaults()}
	peers := map[int32]string{}
	for i := 1; i <= o.nodes; i++ {
		p, err := freeAddr()
		if err != nil {
			return nil, err
		}
		peers[int32(i)] = p
	}
	for i := 1; i <= o.nodes; i++ {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		cfg := broker.DefaultConfig()
		cfg.NodeID, cfg.Peers = int32(i), peers
		cfg.DataDir = filepath.Join(dir, "node-"+strconv.Itoa(i))
		cfg.AdvertisedHost, cfg.AdvertisedPort = host, int32(p)
		cfg.LogDefaults.Flush = o.flush
		if o.noReadChecks {
			cfg.LogNoReadChecks, cfg.LogScrubBytesPerSecond = true, 0
		}
		if o.tiered != nil {
			cfg.Tiered = *o.tiered
		}
		cfg.Logger = log.With("node", i)
		cfg.RaftFaults = c.faults
		// Internal topics with few partitions and no wait before a
		// group's first rebalance: the lab starts many small clusters.
		cfg.OffsetsTopicPartitions = 3
		cfg.Txn.StatePartitions = 3
		cfg.Txn.AbortInterval = 500 * time.Millisecond
		cfg.Groups.InitialRebalanceDelay = 0
		// Every stop in the lab is a crash: nothing is handed over first.
		cfg.ControlledShutdown = false
		// A node that never finds its cluster is an error, not a hang.
		cfg.JoinTimeout = time.Minute
		n := &node{id: int32(i), addr: addr, cfg: cfg}
		if o.crashFS {
			n.fs = storage.NewCrashFS(int64(i))
			n.cfg.FS = n.fs
			n.cfg.DataDir = "/data"
		}
		c.nodes = append(c.nodes, n)
	}
	if err := c.startAll(ctx, c.nodes); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func freeAddr() (string, error) { return freeport.Addr() }

// startAll starts the given stopped nodes concurrently.
func (c *cluster) startAll(ctx context.Context, ns []*node) error {
	errs := make([]error, len(ns))
	var wg sync.WaitGroup
	for i, n := range ns {
		wg.Go(func() { errs[i] = n.start(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (n *node) start(ctx context.Context) error {
	var ln net.Listener
	var err error
	for { // a stopped node's port may take a moment to free
		if ln, err = net.Listen("tcp", n.addr); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %d: listen on %s: %w", n.id, n.addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	b, err := broker.New(n.cfg)
	if err != nil {
		ln.Close()
		return fmt.Errorf("node %d: %w", n.id, err)
	}
	srv := wire.NewServer(b, wire.DefaultLimits(), n.cfg.Logger)
	n.mu.Lock()
	n.b, n.srv = b, srv
	n.mu.Unlock()
	go srv.Serve(ln)
	return nil
}

// stop closes the node's connections and broker without handing anything
// over (controlled shutdown is off): as far as the cluster can tell, the
// node died. What it had written stays in its data directory (on a real
// disk, in the page cache: a process crash does not lose it).
func (n *node) stop() {
	n.mu.Lock()
	b, srv := n.b, n.srv
	n.b, n.srv = nil, nil
	n.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	if b != nil {
		b.Close()
	}
}

// broker is the node's running broker, nil while it is stopped.
func (n *node) broker() *broker.Broker {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.b
}

func (n *node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.b != nil
}

func (c *cluster) node(id int32) *node { return c.nodes[id-1] }

// close stops every node.
func (c *cluster) close() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(n.stop)
	}
	wg.Wait()
}

// powerLoss cuts the power of every node at once: each CrashFS forgets
// what was not fsynced, then the brokers (whose files are now dead
// handles) are closed and started again on what is left.
func (c *cluster) powerLoss(ctx context.Context) error {
	for _, n := range c.nodes {
		if n.fs == nil {
			return errors.New("power loss needs the nodes on CrashFS")
		}
		n.fs.Crash()
	}
	c.close()
	return c.startAll(ctx, c.nodes)
}

// wipe stops node id and gives it an empty data directory: a replaced
// disk. With keepIdentity the old directory's meta.properties is put back,
// so the node cannot tell the disk is new: what a node whose identity is
// only its configured node.id looks like.
func (c *cluster) wipe(id int32, keepIdentity bool) error {
	n := c.node(id)
	n.stop()
	if n.fs != nil {
		return errors.New("wipe: only for nodes on the OS filesystem")
	}
	meta, err := os.ReadFile(filepath.Join(n.cfg.DataDir, datadir.FileName))
	if err != nil {
		return err
	}
	if err := os.RemoveAll(n.cfg.DataDir); err != nil {
		return err
	}
	if !keepIdentity {
		return nil
	}
	if err := os.MkdirAll(n.cfg.DataDir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.cfg.DataDir, datadir.FileName), meta, 0o644)
}

// isolate cuts node id's Raft links to every other node (clients still
// reach it).
func (c *cluster) isolate(id int32) {
	for _, n := range c.nodes {
		if n.id != id {
			c.faults.Cut(uint64(id), uint64(n.id))
		}
	}
}

func (c *cluster) heal() { c.faults.HealAll() }

// seeds lists the Kafka addresses of the running nodes (of all when none
// runs).
func (c *cluster) seeds() []string {
	var out, all []string
	for _, n := range c.nodes {
		all = append(all, n.addr)
		if n.running() {
			out = append(out, n.addr)
		}
	}
	if len(out) == 0 {
		return all
	}
	return out
}

// client is a franz-go client seeded with the running nodes; metadata is
// refreshed quickly, so that leader changes are noticed in the lab's short
// runs.
func (c *cluster) client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.seeds()...), kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond })}, opts...)...)
}

// createTopic creates topic with rf replicas per partition and waits until
// every partition has a leader and all its replicas in sync.
func (c *cluster) createTopic(ctx context.Context, topic string, partitions int32, configs map[string]*string) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		resp, err := adm.CreateTopic(ctx, partitions, int16(len(c.nodes)), configs, topic)
		if err == nil {
			err = resp.Err
		}
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create topic %s: %w", topic, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return c.waitInSync(ctx, topic)
}

// waitInSync waits until every partition of topic has a live leader and
// every replica in sync.
func (c *cluster) waitInSync(ctx context.Context, topic string) error {
	return c.await(ctx, "replicas of "+topic+" in sync", func(md kadm.Metadata) error {
		td, ok := md.Topics[topic]
		if !ok || td.Err != nil || len(td.Partitions) == 0 {
			return fmt.Errorf("topic %s: %v", topic, td.Err)
		}
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 1 || len(p.ISR) < len(c.nodes) {
				return fmt.Errorf("partition %d: leader %d isr %v err %v", p.Partition, p.Leader, p.ISR, p.Err)
			}
		}
		return nil
	}, topic)
}

// leader returns the node leading topic/partition, waiting while there is
// none or it is one of except.
func (c *cluster) leader(ctx context.Context, topic string, partition int32, except ...int32) (int32, error) {
	var l int32
	err := c.await(ctx, "a leader for "+topic, func(md kadm.Metadata) error {
		pd, ok := md.Topics[topic].Partitions[partition]
		if !ok || pd.Err != nil || pd.Leader < 1 || int(pd.Leader) > len(c.nodes) {
			return fmt.Errorf("partition %d: no leader (%v)", partition, pd.Err)
		}
		if slices.Contains(except, pd.Leader) || !c.node(pd.Leader).running() {
			return fmt.Errorf("partition %d: leader %d is down", partition, pd.Leader)
		}
		l = pd.Leader
		return nil
	}, topic)
	return l, err
}

// agreedLeader returns the node leading topic/partition as every running
// node names it, each asked on its own (Metadata is each node's view: a
// leader cut off from the others names itself until it hears of the
// next, and a client's Metadata goes to any one node), waiting until they
// agree.
func (c *cluster) agreedLeader(ctx context.Context, topic string, partition int32) (int32, error) {
	var l int32
	err := c.await(ctx, "the nodes to agree on the leader of "+topic, func(kadm.Metadata) error {
		var err error
		l, err = c.leaderViews(ctx, topic, partition)
		return err
	}, topic)
	return l, err
}

// leaderViews asks every running node for the leader of topic/partition
// and returns it if all name the same live one in the same epoch.
func (c *cluster) leaderViews(ctx context.Context, topic string, partition int32) (int32, error) {
	var leader, epoch int32 = -1, -1
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr))
		if err != nil {
			return 0, err
		}
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		mctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := req.RequestWith(mctx, cl.SeedBrokers()[0])
		cancel()
		cl.Close()
		if err != nil {
			return 0, fmt.Errorf("node %d: %w", n.id, err)
		}
		l, e := int32(-1), int32(-1)
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if t.Topic != nil && *t.Topic == topic && p.Partition == partition && p.ErrorCode == 0 {
					l, e = p.Leader, p.LeaderEpoch
				}
			}
		}
		switch {
		case l < 1 || int(l) > len(c.nodes) || !c.node(l).running():
			return 0, fmt.Errorf("node %d names no live leader (%d)", n.id, l)
		case leader == -1:
			leader, epoch = l, e
		case l != leader || e != epoch:
			return 0, fmt.Errorf("node %d names leader %d in epoch %d, another node %d in epoch %d", n.id, l, e, leader, epoch)
		}
	}
	if leader == -1 {
		return 0, errors.New("no node runs")
	}
	return leader, nil
}

func (c *cluster) await(ctx context.Context, what string, ok func(kadm.Metadata) error, topics ...string) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		mctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		md, err := adm.Metadata(mctx, topics...)
		cancel()
		if err == nil {
			if err = ok(md); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitLeaders waits until every partition of topic has a live leader.
func (c *cluster) waitLeaders(ctx context.Context, topic string) error {
	return c.await(ctx, "leaders of "+topic, func(md kadm.Metadata) error {
		td, ok := md.Topics[topic]
		if !ok || td.Err != nil || len(td.Partitions) == 0 {
			return fmt.Errorf("topic %s: %v", topic, td.Err)
		}
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 1 || int(p.Leader) > len(c.nodes) || !c.node(p.Leader).running() {
				return fmt.Errorf("partition %d: leader %d err %v", p.Partition, p.Leader, p.Err)
			}
		}
		return nil
	}, topic)
}

// controller returns the node leading the metadata group (the
// controller), waiting while there is none.
func (c *cluster) controller(ctx context.Context) (int32, error) {
	var id int32
	err := c.await(ctx, "a controller", func(md kadm.Metadata) error {
		if md.Controller < 1 || int(md.Controller) > len(c.nodes) {
			return fmt.Errorf("no controller (%d)", md.Controller)
		}
		id = md.Controller
		return nil
	})
	return id, err
}
