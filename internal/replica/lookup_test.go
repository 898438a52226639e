package replica

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/metadata"
	"holdfast/internal/partition"
	"holdfast/internal/storage"
)

// Lookup's answer without a replica open here: Kafka's replica manager
// codes for a missing partition, an offline one and one led elsewhere.
func TestLookupWithoutReplica(t *testing.T) {
	m, meta := newTestManager(t, storage.OSFS())
	createTopic(t, meta, "t", []int32{1}, []int32{2})
	m.offline = map[topicPartition]error{{"t", 0}: errors.New("input/output error")}
	for _, c := range []struct {
		topic string
		i     int32
		want  int16
	}{
		{"none", 0, kerr.UnknownTopicOrPartition.Code},
		{"t", -1, kerr.UnknownTopicOrPartition.Code},
		{"t", 2, kerr.UnknownTopicOrPartition.Code},
		{"t", 0, kerr.KafkaStorageError.Code},
		{"t", 1, kerr.NotLeaderForPartition.Code},
	} {
		if p, code := m.Lookup(c.topic, c.i); p != nil || code != c.want {
			t.Errorf("Lookup(%s, %d) = %v, %d; want nil, %d", c.topic, c.i, p, code, c.want)
		}
	}
	if !m.anyOffline() || !m.isOffline(topicPartition{"t", 0}) || m.isOffline(topicPartition{"t", 1}) {
		t.Fatal("offline set")
	}
}

// AllOpen looks only at the partitions assigned here.
func TestAllOpen(t *testing.T) {
	m, meta := newTestManager(t, storage.OSFS())
	elsewhere := createTopic(t, meta, "elsewhere", []int32{2, 3}, []int32{3})
	here := createTopic(t, meta, "here", []int32{2}, []int32{1, 2})
	if !m.AllOpen(elsewhere) {
		t.Fatal("a topic with no replica here is not all open")
	}
	if m.AllOpen(here) {
		t.Fatal("a topic whose replica here is not open is all open")
	}
}

// A deleted topic's data still to be removed blocks an open of a new
// topic of the same name (its replica would open over the old data).
func TestPendingDelete(t *testing.T) {
	m, meta := newTestManager(t, storage.OSFS())
	createTopic(t, meta, "t", []int32{2})
	if err := m.pendingDelete("t"); err != nil {
		t.Fatalf("pendingDelete of a live topic: %v", err)
	}
	applyCmd(t, meta, metadata.Command{Op: metadata.OpDeleteTopic, Name: "t"})
	if err := m.pendingDelete("t"); !errors.Is(err, partition.ErrForeignData) {
		t.Fatalf("pendingDelete after a delete: %v", err)
	}
	if err := m.pendingDelete("u"); err != nil {
		t.Fatalf("pendingDelete of another name: %v", err)
	}
	if err := m.FinishPendingDelete("t"); err != nil {
		t.Fatal(err)
	}
	if err := m.pendingDelete("t"); err != nil {
		t.Fatalf("pendingDelete after FinishPendingDelete: %v", err)
	}
}

// A topic's log config is the broker defaults under its own configs.
func TestLogConfig(t *testing.T) {
	m, meta := newTestManager(t, storage.OSFS())
	plain := createTopic(t, meta, "plain", []int32{1})
	tuned := applyCmd(t, meta, metadata.Command{Op: metadata.OpCreateTopic, Topic: &metadata.Topic{
		Name: "tuned", ID: metadata.NewTopicID(), Partitions: 1, Replicas: [][]int32{{1}},
		Configs: map[string]string{"cleanup.policy": "compact", "segment.bytes": "4096", "message.timestamp.type": "LogAppendTime"}}})
	if c := m.logConfig(plain); c.Compact || m.logAppendTime(plain) {
		t.Fatalf("defaults: compact %v, log append time %v", c.Compact, m.logAppendTime(plain))
	}
	c := m.logConfig(tuned)
	if !c.Compact || c.SegmentBytes != 4096 || !m.logAppendTime(tuned) {
		t.Fatalf("tuned: compact %v, segment bytes %d, log append time %v", c.Compact, c.SegmentBytes, m.logAppendTime(tuned))
	}
}
