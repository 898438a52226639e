package broker

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/controller"
	"holdfast/internal/storage"
	"holdfast/internal/topicconfig"
)

// maxTopicNameLen is Kafka's limit: 249, so that "<topic>-<partition>"
// directory names and their "-delete" suffix fit in 255 bytes.
const maxTopicNameLen = 249

// Names of the internal topics, created by their coordinators.
const (
	offsetsTopic     = "__consumer_offsets"
	transactionTopic = "__transaction_state"
)

// internalTopicConfigs are the configs an internal topic is created with.
func (b *Broker) internalTopicConfigs(topic string) map[string]string {
	if topic == offsetsTopic {
		return topicconfig.Internal(b.cfg.OffsetsTopicSegmentBytes)
	}
	return topicconfig.Internal(b.cfg.TxnTopicSegmentBytes)
}

// validateTopicName applies Kafka's topic name rules.
func validateTopicName(name string) error {
	switch {
	case name == "":
		return errors.New("Topic name is illegal, it can't be empty")
	case name == "." || name == "..":
		return errors.New("Topic name cannot be \".\" or \"..\"")
	case len(name) > maxTopicNameLen:
		return fmt.Errorf("Topic name is illegal, it can't be longer than %d characters, topic name: %s", maxTopicNameLen, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("Topic name %q is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'", name)
		}
	}
	return nil
}

// collisionName is how Kafka detects topics whose metric names would clash:
// '.' and '_' are the same character there.
func collisionName(name string) string { return strings.ReplaceAll(name, ".", "_") }

// topicCollision reports an existing topic other than name whose metric
// name equals name's.
func (b *Broker) topicCollision(name string) (string, bool) {
	c := collisionName(name)
	if c == name && !strings.Contains(name, "_") {
		return "", false
	}
	for _, t := range b.meta.Topics() {
		if t.Name != name && collisionName(t.Name) == c {
			return t.Name, true
		}
	}
	return "", false
}

// topicError is an error with the Kafka error code it is answered with.
type topicError struct {
	code *kerr.Error
	msg  string
}

func (e *topicError) Error() string { return e.msg }

func errCode(code *kerr.Error, format string, args ...any) *topicError {
	return &topicError{code, fmt.Sprintf(format, args...)}
}

// kafkaError turns an error from the topic helpers into a code and a
// message for a response.
func kafkaError(err error) (int16, *string) {
	if err == nil {
		return 0, nil
	}
	msg := err.Error()
	var te *topicError
	switch {
	case errors.As(err, &te):
		return te.code.Code, &msg
	case errors.Is(err, controller.ErrTopicExists):
		return kerr.TopicAlreadyExists.Code, &msg
	case errors.Is(err, controller.ErrUnknownTopic):
		return kerr.UnknownTopicOrPartition.Code, &msg
	case errors.Is(err, controller.ErrInvalidCount):
		return kerr.InvalidPartitions.Code, &msg
	case errors.Is(err, controller.ErrUnknownPartition):
		return kerr.UnknownTopicOrPartition.Code, &msg
	case errors.Is(err, controller.ErrInvalidAssignment):
		return kerr.InvalidReplicaAssignment.Code, &msg
	case errors.Is(err, controller.ErrNoReassignment):
		return kerr.NoReassignmentInProgress.Code, &msg
	case errors.Is(err, controller.ErrReassignInProgress):
		return kerr.ReassignmentInProgress.Code, &msg
	case errors.Is(err, controller.ErrStaleReassignFinish):
		return kerr.InvalidRequest.Code, &msg
	case errors.Is(err, controller.ErrBrokerInUse):
		return kerr.InvalidRequest.Code, &msg
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code, &msg
	}
	return kerr.UnknownServerError.Code, &msg
}

// ensureTopic returns the topic, creating it through the controller if it
// does not exist. Configs must already be validated. Idempotent, and safe
// to call concurrently: every partition of the returned topic assigned to
// this node is open (or offline).
func (b *Broker) ensureTopic(name string, partitions int32, configs map[string]string, internal bool) (controller.Topic, error) {
	if t, ok := b.meta.Topic(name); ok && b.replicas.AllOpen(t) {
		return t, nil
	}
	return b.cluster.createTopic(name, partitions, -1, nil, configs, internal, false)
}

// deleteTopic deletes the topic through the controller; every node
// removes its data as it applies the deletion.
func (b *Broker) deleteTopic(name string) (controller.Topic, error) {
	return b.cluster.deleteTopic(name)
}

// addPartitions raises t's partition count to total through the
// controller.
func (b *Broker) addPartitions(name string, total int32) (controller.Topic, error) {
	return b.cluster.addPartitions(name, total)
}

// setTopicConfigs replaces t's overrides through the controller.
func (b *Broker) setTopicConfigs(name string, configs map[string]string) (controller.Topic, error) {
	return b.cluster.setTopicConfigs(name, configs)
}

// topicLogConfig is the log configuration of t's partitions.
func (b *Broker) topicLogConfig(t controller.Topic) storage.Config {
	return topicconfig.LogConfig(b.cfg.LogDefaults, t.Configs, func(name, value string, err error) {
		b.log.Warn("ignoring bad topic config", "topic", t.Name, "config", name, "value", value, "err", err)
	})
}

// topicLogAppendTime reports whether t's message.timestamp.type is
// LogAppendTime.
func (b *Broker) topicLogAppendTime(t controller.Topic) bool {
	return topicconfig.LogAppendTime(b.cfg.LogDefaults, t.Configs)
}

// topicMinInsyncReplicas is t's min.insync.replicas.
func (b *Broker) topicMinInsyncReplicas(t controller.Topic) int32 {
	return topicconfig.MinInsyncReplicas(b.cfg.LogDefaults, t.Configs)
}
