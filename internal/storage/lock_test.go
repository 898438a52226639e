package storage

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A second lock on a locked directory fails and names the holder; once
// released, the directory can be locked again. (flock conflicts between
// two opens even inside one process, so one process can test it; the
// two-process case is cmd/holdfast's TestSecondServeOnOneDataDirRefuses.)
func TestLockDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	l, err := LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, LockFileName))
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q (%v), want our pid %d", b, err, os.Getpid())
	}
	_, err = LockDir(dir)
	if !errors.Is(err, ErrDirLocked) || !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second lock: %v, want ErrDirLocked naming pid %d", err, os.Getpid())
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	l2, err := LockDir(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	l2.Unlock()
}
