package broker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/controller"
	"holdfast/internal/raft"
	"holdfast/internal/replica"
	"holdfast/internal/wire"
)

// Partition reassignment (cluster mode). The controller commits a target
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

func init() {
	registerInternal(kmsg.AlterPartition, 0, 3, (*Broker).handleAlterPartition)
}

// reassignInterval is how often each node looks for work: one membership
// step per partition per round.
const reassignInterval = 200 * time.Millisecond

// reassignLoop runs on every node: it drives the partitions it leads that
// are being reassigned and, on the controller, adds broker-only nodes to
// the metadata group as learners.
func (c *cluster) reassignLoop() {
	defer c.wg.Done()
	tick := time.NewTicker(reassignInterval)
	defer tick.Stop()
	// Per group and learner: the commit offset it must reach before it is
	// promoted (the leader's commit offset when it was first seen as a
	// learner), so a learner under continuous produce is promoted once it
	// has replayed what existed when it joined.
	marks := map[uint64]map[uint64]int64{}
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		c.syncMetadataLearners()
		seen := map[uint64]bool{}
		for _, t := range c.b.meta.Topics() {
			for _, r := range t.Reassigning {
				g := replica.Group(t.ID, r.Partition)
				seen[g] = true
				if marks[g] == nil {
					marks[g] = map[uint64]int64{}
				}
				c.stepReassignment(t, r, marks[g])
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
func (c *cluster) stepReassignment(t controller.Topic, r controller.Reassignment, marks map[uint64]int64) {
	b := c.b
	p := b.replicas.Get(t.Name, r.Partition)
	if p == nil {
		return
	}
	g := p.RaftGroup()
	st, err := c.host.Status(g)
	if err != nil || st.State != "StateLeader" || st.Failed != "" {
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
	lg := b.log.With("topic", t.Name, "partition", r.Partition, "target", r.Target)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	missing := slices.IndexFunc(target, func(id uint64) bool {
		return !slices.Contains(st.Voters, id) && !slices.Contains(st.Learners, id)
	})
	switch {
	case missing >= 0:
		lg.Info("reassignment: adding a learner", "node", target[missing])
		err = c.host.AddLearner(ctx, g, target[missing])
	case len(st.Learners) > 0:
		l := st.Learners[0]
		if !slices.Contains(target, l) { // a cancelled move's new replica
			lg.Info("reassignment: removing a learner", "node", l)
			err = c.host.RemoveReplica(ctx, g, l)
			break
		}
		mark, ok := marks[l]
		if !ok {
			marks[l] = st.CommitOffset
			return
		}
		pr := progress[l]
		if !pr.Active || pr.State != "StateReplicate" || pr.MatchOffset < mark {
			return
		}
		lg.Info("reassignment: promoting a caught-up learner", "node", l, "match_offset", pr.MatchOffset, "commit_offset", st.CommitOffset)
		err = c.host.AddVoter(ctx, g, l)
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
			err = c.host.RemoveReplica(ctx, g, leaving[i])
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
				err = c.host.TransferLeader(g, to)
			}
			break
		}
		err = c.finishReassignment(ctx, t, r)
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
func (c *cluster) finishReassignment(ctx context.Context, t controller.Topic, r controller.Reassignment) error {
	cmd := controller.Command{Op: controller.OpReassignDone, Name: t.Name, Partition: r.Partition, Target: r.Target}
	if c.isController() {
		return c.propose(ctx, cmd)
	}
	cl, err := c.forwarder()
	if err != nil {
		return err
	}
	req := kmsg.NewPtrAlterPartitionRequest()
	req.BrokerID, req.BrokerEpoch = c.b.cfg.NodeID, 1
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
	resp, err := req.RequestWith(ctx, cl) // kgo routes it to the controller
	if err != nil {
		return err
	}
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

// handleAlterPartition is Kafka's broker-to-controller AlterPartition,
// used here for one thing: a partition leader reporting that the voters of
// a reassigned partition are its target (NewISR = the target). Only the
// controller accepts it; the target must be the current one.
func (b *Broker) handleAlterPartition(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AlterPartitionRequest)
	resp := req.ResponseKind().(*kmsg.AlterPartitionResponse)
	c := b.cluster
	switch {
	case c.controllerOnly() != 0:
		resp.ErrorCode = c.controllerOnly()
		return wire.Respond(resp)
	}
	return func(ctx context.Context) kmsg.Response {
		for _, rt := range req.Topics {
			st := kmsg.NewAlterPartitionResponseTopic()
			st.Topic, st.TopidID = rt.Topic, rt.TopicID
			t, ok := b.meta.Topic(rt.Topic)
			if req.Version >= 2 {
				t, ok = b.meta.TopicByID(rt.TopicID)
			}
			for _, rp := range rt.Partitions {
				sp := kmsg.NewAlterPartitionResponseTopicPartition()
				sp.Partition, sp.LeaderID, sp.LeaderEpoch = rp.Partition, -1, -1
				target := rp.NewISR
				if req.Version >= 3 {
					target = nil
					for _, e := range rp.NewEpochISR {
						target = append(target, e.BrokerID)
					}
				}
				if !ok {
					sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				} else {
					err := c.propose(ctx, controller.Command{Op: controller.OpReassignDone, Name: t.Name, Partition: rp.Partition, Target: target})
					sp.ErrorCode, _ = kafkaError(err)
					sp.ISR = target
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	}
}

// syncMetadataLearners, on the controller, adds every registered
// broker-only node (one with its own Raft address, not a metadata voter)
// to the metadata group as a learner - it receives the metadata log and
// never votes - and removes the learners that were unregistered. One
// change per round.
func (c *cluster) syncMetadataLearners() {
	st, err := c.host.Status(metadataGroup)
	if err != nil || st.State != "StateLeader" {
		return
	}
	for _, l := range st.Learners {
		if _, ok := c.b.meta.Broker(int32(l)); !ok {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := c.host.RemoveReplica(ctx, metadataGroup, l)
			cancel()
			if err != nil && !errors.Is(err, raft.ErrConfChangeInProgress) {
				c.b.log.Warn("removing an unregistered broker from the metadata group", "broker", l, "err", err)
			} else if err == nil {
				c.b.log.Info("unregistered broker removed from the metadata group", "broker", l)
			}
			return
		}
	}
	for _, br := range c.b.meta.Brokers() {
		id := uint64(br.ID)
		if br.RaftAddr == "" || slices.Contains(st.Voters, id) || slices.Contains(st.Learners, id) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.host.AddLearner(ctx, metadataGroup, id)
		cancel()
		if err != nil && !errors.Is(err, raft.ErrConfChangeInProgress) {
			c.b.log.Warn("adding a broker to the metadata group", "broker", br.ID, "err", err)
		} else if err == nil {
			c.b.log.Info("broker-only node added to the metadata group as a learner", "broker", br.ID)
		}
		return
	}
}
