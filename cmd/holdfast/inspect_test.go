package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCLIInspect: log-dirs, metadata-quorum and transactions against a
// broker with a topic, an idempotent producer and an open transaction.
func TestCLIInspect(t *testing.T) {
	addr := startBroker(t)
	b := "--bootstrap=" + addr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("tx-inspect"), kgo.DefaultProduceTopic("insp"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if resp, err := kadm.NewClient(cl).CreateTopics(ctx, 2, 1, nil, "insp"); err != nil || resp.Error() != nil {
		t.Fatalf("create: %v %v", err, resp.Error())
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	dirs := ok(t, "", "log-dirs", "--topic", "insp", b)
	row(t, dirs, "insp", "0")
	row(t, dirs, "insp", "1")
	if !strings.Contains(dirs, "broker 1  dir ") || strings.Contains(dirs, "__consumer_offsets") {
		t.Fatalf("log-dirs:\n%s", dirs)
	}

	status := ok(t, "", "metadata-quorum", b)
	row(t, status, "LeaderId:", "1")
	row(t, status, "CurrentVoters:", "[1]")
	row(t, ok(t, "", "metadata-quorum", "--replication", b), "1")

	row(t, ok(t, "", "transactions", "ls", b), "tx-inspect", "1")
	desc := ok(t, "", "transactions", "describe", "tx-inspect", b)
	if f := row(t, desc, "tx-inspect", "1"); f[4] != "Ongoing" || !strings.Contains(desc, "insp[0]") {
		t.Fatalf("transactions describe:\n%s", desc)
	}
	prod := ok(t, "", "transactions", "describe-producers", "--topic", "insp", "--partition", "0", b)
	if f := row(t, prod, "0", "1"); f[len(f)-1] != "0" { // the open transaction starts at offset 0
		t.Fatalf("describe-producers:\n%s", prod)
	}
	fails(t, 2, "--topic is required", "transactions", "describe-producers", b)

	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	// Committed: the transaction is complete and the partition has no open one.
	awaitOutput(t, func() string { return ok(t, "", "transactions", "describe", "tx-inspect", b) }, "CompleteCommit")
	prod = ok(t, "", "transactions", "describe-producers", "--topic", "insp", "--partition", "0", b)
	if f := row(t, prod, "0", "1"); f[len(f)-1] != "-" {
		t.Fatalf("describe-producers after commit:\n%s", prod)
	}
}

// awaitOutput runs f until its output contains want, for 10 s.
func awaitOutput(t *testing.T, f func() string, want string) {
	t.Helper()
	var out string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if out = f(); strings.Contains(out, want) {
			return
		}
	}
	t.Fatalf("no %q in:\n%s", want, out)
}
