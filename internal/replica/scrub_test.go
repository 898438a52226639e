package replica_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/clock"
	"holdfast/internal/records"
	"holdfast/internal/wire"
)

// The scrubber (scrub.go) checks what this process did not write and
// nobody read: bytes flipped in a sealed segment while the broker was
// stopped are found without any client reading them (the open after a
// clean shutdown does not read sealed segments), and counted. The
// scrubber's start delay and pacing run on the node's clock, a fake one
// here, which the wait below moves a second per look.
func TestScrubFindsColdCorruption(t *testing.T) {
	clk := clock.NewFake(time.Now())
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
		c.LogScrubBytesPerSecond = 64 << 20
		c.Clock = clk
	})
	n.CreateTopic("cold", 1, map[string]*string{"segment.bytes": kadm.StringPtr("14")})
	n.CreateTopic("clean", 1, map[string]*string{"segment.bytes": kadm.StringPtr("14")})
	cl := n.Client(kgo.ProducerBatchCompression(kgo.NoCompression()))
	value := bytes.Repeat([]byte("v"), 200)
	for _, topic := range []string{"cold", "clean"} {
		for range 3 { // one batch and segment each
			if err := cl.ProduceSync(ctxFor(t, 5*time.Second), &kgo.Record{Topic: topic, Value: value}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	n.Stop()
	dir := filepath.Join(n.Cfg.DataDir, "cold-0")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".log" {
			logs = append(logs, e.Name())
		}
	}
	slices.Sort(logs)
	if len(logs) < 3 {
		t.Fatalf("segments %v: want one per batch", logs)
	}
	path := filepath.Join(dir, logs[0]) // sealed: offset 0
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := records.HeaderSize + 100; i < records.HeaderSize+132; i++ {
		b[i] ^= 0xff // in the record's value: the batch CRC no longer matches
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}

	n.Restart()
	if st := n.B.ReplicationStats(); st.Corruptions != 0 {
		t.Fatalf("corruption found at open: %+v (the scrubber is under test)", st)
	}
	// The first pass starts scrubStartDelay (3 s of the clock) after the
	// start.
	// The corruption is counted when the bad batch is met, the bytes
	// scrubbed when a log's step ends: a pass that meets the bad batch
	// first has scrubbed nothing yet, the clean topic's log comes after.
	waitUntil(t, "the scrubber to find the flipped bytes and check the clean log", func() bool {
		clk.Advance(time.Second)
		st := n.B.ReplicationStats()
		return st.Corruptions >= 1 && st.Scrubbed > 0
	})
	st := n.B.ReplicationStats()
	if st.Corruptions != 1 || st.Scrubbed <= 0 {
		t.Fatalf("replication stats %+v: want exactly the one corruption, bytes scrubbed", st)
	}
}
