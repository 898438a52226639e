package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

// cutConn fails every read and write once its node's Kafka clients are
// cut: the connection a heartbeat already holds breaks too.
type cutConn struct {
	net.Conn
	cut *atomic.Bool
}

var errCut = errors.New("cut by the test")

func (c cutConn) Read(p []byte) (int, error) {
	if c.cut.Load() {
		return 0, errCut
	}
	return c.Conn.Read(p)
}

func (c cutConn) Write(p []byte) (int, error) {
	if c.cut.Load() {
		return 0, errCut
	}
	return c.Conn.Write(p)
}

// TestFencedRunningBrokerHandsOffLeadership: a broker whose heartbeats no
// longer reach the controller while its Raft links work is fenced, and
// Metadata names no fenced leader; the partitions it led must get other
// leaders (as Kafka's controller elects them), not answer
// LEADER_NOT_AVAILABLE until it is unfenced. Before, they did for as long
// as the fault lasted.
func TestFencedRunningBrokerHandsOffLeadership(t *testing.T) {
	var cut [4]atomic.Bool // by node id
	nodes := brokertest.StartCluster(t, 3, func(c *broker.Config, _ *wire.Limits) {
		c.BrokerHeartbeatInterval, c.BrokerSessionTimeout = 200*time.Millisecond, 2*time.Second
		id := c.NodeID
		var d net.Dialer
		c.Dialer = func(ctx context.Context, network, host string) (net.Conn, error) {
			if cut[id].Load() {
				return nil, errCut
			}
			conn, err := d.DialContext(ctx, network, host)
			if err != nil {
				return nil, err
			}
			return cutConn{conn, &cut[id]}, nil
		}
	})
	brokertest.Await(t, "3 unfenced brokers", func() error {
		md, err := nodes[0].Metadata()
		if err != nil {
			return err
		}
		if len(md.Brokers) != 3 {
			return fmt.Errorf("%d unfenced brokers", len(md.Brokers))
		}
		return nil
	})
	const topic, partitions = "fenced-handoff", 6
	brokertest.CreateClusterTopic(t, nodes, topic, partitions, 3, nil)

	// The victim: a node that leads some of the partitions and is not the
	// controller (the controller never fences itself).
	var victim, ctrl int32
	brokertest.Await(t, "every partition led, by more than the controller", func() error {
		md, err := nodes[0].Metadata(topic)
		if err != nil {
			return err
		}
		ctrl, victim = md.ControllerID, 0
		for _, p := range md.Topics[0].Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 {
				return fmt.Errorf("partition %d: %v, leader %d", p.Partition, kerr.ErrorForCode(p.ErrorCode), p.Leader)
			}
			if p.Leader != ctrl {
				victim = p.Leader
			}
		}
		if victim == 0 {
			return fmt.Errorf("the controller %d leads every partition", ctrl)
		}
		return nil
	})
	t.Logf("controller %d; cutting the heartbeats of broker %d", ctrl, victim)
	cut[victim].Store(true)

	other := nodes[ctrl-1]
	brokertest.Await(t, fmt.Sprintf("broker %d fenced, and every partition led by an unfenced broker", victim), func() error {
		md, err := other.Metadata(topic)
		if err != nil {
			return err
		}
		for _, b := range md.Brokers {
			if b.NodeID == victim {
				return fmt.Errorf("broker %d not fenced yet", victim)
			}
		}
		for _, p := range md.Topics[0].Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 || p.Leader == victim {
				return fmt.Errorf("partition %d: %v, leader %d", p.Partition, kerr.ErrorForCode(p.ErrorCode), p.Leader)
			}
		}
		return nil
	})

	cut[victim].Store(false)
	brokertest.Await(t, fmt.Sprintf("broker %d unfenced", victim), func() error {
		md, err := other.Metadata(topic)
		if err != nil {
			return err
		}
		for _, b := range md.Brokers {
			if b.NodeID == victim {
				return nil
			}
		}
		return fmt.Errorf("broker %d still fenced", victim)
	})
}
