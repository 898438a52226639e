package faulttest

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCheckerCatchesViolations makes sure the checker can fail: records
// deleted after their acknowledgement must count as lost, a record written
// twice as a duplicate, an older sequence after a newer one as a
// reordering.
func TestCheckerCatchesViolations(t *testing.T) {
	c := Start(t, Options{Nodes: 1})
	const topic = "checker"
	createTopic(t, c, topic, 1, 1)
	ch := NewChecker(t, topic)
	p := ch.StartProducer(producerClient(t, c, topic), 2000)
	ch.WaitAcked(300, 60*time.Second, "produce")
	p.Stop(30 * time.Second)
	res, err := ch.Check(c.Bootstrap(), 60*time.Second)
	RequireOK(t, res, err)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Drop the first 10 records (DeleteRecords), then append a copy of
	// the last acknowledged record and an old sequence of producer 0, and
	// two records of an unknown producer 7 in the wrong order.
	var o kadm.Offsets
	o.Add(kadm.Offset{Topic: topic, Partition: 0, At: 10})
	if _, err := c.Admin().DeleteRecords(ctx, o); err != nil {
		t.Fatal(err)
	}
	var last ID
	for id := range ch.Acks() {
		if id.Seq > last.Seq {
			last = id
		}
	}
	cl := c.Client(kgo.DefaultProduceTopic(topic))
	for _, id := range []ID{last, {0, 50}, {7, 5}, {7, 3}} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: ch.value(id)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	res, err = ch.Check(c.Bootstrap(), 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after tampering: %v", res)
	if res.OK() || res.Lost != 10 || res.Dup != 2 || res.Reordered != 1 || res.Unacked != 2 {
		// {0,50} is a duplicate, counted once as such and not as a
		// reordering; {7,3} after {7,5} is the reordering.
		t.Fatalf("checker missed the tampering: %v", res)
	}
}
