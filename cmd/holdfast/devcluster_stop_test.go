package main

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"sync"
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
	base := devClusterPorts(t)
	cmd := exec.Command(binary, "dev-cluster", "--nodes", "3", "--dir", t.TempDir(), "--base-port", strconv.Itoa(base), "--log-level", "info")
	var (
		mu   sync.Mutex
		logs bytes.Buffer
	)
	w := writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(b) })
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	text := func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }

	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:" + strconv.Itoa(base)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(60 * time.Second)
	for {
		// Every node then leads some of them (preferred leaders).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := adm.CreateTopics(ctx, 6, 3, nil, "stop")
		cancel()
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create topic: %v\n%s", err, text())
		}
		time.Sleep(200 * time.Millisecond)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("dev-cluster did not stop within 2 minutes of SIGTERM:\n%s", text())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("dev-cluster exited %d:\n%s", code, text())
	}
	stop := text()
	stop = stop[strings.Index(stop, "dev-cluster stopping"):]
	// The controller fences the two others through their heartbeats (and
	// itself, unless they were fenced first).
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
