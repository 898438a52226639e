package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/txn"
	"holdfast/internal/wire"
)

// WriteTxnMarkers v0-v1 (coordinator to partition leader): this node writes
// the markers to the partitions it leads and answers once they are
// committed. Only cluster nodes take it.
func (b *Broker) handleWriteTxnMarkers(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.WriteTxnMarkersRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
		for _, m := range req.Markers {
			rm := kmsg.NewWriteTxnMarkersResponseMarker()
			rm.ProducerID = m.ProducerID
			for _, t := range m.Topics {
				rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
				rt.Topic = t.Topic
				for _, i := range t.Partitions {
					rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
					rp.Partition = i
					p := b.replicas.Get(t.Topic, i)
					switch {
					case p == nil:
						rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
					case !p.IsLeader():
						rp.ErrorCode = kerr.NotLeaderForPartition.Code
					default:
						err := b.coord.WriteMarkers(ctx, m.ProducerID, m.ProducerEpoch, m.Committed, []txn.TopicPartition{{Topic: t.Topic, Partition: i}})
						if ctx.Err() != nil {
							return nil
						}
						if err != nil {
							b.log.Warn("writing transaction marker", "topic", t.Topic, "partition", i, "producer_id", m.ProducerID, "err", err)
						}
						rp.ErrorCode, _ = kafkaError(err)
					}
					rt.Partitions = append(rt.Partitions, rp)
				}
				rm.Topics = append(rm.Topics, rt)
			}
			resp.Markers = append(resp.Markers, rm)
		}
		return resp
	}
}
