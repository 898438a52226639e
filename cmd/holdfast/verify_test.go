package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCLIVerify: a clean run passes with every record read back once (JSON
// summary, direct and through a group, with keys and transactions); acks=0
// against a topic whose batches the broker refuses shows the loss acks=0
// hides, and exits 1; bad flag combinations are usage errors.
func TestCLIVerify(t *testing.T) {
	b := "--bootstrap=" + startBroker(t)
	var sum verifySummary
	out := ok(t, "", "verify", b, "--records", "3000", "--producers", "2", "--keys", "50", "--json")
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("verify --json: %v\n%s", err, out)
	}
	if !sum.OK || sum.Acknowledged != 3000 || sum.Report.Seen != 3000 || !sum.Report.OK() || len(sum.Report.Partitions) != 3 {
		t.Fatalf("clean run: %+v", sum)
	}
	out = ok(t, "", "verify", b, "--records", "1000", "--transaction-records", "100", "--group", "verify-g")
	if f := row(t, out, "total"); f[1] != "1000" || f[2] != "0" || f[3] != "0" {
		t.Fatalf("transactions through a group: %v\n%s", f, out)
	}
	if !strings.Contains(out, "OK: every acknowledged record was read back once, in order") {
		t.Fatalf("no verdict:\n%s", out)
	}

	ok(t, "", "topic", "create", "small", b, "--config", "max.message.bytes=500")
	r := hf(t, "", "verify", b, "--topic", "small", "--records", "100", "--acks", "0", "--size", "1000")
	if r.code != exitFailed || !strings.Contains(r.out, "FAILED: 100 acknowledged records lost") || row(t, r.out, "total")[2] != "100" {
		t.Fatalf("acks=0 into refused batches: exit %d\n%s%s", r.code, r.out, r.err)
	}
	fails(t, exitUsage, "needs --acks all", "verify", b, "--acks", "1", "--enable-idempotence")
	fails(t, exitUsage, "--acks \"2\"", "verify", b, "--acks", "2")
	fails(t, exitUsage, "transactions need --acks all", "verify", b, "--acks", "0", "--transaction-records", "5")
}
