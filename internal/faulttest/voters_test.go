package faulttest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/testwait"
)

// TestClusterReplaceControllerUnderLoad replaces a controller quorum voter
// whose machine is gone, online, as an operator would (issue 29, KIP-853):
// three nodes under idempotent acks=all load; the controller is killed
// (SIGKILL) for good; a new node joins at a new address (`serve --join`;
// no other node is restarted or given new flags), `holdfast cluster
// add-controller` makes it a voter, `remove-controller` takes the dead one
// out, and `holdfast topic reassign` moves the dead node's replicas to the
// new one. Then another of the original voters is killed: the quorum -
// the new node and the one original survivor, 2 of 3 voters - must go on
// committing (a topic config change commits, the producer is acknowledged
// again), and nothing acknowledged may be lost, doubled or reordered.
// Last, the removed node restarts: it never heard of the new node, which
// may lead the quorum, and must still catch up (as an observer).
// Without the quorum change the last kill leaves 1 of 3 original voters
// and nothing commits.
func TestClusterReplaceControllerUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster fault tests are skipped in -short mode")
	}
	if ok, why := ClusterModeAvailable(t); !ok {
		t.Skip("cluster mode not available yet: " + why)
	}
	began := time.Now()
	c := Start(t, Options{Nodes: 3, Cluster: true, Spare: 1})
	const topic = "voters"
	const partitions = 3
	createTopic(t, c, topic, partitions, 3)
	requireInSync(t, c, topic, 30*time.Second)
	ch := NewChecker(t, topic)
	p := ch.StartProducer(clusterProducer(t, c, topic), 1000)
	ch.WaitAcked(300, 30*time.Second, "before the first kill")

	gone := int(controllerOf(t, c, nil))
	t.Logf("SIGKILL node %d, the controller, for good (%d acknowledged)", gone, ch.Acked())
	c.Kill(gone)
	// Everything from here is reached through the nodes still alive.
	alive := func() []int {
		var ids []int
		for _, n := range c.Nodes {
			if n.Running() {
				ids = append(ids, n.ID)
			}
		}
		return ids
	}

	added := c.Join()
	t.Logf("node %d joined at %s (raft %s)", added, c.Node(added).Addr, c.Node(added).RaftAddr)
	runCLI(t, c, alive(), "node "+strconv.Itoa(added)+" is a voter", "cluster", "add-controller", "--controller-id", strconv.Itoa(added))
	runCLI(t, c, alive(), "no longer a voter", "cluster", "remove-controller", "--controller-id", strconv.Itoa(gone))
	q := describeMetadataQuorum(t, c, alive())
	if want := without([]int32{1, 2, 3, int32(added)}, int32(gone)); !slices.Equal(q.voters, want) {
		t.Fatalf("voters after the change: %v, want %v", q.voters, want)
	}
	if !slices.Contains(q.observers, int32(gone)) {
		t.Fatalf("the removed voter %d is not an observer: %v", gone, q.observers)
	}

	// The dead node's partition replicas stay assigned until moved.
	md, err := c.Admin().Metadata(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, pd := range md.Topics[topic].Partitions.Sorted() {
		target := slices.Clone(pd.Replicas)
		for i, r := range target {
			if r == int32(gone) {
				target[i] = int32(added)
			}
		}
		var ids []string
		for _, r := range target {
			ids = append(ids, strconv.Itoa(int(r)))
		}
		runCLI(t, c, alive(), "moving", "topic", "reassign", topic, "--partition", strconv.Itoa(int(pd.Partition)), "--replicas", strings.Join(ids, ","))
	}
	waitReassigned(t, c, topic, int32(gone), 30*time.Second)
	ch.WaitAcked(300, 30*time.Second, "after the quorum change")

	// Another original voter goes: the controller if it is one, else the
	// other original survivor.
	second := 0
	if ctl := int(controllerOf(t, c, alive())); ctl != added && slices.Contains(alive(), ctl) {
		second = ctl
	} else {
		for _, id := range alive() {
			if id != added {
				second = id
				break
			}
		}
	}
	t.Logf("SIGKILL node %d, an original voter (%d acknowledged)", second, ch.Acked())
	c.Kill(second)
	ch.WaitAcked(300, 30*time.Second, "after losing a second original voter")
	// The metadata quorum commits: a topic config change goes through.
	adm := kadm.NewClient(c.Client())
	testwait.For(t, 30*time.Second, fmt.Sprintf("the metadata quorum to commit a config change after node %d died", second), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("86400000")}}, topic)
		if err == nil {
			_, err = resp.On(topic, nil)
		}
		return err
	})
	if q := describeMetadataQuorum(t, c, alive()); q.leader == int32(second) || q.leader == int32(gone) {
		t.Fatalf("quorum leader %d is a dead node", q.leader)
	}
	// The removed voter's machine comes back after all: it missed the
	// new node's registration, and the quorum's leader may be that node,
	// whose frames its Raft host would refuse; it learns the address from
	// the controller and catches up as an observer.
	c.Restart(gone)
	waitObserverCaughtUp(t, c, alive(), int32(gone), 30*time.Second)
	p.Stop(30 * time.Second)
	res, err := ch.Check(strings.Join(addrs(c, alive()), ","), 60*time.Second)
	RequireOK(t, res, err)
	t.Logf("took %v", time.Since(began).Round(time.Millisecond))
}

