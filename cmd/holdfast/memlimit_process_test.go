package main

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"holdfast/internal/broker"
	"holdfast/internal/testwait"
)

// TestServeMemoryLimit runs `holdfast serve` and reads the Go runtime's
// memory limit from its /metrics (go_gc_gomemlimit_bytes, the runtime's
// own figure): none by default (Go's), derived with 0 (an empty node: the
// base), as given by --memory-limit or HOLDFAST_MEMORY_LIMIT, and GOMEMLIMIT
// in the environment winning over the setting (and said in the log).
func TestServeMemoryLimit(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		want    int64
		logLine string
	}{
		{name: "default", want: 1<<63 - 1, logLine: "memory limit: none"},
		{name: "derived", args: []string{"--memory-limit", "0"}, want: broker.DerivedMemoryLimit(0, 0), logLine: "memory limit derived from the replicas held"},
		{name: "flag", args: []string{"--memory-limit", "300000000"}, want: 300000000},
		{name: "env", env: map[string]string{"HOLDFAST_MEMORY_LIMIT": "200000000"}, want: 200000000},
		{name: "none", args: []string{"--memory-limit", "-1"}, want: 1<<63 - 1},
		{name: "GOMEMLIMIT wins", args: []string{"--memory-limit", "300000000"}, env: map[string]string{"GOMEMLIMIT": "250MiB"},
			want: 250 << 20, logLine: "memory limit from GOMEMLIMIT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			web := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			p := startProc(t, t.TempDir(), addr, append([]string{"--listen", addr, "--metrics-listen", web, "--console=false"}, c.args...)...)
			var got int64
			var err error
			// The admin listener answers once the node is ready; polled
			// until it does, not timed.
			if !testwait.Poll(30*time.Second, func() bool { got, err = goMemLimit(web); return err == nil }) {
				t.Fatalf("reading /metrics: %v\n%s", err, p.logs)
			}
			if got != c.want {
				t.Fatalf("the runtime's memory limit is %d, want %d\n%s", got, c.want, p.logs)
			}
			if c.logLine != "" && !strings.Contains(p.logs.String(), c.logLine) {
				t.Fatalf("no %q in the log:\n%s", c.logLine, p.logs)
			}
		})
	}
}

// goMemLimit reads go_gc_gomemlimit_bytes from the admin listener web.
func goMemLimit(web string) (int64, error) {
	resp, err := http.Get("http://" + web + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, "go_gc_gomemlimit_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if f >= 1<<63-1 {
				return 1<<63 - 1, err
			}
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("no go_gc_gomemlimit_bytes in /metrics (status %s)", resp.Status)
}
