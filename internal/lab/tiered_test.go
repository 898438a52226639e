package lab

import (
	"context"
	"go/build"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLabTieredRestore runs the tiered-restore row against a real
// versitygw: it passes only when the restored topic lost exactly the
// acknowledged records the remote log did not hold, and some records were
// uploaded (else the row shows nothing).
func TestLabTieredRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two 3-node clusters and an object store")
	}
	if _, err := versitygw(); err != nil && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{Records: 400, Scenarios: []string{"tiered-restore"}, Dir: t.TempDir(), Progress: func(l string) { t.Log(l) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(res.Rows))
	}
	r := res.Rows[0]
	t.Logf("acked %d lost %d not uploaded %d dup %d: %s (%s)", r.Acked, r.Lost, r.NotUploaded, r.Dup, r.Verdict, r.Fault)
	if !r.Pass || !r.Injected || r.Skipped != "" {
		t.Fatalf("row did not pass: %s %s", r.Verdict, r.Error)
	}
	if r.Lost != r.NotUploaded || r.NotUploaded >= r.Acked {
		t.Fatalf("lost %d, not uploaded %d of %d acknowledged: want lost = not uploaded < acknowledged", r.Lost, r.NotUploaded, r.Acked)
	}
	var lost, restored bool
	for _, ev := range r.Events {
		lost = lost || (ev.Fault && strings.Contains(ev.What, "every disk"))
		restored = restored || (lost && strings.Contains(ev.What, "restored"))
	}
	if !lost || !restored {
		t.Fatalf("timeline %+v: want the disks lost, then the restore", r.Events)
	}
}

// TestStartS3 starts and stops the row's object store, and a server that
// exits at once is an error at once, not a wait for the context.
func TestStartS3(t *testing.T) {
	bin, err := versitygw()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	s, err := startS3(ctx, bin, dir)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + s.addr + "/" + s3Bucket)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden { // an unsigned request: the server answers, and refuses it
		t.Errorf("unsigned GET of the bucket: %s, want 403", resp.Status)
	}
	s.stop()
	if _, err := http.Get("http://" + s.addr + "/"); err == nil {
		t.Error("the object store still answers after stop")
	}

	start := time.Now()
	if _, err := startS3(ctx, "/bin/false", t.TempDir()); err == nil || !strings.Contains(err.Error(), "exited before listening") {
		t.Fatalf("a server that exits: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("a server that exits was waited on for %v, until the deadline", time.Since(start))
	}
}

// TestVersitygwFound: the row finds the server on PATH or where go install
// puts it, and says how to install it otherwise.
func TestVersitygwFound(t *testing.T) {
	exe := func(dir string) string {
		p := filepath.Join(dir, "versitygw")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	oldGOPATH := build.Default.GOPATH
	t.Cleanup(func() { build.Default.GOPATH = oldGOPATH })

	onPath := exe(t.TempDir())
	t.Setenv("PATH", filepath.Dir(onPath))
	build.Default.GOPATH = t.TempDir()
	if got, err := versitygw(); err != nil || got != onPath {
		t.Errorf("on PATH: %q, %v; want %q", got, err, onPath)
	}

	t.Setenv("PATH", t.TempDir())
	gopath := t.TempDir()
	if err := os.Mkdir(filepath.Join(gopath, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	inGOPATH := exe(filepath.Join(gopath, "bin"))
	build.Default.GOPATH = gopath
	if got, err := versitygw(); err != nil || got != inGOPATH {
		t.Errorf("in GOPATH/bin: %q, %v; want %q", got, err, inGOPATH)
	}

	build.Default.GOPATH = t.TempDir()
	if _, err := versitygw(); err == nil || !strings.Contains(err.Error(), "go install github.com/versity/versitygw") {
		t.Errorf("nowhere: %v, want how to install it", err)
	}
}

// TestSetCredentials: the row's credentials are in the environment while
// it runs, and what was there before (set or not) comes back after.
func TestSetCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "mine")
	t.Setenv("AWS_SESSION_TOKEN", "token")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	os.Unsetenv("AWS_SECRET_ACCESS_KEY")

	undo := setCredentials()
	for k, want := range map[string]string{"AWS_ACCESS_KEY_ID": s3Access, "AWS_SECRET_ACCESS_KEY": s3Secret, "AWS_SESSION_TOKEN": ""} {
		if got := os.Getenv(k); got != want {
			t.Errorf("during the row %s=%q, want %q", k, got, want)
		}
	}
	undo()
	if got := os.Getenv("AWS_ACCESS_KEY_ID"); got != "mine" {
		t.Errorf("after: AWS_ACCESS_KEY_ID=%q, want mine", got)
	}
	if got := os.Getenv("AWS_SESSION_TOKEN"); got != "token" {
		t.Errorf("after: AWS_SESSION_TOKEN=%q, want token", got)
	}
	if _, had := os.LookupEnv("AWS_SECRET_ACCESS_KEY"); had {
		t.Error("after: AWS_SECRET_ACCESS_KEY set, want it unset as before")
	}
}
