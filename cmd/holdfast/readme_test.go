package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"holdfast/internal/testwait"
)

// quickstart returns the lines of the README code block that follows the
// comment <!-- quickstart: NAME ... -->.
func quickstart(t *testing.T, readme, name string) []string {
	t.Helper()
	re := regexp.MustCompile("(?s)<!-- quickstart: " + name + "\\b[^>]*-->\\s*```sh\\n(.*?)```")
	m := re.FindStringSubmatch(readme)
	if m == nil {
		t.Fatalf("README.md has no code block after <!-- quickstart: %s -->", name)
	}
	var lines []string
	for _, l := range strings.Split(m[1], "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestReadmeQuickStart runs the README's quick start exactly as written,
// from the repository root, with real `go run` and curl: the broker block
// in the background, then each client line, checking what each prints. It
// reads the lines from README.md, so a change there is tested here. The
// broker's data goes to a temporary directory (HOLDFAST_DATA_DIR), not to
// the checkout.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	readmePortsLock(t)
	for _, a := range []string{"localhost:9092", "localhost:9095"} {
		if ln, err := net.Listen("tcp", a); err != nil {
			t.Skipf("%s is in use here; the quick start needs it", a)
		} else {
			ln.Close()
		}
	}
	for _, tool := range []string{"go", "curl", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not installed", tool)
			}
			t.Skipf("%s not installed", tool)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("../..")
	env := append(os.Environ(), "HOLDFAST_DATA_DIR="+t.TempDir())

	broker := quickstart(t, string(readme), "broker")
	if len(broker) != 1 {
		t.Fatalf("the broker block should be one command, got %q", broker)
	}
	srv := exec.Command("bash", "-c", broker[0])
	srv.Dir, srv.Env = root, env
	var logs bytes.Buffer
	srv.Stdout, srv.Stderr = &logs, &logs
	srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // go run's child too
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-srv.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			syscall.Kill(-srv.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if !strings.Contains(logs.String(), "stopped") {
			t.Errorf("the broker did not stop cleanly:\n%s", logs.String())
		}
	})
	exited := false
	if !testwait.Poll(3*time.Minute, func() bool { // go run may compile first
		select {
		case <-done:
			exited = true
			return true
		default:
		}
		return ping("localhost:9092") == nil
	}) {
		t.Fatalf("%s: not serving after 3 minutes:\n%s", broker[0], logs.String())
	}
	if exited {
		t.Fatalf("%s exited:\n%s", broker[0], logs.String())
	}

	// What a line must print, by what it runs.
	expect := []struct{ cmd, want string }{
		{"produce greetings", ""},
		{"consume greetings -n 1", "^hello\n$"},
		{"topic describe greetings", `(?m)^0\s+1\s+\d+\s+1\s+1\s+0\s+1\s*$`}, // partition 0, leader 1, replicas/ISR 1, log start 0, high watermark 1
		{"topic create t", "created t "},
		{"--group readers", "^hello\n$"},
		{"group describe readers", `(?m)^greetings\s+0\s+1\s+1\s+0\s`},
		{"/metrics | grep holdfast_partition", `holdfast_partition_high_watermark\{partition="0",topic="greetings"\} 1\n`},
	}
	checked := 0
	for _, line := range quickstart(t, string(readme), "client") {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
		cmd.Dir, cmd.Env = root, env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("README line failed: %s\n%v\n%s%s\nbroker:\n%s", line, err, out.String(), errb.String(), logs.String())
		}
		for _, e := range expect {
			if strings.Contains(line, e.cmd) {
				checked++
				if e.want != "" && !regexp.MustCompile(e.want).MatchString(out.String()) {
					t.Fatalf("README line: %s\nprinted:\n%s\nwant it to match %s\nbroker:\n%s", line, out.String(), e.want, logs.String())
				}
			}
		}
	}
	if checked < len(expect) {
		t.Errorf("only %d of the %d expected quick-start commands are in README.md: update the test with the README", checked, len(expect))
	}
}

// TestReadmeDevCluster runs the README's "Running a cluster" lines on one
// machine as written, with the built binary as `holdfast` on PATH: the dev
// cluster in the background, then each client line (retried while the new
// cluster elects its first leaders, as a user would).
func TestReadmeDevCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	readmePortsLock(t)
	for _, p := range []int{19092, 19093, 19094, 19192, 19193, 19194} {
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err != nil {
			t.Skipf("port %d is in use here; the README's dev cluster needs it", p)
		} else {
			ln.Close()
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env := append(os.Environ(), "PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"))
	lines := quickstart(t, string(readme), "dev-cluster")
	if len(lines) != 1 {
		t.Fatalf("the dev-cluster block should be one command, got %q", lines)
	}
	dc := exec.Command("bash", "-c", "exec "+lines[0])
	dc.Dir, dc.Env = dir, env
	var logs bytes.Buffer
	dc.Stdout, dc.Stderr = &logs, &logs
	if err := dc.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { dc.Wait(); close(done) }()
	t.Cleanup(func() {
		dc.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			dc.Process.Kill()
			<-done
		}
	})
	if !testwait.Poll(60*time.Second, func() bool { return ping("127.0.0.1:19092") == nil }) {
		t.Fatalf("%s: not serving:\n%s", lines[0], logs.String())
	}
	deadline := time.Now().Add(60 * time.Second)
	if _, err := os.Stat(filepath.Join(dir, "dev-cluster", "node-3")); err != nil {
		t.Fatalf("no ./dev-cluster/node-3: %v", err)
	}
	expect := map[string]string{
		"topic create":          `created orders \(6 partitions, replication factor 3\)`,
		"cluster status":        `(?s)1\s+127\.0\.0\.1\s+19092\s+alive.*3\s+127\.0\.0\.1\s+19094\s+alive`,
		"cluster elect-leaders": `TOPIC\s+PARTITION\s+RESULT`,
	}
	for _, line := range quickstart(t, string(readme), "dev-cluster-client") {
		var out []byte
		// Run again while the cluster forms, as a user would.
		if !testwait.Poll(time.Until(deadline), func() bool {
			cmd := exec.Command("bash", "-o", "pipefail", "-c", line)
			cmd.Dir, cmd.Env = dir, env
			out, err = cmd.CombinedOutput()
			return err == nil
		}) {
			t.Fatalf("README line failed: %s\n%v\n%s\ncluster:\n%s", line, err, out, logs.String())
		}
		for cmd, want := range expect {
			if strings.Contains(line, cmd) {
				delete(expect, cmd)
				if !regexp.MustCompile(want).Match(out) {
					t.Fatalf("README line: %s\nprinted:\n%s\nwant it to match %s", line, out, want)
				}
			}
		}
	}
	if len(expect) > 0 {
		t.Errorf("README's dev-cluster block lost the commands this test checks: %v", expect)
	}
}

// readmePortsLock serializes the README tests between processes on this
// machine: they use the README's fixed ports, so two test runs at once (two
// checkouts) would talk to each other's brokers. Held until the test ends.
func readmePortsLock(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "holdfast-readme-ports.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}
