package broker

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// handleListPartitionReassignments (KIP-455) lists the moves in progress:
// the full replica set (original and target), and which replicas are being
// added and removed. No topics: every topic. Partitions that are not being
// moved (or do not exist) are left out, as Kafka does. Served from this
// node's metadata, which on the controller (where clients send it) is
// current.
func (b *Broker) handleListPartitionReassignments(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ListPartitionReassignmentsRequest)
	resp := req.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
	if !b.authorizeCluster(r, auth.OpDescribe) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	list := func(t metadata.Topic, only []int32) {
		st := kmsg.NewListPartitionReassignmentsResponseTopic()
		st.Topic = t.Name
		for _, ra := range t.Reassigning {
			if only != nil && !slices.Contains(only, ra.Partition) {
				continue
			}
			sp := kmsg.NewListPartitionReassignmentsResponseTopicPartition()
			sp.Partition = ra.Partition
			sp.Replicas = slices.Clone(t.Replicas[ra.Partition])
			sp.AddingReplicas, sp.RemovingReplicas = ra.Adding(), ra.Removing()
			st.Partitions = append(st.Partitions, sp)
		}
		if len(st.Partitions) > 0 {
			resp.Topics = append(resp.Topics, st)
		}
	}
	if req.Topics == nil {
		for _, t := range b.meta.Topics() {
			list(t, nil)
		}
	}
	for _, rt := range req.Topics {
		if t, ok := b.meta.Topic(rt.Topic); ok {
			list(t, rt.Partitions)
		}
	}
	return wire.Respond(resp)
}
