package broker

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/kafkaerr"
	"holdfast/internal/metadata"
	"holdfast/internal/topicconfig"
)

// Names of the internal topics, created by their coordinators.
const (
	offsetsTopic     = metadata.OffsetsTopic
	transactionTopic = metadata.TransactionTopic
)

// errCode is an error carrying a Kafka code and message.
var errCode = kafkaerr.New

// kafkaError turns an error from the topic helpers into a code and a
// message for a response.
func kafkaError(err error) (int16, *string) {
	if err == nil {
		return 0, nil
	}
	msg := err.Error()
	var ke *kafkaerr.Error
	switch {
	case errors.As(err, &ke):
		return ke.Code.Code, &msg
	case errors.Is(err, metadata.ErrTopicExists):
		return kerr.TopicAlreadyExists.Code, &msg
	case errors.Is(err, metadata.ErrUnknownTopic):
		return kerr.UnknownTopicOrPartition.Code, &msg
	case errors.Is(err, metadata.ErrInvalidCount):
		return kerr.InvalidPartitions.Code, &msg
	case errors.Is(err, metadata.ErrUnknownPartition):
		return kerr.UnknownTopicOrPartition.Code, &msg
	case errors.Is(err, metadata.ErrInvalidAssignment):
		return kerr.InvalidReplicaAssignment.Code, &msg
	case errors.Is(err, metadata.ErrNoReassignment):
		return kerr.NoReassignmentInProgress.Code, &msg
	case errors.Is(err, metadata.ErrReassignInProgress):
		return kerr.ReassignmentInProgress.Code, &msg
	case errors.Is(err, metadata.ErrStaleReassignFinish):
		return kerr.InvalidRequest.Code, &msg
	case errors.Is(err, metadata.ErrBrokerInUse):
		return kerr.InvalidRequest.Code, &msg
	}
	if code, ok := kafkaerr.Code(err); ok {
		return code, &msg
	}
	return kerr.UnknownServerError.Code, &msg
}

// ensureTopic returns the topic, creating it through the controller if it
// does not exist. Configs must already be validated. Idempotent, and safe
// to call concurrently: every partition of the returned topic assigned to
// this node is open (or offline).
func (b *Broker) ensureTopic(name string, partitions int32, configs map[string]string, internal bool) (metadata.Topic, error) {
	if t, ok := b.meta.Topic(name); ok && b.replicas.AllOpen(t) {
		return t, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return b.cluster.CreateTopic(ctx, name, partitions, -1, nil, configs, internal, false)
}

// deleteTopic deletes the topic through the controller; every node
// removes its data as it applies the deletion.
func (b *Broker) deleteTopic(name string) (metadata.Topic, error) {
	return b.cluster.DeleteTopic(name)
}

// addPartitions raises t's partition count to total through the
// controller.
func (b *Broker) addPartitions(name string, total int32, assign [][]int32) (metadata.Topic, error) {
	return b.cluster.AddPartitions(name, total, assign)
}

// setTopicConfigs replaces t's overrides through the controller.
func (b *Broker) setTopicConfigs(name string, configs map[string]string) (metadata.Topic, error) {
	return b.cluster.SetTopicConfigs(name, configs)
}

// topicLogAppendTime reports whether t's message.timestamp.type is
// LogAppendTime.
func (b *Broker) topicLogAppendTime(t metadata.Topic) bool {
	return topicconfig.LogAppendTime(b.cfg.LogDefaults, b.replicas.Dynamic().Under(t.Configs))
}

// topicMinInsyncReplicas is t's min.insync.replicas.
func (b *Broker) topicMinInsyncReplicas(t metadata.Topic) int32 {
	return topicconfig.MinInsyncReplicas(b.cfg.LogDefaults, b.replicas.Dynamic().Under(t.Configs))
}
