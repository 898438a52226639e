package faulttest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// cleanShutdownFile is replica.CleanShutdownFile (not imported: this
// package drives the binary only).
const cleanShutdownFile = ".holdfast_cleanshutdown"

// TestCleanShutdownMarker: a clean stop (SIGTERM) leaves the clean
// shutdown marker, which lets the next start skip the recovery fsyncs; a
// running node and a SIGKILLed one have none, so a crash always takes the
// full recovery. A torn tail is cut in both cases, and every acknowledged
// record survives both.
func TestCleanShutdownMarker(t *testing.T) {
	c := Start(t, Options{Nodes: 1})
	const topic = "marker"
	createTopic(t, c, topic, 1, 1)
	dir := c.Node(1).DataDir
	marker := filepath.Join(dir, cleanShutdownFile)
	has := func() bool {
		_, err := os.Stat(marker)
		return err == nil
	}
	produced := 0
	produce := func(n int) {
		t.Helper()
		cl := c.Client(kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for range n {
			if err := cl.ProduceSync(ctx, kgo.StringRecord("v")).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			produced++
		}
	}
	// tear appends half a batch to the partition's active segment, as a
	// write cut by a crash leaves it.
	tear := func() {
		t.Helper()
		segs, _ := filepath.Glob(filepath.Join(dir, topic+"-0", "*.log"))
		if len(segs) == 0 {
			t.Fatal("no segment")
		}
		f, err := os.OpenFile(segs[len(segs)-1], os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		// A batch header claiming 200 bytes, then only a few of them.
		f.Write([]byte{0, 0, 0, 0, 0, 0, 0, 99, 0, 0, 0, 200, 0, 0, 0, 0, 2, 1, 2, 3})
		f.Close()
	}
	consumeAll := func() {
		t.Helper()
		cl := c.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		got := 0
		for got < produced {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				t.Fatalf("consumed %d of %d acknowledged records", got, produced)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if r.Offset != int64(got) {
					t.Fatalf("offset %d, want %d", r.Offset, got)
				}
				got++
			})
		}
	}
	tornCut := func(after int) bool {
		return strings.Count(c.Logs(1)[after:], "truncating torn tail") > 0
	}

	produce(20)
	if has() {
		t.Fatal("marker while the node runs")
	}
	c.Kill(1)
	if has() {
		t.Fatal("marker after SIGKILL")
	}
	tear()
	mark := len(c.Logs(1))
	c.Restart(1)
	if !tornCut(mark) {
		t.Fatal("the torn tail after SIGKILL was not cut")
	}
	if strings.Contains(c.Logs(1)[mark:], "clean shutdown marker found") {
		t.Fatal("a start after SIGKILL took the clean path")
	}
	produce(20)
	consumeAll()

	c.Stop(1)
	if !has() {
		t.Fatalf("no marker after a clean stop:\n%s", c.Logs(1)[max(0, len(c.Logs(1))-4000):])
	}
	// A marker says every log was fsynced, not that none is damaged:
	// recovery still checks the tail.
	tear()
	mark = len(c.Logs(1))
	c.Restart(1)
	if has() {
		t.Fatal("the marker outlived the start that used it")
	}
	if !strings.Contains(c.Logs(1)[mark:], "clean shutdown marker found") {
		t.Fatal("a start after a clean stop did not use the marker")
	}
	if !tornCut(mark) {
		t.Fatal("the torn tail after a clean stop was not cut")
	}
	produce(20)
	consumeAll()
	c.Kill(1)
	if has() {
		t.Fatal("marker after SIGKILL of a node started clean")
	}
}
