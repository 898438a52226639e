package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

func (b *Broker) handleDeleteTopics(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DeleteTopicsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)

	// Before v6 the request is a list of names; from v6 each entry has a
	// name or an id. Normalize to the v6 shape.
	entries := req.Topics
	if req.Version < 6 {
		entries = nil
		for _, n := range req.TopicNames {
			t := kmsg.NewDeleteTopicsRequestTopic()
			t.Topic = &n
			entries = append(entries, t)
		}
	}

	// Kafka refuses duplicates, and a name that resolves to an id given
	// elsewhere in the request, as INVALID_REQUEST.
	names, ids := map[string]int{}, map[[16]byte]int{}
	for _, e := range entries {
		switch {
		case e.Topic != nil:
			names[*e.Topic]++
		case e.TopicID != [16]byte{}:
			ids[e.TopicID]++
		}
	}

	mq := b.mutationQuota(r, req.Version >= 5) // KIP-599
	for _, e := range entries {
		res := kmsg.NewDeleteTopicsResponseTopic()
		res.Topic, res.TopicID = e.Topic, e.TopicID
		fail := func(code *kerr.Error, msg string) {
			res.ErrorCode = code.Code
			if req.Version >= 5 {
				res.ErrorMessage = &msg
			}
		}
		var name string
		switch {
		case e.Topic != nil && e.TopicID != [16]byte{}:
			fail(kerr.InvalidRequest, "You may not specify both topic name and topic id.")
		case e.Topic == nil && e.TopicID == [16]byte{}:
			fail(kerr.InvalidRequest, "Neither topic name nor id were specified.")
		case e.Topic != nil && names[*e.Topic] > 1:
			fail(kerr.InvalidRequest, "Duplicate topic name.")
		case e.Topic == nil && ids[e.TopicID] > 1:
			fail(kerr.InvalidRequest, "Duplicate topic id.")
		case e.Topic == nil:
			t, ok := b.meta.TopicByID(e.TopicID)
			if !ok || !b.topicVisible(r, t.Name) {
				// An id one may not describe might as well not exist.
				fail(kerr.UnknownTopicID, kerr.UnknownTopicID.Description)
				break
			}
			if !b.authorize(r, auth.OpDelete, auth.ResourceTopic, t.Name) {
				fail(kerr.TopicAuthorizationFailed, kerr.TopicAuthorizationFailed.Description)
				break
			}
			name = t.Name
		case !b.authorize(r, auth.OpDelete, auth.ResourceTopic, *e.Topic):
			fail(kerr.TopicAuthorizationFailed, kerr.TopicAuthorizationFailed.Description)
		default:
			t, ok := b.meta.Topic(*e.Topic)
			if !ok {
				fail(kerr.UnknownTopicOrPartition, kerr.UnknownTopicOrPartition.Description)
				break
			}
			if ids[t.ID] > 0 {
				fail(kerr.InvalidRequest, "The provided topic name maps to an ID that was already supplied.")
				break
			}
			name = t.Name
		}
		if res.ErrorCode == 0 && name != "" {
			if t, _ := b.meta.Topic(name); t.Internal {
				// The coordinators' state lives there: deleting it would
				// lose every committed offset or transaction.
				fail(kerr.TopicDeletionDisabled, "Topic "+name+" is an internal topic and cannot be deleted")
			} else if !mq.Admit() {
				fail(kerr.ThrottlingQuotaExceeded, kerr.ThrottlingQuotaExceeded.Description)
			} else if t, err := b.deleteTopic(name); err != nil {
				res.ErrorCode, res.ErrorMessage = kafkaError(err)
			} else {
				mq.Record(int(t.Partitions))
				res.Topic, res.TopicID = &t.Name, t.ID
				// A tiered topic's objects go too: the deletion recorded
				// it (controller RemoteDeleting), tiered storage does it.
			}
		}
		if req.Version < 6 {
			res.TopicID = [16]byte{}
		}
		resp.Topics = append(resp.Topics, res)
	}
	throttleMutation(r, mq, &resp.ThrottleMillis)
	return wire.Respond(resp)
}
