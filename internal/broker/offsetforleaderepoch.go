package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// handleOffsetForLeaderEpoch tells a consumer (KIP-320) where the epoch it
// last saw ended, so it can detect a truncated log.
func (b *Broker) handleOffsetForLeaderEpoch(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.OffsetForLeaderEpochRequest)
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetForLeaderEpochResponseTopic()
		st.Topic = rt.Topic
		denied := !b.authorize(r, auth.OpDescribe, auth.ResourceTopic, rt.Topic)
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			sp.Partition, sp.LeaderEpoch, sp.EndOffset = rp.Partition, -1, -1
			p, missing := b.replicas.Lookup(rt.Topic, rp.Partition)
			switch {
			case denied:
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case p == nil:
				sp.ErrorCode = missing
			default:
				if sp.ErrorCode = leaderEpochCode(p, rp.CurrentLeaderEpoch, false); sp.ErrorCode == 0 {
					sp.LeaderEpoch, sp.EndOffset = p.Log().EndOffsetForEpoch(rp.LeaderEpoch)
					if b.tiered != nil { // the remote log's epochs too (tiered.go)
						sp.LeaderEpoch, sp.EndOffset = b.tiered.EndOffsetForEpoch(p, rp.LeaderEpoch)
					}
					if cur := p.LeaderEpoch(); rp.LeaderEpoch == cur && sp.LeaderEpoch < cur {
						// The current epoch has no batch yet (a Raft term
						// starts without writing into the log): as in Kafka,
						// whose leader records its epoch at the log end when
						// elected, it ends at the log end.
						sp.LeaderEpoch, sp.EndOffset = cur, p.LogEndOffset()
					}
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return wire.Respond(resp)
}
