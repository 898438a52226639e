package broker

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

func (b *Broker) handleCreatePartitions(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.CreatePartitionsRequest)
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	count := map[string]int{}
	for _, rt := range req.Topics {
		count[rt.Topic]++
	}
	mq := b.mutationQuota(r, req.Version >= 3) // KIP-599
	for _, rt := range req.Topics {
		res := kmsg.NewCreatePartitionsResponseTopic()
		res.Topic = rt.Topic
		var err error
		switch {
		case count[rt.Topic] > 1:
			err = errCode(kerr.InvalidRequest, "Duplicate topic in request.")
		case !b.authorize(r, auth.OpAlter, auth.ResourceTopic, rt.Topic):
			err = errCode(kerr.TopicAuthorizationFailed, "%s", kerr.TopicAuthorizationFailed.Description)
		case !mq.Admit():
			err = errCode(kerr.ThrottlingQuotaExceeded, "%s", kerr.ThrottlingQuotaExceeded.Description)
		default:
			before, _ := b.meta.Topic(rt.Topic)
			if err = b.createPartitions(rt, req.ValidateOnly); err == nil && !req.ValidateOnly {
				mq.Record(int(rt.Count - before.Partitions))
			}
		}
		res.ErrorCode, res.ErrorMessage = kafkaError(err)
		resp.Topics = append(resp.Topics, res)
	}
	throttleMutation(r, mq, &resp.ThrottleMillis)
	return wire.Respond(resp)
}

// createPartitions checks one topic of the request in Kafka's order and
// adds the partitions unless validateOnly.
func (b *Broker) createPartitions(rt kmsg.CreatePartitionsRequestTopic, validateOnly bool) error {
	t, ok := b.meta.Topic(rt.Topic)
	if !ok {
		return errCode(kerr.UnknownTopicOrPartition, "The topic '%s' does not exist.", rt.Topic)
	}
	if t.Internal {
		// Coordinators map keys to partitions by count: changing it would
		// strand every group's or transaction's state.
		return errCode(kerr.InvalidRequest, "Cannot change the partition count of internal topic %s", t.Name)
	}
	switch {
	case rt.Count == t.Partitions:
		return errCode(kerr.InvalidPartitions, "Topic already has %d partition(s).", t.Partitions)
	case rt.Count < t.Partitions:
		return errCode(kerr.InvalidPartitions, "The topic %s currently has %d partition(s); %d would not be an increase.", t.Name, t.Partitions, rt.Count)
	case rt.Count > maxPartitionsPerTopic:
		return errCode(kerr.PolicyViolation, "Holdfast allows at most %d partitions per topic; %d were requested", maxPartitionsPerTopic, rt.Count)
	}
	additional := rt.Count - t.Partitions
	var assign [][]int32
	if rt.Assignment != nil {
		if int32(len(rt.Assignment)) != additional {
			return errCode(kerr.InvalidReplicaAssignment, "Attempted to add %d additional partition(s), but only %d assignment(s) were specified.", additional, len(rt.Assignment))
		}
		rf := 1
		if len(t.Replicas) > 0 {
			rf = len(t.Replicas[0])
		}
		for i, a := range rt.Assignment {
			if err := b.validateAssignment(a.Replicas); err != nil {
				return err
			}
			if len(a.Replicas) != rf {
				return errCode(kerr.InvalidReplicaAssignment, "Inconsistent replication factor between partitions, partition 0 has %d while partition %d has %d.", rf, t.Partitions+int32(i), len(a.Replicas))
			}
			assign = append(assign, slices.Clone(a.Replicas))
		}
	}
	if validateOnly {
		return nil
	}
	_, err := b.addPartitions(t.Name, rt.Count, assign)
	return err
}
