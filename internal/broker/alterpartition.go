package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// handleAlterPartition is Kafka's broker-to-controller AlterPartition,
// used here for one thing: a partition leader reporting that the voters of
// a reassigned partition are its target (NewISR = the target). Only the
// controller accepts it; the target must be the current one.
func (b *Broker) handleAlterPartition(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AlterPartitionRequest)
	resp := req.ResponseKind().(*kmsg.AlterPartitionResponse)
	switch {
	case b.cluster.ControllerOnly() != 0:
		resp.ErrorCode = b.cluster.ControllerOnly()
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
					err := b.cluster.Propose(ctx, metadata.Command{Op: metadata.OpReassignDone, Name: t.Name, Partition: rp.Partition, Target: target})
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
