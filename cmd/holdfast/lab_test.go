package main

import (
	"encoding/json"
	"strings"
	"testing"

	"holdfast/internal/lab"
)

// TestCLILab: the lab's command line; one scenario run end to end through
// the binary (the whole lab runs in CI as its own step, see .ci/run).
func TestCLILab(t *testing.T) {
	out := ok(t, "", "lab", "--list")
	for _, s := range lab.Scenarios() {
		if !strings.Contains(out, s.Name) {
			t.Errorf("--list does not name %s:\n%s", s.Name, out)
		}
	}
	fails(t, exitUsage, `--scenario "nope"`, "lab", "--scenario", "nope")
	fails(t, exitUsage, "--records 10", "lab", "--records", "10")

	out = ok(t, "", "lab", "--scenario", "lost-ack", "--records", "300", "--json")
	var res lab.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("lab --json: %v\n%s", err, out)
	}
	if !res.OK || len(res.Rows) != 2 {
		t.Fatalf("lab --scenario lost-ack: %s", out)
	}
	for _, r := range res.Rows {
		if !r.Pass || !r.Injected || r.Acked != 300 || r.Report == nil {
			t.Errorf("row %+v", r)
		}
		if r.Default && (r.Dup != 0 || r.Lost != 0) || !r.Default && r.Dup == 0 {
			t.Errorf("%s: lost %d duplicated %d", r.Setting, r.Lost, r.Dup)
		}
	}
}
