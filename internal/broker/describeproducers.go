package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// DescribeProducers v0 (KIP-664): each partition's active idempotent and
// transactional producers, to find the producer of a hanging transaction.
func (b *Broker) handleDescribeProducers(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DescribeProducersRequest)
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewDescribeProducersResponseTopic()
		st.Topic = rt.Topic
		denied := !b.authorize(r, auth.OpRead, auth.ResourceTopic, rt.Topic)
		for _, pi := range rt.Partitions {
			sp := kmsg.NewDescribeProducersResponseTopicPartition()
			sp.Partition = pi
			p, missing := b.replicas.Lookup(rt.Topic, pi)
			if denied {
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			if p == nil {
				sp.ErrorCode = missing
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			for _, pr := range p.Producers() {
				ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				ap.ProducerID, ap.ProducerEpoch = pr.ProducerID, int32(pr.Epoch)
				ap.LastSequence, ap.LastTimestamp = pr.LastSequence, pr.LastTimestamp
				ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = -1, pr.CurrentTxnOffset
				if pr.CurrentTxnOffset >= 0 {
					ap.CoordinatorEpoch = 0
				}
				sp.ActiveProducers = append(sp.ActiveProducers, ap)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return wire.Respond(resp)
}