func without(ids []int32, drop int32) []int32 {
	return slices.DeleteFunc(slices.Clone(ids), func(id int32) bool { return id == drop })
}

func addrs(c *Cluster, ids []int) []string {
	var out []string
	for _, id := range ids {
		out = append(out, c.Node(id).Addr)
	}
	return out
}

// runCLI runs the holdfast binary's client command args against the nodes
// ids, as an operator would, and fails unless it succeeds and prints want.
func runCLI(t *testing.T, c *Cluster, ids []int, want string, args ...string) {
	t.Helper()
	args = append(args, "--bootstrap-server", strings.Join(addrs(c, ids), ","), "--timeout", "30s")
	out, err := exec.Command(Binary(t), args...).CombinedOutput()
	t.Logf("holdfast %s:\n%s", strings.Join(args, " "), out)
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("holdfast %s: %v (want %q in the output)", strings.Join(args, " "), err, want)
	}
}

// controllerOf is the controller as the nodes ids (all if nil) say,
// asking again while there is none.
func controllerOf(t *testing.T, c *Cluster, ids []int) int32 {
	t.Helper()
	if ids == nil {
		for _, n := range c.Nodes {
			ids = append(ids, n.ID)
		}
	}
	adm := kadm.NewClient(c.Client(kgo.SeedBrokers(addrs(c, ids)...)))
	ctl := int32(-1)
	testwait.For(t, 30*time.Second, "a controller", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		md, err := adm.BrokerMetadata(ctx)
		if err == nil && md.Controller < 0 {
			err = errors.New("no controller in the metadata")
		}
		if err == nil {
			ctl = md.Controller
		}
		return err
	})
	return ctl
}

type quorumView struct {
	leader            int32
	voters, observers []int32
	hw                int64
	ends              map[int32]int64 // each replica's acknowledged log end
}

// waitObserverCaughtUp waits until the metadata quorum's leader reports
// observer id with everything up to the high watermark.
func waitObserverCaughtUp(t *testing.T, c *Cluster, ids []int, id int32, timeout time.Duration) {
	t.Helper()
	testwait.Until(t, timeout, fmt.Sprintf("node %d to catch up with the metadata log as an observer", id), func() bool {
		q := describeMetadataQuorum(t, c, ids)
		end, ok := q.ends[id]
		return ok && slices.Contains(q.observers, id) && end >= q.hw
	})
}

// describeMetadataQuorum asks the nodes ids for the metadata quorum until
// its leader answers.
func describeMetadataQuorum(t *testing.T, c *Cluster, ids []int) quorumView {
	t.Helper()
	var q quorumView
	testwait.For(t, 30*time.Second, "an answer from the metadata quorum's leader", func() error {
		var last error
		for _, id := range ids {
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.Node(id).Addr))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			req := kmsg.NewPtrDescribeQuorumRequest()
			rt := kmsg.NewDescribeQuorumRequestTopic()
			rt.Topic = "__cluster_metadata"
			rt.Partitions = append(rt.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl)
			cancel()
			cl.Close()
			switch {
			case err != nil:
				last = fmt.Errorf("node %d: %w", id, err)
			case len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1:
				last = fmt.Errorf("node %d: no partition in the answer", id)
			case resp.Topics[0].Partitions[0].ErrorCode != 0:
				last = fmt.Errorf("node %d: %w", id, kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode))
			default:
				p := resp.Topics[0].Partitions[0]
				q = quorumView{leader: p.LeaderID, hw: p.HighWatermark, ends: map[int32]int64{}}
				for _, v := range p.CurrentVoters {
					q.voters = append(q.voters, v.ReplicaID)
					q.ends[v.ReplicaID] = v.LogEndOffset
				}
				for _, o := range p.Observers {
					q.observers = append(q.observers, o.ReplicaID)
					q.ends[o.ReplicaID] = o.LogEndOffset
				}
				slices.Sort(q.voters)
				slices.Sort(q.observers)
				t.Logf("metadata quorum: leader %d, voters %v, observers %v", q.leader, q.voters, q.observers)
				return nil
			}
		}
		return last
	})
	return q
}

// waitReassigned waits until no replica of topic is on node gone and no
// reassignment is pending.
func waitReassigned(t *testing.T, c *Cluster, topic string, gone int32, timeout time.Duration) {
	t.Helper()
	adm := c.Admin()
	var last string
	if !testwait.Poll(timeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		md, err := adm.Metadata(ctx, topic)
		var pending kadm.ListPartitionReassignmentsResponses
		if err == nil {
			pending, err = adm.ListPartitionReassignments(ctx, kadm.TopicsSet{topic: nil})
		}
		cancel()
		if err == nil {
			done := len(pending) == 0
			last = ""
			for _, pd := range md.Topics[topic].Partitions.Sorted() {
				last += fmt.Sprintf(" p%d replicas %v;", pd.Partition, pd.Replicas)
				if slices.Contains(pd.Replicas, gone) {
					done = false
				}
			}
			return done
		}
		last = err.Error()
		return false
	}) {
		t.Fatalf("replicas of %s still on node %d after %v:%s", topic, gone, timeout, last)
	}
	t.Logf("reassigned:%s", last)
}
