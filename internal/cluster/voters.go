package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/datadir"
	"holdfast/internal/kafkaerr"
	"holdfast/internal/raft"
)

// Changing the controller quorum while it runs (KIP-853's AddRaftVoter and
// RemoveRaftVoter). The quorum is the metadata Raft group's voter set: it
// starts as --peers and then is whatever the committed membership changes
// made it, journaled by every node's Raft host with the group (a node
// restarted with its old --peers still votes, or not, as committed). A
// node joins the metadata group as a learner first (a broker-only node,
// `serve --join`, is added as one when it registers), so a new voter never
// counts towards a quorum before it holds the log: AddVoter promotes it
// only once it has caught up. Every change is one Raft conf change, Raft's
// single-server protocol, one at a time (quorumChange): a majority of the
// old voters and a majority of the new ones always overlap.

// MaxQuorumChangeWait bounds how long AddVoter waits for the new voter to
// catch up, whatever the request's timeout says.
const MaxQuorumChangeWait = 2 * time.Minute

// QuorumVoters is the controller quorum as this node applied it: the
// metadata group's voters and learners (observers, in Kafka's words).
func (n *Node) QuorumVoters() (voters, learners []int32) {
	v, l, err := n.host.Members(MetadataGroup)
	if err != nil {
		return nil, nil
	}
	for _, id := range v {
		voters = append(voters, int32(id))
	}
	for _, id := range l {
		learners = append(learners, int32(id))
	}
	slices.Sort(voters)
	slices.Sort(learners)
	return voters, learners
}

// lockQuorum takes the one-change-at-a-time admission, or fails when ctx
// ends first.
func (n *Node) lockQuorum(ctx context.Context) (func(), error) {
	select {
	case n.quorumChange <- struct{}{}:
		return func() { <-n.quorumChange }, nil
	case <-ctx.Done():
		return nil, kafkaerr.New(kerr.RequestTimedOut, "another controller quorum change is in progress")
	}
}

// checkVoterDir refuses a directory id that is set and differs from the
// one broker id registered (KIP-853 names a voter by id and directory, so
// a replaced disk under the same id is another voter).
func (n *Node) checkVoterDir(id int32, dir datadir.UUID, code *kerr.Error) error {
	if dir.IsZero() {
		return nil
	}
	br, ok := n.meta.Broker(id)
	if !ok || br.DirID != dir.String() {
		reg := "none"
		if ok {
			reg = br.DirID
		}
		return kafkaerr.New(code, "node %d's registered directory id is %s, not %s", id, reg, dir)
	}
	return nil
}

// AddVoter makes node id a voter of the controller quorum (on the
// controller: NOT_CONTROLLER elsewhere). The node must be registered (a
// new node starts with `serve --join`; one not registered before ctx ends:
// INVALID_REQUEST); it is added as a learner if it is
// not one yet, and promoted once the leader sees it replicating, heard from
// within an election timeout, with everything acknowledged that was
// committed when the request came. A node that does not catch up before
// ctx ends is left a learner: REQUEST_TIMED_OUT. A voter already:
// DUPLICATE_VOTER.
func (n *Node) AddVoter(ctx context.Context, id int32, dir datadir.UUID) error {
	if !n.IsController() {
		return kafkaerr.New(kerr.NotController, "this node is not the controller")
	}
	if id <= 0 || id >= 1<<ProducerIDNodeBits {
		return kafkaerr.New(kerr.InvalidRequest, "voter id %d: must be in 1..%d", id, 1<<ProducerIDNodeBits-1)
	}
	ctx, cancel := context.WithTimeout(ctx, MaxQuorumChangeWait)
	defer cancel()
	// A node that was just started may not be registered yet (it serves
	// before its registration commits): wait for it as for its catch-up.
	for {
		if _, ok := n.meta.Broker(id); ok {
			break
		}
		select {
		case <-ctx.Done():
			return kafkaerr.New(kerr.InvalidRequest, "node %d is not registered: start it first (holdfast serve --node-id %d --raft-listen ... --join ...)", id, id)
		case <-n.clk.After(100 * time.Millisecond):
		}
	}
	if err := n.checkVoterDir(id, dir, kerr.InvalidRequest); err != nil {
		return err
	}
	unlock, err := n.lockQuorum(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	voters, learners, err := n.host.Members(MetadataGroup)
	if err != nil {
		return err
	}
	if slices.Contains(voters, uint64(id)) {
		return kafkaerr.New(kerr.DuplicateVoter, "node %d is already a voter", id)
	}
	if !slices.Contains(learners, uint64(id)) {
		if err := n.host.AddLearner(ctx, MetadataGroup, uint64(id)); err != nil {
			return n.quorumErr("adding node as a learner", err)
		}
		n.log.Info("controller quorum: node added to the metadata group as a learner", "node", id)
	}
	st, err := n.host.Status(MetadataGroup)
	if err != nil {
		return err
	}
	mark := st.CommitOffset
	tick := n.clk.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := n.host.Status(MetadataGroup)
		if err != nil {
			return err
		}
		if st.State != raft.StateLeader {
			return kafkaerr.New(kerr.NotController, "lost the controller role while node %d caught up", id)
		}
		i := slices.IndexFunc(st.Replicas, func(r raft.ReplicaStatus) bool { return r.ID == uint64(id) })
		if i >= 0 {
			r := st.Replicas[i]
			if r.Active && r.State == raft.ProgressReplicate && r.MatchOffset >= mark {
				break
			}
		}
		select {
		case <-ctx.Done():
			at := int64(-1)
			if i >= 0 {
				at = st.Replicas[i].MatchOffset
			}
			return kafkaerr.New(kerr.RequestTimedOut, "node %d did not catch up with the metadata log in time (it has up to offset %d of %d); it stays an observer", id, at, mark)
		case <-tick.C:
		}
	}
	if err := n.host.AddVoter(ctx, MetadataGroup, uint64(id)); err != nil {
		return n.quorumErr("promoting node to voter", err)
	}
	n.log.Info("controller quorum: voter added", "node", id, "voters", n.voterList())
	return nil
}

