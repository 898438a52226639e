package replica_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/testwait"
	"holdfast/internal/wire"
)

// The background work of the replica manager, on one in-process broker
// (a one-voter Raft group per partition) with real clients: retention
// (retention.go, through the replicated log start of logstart.go) and
// the log cleaner (cleaner.go).

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// produceEach writes one batch per record (segment.bytes 14 then gives
// each its own segment) with the given keys and timestamps.
func produceEach(t *testing.T, cl *kgo.Client, topic string, ts []time.Time, keys ...string) {
	t.Helper()
	for i, k := range keys {
		r := &kgo.Record{Topic: topic, Key: []byte(k), Value: fmt.Appendf(nil, "%s@%d", k, i), Timestamp: ts[i]}
		if err := cl.ProduceSync(ctxFor(t, 5*time.Second), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func times(n int, at time.Time) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = at
	}
	return out
}

func startOffset(t *testing.T, adm *kadm.Client, topic string) int64 {
	t.Helper()
	l, err := adm.ListStartOffsets(ctxFor(t, 5*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := l.Lookup(topic, 0)
	if !ok || o.Err != nil {
		t.Fatalf("start offset of %s-0: %+v", topic, o)
	}
	return o.Offset
}

// waitUntil polls cond every few milliseconds (a cheap request to an
// in-process broker) until it holds; it fails the test after 5 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 5*time.Second, what, cond)
}

// Retention deletes the segments older than retention.ms on a topic whose
// cleanup.policy includes delete, moving the log start to the first record
// kept; a compact-only topic keeps every segment whatever its age.
func TestRetentionByTime(t *testing.T) {
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.RetentionCheckInterval = 20 * time.Millisecond })
	adm := n.Admin()
	cfg := func(policy string) map[string]*string {
		return map[string]*string{"cleanup.policy": kadm.StringPtr(policy), "segment.bytes": kadm.StringPtr("14"),
			"retention.ms": kadm.StringPtr("60000")}
	}
	n.CreateTopic("compacted", 1, cfg("compact"))
	n.CreateTopic("deleted", 1, cfg("delete"))
	n.CreateTopic("both", 1, cfg("compact,delete"))
	cl := n.Client()
	old, now := time.Now().Add(-time.Hour), time.Now()
	for _, topic := range []string{"compacted", "deleted", "both"} {
		// Five records an hour old, then two new ones.
		produceEach(t, cl, topic, append(times(5, old), now, now), "a", "b", "c", "d", "e", "f", "g")
	}
	for _, topic := range []string{"deleted", "both"} {
		waitUntil(t, topic+"'s log start at 5", func() bool { return startOffset(t, adm, topic) == 5 })
	}
	// A later topic's retention proves later passes ran over "compacted".
	n.CreateTopic("later", 1, cfg("delete"))
	produceEach(t, cl, "later", append(times(2, old), now), "x", "y", "z")
	waitUntil(t, "later's log start at 2", func() bool { return startOffset(t, adm, "later") == 2 })
	if got := startOffset(t, adm, "compacted"); got != 0 {
		t.Fatalf("a compact-only topic's log start moved to %d", got)
	}
	// What is left is readable from the new start.
	for _, topic := range []string{"deleted", "both"} {
		if got := startOffset(t, adm, topic); got != 5 {
			t.Fatalf("%s's log start moved on to %d", topic, got)
		}
	}
}

