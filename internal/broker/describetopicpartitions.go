package broker

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// DescribeTopicPartitions v0 (KIP-966): topics and their partitions, like
// Metadata but paginated: at most ResponsePartitionLimit partitions (and
// never more than max.request.partition.size.limit, 2000) per response, with
// a cursor (topic, partition) to continue from; what the Java admin
// client's describeTopics uses. Topics come sorted by name. Asked for no
// topic, it lists every topic the principal may describe (the others are
// left out); asked for named topics, those it may not describe are
// answered TOPIC_AUTHORIZATION_FAILED. Holdfast has no eligible leader
// replicas (KIP-966's ELR): those lists are empty.

// maxRequestPartitionSizeLimit is Kafka's max.request.partition.size.limit.
const maxRequestPartitionSizeLimit = 2000

func (b *Broker) handleDescribeTopicPartitions(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DescribeTopicPartitionsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeTopicPartitionsResponse)
	invalid := func(msg string) wire.Reply {
		// Kafka's error response: every requested topic with the error.
		for _, t := range req.Topics {
			rt := kmsg.NewDescribeTopicPartitionsResponseTopic()
			rt.Topic, rt.ErrorCode = kmsg.StringPtr(t.Topic), kerr.InvalidRequest.Code
			resp.Topics = append(resp.Topics, rt)
		}
		b.log.Debug("DescribeTopicPartitions refused", "reason", msg, "client_id", r.ClientID)
		return wire.Respond(resp)
	}

	all := len(req.Topics) == 0
	cursorTopic, cursorPart := "", int32(0)
	if req.Cursor != nil {
		cursorTopic, cursorPart = req.Cursor.Topic, req.Cursor.Partition
	}
	var names []string
	if all {
		for _, t := range b.meta.Topics() {
			if t.Name >= cursorTopic {
				names = append(names, t.Name)
			}
		}
	} else {
		for _, t := range req.Topics {
			if t.Topic >= cursorTopic {
				names = append(names, t.Topic)
			}
		}
		slices.Sort(names)
		names = slices.Compact(names)
		if req.Cursor != nil && !slices.Contains(names, cursorTopic) {
			return invalid(fmt.Sprintf("DescribeTopicPartitionsRequest topic list should contain the cursor topic: %s", cursorTopic))
		}
	}
	if req.Cursor != nil && cursorPart < 0 {
		return invalid(fmt.Sprintf("DescribeTopicPartitionsRequest cursor partition must be valid: %d", cursorPart))
	}

	var denied []kmsg.DescribeTopicPartitionsResponseTopic
	remaining := max(min(req.ResponsePartitionLimit, maxRequestPartitionSizeLimit), 1)
	for _, name := range names {
		if !b.topicVisible(r, name) {
			if !all {
				rt := kmsg.NewDescribeTopicPartitionsResponseTopic()
				rt.Topic, rt.ErrorCode = kmsg.StringPtr(name), kerr.TopicAuthorizationFailed.Code
				denied = append(denied, rt)
			}
			continue
		}
		if remaining == 0 {
			// Full: the next response starts with this topic.
			resp.NextCursor = &kmsg.DescribeTopicPartitionsResponseNextCursor{Topic: name, Partition: 0}
			break
		}
		t, ok := b.meta.Topic(name)
		rt := kmsg.NewDescribeTopicPartitionsResponseTopic()
		rt.Topic, rt.IsInternal = kmsg.StringPtr(name), metadata.IsInternalTopic(name)
		if !ok {
			if all {
				continue // deleted meanwhile
			}
			rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			if metadata.ValidateTopicName(name) != nil {
				rt.ErrorCode = kerr.InvalidTopicException.Code
			}
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		rt.TopicID = t.ID
		rt.IsInternal = t.Internal
		rt.AuthorizedOperations = b.authorizedOps(r, auth.ResourceTopic, name)
		start := int32(0)
		if name == cursorTopic {
			start = cursorPart
		}
		end := min(t.Partitions, start+remaining)
		for i := start; i < end; i++ {
			mp := b.answerPartition(r, t, i)
			p := kmsg.NewDescribeTopicPartitionsResponseTopicPartition()
			p.Partition, p.ErrorCode = i, mp.ErrorCode
			p.LeaderID, p.LeaderEpoch = mp.Leader, mp.LeaderEpoch
			p.Replicas, p.ISR, p.OfflineReplicas = mp.Replicas, mp.ISR, mp.OfflineReplicas
			p.EligibleLeaderReplicas, p.LastKnownELR = []int32{}, []int32{}
			rt.Partitions = append(rt.Partitions, p)
		}
		resp.Topics = append(resp.Topics, rt)
		if end < t.Partitions {
			resp.NextCursor = &kmsg.DescribeTopicPartitionsResponseNextCursor{Topic: name, Partition: end}
			break
		}
		remaining -= max(end-start, 0)
	}
	resp.Topics = append(resp.Topics, denied...)
	return wire.Respond(resp)
}
