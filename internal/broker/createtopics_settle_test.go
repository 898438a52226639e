package broker_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/brokertest"
	"holdfast/internal/records"
)

// The replicas of a new topic open in the background (replica's open
// queue) and a one-voter group's first election and commit are waited for
// apart from its open, all of them together (issue 27: each open waited
// out its group's first two Raft cycles, holding one of a few open slots).
// A CreateTopics with a timeout must still answer only once every
// partition leads and takes a write: one produce to all of them, sent as
// soon as the answer comes, is acknowledged everywhere without a retry.
// More partitions than open workers, so that the last opens are still
// settling when the others are done.
func TestCreateTopicsAnswerMeansEveryPartitionSettled(t *testing.T) {
	n := brokertest.Start(t)
	const parts = 300
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 120_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "settled", parts, 1
	req.Topics = append(req.Topics, rt)
	resp, err := n.Request(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.(*kmsg.CreateTopicsResponse).Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			t.Fatalf("create %s: %v", rt.Topic, err)
		}
	}

	batch, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]records.Record{{Timestamp: time.Now().UnixMilli(), Value: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	preq := kmsg.NewPtrProduceRequest()
	preq.Acks, preq.TimeoutMillis = -1, 10_000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "settled"
	// The last partitions opened first in the request.
	for p := int32(parts - 1); p >= 0; p-- {
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Partition, pp.Records = p, batch
		pt.Partitions = append(pt.Partitions, pp)
	}
	preq.Topics = append(preq.Topics, pt)
	presp, err := n.Request(brokertest.Pin(preq, 12)) // topics by name
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for _, pt := range presp.(*kmsg.ProduceResponse).Topics {
		for _, pp := range pt.Partitions {
			if err := kerr.ErrorForCode(pp.ErrorCode); err != nil {
				t.Errorf("%s-%d right after CreateTopics answered: %v", pt.Topic, pp.Partition, err)
				continue
			}
			acked++
		}
	}
	if acked != parts {
		t.Fatalf("%d of %d partitions acknowledged the first write", acked, parts)
	}
}
