package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDevClusterStopFencesEveryNode: on SIGTERM, dev-cluster fences every
// node (as serve does) before it closes them, so each node's controlled
// shutdown leaves its leaderships in place instead of handing them to a
// node about to close, and nothing about fencing is logged at WARN.
func TestDevClusterStopFencesEveryNode(t *testing.T) {
	dc := runDevCluster(t, "--log-level", "info")
	cl, err := kgo.NewClient(kgo.SeedBrokers(dc.boot))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Every node then leads some of its partitions (preferred leaders).
	dc.createTopic(t, kadm.NewClient(cl), "stop")

	// Each node's admin listener, printed after the bootstrap string: its
	// console and its own metrics.
	for i := 0; i < 3; i++ {
		console := fmt.Sprintf("http://127.0.0.1:%d", dc.base+200+i)
		if !strings.Contains(dc.Logs(), fmt.Sprintf("node %d: console %s/  metrics %s/metrics", i+1, console, console)) {
			t.Fatalf("node %d's admin listener not printed:\n%s", i+1, dc.Logs())
		}
		if page := get(t, console+"/"); !strings.Contains(page, "Cluster") {
			t.Errorf("node %d's console:\n%s", i+1, page)
		}
		if m := get(t, console+"/metrics"); !strings.Contains(m, `holdfast_partition_leader{partition="0",topic="stop"}`) {
			t.Errorf("node %d's /metrics has no partition of topic stop", i+1)
		}
	}

	dc.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-dc.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("dev-cluster did not stop within 2 minutes of SIGTERM:\n%s", dc.Logs())
	}
	if code := dc.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("dev-cluster exited %d:\n%s", code, dc.Logs())
	}
	stop := dc.Logs()
	i := strings.Index(stop, "dev-cluster stopping")
	// A normal start warns of nothing (waiting a moment for the other
	// nodes of a new cluster is not a warning).
	for _, line := range strings.Split(stop[:max(i, 0)], "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("while starting: %s", line)
		}
	}
	stop = stop[i:]
	// The controller fences the two others through their heartbeats, and
	// itself directly (even when they were fenced first: still up, they
	// must not hand it leaderships as they close).
	if n := strings.Count(stop, "broker fenced by heartbeat"); n != 2 {
		t.Errorf("%d brokers fenced by heartbeat, want 2", n)
	}
	for _, line := range strings.Split(stop, "\n") {
		switch {
		case strings.Contains(line, "level=ERROR"),
			strings.Contains(line, "level=WARN") && strings.Contains(line, "fenc"),
			strings.Contains(line, "controlled shutdown: leadership moved"):
			t.Errorf("while stopping: %s", line)
		}
	}
	if t.Failed() {
		t.Logf("stop logs:\n%s", stop)
	}
}
