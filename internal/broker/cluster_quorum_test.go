package broker_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/brokertest"
	"holdfast/internal/cluster"
	"holdfast/internal/datadir"
)

// TestClusterQuorumChange: the controller quorum changes while the cluster
// runs (KIP-853). On three nodes and a fourth that joined (broker-only, a
// learner of the metadata group): AddRaftVoter and RemoveRaftVoter answer
// Kafka's errors (an unregistered node, another cluster id, a wrong
// directory id, a node that is no voter, a voter twice); a voter cannot be
// unregistered; node 4 becomes a voter and node 1 an observer, on every
// node's committed membership; with node 2 stopped, removing node 3 is
// refused (one live voter of the two left is no majority). Then node 4
// leads the quorum and node 5 joins with the cluster's original --peers:
// it knows nothing of node 4, whose Raft frames its host would refuse, and
// still gets the metadata log, because it learns node 4's Raft address
// from the controller (DescribeQuorum's RAFT endpoint). Without that (the
// discover loop off) node 5 never registers everywhere. Last, node 4, the
// controller, removes itself and the two voters left elect a leader.
func TestClusterQuorumChange(t *testing.T) {
	nodes := startCluster(t, 3)
	n4 := startBrokerOnly(t, nodes, 4)
	all := append(slices.Clone(nodes), n4)
	clusterID := func() string {
		md, err := nodes[0].Metadata()
		if err != nil || md.ClusterID == nil {
			t.Fatalf("cluster id: %v", err)
		}
		return *md.ClusterID
	}()
	add := func(id int32, dir [16]byte, cid string) (int16, string) {
		req := kmsg.NewPtrAddRaftVoterRequest()
		req.VoterID, req.VoterDirectoryID, req.TimeoutMillis = id, dir, 20000
		if id == 9 {
			req.TimeoutMillis = 300 // waits that long for node 9 to register
		}
		if cid != "" {
			req.ClusterID = kmsg.StringPtr(cid)
		}
		kresp, err := nodes[1].Request(req)
		if err != nil {
			t.Fatalf("AddRaftVoter %d: %v", id, err)
		}
		resp := kresp.(*kmsg.AddRaftVoterResponse)
		return resp.ErrorCode, deref(resp.ErrorMessage)
	}
	remove := func(id int32) (int16, string) {
		req := kmsg.NewPtrRemoveRaftVoterRequest()
		req.VoterID = id
		kresp, err := nodes[2].Request(req)
		if err != nil {
			t.Fatalf("RemoveRaftVoter %d: %v", id, err)
		}
		resp := kresp.(*kmsg.RemoveRaftVoterResponse)
		return resp.ErrorCode, deref(resp.ErrorMessage)
	}
	want := func(what string, code int16, msg string, err *kerr.Error) {
		t.Helper()
		if code != err.Code {
			t.Fatalf("%s: %v %s, want %v", what, kerr.ErrorForCode(code), msg, err)
		}
	}
	code, msg := add(9, [16]byte{}, "")
	want("add unregistered node 9", code, msg, kerr.InvalidRequest)
	code, msg = add(4, [16]byte{}, "not-this-cluster")
	want("add with another cluster id", code, msg, kerr.InconsistentClusterID)
	code, msg = add(4, datadir.NewUUID(), clusterID)
	want("add with a wrong directory id", code, msg, kerr.InvalidRequest)
	code, msg = remove(4)
	want("remove a learner", code, msg, kerr.VoterNotFound)
	ureq := kmsg.NewPtrUnregisterBrokerRequest()
	ureq.BrokerID = 1
	if kresp, err := nodes[0].Request(ureq); err != nil || kresp.(*kmsg.UnregisterBrokerResponse).ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("unregister voter 1: %v %+v, want INVALID_REQUEST", err, kresp)
	}

	code, msg = add(4, n4Dir(t, n4), clusterID)
	want("add node 4", code, msg, &kerr.Error{Message: "NONE"})
	code, msg = add(4, [16]byte{}, "")
	want("add node 4 again", code, msg, kerr.DuplicateVoter)
	awaitQuorum(t, all, []int32{1, 2, 3, 4}, nil)
	code, msg = remove(1)
	want("remove node 1", code, msg, &kerr.Error{Message: "NONE"})
	awaitQuorum(t, all, []int32{2, 3, 4}, []int32{1})
	awaitCluster(t, "every node applied the new quorum", func() error {
		for _, n := range all {
			if v, _ := n.B.QuorumVoters(); !slices.Equal(v, []int32{2, 3, 4}) {
				return fmt.Errorf("node %d: voters %v", n.Cfg.NodeID, v)
			}
		}
		return nil
	})

	// Node 4 leads: move the controller there.
	awaitCluster(t, "node 4 leads the metadata quorum", func() error {
		md, err := n4.Metadata()
		if err != nil {
			return err
		}
		if md.ControllerID == 4 {
			return nil
		}
		for _, n := range all {
			if n.Cfg.NodeID == md.ControllerID {
				n.B.MoveController(4)
			}
		}
		return fmt.Errorf("controller %d", md.ControllerID)
	})
	// The majority guard: with node 2 stopped, removing node 3 from
	// {2, 3, 4} would leave {2, 4} with one live voter: no majority.
	// (The leader counts a voter live until an election timeout without
	// word from it: wait for that first.)
	nodes[1].Stop()
	awaitCluster(t, "node 4 sees node 2 gone", func() error {
		req := kmsg.NewPtrDescribeQuorumRequest()
		rt := kmsg.NewDescribeQuorumRequestTopic()
		rt.Topic = cluster.MetadataTopic
		rt.Partitions = append(rt.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
		req.Topics = append(req.Topics, rt)
		kresp, err := n4.Request(req)
		if err != nil {
			return err
		}
		for _, v := range kresp.(*kmsg.DescribeQuorumResponse).Topics[0].Partitions[0].CurrentVoters {
			if v.ReplicaID == 2 && v.LastFetchTimestamp >= 0 {
				return fmt.Errorf("node 2 still live for the leader")
			}
		}
		return nil
	})
	code, msg = remove(3)
	want("remove node 3 with node 2 down", code, msg, kerr.InvalidRequest)
	nodes[1].Restart()

	// Node 5 joins with the original --peers only; startBrokerOnly waits
	// until every node, node 5 too, lists all five brokers: node 5 has the
	// metadata log, which only node 4, the leader, sends it.
	n5 := startBrokerOnly(t, all, 5)

	// The controller removes itself: it steps down once the change
	// commits, and the two voters left elect a leader.
	code, msg = remove(4)
	want("remove node 4, the controller", code, msg, &kerr.Error{Message: "NONE"})
	awaitQuorum(t, append(all, n5), []int32{2, 3}, []int32{1, 4, 5})
	awaitCluster(t, "a controller among the voters left", func() error {
		md, err := n5.Metadata()
		if err != nil {
			return err
		}
		if md.ControllerID != 2 && md.ControllerID != 3 {
			return fmt.Errorf("controller %d", md.ControllerID)
		}
		return nil
	})
}

// n4Dir is the directory id node n registered.
func n4Dir(t *testing.T, n *brokertest.Node) [16]byte {
	t.Helper()
	d, err := datadir.ParseUUID(n.B.DirectoryID())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// awaitQuorum waits until the metadata quorum's leader reports these
// voters and observers.
func awaitQuorum(t *testing.T, nodes []*brokertest.Node, voters, observers []int32) {
	t.Helper()
	awaitCluster(t, fmt.Sprintf("metadata voters %v observers %v", voters, observers), func() error {
		v, o, err := quorum(nodes, cluster.MetadataTopic)
		if err != nil {
			return err
		}
		if !slices.Equal(v, voters) || !slices.Equal(o, observers) {
			return fmt.Errorf("voters %v observers %v", v, o)
		}
		return nil
	})
}
