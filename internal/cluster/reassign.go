package cluster

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/metadata"
	"holdfast/internal/raft"
	"holdfast/internal/replica"
)

// Partition reassignment. The controller commits a target
// replica set (OpReassign); while it is pending the metadata lists the
// union of the original and target replicas, and every node in it opens a
// replica (bootstrapped with the partition's initial voters, so that it
// replays the membership changes from the log). The partition's Raft
// leader then changes the membership one step at a time: add each new
// replica as a learner, promote it once it has caught up, remove the
// replicas that leave (handing leadership away first if it leaves itself).
// When the voters equal the target it reports to the controller with
// AlterPartition, which commits OpReassignDone; only then do the removed
// nodes close their replicas and delete the data.

// reassignInterval is how often each node looks for work: one membership
// step per partition per round.
const reassignInterval = 200 * time.Millisecond

// reassignLoop runs on every node: it drives the partitions it leads that
// are being reassigned and, on the controller, adds broker-only nodes to
// the metadata group as learners.
func (n *Node) reassignLoop() {
	tick := n.clk.NewTicker(reassignInterval)
	defer tick.Stop()
	// A membership change applied here (a learner added, promoted or a
	// voter removed) is a reason to take the next step at once, not at the
	// next tick: a move is three changes in a row.
	sub := n.host.Subscribe(raft.EventConfChange)
	defer sub.Close()
	// Per group and learner: the commit offset it must reach before it is
	// promoted (the leader's commit offset when it was first seen as a
	// learner), so a learner under continuous produce is promoted once it
	// has replayed what existed when it joined.
	marks := map[uint64]map[uint64]int64{}
	topics := n.meta.NewTopicsCache()
	for {
		select {
		case <-n.stop:
			return
		case <-tick.C:
		case <-sub.Ready():
			sub.Take(nil)
		}
		n.syncMetadataLearners()
		seen := map[uint64]bool{}
		for _, t := range topics.Topics() {
			for _, r := range t.Reassigning {
				g := replica.Group(t.ID, r.Partition)
				seen[g] = true
				if marks[g] == nil {
					marks[g] = map[uint64]int64{}
				}
				n.stepReassignment(t, r, marks[g])
			}
		}
		for g := range marks {
			if !seen[g] {
				delete(marks, g)
			}
		}
	}
}

// stepReassignment makes at most one membership change for partition
// r.Partition of t, if this node leads it.
func (n *Node) stepReassignment(t metadata.Topic, r metadata.Reassignment, marks map[uint64]int64) {
	p := n.replicas.Get(t.Name, r.Partition)
	if p == nil {
		return
	}
	g := p.RaftGroup()
	st, err := n.host.Status(g)
	if err != nil || st.State != raft.StateLeader || st.Failed != "" {
		return
	}
	target := make([]uint64, len(r.Target))
	for i, id := range r.Target {
		target[i] = uint64(id)
	}
	progress := map[uint64]raft.ReplicaStatus{}
	for _, rs := range st.Replicas {
		progress[rs.ID] = rs
	}
	lg := n.log.With("topic", t.Name, "partition", r.Partition, "target", r.Target)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	missing := slices.IndexFunc(target, func(id uint64) bool {
		return !slices.Contains(st.Voters, id) && !slices.Contains(st.Learners, id)
	})
	switch {
	case missing >= 0:
		lg.Info("reassignment: adding a learner", "node", target[missing])
		err = n.host.AddLearner(ctx, g, target[missing])
	case len(st.Learners) > 0:
		l := st.Learners[0]
		if !slices.Contains(target, l) { // a cancelled move's new replica
			lg.Info("reassignment: removing a learner", "node", l)
			err = n.host.RemoveReplica(ctx, g, l)
			break
		}
		mark, ok := marks[l]
		if !ok {
			marks[l] = st.CommitOffset
			return
		}
		pr := progress[l]
		if !pr.Active || pr.State != raft.ProgressReplicate || pr.MatchOffset < mark {
			return
		}
		lg.Info("reassignment: promoting a caught-up learner", "node", l, "match_offset", pr.MatchOffset, "commit_offset", st.CommitOffset)
		err = n.host.AddVoter(ctx, g, l)
		if err == nil {
			delete(marks, l)
		}
	default:
		var leaving []uint64
		for _, v := range st.Voters {
			if !slices.Contains(target, v) {
				leaving = append(leaving, v)
			}
		}
		// Others first: the leader leaves last, once it has nothing
		// else to do, by handing leadership to a target voter.
		if i := slices.IndexFunc(leaving, func(v uint64) bool { return v != st.Node }); i >= 0 {
			lg.Info("reassignment: removing a replica", "node", leaving[i])
			err = n.host.RemoveReplica(ctx, g, leaving[i])
			break
		}
		if len(leaving) > 0 {
			to, best := uint64(0), int64(-1)
			for _, v := range st.Voters {
				if pr := progress[v]; v != st.Node && pr.Active && pr.MatchOffset > best {
					to, best = v, pr.MatchOffset
				}
			}
			if to != 0 {
				lg.Info("reassignment: the leader leaves, transferring leadership", "to", to)
				err = n.host.TransferLeader(g, to)
			}
			break
		}
		err = n.finishReassignment(ctx, t, r)
		if err == nil {
			lg.Info("reassignment: complete")
		}
	}
	if err != nil && !errors.Is(err, raft.ErrConfChangeInProgress) {
		lg.Warn("reassignment step", "err", err)
	}
}

