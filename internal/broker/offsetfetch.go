package broker

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// v10 addresses topics by id and is not served.

// handleOffsetFetch needs DESCRIBE on each group and on each topic: a
// named topic one may not describe is answered TOPIC_AUTHORIZATION_FAILED,
// and left out when all of a group's topics are asked for.
func (b *Broker) handleOffsetFetch(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.OffsetFetchRequest)
	groupOK := func(g string) bool { return b.authorize(r, auth.OpDescribe, auth.ResourceGroup, g) }
	topicOK := func(t string) bool { return b.authorize(r, auth.OpDescribe, auth.ResourceTopic, t) }
	allowed := *req
	if req.Version < 8 {
		if !groupOK(req.Group) {
			resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
			resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
			for _, t := range req.Topics {
				rt := kmsg.NewOffsetFetchResponseTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseTopicPartition()
					rp.Partition, rp.Offset, rp.ErrorCode = p, -1, kerr.GroupAuthorizationFailed.Code
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
			return wire.Respond(resp)
		}
		var denied []kmsg.OffsetFetchRequestTopic
		if req.Topics != nil {
			allowed.Topics = []kmsg.OffsetFetchRequestTopic{}
			for _, t := range req.Topics {
				if topicOK(t.Topic) {
					allowed.Topics = append(allowed.Topics, t)
				} else {
					denied = append(denied, t)
				}
			}
		}
		return thenEdit(b.groups.OffsetFetch(&allowed), func(out kmsg.Response) {
			resp := out.(*kmsg.OffsetFetchResponse)
			if req.Topics == nil {
				resp.Topics = slices.DeleteFunc(resp.Topics, func(t kmsg.OffsetFetchResponseTopic) bool { return !topicOK(t.Topic) })
			}
			for _, t := range denied {
				rt := kmsg.NewOffsetFetchResponseTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseTopicPartition()
					rp.Partition, rp.Offset, rp.ErrorCode = p, -1, kerr.TopicAuthorizationFailed.Code
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
		})
	}
	// v8+: several groups.
	allowed.Groups = nil
	deniedGroups := map[string]bool{}
	deniedTopics := map[string][]kmsg.OffsetFetchRequestGroupTopic{}
	for _, g := range req.Groups {
		if !groupOK(g.Group) {
			deniedGroups[g.Group] = true
			continue
		}
		ag := g
		if g.Topics != nil {
			ag.Topics = []kmsg.OffsetFetchRequestGroupTopic{}
			for _, t := range g.Topics {
				if topicOK(t.Topic) {
					ag.Topics = append(ag.Topics, t)
				} else {
					deniedTopics[g.Group] = append(deniedTopics[g.Group], t)
				}
			}
		}
		allowed.Groups = append(allowed.Groups, ag)
	}
	all := map[string]bool{}
	for _, g := range req.Groups {
		all[g.Group] = g.Topics == nil
	}
	return thenEdit(b.groups.OffsetFetch(&allowed), func(out kmsg.Response) {
		resp := out.(*kmsg.OffsetFetchResponse)
		for i := range resp.Groups {
			rg := &resp.Groups[i]
			if all[rg.Group] {
				rg.Topics = slices.DeleteFunc(rg.Topics, func(t kmsg.OffsetFetchResponseGroupTopic) bool { return !topicOK(t.Topic) })
			}
			for _, t := range deniedTopics[rg.Group] {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.ErrorCode = p, -1, kerr.TopicAuthorizationFailed.Code
					rt.Partitions = append(rt.Partitions, rp)
				}
				rg.Topics = append(rg.Topics, rt)
			}
		}
		for _, g := range req.Groups {
			if deniedGroups[g.Group] {
				rg := kmsg.NewOffsetFetchResponseGroup()
				rg.Group, rg.ErrorCode = g.Group, kerr.GroupAuthorizationFailed.Code
				resp.Groups = append(resp.Groups, rg)
				delete(deniedGroups, g.Group)
			}
		}
	})
}
