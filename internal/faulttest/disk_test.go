package faulttest

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/testwait"
)

// TestSingleNodeDiskFull fills the broker's disk (a 24 MiB tmpfs) under an
// idempotent acks=all producer. A partition whose write fails refuses
// appends until the broker restarts (the failed write may have left a torn
// tail that only recovery can judge), like Kafka taking a log directory
// offline. What must hold: the broker keeps serving, the producer gets
// retriable errors and no acknowledgement for what was not stored, and
// after space is added and the broker restarted, the same producer's
// retries land once; every acknowledged record is there exactly once.
func TestSingleNodeDiskFull(t *testing.T) {
	c := Start(t, Options{Nodes: 1, DiskBytes: 24 << 20})
	const topic = "diskfull"
	createTopic(t, c, topic, 3, 1)
	ch := NewChecker(t, topic)
	ch.Size = 4000
	// Uncompressed, so the padding takes real space.
	p := ch.StartProducer(producerClient(t, c, topic, kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordDeliveryTimeout(5*time.Minute)), 2000)
	if !testwait.Poll(60*time.Second, func() bool { return strings.Contains(c.Logs(1), "no space left on device") }) {
		t.Fatalf("disk not full after 60s and %d acknowledgements of 4 KB", ch.Acked())
	}
	full := ch.Acked()
	t.Logf("disk full after %d acknowledgements", full)
	time.Sleep(2 * time.Second) // keep the disk full a while: the broker must still serve
	if err := Ping(c.Node(1).Addr); err != nil {
		t.Fatalf("broker stopped serving with a full disk: %v", err)
	}
	c.ResizeDisk(1, 512<<20)
	c.Restart(1)
	ch.WaitAcked(1000, 90*time.Second, "after space was added and the broker restarted")
	p.Stop(60 * time.Second)
	res, err := ch.Check(c.Bootstrap(), 60*time.Second)
	RequireOK(t, res, err)
}
