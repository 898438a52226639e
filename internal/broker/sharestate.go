package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/coordinator"
	"holdfast/internal/share"
	"holdfast/internal/wire"
)

// A share partition's leader reads and writes its durable state at the
// group's coordinator (the leader of the group's __consumer_offsets
// partition, share/store.go): in process when that is this node, else
// with Kafka's inter-broker ReadShareGroupState / WriteShareGroupState
// (which Kafka's brokers send to the share coordinator). A write is
// answered once committed; an older partition leader's write, or one
// made before an admin reset the state, is fenced (FENCED_LEADER_EPOCH,
// FENCED_STATE_EPOCH).

// shareStateError is the Kafka code of a Store error.
func shareStateError(err error) int16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, share.ErrNotCoordinator):
		return kerr.NotCoordinator.Code
	case errors.Is(err, share.ErrLoading):
		return kerr.CoordinatorLoadInProgress.Code
	case errors.Is(err, share.ErrFencedLeaderEpoch):
		return kerr.FencedLeaderEpoch.Code
	case errors.Is(err, share.ErrFencedStateEpoch):
		return kerr.FencedStateEpoch.Code
	}
	if code, _ := kafkaError(err); code != 0 && code != kerr.UnknownServerError.Code {
		return code
	}
	return kerr.CoordinatorNotAvailable.Code
}

// shareStateErr is the Store error of a Kafka code (from another node).
func shareStateErr(code int16, msg *string) error {
	switch code {
	case 0:
		return nil
	case kerr.NotCoordinator.Code:
		return share.ErrNotCoordinator
	case kerr.CoordinatorLoadInProgress.Code:
		return share.ErrLoading
	case kerr.FencedLeaderEpoch.Code:
		return share.ErrFencedLeaderEpoch
	case kerr.FencedStateEpoch.Code:
		return share.ErrFencedStateEpoch
	}
	m := ""
	if msg != nil {
		m = *msg
	}
	return fmt.Errorf("share state: %w %s", kerr.ErrorForCode(code), m)
}

func (b *Broker) handleReadShareGroupState(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ReadShareGroupStateRequest)
	resp := req.ResponseKind().(*kmsg.ReadShareGroupStateResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewReadShareGroupStateResponseTopic()
		st.TopicID = rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewReadShareGroupStateResponseTopicPartition()
			sp.Partition = rp.Partition
			snap, found, err := b.coord.ShareState().Read(share.Key{Group: req.GroupID, TopicID: rt.TopicID, Partition: rp.Partition}, rp.LeaderEpoch)
			sp.ErrorCode = shareStateError(err)
			sp.StateEpoch, sp.StartOffset = snap.StateEpoch, snap.StartOffset
			if !found {
				sp.StartOffset = -1
			}
			for _, x := range snap.Batches {
				sb := kmsg.NewReadShareGroupStateResponseTopicPartitionStateBatch()
				sb.FirstOffset, sb.LastOffset, sb.DeliveryState, sb.DeliveryCount = x.First, x.Last, x.State, x.Count
				sp.StateBatches = append(sp.StateBatches, sb)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return wire.Respond(resp)
}

func (b *Broker) handleWriteShareGroupState(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.WriteShareGroupStateRequest)
	resp := req.ResponseKind().(*kmsg.WriteShareGroupStateResponse)
	return func(ctx context.Context) kmsg.Response {
		for _, rt := range req.Topics {
			st := kmsg.NewWriteShareGroupStateResponseTopic()
			st.TopicID = rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewWriteShareGroupStateResponseTopicPartition()
				sp.Partition = rp.Partition
				snap := share.Snapshot{StateEpoch: rp.StateEpoch, LeaderEpoch: rp.LeaderEpoch, StartOffset: rp.StartOffset}
				for _, x := range rp.StateBatches {
					snap.Batches = append(snap.Batches, share.Batch{First: x.FirstOffset, Last: x.LastOffset, State: x.DeliveryState, Count: x.DeliveryCount})
				}
				err := b.coord.ShareState().Write(ctx, share.Key{Group: req.GroupID, TopicID: rt.TopicID, Partition: rp.Partition}, snap)
				sp.ErrorCode = shareStateError(err)
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	}
}

// sharePersister is share.Persister through the group's coordinator.
type sharePersister struct{ b *Broker }

// shareStateRetry is how often a read or write is tried again while the
// coordinator moves or loads.
const shareStateRetry = 100 * time.Millisecond

// coordinatorOf is the node coordinating group (creating
// __consumer_offsets if needed), or -1.
func (p sharePersister) coordinatorOf(group string) int32 {
	at := p.b.coord.Find(coordinator.KeyGroup, group, false, p.b.cfg.Security.InterBrokerListener)
	if at.Code != 0 {
		return -1
	}
	return at.Node
}

// retry runs fn until it succeeds, fails for good, or ctx ends; fn gets
// the coordinator's node id.
func (p sharePersister) retry(ctx context.Context, group string, fn func(node int32) error) error {
	for {
		node := p.coordinatorOf(group)
		err := share.ErrNotCoordinator
		if node >= 0 {
			err = fn(node)
		}
		retriable := errors.Is(err, share.ErrNotCoordinator) || errors.Is(err, share.ErrLoading) ||
			errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.NotCoordinator)
		if err == nil || !retriable {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(shareStateRetry):
		}
	}
}