// finishReassignment tells the controller that the partition's voters are
// the target: directly on the controller, with AlterPartition elsewhere.
func (n *Node) finishReassignment(ctx context.Context, t metadata.Topic, r metadata.Reassignment) error {
	cmd := metadata.Command{Op: metadata.OpReassignDone, Name: t.Name, Partition: r.Partition, Target: r.Target}
	if n.IsController() {
		return n.Propose(ctx, cmd)
	}
	ctrl := n.ControllerID()
	if ctrl < 0 {
		return notController()
	}
	req := kmsg.NewPtrAlterPartitionRequest()
	req.BrokerID, req.BrokerEpoch = n.cfg.NodeID, 1
	rt := kmsg.NewAlterPartitionRequestTopic()
	rt.Topic, rt.TopicID = t.Name, t.ID
	rp := kmsg.NewAlterPartitionRequestTopicPartition()
	rp.Partition = r.Partition
	rp.NewISR = slices.Clone(r.Target)
	for _, id := range r.Target {
		e := kmsg.NewAlterPartitionRequestTopicPartitionNewEpochISR()
		e.BrokerID, e.BrokerEpoch = id, -1
		rp.NewEpochISR = append(rp.NewEpochISR, e)
	}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := n.Send(ctx, ctrl, req)
	if err != nil {
		return err
	}
	resp := kresp.(*kmsg.AlterPartitionResponse)
	if resp.ErrorCode != 0 {
		return kerr.ErrorForCode(resp.ErrorCode)
	}
	for _, tp := range resp.Topics {
		for _, pp := range tp.Partitions {
			if pp.ErrorCode != 0 {
				return kerr.ErrorForCode(pp.ErrorCode)
			}
		}
	}
	return nil
}

// syncMetadataLearners, on the controller, adds every registered
// broker-only node (one with its own Raft address, not a metadata voter)
// to the metadata group as a learner - it receives the metadata log and
// never votes - and removes the learners that were unregistered. One
// change per round.
func (n *Node) syncMetadataLearners() {
	select {
	case n.quorumChange <- struct{}{}:
		defer func() { <-n.quorumChange }()
	default:
		return // a voter change is under way: next round
	}
	st, err := n.host.Status(MetadataGroup)
	if err != nil || st.State != raft.StateLeader {
		return
	}
	for _, l := range st.Learners {
		if _, ok := n.meta.Broker(int32(l)); !ok {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := n.host.RemoveReplica(ctx, MetadataGroup, l)
			cancel()
			if err != nil && !errors.Is(err, raft.ErrConfChangeInProgress) {
				n.log.Warn("removing an unregistered broker from the metadata group", "broker", l, "err", err)
			} else if err == nil {
				n.log.Info("unregistered broker removed from the metadata group", "broker", l)
			}
			return
		}
	}
	for _, br := range n.meta.Brokers() {
		id := uint64(br.ID)
		if br.RaftAddr == "" || slices.Contains(st.Voters, id) || slices.Contains(st.Learners, id) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := n.host.AddLearner(ctx, MetadataGroup, id)
		cancel()
		if err != nil && !errors.Is(err, raft.ErrConfChangeInProgress) {
			n.log.Warn("adding a broker to the metadata group", "broker", br.ID, "err", err)
		} else if err == nil {
			n.log.Info("broker-only node added to the metadata group as a learner", "broker", br.ID)
		}
		return
	}
}
