// Package s3test runs a real S3-compatible server for tests, as a
// process: versitygw with its POSIX backend (.ci/run installs the pinned
// version), one bucket, credentials in the environment (the standard
// chain the nodes read). The tiered-storage tests of internal/tiered and
// internal/faulttest share it.
package s3test

import (
	"fmt"
	"go/build"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"holdfast/internal/freeport"
)

// Bucket and the credentials the server accepts.
const (
	Bucket = "holdfast"
	Access = "holdfasttest"
	Secret = "holdfasttestsecret"
)

// Server is one versitygw process; Kill and Restart keep its address and
// its directory (the bucket's contents).
type Server struct {
	t    testing.TB
	bin  string
	Dir  string // the POSIX backend's root: Dir/Bucket/<key>
	Addr string // host:port
	cmd  *exec.Cmd
}

// Start starts versitygw on host (an IP address; "" is 127.0.0.1) and a
// free port, and sets AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for
// the test (t.Setenv: the nodes it starts inherit them). Without the
// binary the test is skipped, except under CI=true, where it fails.
// The server is killed when the test ends.
func Start(t testing.TB, host string) *Server {
	t.Helper()
	bin, err := exec.LookPath("versitygw")
	if err != nil {
		if p := filepath.Join(build.Default.GOPATH, "bin", "versitygw"); fileExists(p) {
			bin, err = p, nil
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("versitygw (the S3-compatible server these tests run) is not installed: .ci/run installs it")
		}
		t.Skip("versitygw not found on PATH or in $GOPATH/bin: install it as .ci/run does (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0) to run the tiered-storage tests")
	}
	if host == "" {
		host = "127.0.0.1"
	}
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, Dir: t.TempDir(), Addr: net.JoinHostPort(host, fmt.Sprint(port))}
	if err := os.Mkdir(filepath.Join(s.Dir, Bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	if st, ok := t.(interface{ Setenv(k, v string) }); ok {
		st.Setenv("AWS_ACCESS_KEY_ID", Access)
		st.Setenv("AWS_SECRET_ACCESS_KEY", Secret)
	}
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Endpoint is the server's URL, for --remote-log-storage-s3-endpoint.
func (s *Server) Endpoint() string { return "http://" + s.Addr }

// Restart starts the server (again, after Kill) on the same address and
// directory and waits until it listens.
func (s *Server) Restart() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "--access", Access, "--secret", Secret, "--port", s.Addr, "--quiet", "posix", s.Dir)
	s.cmd.Stdout, s.cmd.Stderr = os.Stderr, os.Stderr
	// It dies with the test binary even if cleanup never runs.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("versitygw does not listen on %s: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server with SIGKILL, as a crash, and waits for it.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.cmd.Wait()
	s.cmd = nil
}

// Signal sends sig to the server (SIGSTOP, SIGCONT: a store that hangs).
func (s *Server) Signal(sig syscall.Signal) {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(sig)
	}
}

// SegmentObjects lists the bucket's segment objects (.log), as keys.
func (s *Server) SegmentObjects() []string {
	var keys []string
	root := filepath.Join(s.Dir, Bucket)
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".log") {
			if k, err := filepath.Rel(root, p); err == nil {
				keys = append(keys, filepath.ToSlash(k))
			}
		}
		return nil
	})
	return keys
}