// RemoveVoter takes node id out of the controller quorum (on the
// controller). A node still registered becomes a learner - if it runs, it
// goes on receiving the metadata as any broker-only node, and `holdfast
// cluster unregister` removes it for good once it holds no replica -, an
// unregistered one leaves the group. Refused: a node that is not a voter
// (VOTER_NOT_FOUND), the last voter, and a change that would leave fewer
// live voters than a majority of the remaining ones (INVALID_REQUEST: the
// quorum would stop committing; bring a voter back or add one first). When
// the controller removes itself it steps down once the change commits and
// the others elect a leader.
func (n *Node) RemoveVoter(ctx context.Context, id int32, dir datadir.UUID) error {
	if !n.IsController() {
		return kafkaerr.New(kerr.NotController, "this node is not the controller")
	}
	if err := n.checkVoterDir(id, dir, kerr.VoterNotFound); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, MaxQuorumChangeWait)
	defer cancel()
	unlock, err := n.lockQuorum(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := n.host.Status(MetadataGroup)
	if err != nil {
		return err
	}
	if st.State != raft.StateLeader {
		return kafkaerr.New(kerr.NotController, "this node is not the controller")
	}
	if !slices.Contains(st.Voters, uint64(id)) {
		return kafkaerr.New(kerr.VoterNotFound, "node %d is not a voter", id)
	}
	if len(st.Voters) == 1 {
		return kafkaerr.New(kerr.InvalidRequest, "node %d is the last voter", id)
	}
	live := 0
	for _, r := range st.Replicas {
		if r.ID != uint64(id) && !r.Learner && r.Active {
			live++
		}
	}
	if rest := len(st.Voters) - 1; live < rest/2+1 {
		return kafkaerr.New(kerr.InvalidRequest, "removing node %d would leave %d voters of which only %d are live: not a majority, the quorum would stop; restart or add a voter first", id, rest, live)
	}
	if _, registered := n.meta.Broker(id); registered {
		err = n.host.AddLearner(ctx, MetadataGroup, uint64(id)) // a voter made a learner
	} else {
		err = n.host.RemoveReplica(ctx, MetadataGroup, uint64(id))
	}
	if err != nil {
		return n.quorumErr("removing voter", err)
	}
	n.log.Info("controller quorum: voter removed", "node", id, "voters", n.voterList())
	return nil
}

func (n *Node) voterList() []int32 {
	v, _ := n.QuorumVoters()
	return v
}

