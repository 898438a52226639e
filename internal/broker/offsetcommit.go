package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// v10 addresses topics by id (KIP-848 era) and is not served. The Reply
// waits for the commit to be durable.
func (b *Broker) handleOffsetCommit(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.OffsetCommitRequest)
	groupDenied := !b.authorize(r, auth.OpRead, auth.ResourceGroup, req.Group)
	if !groupDenied && b.isShareGroup(req.Group) {
		// A share group has no committed offsets (its share partitions'
		// start offsets are AlterShareGroupOffsets').
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.GroupIDNotFound.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return wire.Respond(resp)
	}
	allowed := *req
	allowed.Topics = nil
	var denied []kmsg.OffsetCommitRequestTopic
	for _, t := range req.Topics {
		if !groupDenied && b.authorize(r, auth.OpRead, auth.ResourceTopic, t.Topic) {
			allowed.Topics = append(allowed.Topics, t)
		} else {
			denied = append(denied, t)
		}
	}
	code := kerr.TopicAuthorizationFailed.Code
	if groupDenied {
		code = kerr.GroupAuthorizationFailed.Code
	}
	fill := func(out kmsg.Response) {
		resp := out.(*kmsg.OffsetCommitResponse)
		for _, t := range denied {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
	}
	if groupDenied {
		resp := req.ResponseKind()
		fill(resp)
		return wire.Respond(resp)
	}
	return thenEdit(b.groups.OffsetCommit(&allowed), fill)
}
