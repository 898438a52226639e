package main

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"holdfast/internal/testwait"
)

// labChild is the pid of serve's `holdfast lab` child process, or 0.
func labChild(t *testing.T, pid int) int {
	t.Helper()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, c := range strings.Fields(string(b)) {
			cpid, _ := strconv.Atoi(c)
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cpid)); strings.Contains(string(cmd), "lab\x00--json\x00--events") {
				return cpid
			}
		}
	}
	return 0
}

// alive: pid is a process that is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// TestConsoleLabStopsWithBroker: a lab run started from the console does
// not outlive its broker. Shut down (SIGTERM), serve interrupts the lab
// child, waits for it and removes its directory; killed (SIGKILL), the
// child dies with it (Pdeathsig; without it the child would also die of
// SIGPIPE at its next progress line to the dead broker's pipe). Each run is a long one (all
// scenarios, 20000 records a row) stopped in its first scenario.
func TestConsoleLabStopsWithBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the lab")
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			dir, tmp := t.TempDir(), t.TempDir()
			t.Setenv("TMPDIR", tmp)
			addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			web := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			p := startProc(t, dir, addr, "--listen", addr, "--metrics-listen", web)
			base := "http://" + web
			if code, body := postForm(t, base+"/lab/run", url.Values{"records": {"20000"}}, "", ""); code != http.StatusSeeOther {
				t.Fatalf("starting a run: %d %s", code, body)
			}
			var child int
			if !testwait.Poll(time.Minute, func() bool {
				if child == 0 {
					child = labChild(t, p.cmd.Process.Pid)
				}
				return child != 0 && getLabStatus(t, base).Current != ""
			}) {
				t.Fatalf("no lab child running after a minute (child %d): %+v\n%s", child, getLabStatus(t, base), p.logs)
			}
			t.Logf("lab child %d, status %+v", child, getLabStatus(t, base))
			p.cmd.Process.Signal(sig)
			select {
			case <-p.done:
			case <-time.After(2 * time.Minute):
				t.Fatalf("serve did not exit after %v:\n%s", sig, p.logs)
			}
			if !testwait.Poll(30*time.Second, func() bool { return !alive(child) }) {
				syscall.Kill(child, syscall.SIGKILL)
				t.Fatalf("the lab child %d outlived serve's %v by 30 s", child, sig)
			}
			if sig == syscall.SIGTERM {
				if left, _ := os.ReadDir(tmp); len(left) > 0 {
					t.Errorf("the lab run left %v in its temporary directory", left)
				}
				if !strings.Contains(p.logs.String(), "cancelled_by=\"this node's shutdown\"") {
					t.Errorf("serve's log does not say the run was cancelled by the shutdown:\n%s", p.logs)
				}
			}
		})
	}
}
