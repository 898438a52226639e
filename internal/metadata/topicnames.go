package metadata

import (
	"errors"
	"fmt"
	"strings"
)

// Names of the internal topics, created by their coordinators.
const (
	OffsetsTopic     = "__consumer_offsets"
	TransactionTopic = "__transaction_state"
)

// IsInternalTopic reports whether name is one of Kafka's internal topics.
func IsInternalTopic(name string) bool { return name == OffsetsTopic || name == TransactionTopic }

// maxTopicNameLen is Kafka's limit: 249, so that "<topic>-<partition>"
// directory names and their "-delete" suffix fit in 255 bytes.
const maxTopicNameLen = 249

// ValidateTopicName applies Kafka's topic name rules; the error is the
// message of an INVALID_TOPIC_EXCEPTION answer.
func ValidateTopicName(name string) error {
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

// Collision reports an existing topic other than name whose metric name
// equals name's.
func (s *Store) Collision(name string) (string, bool) {
	c := collisionName(name)
	if c == name && !strings.Contains(name, "_") {
		return "", false
	}
	for _, t := range s.Topics() {
		if t.Name != name && collisionName(t.Name) == c {
			return t.Name, true
		}
	}
	return "", false
}