func (p sharePersister) Read(ctx context.Context, k share.Key, leaderEpoch int32) (snap share.Snapshot, found bool, err error) {
	err = p.retry(ctx, k.Group, func(node int32) error {
		if node == p.b.cfg.NodeID {
			var err error
			snap, found, err = p.b.coord.ShareState().Read(k, leaderEpoch)
			return err
		}
		req := kmsg.NewPtrReadShareGroupStateRequest()
		req.GroupID = k.Group
		rt := kmsg.NewReadShareGroupStateRequestTopic()
		rt.TopicID = k.TopicID
		rp := kmsg.NewReadShareGroupStateRequestTopicPartition()
		rp.Partition, rp.LeaderEpoch = k.Partition, leaderEpoch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		out, err := p.b.cluster.Send(ctx, node, req)
		if err != nil {
			return fmt.Errorf("%w: %w", kerr.CoordinatorNotAvailable, err)
		}
		resp := out.(*kmsg.ReadShareGroupStateResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return fmt.Errorf("%w: malformed ReadShareGroupState answer", kerr.CoordinatorNotAvailable)
		}
		sp := resp.Topics[0].Partitions[0]
		if err := shareStateErr(sp.ErrorCode, sp.ErrorMessage); err != nil {
			return err
		}
		snap = share.Snapshot{StateEpoch: sp.StateEpoch, LeaderEpoch: leaderEpoch, StartOffset: sp.StartOffset}
		found = sp.StartOffset >= 0
		for _, x := range sp.StateBatches {
			snap.Batches = append(snap.Batches, share.Batch{First: x.FirstOffset, Last: x.LastOffset, State: x.DeliveryState, Count: x.DeliveryCount})
		}
		return nil
	})
	return snap, found, err
}

func (p sharePersister) Write(ctx context.Context, k share.Key, snap share.Snapshot) error {
	return p.retry(ctx, k.Group, func(node int32) error {
		if node == p.b.cfg.NodeID {
			return p.b.coord.ShareState().Write(ctx, k, snap)
		}
		req := kmsg.NewPtrWriteShareGroupStateRequest()
		req.GroupID = k.Group
		rt := kmsg.NewWriteShareGroupStateRequestTopic()
		rt.TopicID = k.TopicID
		rp := kmsg.NewWriteShareGroupStateRequestTopicPartition()
		rp.Partition, rp.StateEpoch, rp.LeaderEpoch, rp.StartOffset = k.Partition, snap.StateEpoch, snap.LeaderEpoch, snap.StartOffset
		for _, x := range snap.Batches {
			sb := kmsg.NewWriteShareGroupStateRequestTopicPartitionStateBatch()
			sb.FirstOffset, sb.LastOffset, sb.DeliveryState, sb.DeliveryCount = x.First, x.Last, x.State, x.Count
			rp.StateBatches = append(rp.StateBatches, sb)
		}
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		out, err := p.b.cluster.Send(ctx, node, req)
		if err != nil {
			return fmt.Errorf("%w: %w", kerr.CoordinatorNotAvailable, err)
		}
		resp := out.(*kmsg.WriteShareGroupStateResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return fmt.Errorf("%w: malformed WriteShareGroupState answer", kerr.CoordinatorNotAvailable)
		}
		sp := resp.Topics[0].Partitions[0]
		return shareStateErr(sp.ErrorCode, sp.ErrorMessage)
	})
}
