package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"holdfast/internal/auth"
	"holdfast/internal/console"
	"holdfast/internal/lab"
)

// labProcess is how the console runs the durability lab: this binary's
// `holdfast lab --json --events` as a child process, in a temporary
// directory of its own under tmp, at a lower CPU priority, dying with the
// broker. Not in the broker's process: the lab starts three brokers per
// scenario, crashes them and fills their memory on purpose, and none of
// that may touch the broker serving the console (a panic there, a leak, a
// goroutine left behind). Cancelling interrupts the child (SIGINT, as
// Ctrl-C: it stops its clusters and removes its directory), then kills it
// after 30 s; the directory is removed here either way.
func labProcess(exe, tmp string, log *slog.Logger) func(context.Context, lab.Config) (lab.Result, error) {
	return func(ctx context.Context, cfg lab.Config) (lab.Result, error) {
		dir, err := os.MkdirTemp(tmp, "holdfast-console-lab-")
		if err != nil {
			return lab.Result{}, err
		}
		defer os.RemoveAll(dir)
		args := []string{"lab", "--json", "--events", "--records", strconv.Itoa(cfg.Records), "--dir", dir}
		for _, s := range cfg.Scenarios {
			args = append(args, "--scenario", s)
		}
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Dir = dir
		// The lab reads no setting of serve's: leave them (and
		// HOLDFAST_PASSWORD) out of its environment.
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "HOLDFAST_") })
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 30 * time.Second
		childOfBroker(cmd)
		var out bytes.Buffer
		cmd.Stdout = &limitedWriter{w: &out, n: lab.MaxFileBytes}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return lab.Result{}, err
		}
		if err := cmd.Start(); err != nil {
			return lab.Result{}, err
		}
		if err := lowerPriority(cmd.Process.Pid); err != nil {
			log.Warn("console: lab at normal priority", "err", err)
		}
		// Events: progress lines and scenarios; anything else (a panic's
		// trace) is kept for the error.
		var tail []string
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), lab.MaxFileBytes)
		for sc.Scan() {
			var ev labEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				if tail = append(tail, sc.Text()); len(tail) > 20 {
					tail = tail[1:]
				}
				continue
			}
			switch {
			case ev.Line != "" && cfg.Progress != nil:
				cfg.Progress(ev.Line)
			case ev.Scenario != "" && cfg.Scenario != nil:
				s := lab.Scenario{Name: ev.Scenario}
				if i := slices.IndexFunc(lab.Scenarios(), func(x lab.Scenario) bool { return x.Name == ev.Scenario }); i >= 0 {
					s = lab.Scenarios()[i]
				}
				rows := ev.Rows
				if ev.Done && rows == nil {
					rows = []lab.Row{}
				}
				cfg.Scenario(ev.Index, ev.Of, s, rows)
			}
		}
		io.Copy(io.Discard, stderr)
		err = cmd.Wait()
		if ctx.Err() != nil {
			return lab.Result{}, ctx.Err()
		}
		// Exit 1 is a lab that ran and failed a row: its JSON is the result.
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == exitFailed && out.Len() > 0) {
			return lab.Result{}, fmt.Errorf("holdfast lab: %v: %s", err, strings.Join(tail, "\n"))
		}
		return lab.Decode(&out)
	}
}

// limitedWriter keeps the first n bytes and fails after them.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if len(b) > l.n {
		return 0, errors.New("holdfast lab wrote more than a results file holds")
	}
	l.n -= len(b)
	return l.w.Write(b)
}

// checkPassword: user's password is a PLAIN user's of some listener, or
// the one its SCRAM credential was made from (the console's logins; the
// console checks one at a time and holds the next after a failure).
func (sec *serveSecurity) checkPassword(user, pass string) bool {
	if pass == "" || strings.ContainsRune(user, 0) || strings.ContainsRune(pass, 0) {
		return false
	}
	for _, l := range sec.listeners {
		if l.wire.SASL == nil {
			continue
		}
		if s, ok := l.wire.SASL.Start(auth.MechPlain); ok {
			if _, done, err := s.Step([]byte("\x00" + user + "\x00" + pass)); err == nil && done {
				return true
			}
		}
	}
	for _, m := range []string{auth.MechScramSHA512, auth.MechScramSHA256} {
		if c, ok := sec.creds.ScramCredential(user, m); ok {
			return c.VerifyPassword(pass)
		}
	}
	return false
}

// consoleLab fills the console's lab settings: runs as child processes,
// results kept in the data directory (who may start them is the gate's:
// a user allowed to ALTER the CLUSTER when the console asks for logins).
func consoleLab(cfg *console.Config, sc *serveConfig, log *slog.Logger) {
	cfg.LabDir = filepath.Join(sc.dataDir, "console")
	cfg.LabTempDir = os.TempDir()
	if !sc.consoleLab {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		log.Error("console: the lab cannot start runs", "err", err)
		return
	}
	cfg.LabRun = labProcess(exe, cfg.LabTempDir, log)
	if host, _, err := net.SplitHostPort(sc.metricsListen); err == nil && host != "" {
		cfg.ActionHosts = append(cfg.ActionHosts, host)
	}
	if h, err := os.Hostname(); err == nil {
		cfg.ActionHosts = append(cfg.ActionHosts, h)
	}
}
