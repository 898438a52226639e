package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxTestSleeps bounds the sleeps in the tests of cmd and internal
// (issue 30: at most half of the 117 counted then). A test that waits for
// a state waits on it (internal/testwait, a channel); one whose logic is
// timed runs on fake time (testing/synctest, an injected clock). What is
// left sleeps because time is the point, and says why.
const maxTestSleeps = 58

// unexplainedSleepsAllowed: files that may still hold up to this many
// sleeps without a comment saying why (the simulation test is being
// rewritten on its own branch). Only shrinks.
var unexplainedSleepsAllowed = map[string]int{
	"internal/brokertest/sim_test.go": 3,
}

// TestTestSleepsExplained: the tests' sleeps (the lines of *_test.go
// under cmd and internal that call time.Sleep, as the grep counts
// them) stay at most maxTestSleeps, and each has a comment on its line or
// the line above saying why time is the point.
func TestTestSleepsExplained(t *testing.T) {
	root := filepath.Join("..", "..")
	sleep := "time." + "Sleep(" // not counted in this file
	total, files := 0, 0
	unexplained := map[string][]int{}
	for _, dir := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
				return err
			}
			files++
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			lines := strings.Split(string(b), "\n")
			for i, l := range lines {
				if !strings.Contains(l, sleep) {
					continue
				}
				total++
				if strings.Contains(l, "//") || i > 0 && strings.HasPrefix(strings.TrimSpace(lines[i-1]), "//") {
					continue
				}
				unexplained[rel] = append(unexplained[rel], i+1)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 100 {
		t.Fatalf("only %d test files found: the walk is off", files)
	}
	if total > maxTestSleeps {
		t.Errorf("%d sleeps in the tests, at most %d: wait for the state (internal/testwait) or run on fake time (testing/synctest) instead", total, maxTestSleeps)
	}
	for file, at := range unexplained {
		if len(at) > unexplainedSleepsAllowed[file] {
			t.Errorf("%s: sleeps at lines %v say not why: a comment on the line or the one above tells why time is the point (or wait for the state instead)", file, at)
		}
	}
	t.Logf("%d sleeps in the tests (at most %d)", total, maxTestSleeps)
}