// A retention.ms of -1 keeps everything on a delete topic, and
// retention.bytes bounds a partition's size: the oldest segments go.
func TestRetentionBySize(t *testing.T) {
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.RetentionCheckInterval = 20 * time.Millisecond })
	adm := n.Admin()
	n.CreateTopic("forever", 1, map[string]*string{"segment.bytes": kadm.StringPtr("14"), "retention.ms": kadm.StringPtr("-1")})
	cl := n.Client()
	old := time.Now().Add(-100 * 24 * time.Hour)
	produceEach(t, cl, "forever", times(3, old), "a", "b", "c")

	// Each one-record batch of this size is its own segment of the same
	// size; retention.bytes is two and a half of them.
	n.CreateTopic("sized", 1, map[string]*string{"segment.bytes": kadm.StringPtr("14"), "retention.ms": kadm.StringPtr("-1")})
	produceEach(t, cl, "sized", times(1, time.Now()), "k")
	one := n.B.PartitionLog("sized", 0).Size()
	if one <= 0 {
		t.Fatalf("log size %d after one record", one)
	}
	produceEach(t, cl, "sized", times(5, time.Now()), "k", "k", "k", "k", "k")
	if got := n.B.PartitionLog("sized", 0).Size(); got != 6*one {
		t.Fatalf("six equal batches take %d bytes, want %d", got, 6*one)
	}
	resp, err := adm.AlterTopicConfigs(ctxFor(t, 5*time.Second), []kadm.AlterConfig{{Name: "retention.bytes", Value: kadm.StringPtr(fmt.Sprint(one * 5 / 2))}}, "sized")
	if err == nil {
		_, err = resp.On("sized", nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Kafka's rule: delete the oldest segment while what is left without
	// it is still at least retention.bytes: 6 segments → 5, 4, 3 (3 ≥
	// 2.5 segments), not 2 (2 < 2.5): the log keeps offsets 3 to 5.
	waitUntil(t, "sized's log start at 3", func() bool { return startOffset(t, adm, "sized") == 3 })
	// The segments go once the new log start is applied (logstart.go).
	waitUntil(t, "three segments left", func() bool { return n.B.PartitionLog("sized", 0).Size() == 3*one })
	if got := startOffset(t, adm, "forever"); got != 0 {
		t.Fatalf("retention.ms -1 moved the log start to %d", got)
	}
}

// The cleaner keeps the newest record of each key in the cleanable part
// of a compacted log (below the active segment) and reports the pass.
func TestCleanerCompacts(t *testing.T) {
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
		c.LogCleaner = broker.DefaultCleanerConfig()
		c.LogCleaner.Backoff = 20 * time.Millisecond
		c.LogCleaner.DedupeBufferSize = 4 << 20
	})
	n.CreateTopic("c", 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact"), "segment.bytes": kadm.StringPtr("14"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.01")})
	cl := n.Client()
	keys := []string{"k0", "k1", "k2", "k0", "k1", "k2", "k0", "k1", "k2", "z"}
	produceEach(t, cl, "c", times(len(keys), time.Now()), keys...)
	n.B.KickCleaner()
	// The partitions' figures are taken as a thread looks for work (pick),
	// before the pass: wait for a look after the pass too.
	cleaned := func(st broker.CleanerStats) bool {
		for _, p := range st.Partitions {
			if p.Topic == "c" && p.Partition == 0 {
				return p.FirstDirty >= 9
			}
		}
		return false
	}
	waitUntil(t, "a cleaner pass removing 6 records, then a look", func() bool {
		st := n.B.CleanerStats()
		return st.RecordsRemoved >= 6 && cleaned(st)
	})
	st := n.B.CleanerStats()
	if !st.Enabled || st.Threads != 1 || st.Runs < 1 || st.Failed != 0 || st.RecordsRemoved != 6 || st.BytesReclaimed <= 0 || st.Uncleanable != 0 {
		t.Fatalf("cleaner stats %+v", st)
	}
	for _, p := range st.Partitions {
		if p.Topic == "c" && (p.Uncleanable || p.Internal) {
			t.Fatalf("cleaner partition %+v", p)
		}
	}

	rc := n.Client(kgo.ConsumeTopics("c"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	for len(got) < 4 {
		fs := rc.PollFetches(ctxFor(t, 5*time.Second))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, fmt.Sprintf("%d:%s", r.Offset, r.Value)) })
	}
	if want := "[6:k0@6 7:k1@7 8:k2@8 9:z@9]"; fmt.Sprint(got) != want {
		t.Fatalf("compacted log %v, want %s", got, want)
	}
}
