package faulttest

// Single-node crash story: one holdfast process under flush=sync. Durability
// comes from fsync before the acknowledgement; there is no replica.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/testwait"
)

// producerClient is an idempotent acks=all producer that keeps retrying
// through a broker's absence for up to a minute per record.
func producerClient(t testing.TB, c *Cluster, topic string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(c.Bootstrap(), ",")...),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProduceRequestTimeout(5 * time.Second),
		kgo.RecordDeliveryTimeout(60 * time.Second),
		kgo.MaxBufferedRecords(4000),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// createTopic creates topic, retrying while the cluster is still electing
// its controller or registering brokers.
func createTopic(t testing.TB, c *Cluster, topic string, partitions int32, rf int16) {
	t.Helper()
	adm := c.Admin()
	testwait.For(t, 60*time.Second, "topic "+topic+" created", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := adm.CreateTopic(ctx, partitions, rf, nil, topic)
		if err == nil {
			err = resp.Err
		}
		if errors.Is(err, kerr.TopicAlreadyExists) {
			err = nil
		}
		return err
	})
}

// TestSingleNodeKill9Loop kills the broker with SIGKILL five times while an
// idempotent acks=all producer writes without pause, restarting it each
// time on the same data directory. The producer client lives through all
// five crashes, so its retries of unanswered batches exercise the broker's
// rebuilt producer state: nothing acknowledged may be lost, nothing
// written twice, and no offset handed out twice.
func TestSingleNodeKill9Loop(t *testing.T) {
	c := Start(t, Options{Nodes: 1})
	const topic = "kill9"
	createTopic(t, c, topic, 3, 1)
	ch := NewChecker(t, topic)
	p := ch.StartProducer(producerClient(t, c, topic), 3000)
	for round := 1; round <= 5; round++ {
		ch.WaitAcked(1000, 90*time.Second, "before kill")
		c.Kill(1)
		t.Logf("round %d: SIGKILL after %d acknowledgements", round, ch.Acked())
		c.Restart(1)
	}
	ch.WaitAcked(1000, 90*time.Second, "after the last restart")
	p.Stop(30 * time.Second)
	res, err := ch.Check(c.Bootstrap(), 90*time.Second)
	RequireOK(t, res, err)
}

// TestSingleNodeSIGSTOP freezes the broker for 3 s in the middle of
// produce: connections stay open, nothing is answered. After SIGCONT the
// producer must recover by itself, and nothing acknowledged is lost or
// doubled.
func TestSingleNodeSIGSTOP(t *testing.T) {
	c := Start(t, Options{Nodes: 1})
	const topic = "sigstop"
	createTopic(t, c, topic, 3, 1)
	ch := NewChecker(t, topic)
	p := ch.StartProducer(producerClient(t, c, topic), 3000)
	ch.WaitAcked(1000, 60*time.Second, "before SIGSTOP")
	c.Pause(1)
	paused := ch.Acked()
	time.Sleep(3 * time.Second) // the node stays stopped past the clients' request timeout
	c.Resume(1)
	t.Logf("paused 3s at %d acknowledgements", paused)
	ch.WaitAcked(1000, 60*time.Second, "after SIGCONT")
	p.Stop(30 * time.Second)
	res, err := ch.Check(c.Bootstrap(), 60*time.Second)
	RequireOK(t, res, err)
	if f := ch.Failures(); len(f) > 0 {
		t.Logf("produce errors the client gave up on (unacknowledged, allowed): %v", f)
	}
}

// TestSingleNodeWipedDataDir restarts the broker on an empty data
// directory. A single node has no redundancy, so the topic is gone (see
// docs/faults.md); what must hold is a clean start that serves again.
func TestSingleNodeWipedDataDir(t *testing.T) {
	c := Start(t, Options{Nodes: 1})
	const topic = "wiped"
	createTopic(t, c, topic, 1, 1)
	cl := c.Client(kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 100; i++ {
		if err := cl.ProduceSync(ctx, kgo.StringRecord("before")).FirstErr(); err != nil {
			t.Fatalf("produce before wipe: %v", err)
		}
	}
	c.WipeAndRestart(1)

	adm := c.Admin()
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has(topic) {
		t.Fatalf("topic %s still listed after its data directory was wiped: %v", topic, topics.Names())
	}
	// The node works as a fresh broker: the topic can be made again and
	// starts at offset 0.
	createTopic(t, c, topic, 1, 1)
	cl2 := c.Client(kgo.DefaultProduceTopic(topic))
	r := kgo.StringRecord("after")
	if err := cl2.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatalf("produce after wipe: %v", err)
	}
	if r.Offset != 0 {
		t.Fatalf("first record on the recreated topic at offset %d, want 0", r.Offset)
	}
	if logs := c.Logs(1); strings.Contains(logs[strings.LastIndex(logs, "data directory wiped"):], "level=ERROR") {
		t.Fatalf("errors logged by the start on a wiped directory")
	}
}
