package brokertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/freeport"
	"holdfast/internal/raft"
	"holdfast/internal/wire"
)

// Cluster is n in-process brokers that form one Raft cluster (node ids
// 1..n, every one a metadata voter), each with real Kafka listeners on free
// loopback ports, and the hooks a test injects faults with:
//
//   - a node stops (Node.Stop: a clean shutdown, with controlled shutdown
//     unless the config turns it off), starts again on its data directory
//     and ports (Node.Restart, Node.Start), or loses its disk (Node.Wipe);
//   - its Raft links are cut (Isolate, Cut, CutOneWay), made lossy (Lose)
//     or slow (Delay), and healed (Heal). These act on the Raft transport
//     only, through the raft.Faults seam every node shares: Kafka clients
//     still reach every node, so a test sees what a node cut off from its
//     peers answers them (a leader that has lost its quorum, say).
//
// What it cannot do in one process: kill -9 (a stop always runs the
// broker's Close) and SIGSTOP; internal/faulttest runs real processes for
// those.
type Cluster struct {
	t      testing.TB
	Nodes  []*Node // Nodes[i] has node id i+1
	Faults *raft.Faults
	// Net, on a cluster of NewMemCluster, is the in-memory network the
	// nodes' Raft traffic goes over (Faults is then nil): the fault hooks
	// cut its links.
	Net   *raft.MemNetwork
	pipes *PipeNet // NewMemCluster's Kafka network
}

// NewCluster starts n brokers (StartCluster) sharing one raft.Faults and
// waits until every broker is registered on every node and each knows the
// controller. opts adjust every node's config; each sees its own NodeID.
// Everything is closed when the test ends.
func NewCluster(t testing.TB, n int, opts ...func(*broker.Config, *wire.Limits)) *Cluster {
	t.Helper()
	f := raft.NewFaults()
	return newCluster(t, n, &Cluster{t: t, Faults: f}, append([]func(*broker.Config, *wire.Limits){func(c *broker.Config, _ *wire.Limits) {
		c.RaftFaults = f
	}}, opts...)...)
}

// NewMemCluster is NewCluster in memory: the nodes' Raft traffic on one
// raft.MemNetwork instead of loopback TCP, its losses and delays drawn
// from seed (Isolate, Cut, Lose, Delay and Heal act on it), and their
// Kafka listeners on a PipeNet (a client needs Node.ClientOpts; Client
// and the helpers here add them). No socket is opened, so the cluster
// can run in a testing/synctest bubble.
func NewMemCluster(t testing.TB, n int, seed uint64, opts ...func(*broker.Config, *wire.Limits)) *Cluster {
	t.Helper()
	net := raft.NewMemNetwork(seed)
	return newCluster(t, n, &Cluster{t: t, Net: net, pipes: NewPipeNet()}, append([]func(*broker.Config, *wire.Limits){func(c *broker.Config, _ *wire.Limits) {
		c.RaftNetwork = net
	}}, opts...)...)
}

func newCluster(t testing.TB, n int, c *Cluster, opts ...func(*broker.Config, *wire.Limits)) *Cluster {
	t.Helper()
	nodes := startCluster(t, n, c.pipes, opts...)
	c.Nodes = nodes
	Await(t, "every broker registered everywhere", func() error {
		for _, node := range nodes {
			md, err := node.Metadata()
			if err != nil {
				return err
			}
			if len(md.Brokers) != n || md.ControllerID <= 0 || node.B.RegisteredBrokers() != n {
				return fmt.Errorf("node %d: brokers %d (registered %d), controller %d", node.Cfg.NodeID, len(md.Brokers), node.B.RegisteredBrokers(), md.ControllerID)
			}
		}
		return nil
	})
	return c
}

// Node returns the node with this id (nil if none).
func (c *Cluster) Node(id int32) *Node {
	if id < 1 || int(id) > len(c.Nodes) {
		return nil
	}
	return c.Nodes[id-1]
}

// Addrs lists every node's client address, stopped ones included.
func (c *Cluster) Addrs() []string { return Addrs(c.Nodes) }

// Running lists the nodes whose broker runs.
func (c *Cluster) Running() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if n.B != nil {
			out = append(out, n)
		}
	}
	return out
}

