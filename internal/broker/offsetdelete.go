package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

func (b *Broker) handleOffsetDelete(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.OffsetDeleteRequest)
	if !b.authorize(r, auth.OpDelete, auth.ResourceGroup, req.Group) {
		resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	// READ on each topic; the others' partitions TOPIC_AUTHORIZATION_FAILED.
	allowed := *req
	allowed.Topics = nil
	var denied []kmsg.OffsetDeleteRequestTopic
	for _, t := range req.Topics {
		if b.authorize(r, auth.OpRead, auth.ResourceTopic, t.Topic) {
			allowed.Topics = append(allowed.Topics, t)
		} else {
			denied = append(denied, t)
		}
	}
	return thenEdit(b.groups.OffsetDelete(&allowed), func(out kmsg.Response) {
		resp := out.(*kmsg.OffsetDeleteResponse)
		for _, t := range denied {
			rt := kmsg.NewOffsetDeleteResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetDeleteResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.TopicAuthorizationFailed.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
	})
}
