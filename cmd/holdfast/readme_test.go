package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
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
	deadline := time.Now().Add(3 * time.Minute) // go run may compile first
	for ping("localhost:9092") != nil {
		select {
		case <-done:
			t.Fatalf("%s exited:\n%s", broker[0], logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not serving after 3 minutes:\n%s", broker[0], logs.String())
		}
		time.Sleep(100 * time.Millisecond)
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
					t.Fatalf("README line: %s\nprinted:\n%s\nwant it to match %s", line, out.String(), e.want)
				}
			}
		}
	}
	if checked < len(expect) {
		t.Errorf("only %d of the %d expected quick-start commands are in README.md: update the test with the README", checked, len(expect))
	}
}