// Client returns a franz-go client seeded with every node, closed at test
// end.
func (c *Cluster) Client(opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(c.Addrs()...)}, c.Nodes[0].ClientOpts()...), opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// CreateTopic creates topic with rf replicas per partition and waits until
// every running node's metadata shows each partition with a leader
// (CreateClusterTopic).
func (c *Cluster) CreateTopic(topic string, partitions, rf int, configs map[string]*string) {
	c.t.Helper()
	CreateClusterTopic(c.t, c.Nodes, topic, partitions, rf, configs)
}

func (c *Cluster) ids() []uint64 {
	out := make([]uint64, len(c.Nodes))
	for i := range c.Nodes {
		out[i] = uint64(i + 1)
	}
	return out
}

// Isolate cuts node id's Raft links to every other node, both ways (on
// an in-memory network, a partition with id alone on its side).
func (c *Cluster) Isolate(id int32) {
	if c.Net != nil {
		c.Net.Isolate(uint64(id))
		return
	}
	c.Faults.Isolate(uint64(id), c.ids()...)
}

// Cut cuts the Raft link between a and b, both ways.
func (c *Cluster) Cut(a, b int32) {
	if c.Net != nil {
		c.Net.Cut(uint64(a), uint64(b))
		return
	}
	c.Faults.Cut(uint64(a), uint64(b))
}

// Lose drops each Raft frame from one node to another with probability p
// (0 removes the loss).
func (c *Cluster) Lose(from, to int32, p float64) {
	if c.Net != nil {
		c.Net.UpdateLink(uint64(from), uint64(to), func(f *raft.LinkFaults) { f.Loss = p })
		return
	}
	c.Faults.Lose(uint64(from), uint64(to), p)
}

// Delay delays Raft messages from one node to another by d (0 removes
// it); on an in-memory network, each by up to d, drawn from its seed.
func (c *Cluster) Delay(from, to int32, d time.Duration) {
	if c.Net != nil {
		c.Net.UpdateLink(uint64(from), uint64(to), func(f *raft.LinkFaults) { f.Delay = d })
		return
	}
	c.Faults.Delay(uint64(from), uint64(to), d)
}

// Heal restores every Raft link.
func (c *Cluster) Heal() {
	if c.Net != nil {
		c.Net.HealAll()
		return
	}
	c.Faults.HealAll()
}

// Partition returns what node n's own metadata says of one partition: an
// error for a partition error code or a partition it does not list.
func (n *Node) Partition(topic string, partition int32) (kmsg.MetadataResponseTopicPartition, error) {
	md, err := n.Metadata(topic)
	if err != nil {
		return kmsg.MetadataResponseTopicPartition{}, err
	}
	if len(md.Topics) != 1 {
		return kmsg.MetadataResponseTopicPartition{}, fmt.Errorf("node %d: %d topics in the answer", n.Cfg.NodeID, len(md.Topics))
	}
	if code := md.Topics[0].ErrorCode; code != 0 {
		return kmsg.MetadataResponseTopicPartition{}, fmt.Errorf("node %d: topic %s: %w", n.Cfg.NodeID, topic, kerr.ErrorForCode(code))
	}
	for _, p := range md.Topics[0].Partitions {
		if p.Partition != partition {
			continue
		}
		if p.ErrorCode != 0 {
			return p, fmt.Errorf("node %d: %s/%d: %w", n.Cfg.NodeID, topic, partition, kerr.ErrorForCode(p.ErrorCode))
		}
		return p, nil
	}
	return kmsg.MetadataResponseTopicPartition{}, fmt.Errorf("node %d: no partition %s/%d", n.Cfg.NodeID, topic, partition)
}

// AwaitLeader waits until a running node that is not one of except says,
// in its own metadata, that it leads the partition, and returns its id and
// leader epoch.
func (c *Cluster) AwaitLeader(topic string, partition int32, except ...int32) (leader, epoch int32) {
	c.t.Helper()
	Await(c.t, fmt.Sprintf("a leader of %s/%d (not %v)", topic, partition, except), func() error {
		var errs []error
		for _, n := range c.Running() {
			if slices.Contains(except, n.Cfg.NodeID) {
				continue
			}
			p, err := n.Partition(topic, partition)
			switch {
			case err != nil:
				errs = append(errs, err)
			case p.Leader == n.Cfg.NodeID && p.LeaderEpoch >= 0:
				leader, epoch = p.Leader, p.LeaderEpoch
				return nil
			default:
				errs = append(errs, fmt.Errorf("node %d: leader %d epoch %d", n.Cfg.NodeID, p.Leader, p.LeaderEpoch))
			}
		}
		return errors.Join(append(errs, errors.New("no node leads"))...)
	})
	return leader, epoch
}

