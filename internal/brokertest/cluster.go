package brokertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Await polls fn until it returns nil, failing the test after a minute.
func Await(t testing.TB, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Addrs lists the nodes' client addresses.
func Addrs(nodes []*Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Addr
	}
	return out
}

// Metadata asks this node directly (not through a client's routing).
func (n *Node) Metadata(topics ...string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, tp := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(tp)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := n.Request(req)
	if err != nil {
		return nil, err
	}
	return resp.(*kmsg.MetadataResponse), nil
}

// Request sends req to this node only, with a 10 s timeout.
func (n *Node) Request(req kmsg.Request) (kmsg.Response, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(n.Addr)}, n.ClientOpts()...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.SeedBrokers()[0].Request(ctx, req)
}

// CreateClusterTopic creates topic with rf replicas per partition through
// any node and waits until every running node's metadata shows each
// partition with a leader.
func CreateClusterTopic(t testing.TB, nodes []*Node, topic string, partitions, rf int, configs map[string]*string) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(Addrs(nodes)...)}, nodes[0].ClientOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, int32(partitions), int16(rf), configs, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	Await(t, "a leader for every partition of "+topic+" on every node", func() error {
		for _, n := range nodes {
			if n.B == nil {
				continue // stopped
			}
			md, err := n.Metadata(topic)
			if err != nil {
				return err
			}
			if len(md.Topics) != 1 || len(md.Topics[0].Partitions) != partitions {
				return fmt.Errorf("node %d: %+v", n.Cfg.NodeID, md.Topics)
			}
			for _, p := range md.Topics[0].Partitions {
				if p.ErrorCode != 0 || p.Leader <= 0 || len(p.Replicas) != rf {
					return fmt.Errorf("node %d partition %d: leader %d replicas %v code %d", n.Cfg.NodeID, p.Partition, p.Leader, p.Replicas, p.ErrorCode)
				}
				if rf == len(nodes) && p.LeaderEpoch < 0 {
					return fmt.Errorf("node %d partition %d: replica not open yet", n.Cfg.NodeID, p.Partition)
				}
			}
		}
		return nil
	})
}

// Start starts a stopped node again on its data directory and port.
func (n *Node) Start() {
	n.t.Helper()
	ln, err := n.listen(n.Addr)
	if err != nil {
		n.t.Fatalf("re-listen on %s: %v", n.Addr, err)
	}
	n.start(ln)
}

// Pinned caps the version a kgo client negotiates for a request: raw
// Produce requests name topics, which Produce v13 replaces by ids, and the
// transaction tests of the pre-KIP-890-part-2 flow need Produce v11 (v12+
// adds partitions to the transaction implicitly).
type Pinned struct {
	kmsg.Request
	Max int16
}

// MaxVersion is the lower of the request's and the pin.
func (p Pinned) MaxVersion() int16 { return min(p.Max, p.Request.MaxVersion()) }

// Pin caps req at version max.
func Pin(req kmsg.Request, max int16) kmsg.Request { return Pinned{Request: req, Max: max} }
