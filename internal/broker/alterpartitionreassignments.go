package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// maxReassignWait bounds one AlterPartitionReassignments request: each
// partition is one metadata commit, and partitions the deadline leaves
// get REQUEST_TIMED_OUT.
const maxReassignWait = 60 * time.Second

// handleAlterPartitionReassignments (KIP-455) starts or cancels (null
// replicas) moves of partitions to new replica sets. Only the controller
// accepts it; the answer comes once each move is committed, not done
// (ListPartitionReassignments shows progress).
func (b *Broker) handleAlterPartitionReassignments(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AlterPartitionAssignmentsRequest)
	resp := req.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
	if !b.authorizeCluster(r, auth.OpAlter) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	if !b.cluster.IsController() {
		resp.ErrorCode = kerr.NotController.Code
		return wire.Respond(resp)
	}
	wait := time.Duration(req.TimeoutMillis) * time.Millisecond
	if wait <= 0 || wait > maxReassignWait {
		wait = maxReassignWait
	}
	return func(ctx context.Context) kmsg.Response {
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		for _, rt := range req.Topics {
			st := kmsg.NewAlterPartitionAssignmentsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode, sp.ErrorMessage = kafkaError(b.reassign(ctx, req, rt.Topic, rp))
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	}
}

// reassign validates and commits one partition's reassignment.
func (b *Broker) reassign(ctx context.Context, req *kmsg.AlterPartitionAssignmentsRequest, topic string, rp kmsg.AlterPartitionAssignmentsRequestTopicPartition) error {
	t, ok := b.meta.Topic(topic)
	if !ok || rp.Partition < 0 || rp.Partition >= t.Partitions {
		return errCode(kerr.UnknownTopicOrPartition, "Topic or partition %s-%d does not exist.", topic, rp.Partition)
	}
	if rp.Replicas != nil {
		if err := metadata.ValidateTarget(b.meta.Brokers(), rp.Replicas); err != nil {
			return errCode(kerr.InvalidReplicaAssignment, "replicas %v: empty, duplicated, more than %d, or naming an unregistered broker", rp.Replicas, metadata.MaxReplicas)
		}
		if req.Version >= 1 && !req.AllowReplicationFactorChange && int(rp.Partition) < len(t.Replicas) {
			cur := t.Replicas[rp.Partition]
			if r, ok := t.Reassignment(rp.Partition); ok {
				cur = r.Original
			}
			if len(cur) != len(rp.Replicas) {
				return errCode(kerr.InvalidReplicationFactor, "replication factor %d -> %d and the request does not allow changing it", len(cur), len(rp.Replicas))
			}
		}
	}
	if ctx.Err() != nil {
		return errCode(kerr.RequestTimedOut, "request timed out before this partition")
	}
	return b.cluster.Propose(ctx, metadata.Command{Op: metadata.OpReassign, Name: topic, Partition: rp.Partition, Target: rp.Replicas})
}