// AwaitInSync waits until the partition's leader lists every node in its
// in-sync replicas.
func (c *Cluster) AwaitInSync(topic string, partition int32) {
	c.t.Helper()
	Await(c.t, fmt.Sprintf("every replica of %s/%d in sync", topic, partition), func() error {
		for _, n := range c.Running() {
			p, err := n.Partition(topic, partition)
			if err != nil || p.Leader != n.Cfg.NodeID {
				continue
			}
			if len(p.ISR) != len(c.Nodes) {
				return fmt.Errorf("leader %d: in sync %v", p.Leader, p.ISR)
			}
			return nil
		}
		return errors.New("no node leads")
	})
}

// Produce sends one batch of values straight to node n (not through a
// client's routing) with the given acks and timeout, and returns the
// partition's error code and base offset.
func (n *Node) Produce(topic string, partition int32, acks int16, timeout time.Duration, batch []byte) (code int16, base int64, err error) {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = acks, int32(timeout/time.Millisecond)
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	// kgo stamps its own acks setting on every produce request.
	ack := kgo.AllISRAcks()
	if acks == 1 {
		ack = kgo.LeaderAck()
	} else if acks != -1 {
		return 0, 0, fmt.Errorf("acks %d: want -1 or 1", acks)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(n.Addr), kgo.RequiredAcks(ack), kgo.DisableIdempotentWrite()}, n.ClientOpts()...)...)
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	resp, err := cl.SeedBrokers()[0].Request(ctx, Pin(req, 12)) // topics by name
	if err != nil {
		return 0, 0, err
	}
	pr := resp.(*kmsg.ProduceResponse)
	if len(pr.Topics) != 1 || len(pr.Topics[0].Partitions) != 1 {
		return 0, 0, fmt.Errorf("node %d: produce answer %+v", n.Cfg.NodeID, pr.Topics)
	}
	p := pr.Topics[0].Partitions[0]
	return p.ErrorCode, p.BaseOffset, nil
}

// AddBrokerOnly adds broker id to the running cluster of nodes as a
// broker-only node: not a metadata voter (not in Peers), with its own Raft
// listener, joining through the existing brokers, on their fault seam. It
// waits until every node, itself included, lists it. Closed at test end.
func AddBrokerOnly(t testing.TB, nodes []*Node, id int32, opts ...func(*broker.Config, *wire.Limits)) *Node {
	t.Helper()
	// A fixed Raft port, as in production: the others learn the address
	// from the registration, and a new one after a restart needs the
	// controller to commit the re-registration first.
	raftAddr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	n := Start(t, append([]func(*broker.Config, *wire.Limits){func(c *broker.Config, _ *wire.Limits) {
		c.NodeID, c.Peers = id, nodes[0].Cfg.Peers
		c.RaftListen = raftAddr
		c.RaftFaults = nodes[0].Cfg.RaftFaults
		c.RaftNetwork = nodes[0].Cfg.RaftNetwork
		c.Join = Addrs(nodes)
	}}, opts...)...)
	all := append(slices.Clone(nodes), n)
	Await(t, fmt.Sprintf("broker-only node %d registered everywhere", id), func() error {
		for _, node := range all {
			if node.B == nil {
				continue
			}
			if got := node.B.RegisteredBrokers(); got != len(all) {
				return fmt.Errorf("node %d knows %d brokers", node.Cfg.NodeID, got)
			}
		}
		return nil
	})
	return n
}

// AddBrokerOnly adds the next node id as a broker-only node (see the
// function AddBrokerOnly) and appends it to c.Nodes.
func (c *Cluster) AddBrokerOnly(opts ...func(*broker.Config, *wire.Limits)) *Node {
	c.t.Helper()
	n := AddBrokerOnly(c.t, c.Nodes, int32(len(c.Nodes)+1), opts...)
	c.Nodes = append(c.Nodes, n)
	return n
}
