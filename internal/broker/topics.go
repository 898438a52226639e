package broker

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/controller"
	"holdfast/internal/storage"
)

// maxTopicNameLen is Kafka's limit: 249, so that "<topic>-<partition>"
// directory names and their "-delete" suffix fit in 255 bytes.
const maxTopicNameLen = 249

// Names of the internal topics, created by their coordinators.
const (
	offsetsTopic     = "__consumer_offsets"
	transactionTopic = "__transaction_state"
)

// internalTopicConfigs are the configs an internal topic is created with,
// Kafka's: compacted, with its own segment size (offsets.topic.segment.bytes,
// transaction.state.log.segment.bytes) so that the active segment rolls
// and the cleaner gets to the history.
func (b *Broker) internalTopicConfigs(topic string) map[string]string {
	seg := b.cfg.OffsetsTopicSegmentBytes
	if topic != offsetsTopic {
		seg = b.cfg.TxnTopicSegmentBytes
	}
	c := map[string]string{"cleanup.policy": "compact"}
	if seg > 0 {
		c["segment.bytes"] = strconv.FormatInt(min(max(seg, minSegmentBytes), math.MaxInt32), 10)
	}
	return c
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
	case errors.Is(err, controller.ErrDeletePending):
		return kerr.TopicAlreadyExists.Code, &msg
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

// ensureTopic returns the topic, creating it (and opening its partitions)
// if it does not exist. Configs must already be validated. Idempotent, and
// safe to call concurrently: every partition of the returned topic is open.
func (b *Broker) ensureTopic(name string, partitions int32, configs map[string]string, internal bool) (controller.Topic, error) {
	if t, ok := b.meta.Topic(name); ok && b.allOpen(t) {
		return t, nil
	}
	// Opening happens under topicsMu only, so a concurrent delete cannot
	// be undone by reopening the logs it just removed.
	b.topicsMu.Lock()
	defer b.topicsMu.Unlock()
	return b.createTopicLocked(name, partitions, configs, internal, false)
}

// createNewTopic creates a topic that must not exist yet (CreateTopics).
func (b *Broker) createNewTopic(name string, partitions int32, configs map[string]string) (controller.Topic, error) {
	b.topicsMu.Lock()
	defer b.topicsMu.Unlock()
	return b.createTopicLocked(name, partitions, configs, false, true)
}

func (b *Broker) createTopicLocked(name string, partitions int32, configs map[string]string, internal, mustBeNew bool) (controller.Topic, error) {
	if b.cluster != nil {
		return b.cluster.createTopic(name, partitions, -1, configs, internal, mustBeNew)
	}
	if t, ok := b.meta.Topic(name); ok {
		if mustBeNew {
			return controller.Topic{}, errCode(kerr.TopicAlreadyExists, "Topic '%s' already exists.", name)
		}
		return t, b.openPartitions(t, 0)
	}
	if err := validateTopicName(name); err != nil {
		return controller.Topic{}, errCode(kerr.InvalidTopicException, "%v", err)
	}
	if other, ok := b.topicCollision(name); ok {
		return controller.Topic{}, errCode(kerr.InvalidTopicException, "Topic '%s' collides with existing topic: %s", name, other)
	}
	if err := b.finishPendingDelete(name); err != nil {
		return controller.Topic{}, err
	}
	t, err := b.meta.CreateTopic(name, partitions, configs, internal)
	if err != nil {
		return controller.Topic{}, err
	}
	b.log.Info("created topic", "topic", name, "partitions", partitions, "topic_id", t.IDString(), "configs", configs)
	return t, b.openPartitions(t, 0)
}

// allOpen reports whether every partition of t is open.
func (b *Broker) allOpen(t controller.Topic) bool {
	for i := int32(0); i < t.Partitions; i++ {
		if b.parts.Get(t.Name, i) == nil {
			return false
		}
	}
	return true
}

// openPartitions opens partitions from..t.Partitions-1 of t (Open is
// idempotent).
func (b *Broker) openPartitions(t controller.Topic, from int32) error {
	if b.cluster != nil {
		return b.cluster.openReplicas(t, from)
	}
	cfg := b.topicLogConfig(t)
	lat := b.topicLogAppendTime(t)
	for i := from; i < t.Partitions; i++ {
		p, err := b.parts.Open(t.Name, t.ID, i, cfg)
		if err != nil {
			return fmt.Errorf("opening %s-%d: %w", t.Name, i, err)
		}
		p.SetLogAppendTime(lat)
	}
	return nil
}

// finishPendingDelete removes the data of a deleted topic named name whose
// removal was interrupted, so a new topic of that name starts empty.
// Called with topicsMu held (or during start-up).
func (b *Broker) finishPendingDelete(name string) error {
	for _, d := range b.meta.Deleting() {
		if d.Name != name {
			continue
		}
		if err := b.parts.DeleteTopic(d.Name); err != nil {
			return errCode(kerr.KafkaStorageError, "removing the data of deleted topic %s: %v", d.Name, err)
		}
		if err := b.meta.FinishDelete(d.ID); err != nil {
			return err
		}
	}
	return nil
}

// deleteTopic forgets the topic and removes its data.
func (b *Broker) deleteTopic(name string) (controller.Topic, error) {
	if b.cluster != nil {
		return b.cluster.deleteTopic(name)
	}
	b.topicsMu.Lock()
	defer b.topicsMu.Unlock()
	t, err := b.meta.DeleteTopic(name)
	if err != nil {
		return t, err
	}
	b.log.Info("deleted topic", "topic", name, "topic_id", t.IDString())
	if err := b.finishPendingDelete(name); err != nil {
		// The metadata says deleted; the data goes at the next start-up or
		// before a topic of the same name is created.
		b.log.Warn("removing deleted topic's data", "topic", name, "err", err)
	}
	return t, nil
}

// addPartitions raises t's partition count to total and opens the new
// partitions.
func (b *Broker) addPartitions(name string, total int32) (controller.Topic, error) {
	if b.cluster != nil {
		return b.cluster.addPartitions(name, total)
	}
	b.topicsMu.Lock()
	defer b.topicsMu.Unlock()
	old, ok := b.meta.Topic(name)
	if !ok {
		return old, controller.ErrUnknownTopic
	}
	t, err := b.meta.AddPartitions(name, total)
	if err != nil {
		return t, err
	}
	b.log.Info("added partitions", "topic", name, "from", old.Partitions, "to", total)
	return t, b.openPartitions(t, old.Partitions)
}

// setTopicConfigs replaces t's overrides and applies them to its open logs.
func (b *Broker) setTopicConfigs(name string, configs map[string]string) (controller.Topic, error) {
	if b.cluster != nil {
		return b.cluster.setTopicConfigs(name, configs)
	}
	b.topicsMu.Lock()
	defer b.topicsMu.Unlock()
	t, err := b.meta.SetTopicConfigs(name, configs)
	if err != nil {
		return t, err
	}
	b.applyLogConfigs(t)
	b.log.Info("altered topic configs", "topic", name, "configs", configs)
	return t, nil
}

// applyLogConfigs pushes t's effective config to its open partitions.
func (b *Broker) applyLogConfigs(t controller.Topic) {
	cfg := b.topicLogConfig(t)
	lat := b.topicLogAppendTime(t)
	for i := int32(0); i < t.Partitions; i++ {
		if p := b.parts.Get(t.Name, i); p != nil {
			p.Log().SetConfig(cfg)
			p.SetLogAppendTime(lat)
		}
	}
	if cfg.Compact {
		b.KickCleaner() // a compaction config changed: look now, not after the backoff
	}
}

// topicLogConfig is the log configuration of t's partitions: the broker's
// defaults with t's overrides on top. Overrides were validated on the way
// in; one that no longer parses is ignored (logged) rather than fatal.
func (b *Broker) topicLogConfig(t controller.Topic) storage.Config {
	cfg := b.cfg.LogDefaults
	names := slices.Sorted(maps.Keys(t.Configs))
	for _, name := range names {
		spec, ok := topicConfigs[name]
		if !ok || spec.apply == nil {
			continue
		}
		if err := spec.apply(&cfg, t.Configs[name]); err != nil {
			b.log.Warn("ignoring bad topic config", "topic", t.Name, "config", name, "value", t.Configs[name], "err", err)
		}
	}
	// flush.messages=1 asks for an fsync per message: the strongest
	// policy wins over whatever flush.ms says.
	if t.Configs["flush.messages"] == "1" {
		cfg.Flush = storage.FlushPolicy{Mode: storage.FlushSync}
	}
	return cfg
}

// topicConfigValue is the effective value of a topic config: the topic's
// override, else the broker's default (as DescribeConfigs shows it).
func (b *Broker) topicConfigValue(t controller.Topic, name string) string {
	if v, ok := t.Configs[name]; ok {
		return v
	}
	if spec, ok := topicConfigs[name]; ok {
		return spec.brokerDefault(b)
	}
	return ""
}

// topicLogAppendTime reports whether t's message.timestamp.type is
// LogAppendTime: the broker then stamps each batch with its append time.
func (b *Broker) topicLogAppendTime(t controller.Topic) bool {
	return b.topicConfigValue(t, "message.timestamp.type") == "LogAppendTime"
}

// topicMinInsyncReplicas is t's min.insync.replicas: acks=all produce fails
// with NOT_ENOUGH_REPLICAS when fewer replicas are in sync (one, here).
func (b *Broker) topicMinInsyncReplicas(t controller.Topic) int32 {
	n, err := parseInt(b.topicConfigValue(t, "min.insync.replicas"), 1, 1<<31-1)
	if err != nil {
		return 1
	}
	return int32(n)
}
