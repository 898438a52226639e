package main

import (
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"holdfast/internal/testwait"
)

// runToExit runs the binary with args and returns its combined output and
// whether it exited non-zero within the deadline (a process that keeps
// running is killed and fails the test).
func runToExit(t *testing.T, dir string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err != nil
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("holdfast %v kept running on a data directory another process holds:\n%s", args, out.String())
	}
	return "", false
}

// TestSecondServeOnOneDataDirRefuses: two `holdfast serve` on one
// --data-dir would both write the same log. The second refuses to start,
// names the first by its pid and the lock file, and the first keeps
// serving.
func TestSecondServeOnOneDataDirRefuses(t *testing.T) {
	dir := t.TempDir()
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	first := startProc(t, dir, addr, "--listen", addr, "--metrics-listen", "", "--data-dir", "data")
	pid := strconv.Itoa(first.cmd.Process.Pid)

	addr2 := "127.0.0.1:" + strconv.Itoa(freePort(t))
	out, failed := runToExit(t, dir, "serve", "--listen", addr2, "--metrics-listen", "", "--data-dir", "data")
	if !failed {
		t.Fatalf("second serve on the same data dir exited 0:\n%s", out)
	}
	if !strings.Contains(out, "process "+pid) || !strings.Contains(out, ".lock") {
		t.Fatalf("second serve's message does not name the holder (pid %s) and the lock file:\n%s", pid, out)
	}
	if err := ping(addr); err != nil {
		t.Fatalf("the first serve stopped answering: %v\n%s", err, first.logs)
	}

	// Once the holder is gone (even by kill -9: the kernel drops a
	// flock with its process) the directory is free again.
	first.kill()
	<-first.done
	startProc(t, dir, addr2, "--listen", addr2, "--metrics-listen", "", "--data-dir", "data")
}

// TestSecondDevClusterOnOneDirRefuses: dev-cluster's per-node directories
// are locked too.
func TestSecondDevClusterOnOneDirRefuses(t *testing.T) {
	dir := t.TempDir()
	base := devClusterPorts(t)
	cmd := exec.Command(binary, "dev-cluster", "--nodes", "1", "--dir", dir, "--base-port", strconv.Itoa(base))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	addr := "127.0.0.1:" + strconv.Itoa(base)
	if !testwait.Poll(30*time.Second, func() bool { return ping(addr) == nil }) {
		t.Fatalf("dev-cluster did not start:\n%s", logs.String())
	}
	base2 := devClusterPorts(t)
	out, failed := runToExit(t, dir, "dev-cluster", "--nodes", "1", "--dir", dir, "--base-port", strconv.Itoa(base2))
	if !failed || !strings.Contains(out, "process "+strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("second dev-cluster on the same dir: failed=%v, want a refusal naming pid %d:\n%s", failed, cmd.Process.Pid, out)
	}
}
