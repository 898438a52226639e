package lab

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/storage"
	"holdfast/internal/testwait"
)

// TestLabProducerScenarios runs the two cheapest scenarios with their
// faults: under Kafka's settings the loss (acks=0) and the duplicates
// (acks=all without idempotence) show; under Holdfast's defaults nothing
// is lost or duplicated. Each row says what was injected, with evidence,
// and carries its timeline; Run reports each scenario as it starts and
// ends.
func TestLabProducerScenarios(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var calls []string
	var lines []string
	res, err := Run(ctx, Config{Records: 300, Scenarios: []string{"acks0-drop", "lost-ack"}, Dir: t.TempDir(),
		Progress: func(l string) { mu.Lock(); lines = append(lines, l); mu.Unlock() },
		Scenario: func(i, n int, s Scenario, rows []Row) {
			mu.Lock()
			defer mu.Unlock()
			state := "start"
			if rows != nil {
				state = "end"
			}
			calls = append(calls, s.Name+" "+state)
		}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Expectation{"acks=0": ExpectLoss, "acks=all, idempotent": ExpectNothing, "acks=all, not idempotent": ExpectDuplicates}
	if !res.OK || len(res.Rows) != 4 || res.Records != 300 || res.Seconds <= 0 || res.Started.IsZero() {
		for _, r := range res.Rows {
			t.Logf("%s / %s: %s (%s)", r.Scenario, r.Setting, r.Verdict, r.Error)
		}
		t.Fatalf("result ok=%v rows=%d records=%d", res.OK, len(res.Rows), res.Records)
	}
	for _, r := range res.Rows {
		if r.Expect != want[r.Setting] || !r.Pass || !r.Injected || r.Fault == "" || r.Acked == 0 {
			t.Errorf("%s / %s: %+v", r.Scenario, r.Setting, r)
		}
		if r.Default != (r.Expect == ExpectNothing) || (r.Profile == "holdfast") != r.Default {
			t.Errorf("%s / %s: default %v profile %s", r.Scenario, r.Setting, r.Default, r.Profile)
		}
		faults := 0
		for _, ev := range r.Events {
			if ev.Fault {
				faults++
			}
		}
		if faults == 0 || len(r.Acks) == 0 || r.Acks[len(r.Acks)-1].Acked == 0 || r.Report == nil {
			t.Errorf("%s / %s: %d fault events, %d points, report %v", r.Scenario, r.Setting, faults, len(r.Acks), r.Report != nil)
		}
	}
	if strings.Join(calls, ",") != "acks0-drop start,acks0-drop end,lost-ack start,lost-ack end" {
		t.Errorf("scenario callbacks %v", calls)
	}
	if len(lines) < 6 || !strings.HasPrefix(lines[0], "acks0-drop: ") {
		t.Errorf("progress %q", lines)
	}
}

// TestLinkUnderAClient: a franz-go producer dialing through the link
// keeps going through a blackhole and a cut (it reconnects), and every
// record it had acknowledged is in the log.
func TestLinkUnderAClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := startCluster(ctx, t.TempDir(), quietLog(), clusterOptions{nodes: 1, flush: storage.FlushPolicy{Mode: storage.FlushSync}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	ln := newLink()
	cl, err := producer(c, "via-link", "all", true, ln.dialer(), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := c.createTopic(ctx, "via-link", 1, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[string]bool{}
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			v := fmt.Sprintf("r%d", i)
			cl.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
				if err == nil {
					mu.Lock()
					acked[string(r.Value)] = true
					mu.Unlock()
				}
			})
		}
	}
	produce(0, 100)
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ln.blackhole.Store(true)
	produce(100, 150)
	testwait.Until(t, 10*time.Second, "a request lost in the blackhole", func() bool { return ln.swallowed.Load() > 0 })
	ln.cut()
	ln.blackhole.Store(false)
	if ln.swallowed.Load() == 0 || ln.connsCut.Load() == 0 {
		t.Fatalf("swallowed %d bytes, cut %d connections", ln.swallowed.Load(), ln.connsCut.Load())
	}
	produce(150, 200)
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	// acks=all, idempotent: what the blackhole ate is sent again on a new
	// connection, so every record ends up acknowledged.
	if n != 200 {
		t.Fatalf("%d of 200 records acknowledged", n)
	}
	seen := consumeAll(ctx, t, c, "via-link", n)
	for v := range acked {
		if seen[v] == 0 {
			t.Fatalf("%q acknowledged, not in the log (%d of %d read)", v, len(seen), n)
		}
	}
}