// quorumErr maps a failed conf change to a Kafka error.
func (n *Node) quorumErr(what string, err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrProposalLost):
		return kafkaerr.New(kerr.NotController, "%s: lost the controller role: %v", what, err)
	case errors.Is(err, raft.ErrConfChangeInProgress):
		return kafkaerr.New(kerr.RequestTimedOut, "%s: another membership change was pending; retry", what)
	}
	return kafkaerr.New(kerr.RequestTimedOut, "%s: %v", what, fmt.Sprint(err))
}

// RaftAddrOf is node id's Raft address as this node knows it: its own, or
// where its Raft host sends that peer's messages (--peers, a registration,
// or learned from the controller: discoverQuorum).
func (n *Node) RaftAddrOf(id int32) (string, bool) {
	if id == n.cfg.NodeID {
		if n.BrokerOnly() {
			a := n.registration().RaftAddr
			return a, a != ""
		}
		a := n.cfg.Peers[id]
		return a, a != ""
	}
	return n.host.PeerAddr(uint64(id))
}

// Learning the quorum's addresses. Every node knows the Raft addresses of
// --peers and of the nodes whose registrations it applied. A node that
// was down while a node joined and became a voter - or leader - does not:
// its Raft host refuses that node's frames (a frame from a node that is
// not a peer), so it would never hear the log that names it. A node that
// hears no metadata leader for leaderlessFor asks the controller, through
// any broker it knows, for the quorum (DescribeQuorum v2 names each node's
// Raft endpoint, listener RAFT) and adds the members it lacks.
const (
	leaderlessFor   = 3 * time.Second
	discoverTimeout = 3 * time.Second
)

func (n *Node) discoverLoop(stop <-chan struct{}) {
	tick := n.clk.NewTicker(time.Second)
	defer tick.Stop()
	var since time.Time
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		l, err := n.host.Leadership(MetadataGroup)
		if err != nil || l.Leader != 0 {
			since = time.Time{}
			continue
		}
		if since.IsZero() {
			since = n.clk.Now()
			continue
		}
		if n.clk.Now().Sub(since) < leaderlessFor {
			continue
		}
		since = n.clk.Now() // at most one round per leaderlessFor
		if err := n.discoverQuorum(); err != nil {
			n.log.Debug("asking the cluster for the controller quorum", "err", err)
		}
	}
}

// discoverQuorum asks the controller, found through the brokers this node
// knows, for the quorum's members and their Raft addresses, and adds those
// its Raft host has no address for.
func (n *Node) discoverQuorum() error {
	seeds := slices.Clone(n.cfg.Join)
	for _, br := range n.meta.Brokers() {
		if br.ID == n.cfg.NodeID {
			continue
		}
		if addr, ok := n.BrokerAddr(br); ok {
			seeds = append(seeds, addr)
		}
	}
	if len(seeds) == 0 {
		return errors.New("no broker known")
	}
	ctx, cancel := context.WithTimeout(context.Background(), discoverTimeout)
	defer cancel()
	cl, err := n.cfg.Dial(seeds, kgo.DialTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	var ctrl string
	for _, b := range md.Brokers {
		if b.NodeID == md.ControllerID && b.NodeID != n.cfg.NodeID {
			ctrl = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
		}
	}
	if ctrl == "" {
		return fmt.Errorf("the brokers name no controller (%d)", md.ControllerID)
	}
	cc, err := n.cfg.Dial([]string{ctrl}, kgo.DialTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cc.Close()
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = MetadataTopic
	rt.Partitions = append(rt.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
	req.Topics = append(req.Topics, rt)
	kresp, err := cc.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		return err
	}
	resp := kresp.(*kmsg.DescribeQuorumResponse)
	if resp.ErrorCode != 0 {
		return kerr.ErrorForCode(resp.ErrorCode)
	}
	for _, nd := range resp.Nodes {
		if nd.NodeID == n.cfg.NodeID {
			continue
		}
		for _, l := range nd.Listeners {
			if l.Name != RaftListenerName || l.Host == "" || l.Port == 0 {
				continue
			}
			// Only members this node has no address for: a known one's
			// address changes with its registration, which reaches this
			// node through the log whatever address it sends to.
			if _, ok := n.host.PeerAddr(uint64(nd.NodeID)); ok {
				continue
			}
			addr := net.JoinHostPort(l.Host, strconv.Itoa(int(l.Port)))
			n.log.Info("learned a controller quorum member's Raft address from the controller", "node", nd.NodeID, "raft_addr", addr)
			n.host.SetPeer(uint64(nd.NodeID), addr)
		}
	}
	return nil
}
