package freeport

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func TestPortIsBindableAndBelowEphemeral(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 20 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if low > lowest+1 && (p < lowest || p >= low) {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, low)
		}
		seen[p] = true
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s not bindable: %v", a, err)
		}
		ln.Close()
	}
	if len(seen) < 20 {
		t.Fatalf("20 picks gave only %d distinct ports: a port came round again before its block", len(seen))
	}
}

// TestProcessesNeverShareAPort: a port checked free is not reserved (a
// stopped node's port is free until it restarts on it), so two test
// processes picking at random could both take it. Each process's ports
// come from a block it holds; a second process (this test binary again)
// gets none of them, even while the first one's ports are all free.
func TestProcessesNeverShareAPort(t *testing.T) {
	if os.Getenv("FREEPORT_CHILD") == "1" {
		var out []string
		for range 300 {
			p, err := Port()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, strconv.Itoa(p))
		}
		os.Stdout.WriteString("ports " + strings.Join(out, " ") + "\n")
		return
	}
	if _, err := Port(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	b := own
	mu.Unlock()
	if b == nil {
		t.Skip("no block of ports could be held here")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestProcessesNeverShareAPort$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FREEPORT_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	var n int
	for _, line := range strings.Split(string(out), "\n") {
		f, ok := strings.CutPrefix(line, "ports ")
		if !ok {
			continue
		}
		for _, s := range strings.Fields(f) {
			p, err := strconv.Atoi(s)
			if err != nil {
				t.Fatal(err)
			}
			if p >= b.first && p < b.first+blockSize {
				t.Fatalf("the child got port %d of this process's block %d-%d", p, b.first, b.first+blockSize-1)
			}
			n++
		}
	}
	if n != 300 {
		t.Fatalf("the child reported %d ports, want 300: %s", n, out)
	}
}
