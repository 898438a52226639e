package broker_test

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
)

// initProducerIDs asks node for k fresh idempotent producer ids.
func initProducerIDs(t *testing.T, n *brokertest.Node, k int) []int64 {
	t.Helper()
	var out []int64
	for len(out) < k {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.ProducerID, req.ProducerEpoch = -1, -1
		var resp *kmsg.InitProducerIDResponse
		brokertest.Await(t, fmt.Sprintf("a producer id from node %d", n.Cfg.NodeID), func() error {
			r, err := n.Request(req)
			if err != nil {
				return err
			}
			resp = r.(*kmsg.InitProducerIDResponse)
			return kerr.ErrorForCode(resp.ErrorCode)
		})
		if resp.ProducerEpoch != 0 || resp.ProducerID < 0 {
			t.Fatalf("node %d: InitProducerId gave id %d epoch %d", n.Cfg.NodeID, resp.ProducerID, resp.ProducerEpoch)
		}
		out = append(out, resp.ProducerID)
	}
	return out
}

// txnProducerID runs a transactional InitProducerId for id through the
// cluster (the coordinator may be any node).
func txnProducerID(t *testing.T, nodes []*brokertest.Node, id string) int64 {
	t.Helper()
	cl := nodes[0].Client()
	var pid int64
	brokertest.Await(t, "a transactional producer id", func() error {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = kmsg.StringPtr(id)
		req.TransactionTimeoutMillis = 60000
		req.ProducerID, req.ProducerEpoch = -1, -1
		resp, err := req.RequestWith(t.Context(), cl)
		if err != nil {
			return err
		}
		pid = resp.ProducerID
		return kerr.ErrorForCode(resp.ErrorCode)
	})
	return pid
}

// TestClusterProducerIDsNeverRepeat: producer ids come from blocks
// committed through the metadata log, so no node hands out an id twice -
// across restarts, a full-cluster restart and a node whose data directory
// was wiped (issue 10: a wiped node handed out ids it had handed out
// before, and a new producer's records were answered as duplicates).
func TestClusterProducerIDsNeverRepeat(t *testing.T) {
	nodes := startCluster(t, 3, func(c *broker.Config) {
		c.OffsetsTopicPartitions = 2
		c.Txn.StatePartitions = 2
	})
	seen := map[int64]string{}
	note := func(what string, ids ...int64) {
		t.Helper()
		for _, id := range ids {
			if prev, dup := seen[id]; dup {
				t.Fatalf("producer id %d handed out twice: %s, then %s", id, prev, what)
			}
			seen[id] = what
		}
	}
	collect := func(round string) {
		t.Helper()
		for _, n := range nodes {
			note(fmt.Sprintf("%s, node %d", round, n.Cfg.NodeID), initProducerIDs(t, n, 5)...)
		}
	}
	collect("first start")
	note("transactional id a", txnProducerID(t, nodes, "pid-a"))

	nodes[1].Restart()
	collect("after node 2 restarted")

	nodes[2].Wipe()
	nodes[2].Restart()
	brokertest.Await(t, "the wiped node registered again", func() error {
		if nodes[2].B.RegisteredBrokers() != 3 {
			return fmt.Errorf("node 3 knows %d brokers", nodes[2].B.RegisteredBrokers())
		}
		return nil
	})
	collect("after node 3 was wiped")
	note("transactional id b", txnProducerID(t, nodes, "pid-b"))

	for _, n := range nodes {
		n.Stop()
	}
	for _, n := range nodes {
		n.Start()
	}
	collect("after a full restart")
	note("transactional id c", txnProducerID(t, nodes, "pid-c"))
	t.Logf("%d distinct producer ids", len(seen))
}

// TestSingleNodeProducerIDsSurviveRestart: one node counts producer ids in
// its data directory; a restart (clean or not) never gives one out again.
func TestSingleNodeProducerIDsSurviveRestart(t *testing.T) {
	n := brokertest.Start(t)
	seen := map[int64]bool{}
	for round := range 3 {
		for _, id := range initProducerIDs(t, n, 20) {
			if seen[id] {
				t.Fatalf("round %d: producer id %d handed out twice", round, id)
			}
			seen[id] = true
		}
		n.Restart()
	}
}
