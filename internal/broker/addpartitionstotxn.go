package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/txn"
	"holdfast/internal/wire"
)

// AddPartitionsToTxn v0-v3: the client path. v4+ (KIP-890's batched,
// broker-to-broker verification) has no use on a single node, where the
// partition asks the coordinator directly.
func init() { register(kmsg.AddPartitionsToTxn, 0, 3, (*Broker).handleAddPartitionsToTxn) }

func (b *Broker) handleAddPartitionsToTxn(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AddPartitionsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	var parts []txn.TopicPartition
	unknown := false
	for _, rt := range req.Topics {
		st := kmsg.NewAddPartitionsToTxnResponseTopic()
		st.Topic = rt.Topic
		t, ok := b.meta.Topic(rt.Topic)
		for _, p := range rt.Partitions {
			sp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			sp.Partition = p
			if !ok || p < 0 || p >= t.Partitions || t.Internal {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				unknown = true
			}
			st.Partitions = append(st.Partitions, sp)
			parts = append(parts, txn.TopicPartition{Topic: rt.Topic, Partition: p})
		}
		resp.Topics = append(resp.Topics, st)
	}
	setAll := func(code int16) {
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				if sp := &resp.Topics[i].Partitions[j]; sp.ErrorCode == 0 {
					sp.ErrorCode = code
				}
			}
		}
	}
	if unknown {
		// All or nothing, as Kafka: the rest were not attempted.
		setAll(kerr.OperationNotAttempted.Code)
		return wire.Respond(resp)
	}
	c := b.coordinator()
	if c == nil {
		setAll(kerr.InvalidProducerIDMapping.Code)
		return wire.Respond(resp)
	}
	wait := c.AddPartitions(req.TransactionalID, req.ProducerID, req.ProducerEpoch, parts)
	return func(ctx context.Context) kmsg.Response {
		err := wait(ctx)
		if ctx.Err() != nil {
			return nil
		}
		setAll(txnErrorCode(err))
		return resp
	}
}
