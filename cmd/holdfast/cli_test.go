package main

// End-to-end tests of the client commands: the real binary against a real
// broker process, checking output and exit codes.

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/brokertest"
	"holdfast/internal/testwait"
)

type result struct {
	out, err string
	code     int
}

// hf runs the binary with stdin and returns its output and exit code.
func hf(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{out.String(), errb.String(), 0}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("holdfast %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("holdfast %v: still running after 60s\n%s%s", args, r.out, r.err)
	}
	return r
}

// ok runs a command that must succeed and returns its stdout.
func ok(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	r := hf(t, stdin, args...)
	if r.code != 0 {
		t.Fatalf("holdfast %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.out, r.err)
	}
	return r.out
}

// fails runs a command that must exit with code and say want on stderr.
func fails(t *testing.T, code int, want string, args ...string) {
	t.Helper()
	r := hf(t, "", args...)
	if r.code != code || !strings.Contains(r.err, want) {
		t.Fatalf("holdfast %s: exit %d (want %d), stderr should say %q:\n%s%s", strings.Join(args, " "), r.code, code, want, r.out, r.err)
	}
}

// row finds the line of a table that starts with the given fields.
func row(t *testing.T, out string, fields ...string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= len(fields) && strings.Join(f[:len(fields)], " ") == strings.Join(fields, " ") {
			return f
		}
	}
	t.Fatalf("no row %v in:\n%s", fields, out)
	return nil
}

func startBroker(t *testing.T, args ...string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	startProc(t, t.TempDir(), addr, append([]string{"--listen", addr, "--metrics-listen", ""}, args...)...)
	return addr
}

// TestCLITopics: create (flags after the name), describe, alter-config,
// add-partitions, list, delete; and the errors a script can tell apart.
func TestCLITopics(t *testing.T) {
	addr := startBroker(t, "--num-partitions", "2")
	b := "--bootstrap=" + addr
	// No --partitions: the broker's num.partitions, as kafka-topics.sh.
	out := ok(t, "", "topic", "create", "t1", "--config", "retention.ms=3600000", b, "-c", "segment.ms=600000")
	if !strings.Contains(out, "created t1 (2 partitions") {
		t.Fatalf("create: %s", out)
	}
	// Kafka's tools' spellings: --bootstrap-server, -b, ls.
	for _, args := range [][]string{{"topic", "ls", "--bootstrap-server", addr}, {"topic", "list", "-b", addr}} {
		if list := ok(t, "", args...); !strings.Contains(list, "t1") {
			t.Fatalf("%v:\n%s", args, list)
		}
	}
	desc := ok(t, "", "topic", "describe", "t1", b)
	if f := row(t, desc, "retention.ms"); f[1] != "3600000" || f[2] != "topic" {
		t.Fatalf("retention.ms not set by create: %v\n%s", f, desc)
	}
	row(t, desc, "segment.ms", "600000", "topic")
	if list := ok(t, "", "topic", "list", b); strings.Contains(list, "--config") || !strings.Contains(list, "t1") || strings.Contains(list, "__consumer_offsets") {
		t.Fatalf("topic list:\n%s", list)
	}
	// As in Kafka, the first group request creates __consumer_offsets.
	hf(t, "", "group", "describe", "nobody", b)
	if list := ok(t, "", "topic", "list", "--internal", b); !strings.Contains(list, "__consumer_offsets") {
		t.Fatalf("topic list --internal:\n%s", list)
	}
	// Shell completion asks the broker for topic names.
	if out := ok(t, "", "__complete", "topic", "describe", b, "t"); !strings.HasPrefix(out, "t1\n") {
		t.Fatalf("completing a topic name: %q", out)
	}
	fails(t, 1, "TOPIC_ALREADY_EXISTS", "topic", "create", "t1", b)
	// restore asks for a tiered topic rebuilt from the bucket: refused by
	// a broker without tiered storage (internal/tiered tests the restore).
	fails(t, 1, "Tiered Storage functionality is disabled", "topic", "restore", "t9", b)
	ok(t, "", "topic", "create", "t1", "--if-not-exists", b)

	ok(t, "", "topic", "alter-config", "t1", "--set", "retention.ms=7200000", "--delete", "segment.ms", b)
	desc = ok(t, "", "topic", "describe", "t1", b)
	row(t, desc, "retention.ms", "7200000", "topic")
	if f := row(t, desc, "segment.ms"); f[2] == "topic" {
		t.Fatalf("segment.ms not deleted: %v", f)
	}
	fails(t, 1, "INVALID_CONFIG", "topic", "alter-config", "t1", "--set", "retention.ms=soon", b)

	ok(t, "", "topic", "add-partitions", "t1", "--partitions", "3", b)
	desc = ok(t, "", "topic", "describe", "t1", "--no-configs", b)
	row(t, desc, "topic", "t1", "partitions", "3")
	// The new partitions' Raft groups elect after the answer: until then
	// describe shows them without a leader (LEADER_NOT_AVAILABLE, offsets
	// "-"), as Kafka's metadata does for a partition being elected.
	if f := row(t, desc, "2"); f[1] == "-1" {
		row(t, desc, "2", "-1", "-1", "1", "-", "-", "LEADER_NOT_AVAILABLE")
	}
	brokertest.Await(t, "partition 2 of t1 led by node 1", func() error {
		desc = ok(t, "", "topic", "describe", "t1", "--no-configs", b)
		if f := row(t, desc, "2"); f[1] != "1" {
			return fmt.Errorf("partition 2: %v", f)
		}
		return nil
	})
	row(t, desc, "2", "1", "1", "1", "1", "0", "0")
	fails(t, 1, "INVALID_PARTITIONS", "topic", "add-partitions", "t1", "--partitions", "2", b)

	ok(t, "", "topic", "delete", "t1", b)
	if list := ok(t, "", "topic", "list", b); strings.Contains(list, "t1") {
		t.Fatalf("t1 still listed:\n%s", list)
	}
	fails(t, 1, "UNKNOWN_TOPIC_OR_PARTITION", "topic", "describe", "t1", b)
	fails(t, 2, "want at least 1 argument", "topic", "create", b)
	fails(t, 2, "unknown flag", "topic", "create", "x", "--no-such-flag", b)
}

// TestCLIProduceConsume: keys, headers, a partition and a file in; every
// way of choosing where to start and every output format out; a group that
// commits what it printed.
func TestCLIProduceConsume(t *testing.T) {
	b := "--bootstrap=" + startBroker(t)
	ok(t, "", "topic", "create", "pc", "--partitions", "3", b)
	file := filepath.Join(t.TempDir(), "in.txt")
	var lines []string
	for i := 0; i < 10; i++ {
		lines = append(lines, fmt.Sprintf("k%d:v%d", i, i))
	}
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Second)
	r := hf(t, "", "produce", "pc", "--file", file, "-K", ":", "-H", "source=test", "--header", "n=1", "--partition", "2", b)
	if r.code != 0 || !strings.Contains(r.err, "produced 10 records to pc") {
		t.Fatalf("produce: %d %s %s", r.code, r.out, r.err)
	}
	// All ten in partition 2, with their keys and headers.
	out := ok(t, "", "consume", "pc", "--partition", "2", "-n", "10", "--format", "json", b)
	var recs []jsonRecord
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var jr jsonRecord
		if err := json.Unmarshal([]byte(l), &jr); err != nil {
			t.Fatalf("json output %q: %v", l, err)
		}
		recs = append(recs, jr)
	}
	if len(recs) != 10 {
		t.Fatalf("%d records:\n%s", len(recs), out)
	}
	for i, jr := range recs {
		if jr.Partition != 2 || jr.Offset != int64(i) || *jr.Key != fmt.Sprintf("k%d", i) || *jr.Value != fmt.Sprintf("v%d", i) ||
			jr.Headers["source"] != "test" || jr.Headers["n"] != "1" {
			t.Fatalf("record %d: %+v", i, jr)
		}
		if ts, err := time.Parse(time.RFC3339Nano, jr.Timestamp); err != nil || ts.Before(start) {
			t.Fatalf("record %d timestamp %q", i, jr.Timestamp)
		}
	}
	// -e stops at the end; --offset N and -N; hex.
	if out := ok(t, "", "consume", "pc", "-e", b); strings.Count(out, "\n") != 10 {
		t.Fatalf("consume -e: want 10 lines:\n%s", out)
	}
	if out := ok(t, "", "consume", "pc", "-p", "2", "--offset", "7", "-e", b); out != "v7\nv8\nv9\n" {
		t.Fatalf("--offset 7: %q", out)
	}
	if out := ok(t, "", "consume", "pc", "-p", "2", "-o", "-2", "-e", b); out != "v8\nv9\n" {
		t.Fatalf("--offset -2: %q", out)
	}
	// An offset past the end is refused, or moved as --auto-offset-reset
	// says, and said (it printed the log from 0 silently).
	fails(t, 2, "holds offsets 0 to 10 (OFFSET_OUT_OF_RANGE)", "consume", "pc", "-p", "2", "-o", "100", "-e", b)
	if r := hf(t, "", "consume", "pc", "-p", "2", "-o", "100", "-e", "--auto-offset-reset", "earliest", b); r.code != 0 || strings.Count(r.out, "\n") != 10 || !strings.Contains(r.err, "starting at the earliest, 0") {
		t.Fatalf("--offset 100 --auto-offset-reset earliest: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if r := hf(t, "", "consume", "pc", "-p", "2", "-o", "100", "-e", "--auto-offset-reset", "latest", b); r.code != 0 || r.out != "" || !strings.Contains(r.err, "starting at the latest, 10") {
		t.Fatalf("--offset 100 --auto-offset-reset latest: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if out := ok(t, "", "consume", "pc", "-p", "2", "-o", "9", "-e", "--format", "hex", b); out != "7639\n" {
		t.Fatalf("hex: %q", out)
	}
	if out := ok(t, "", "consume", "pc", "-p", "2", "-o", "9", "-e", "-v", b); !regexp.MustCompile(`^2\t9\t\S+\tk9\tsource=test,n=1\tv9\n$`).MatchString(out) {
		t.Fatalf("-v: %q", out)
	}
	// --timestamp: records after a moment get exactly the later ones.
	mid := time.Now()
	time.Sleep(20 * time.Millisecond) // the later record's timestamp must be past mid (milliseconds)
	ok(t, "later\n", "produce", "pc", "-p", "0", b)
	if out := ok(t, "", "consume", "pc", "--timestamp", mid.UTC().Format(time.RFC3339Nano), "-e", b); out != "later\n" {
		t.Fatalf("--timestamp: %q", out)
	}
	if out := ok(t, "", "consume", "pc", "--timestamp", fmt.Sprint(mid.UnixMilli()), "-e", b); out != "later\n" {
		t.Fatalf("--timestamp ms: %q", out)
	}

	// A group commits exactly what it printed, and the next run goes on.
	if out := ok(t, "", "consume", "pc", "--group", "g", "-n", "3", b); strings.Count(out, "\n") != 3 {
		t.Fatalf("group first run: %q", out)
	}
	desc := ok(t, "", "group", "describe", "g", b)
	f := row(t, desc, "group", "g")
	if !strings.Contains(desc, "lag 8") {
		t.Fatalf("group lag after 3 of 11: %v\n%s", f, desc)
	}
	if out := ok(t, "", "consume", "pc", "--group", "g", "-e", b); strings.Count(out, "\n") != 8 {
		t.Fatalf("group second run: want the 8 not yet read:\n%s", out)
	}
	desc = ok(t, "", "group", "describe", "g", b)
	if !strings.Contains(desc, "lag 0") {
		t.Fatalf("group lag after all:\n%s", desc)
	}
	row(t, desc, "pc", "2", "10", "10", "0")

	fails(t, 2, "--format", "consume", "pc", "--format", "xml", b)
	fails(t, 2, "--partition and --group", "consume", "pc", "-g", "g", "-p", "1", b)
	fails(t, 1, "UNKNOWN_TOPIC_OR_PARTITION", "consume", "nope", "-e", b)
	fails(t, 2, "want 1 argument", "consume", "a", "b", b)
}

// TestCLIProduceAutoCreate: produce creates a topic when the broker
// auto-creates topics and names the setting when it does not.
func TestCLIProduceAutoCreate(t *testing.T) {
	b := "--bootstrap=" + startBroker(t)
	ok(t, "hello\n", "produce", "greetings", b)
	if out := ok(t, "", "consume", "greetings", "-n", "1", b); out != "hello\n" {
		t.Fatalf("consume: %q", out)
	}
	off := "--bootstrap=" + startBroker(t, "--auto-create-topics=false")
	r := hf(t, "hello\n", "produce", "greetings", off, "--timeout", "10s")
	if r.code != 1 || !strings.Contains(r.err, "auto.create.topics.enable") {
		t.Fatalf("produce without auto-create: exit %d\n%s", r.code, r.err)
	}
}

// TestCLIGroupsAndRecords: group list, describe with time lag,
// reset-offsets (dry run, then executed), delete; records delete.
func TestCLIGroupsAndRecords(t *testing.T) {
	b := "--bootstrap=" + startBroker(t)
	ok(t, "a\nb\nc\nd\ne\n", "produce", "gr", b)
	ok(t, "", "consume", "gr", "-g", "readers", "-n", "2", b)
	row(t, ok(t, "", "group", "list", b), "readers", "Empty", "consumer", "1")
	if out := ok(t, "", "__complete", "group", "describe", b, "re"); !strings.HasPrefix(out, "readers\n") {
		t.Fatalf("completing a group name: %q", out)
	}

	time.Sleep(50 * time.Millisecond) // time lag counts from the last commit, in ms: let some pass
	desc := ok(t, "", "group", "describe", "readers", b)
	if !strings.Contains(desc, "state Empty  protocol consumer  coordinator") {
		t.Fatalf("an Empty group's protocol:\n%s", desc)
	}
	f := row(t, desc, "gr", "0", "2", "5", "3") // committed 2, end 5, lag 3
	if d, err := time.ParseDuration(f[5]); err != nil || d <= 0 {
		t.Fatalf("time lag %q of a lagging partition:\n%s", f[5], desc)
	}

	dry := ok(t, "", "group", "reset-offsets", "readers", "--to-earliest", b)
	row(t, dry, "gr", "0", "2", "0")
	if !strings.Contains(dry, "dry run") {
		t.Fatalf("reset without --execute:\n%s", dry)
	}
	row(t, ok(t, "", "group", "describe", "readers", b), "gr", "0", "2")
	ok(t, "", "group", "reset-offsets", "readers", "--to-offset", "4", "--execute", b)
	row(t, ok(t, "", "group", "describe", "readers", b), "gr", "0", "4", "5", "1")
	// kafka-consumer-groups.sh's other modes and per-partition selection.
	row(t, ok(t, "", "group", "reset-offsets", "readers", "--topic", "gr:0", "--shift-by", "-3", "--execute", b), "gr", "0", "4", "1")
	row(t, ok(t, "", "group", "reset-offsets", "readers", "--by-duration", "PT1H", "--dry-run", b), "gr", "0", "1", "0")
	row(t, ok(t, "", "group", "reset-offsets", "readers", "--to-current", b), "gr", "0", "1", "1")
	row(t, ok(t, "", "group", "reset-offsets", "readers", "--shift-by", "3", "--execute", b), "gr", "0", "1", "4")
	fails(t, 1, "UNKNOWN_TOPIC_OR_PARTITION", "group", "reset-offsets", "readers", "--topic", "gr:5", "--to-earliest", b)
	fails(t, 2, "not a number", "group", "reset-offsets", "readers", "--topic", "gr:x", "--to-earliest", b)
	fails(t, 2, "choose one of", "group", "reset-offsets", "readers", b)

	out := ok(t, "", "records", "delete", "gr", "--before", "3", b)
	row(t, out, "gr", "0", "3")
	// Leader epoch 1: the first Raft term of the one-voter group.
	row(t, ok(t, "", "topic", "describe", "gr", "--no-configs", b), "0", "1", "1", "1", "1", "3", "5")
	if out := ok(t, "", "consume", "gr", "-e", b); out != "d\ne\n" {
		t.Fatalf("after records delete: %q", out)
	}
	fails(t, 2, `required flag(s) "before"`, "records", "delete", "gr", b)

	ok(t, "", "group", "delete", "readers", b)
	if out := ok(t, "", "group", "list", b); strings.Contains(out, "readers") {
		t.Fatalf("deleted group listed:\n%s", out)
	}
	fails(t, 1, "GROUP_ID_NOT_FOUND", "group", "delete", "readers", b)
	fails(t, 1, "does not exist", "group", "describe", "readers", b)

	status := ok(t, "", "cluster", "status", b)
	row(t, status, "1", "127.0.0.1")
	row(t, status, "gr", "0", "1")
	if strings.Contains(status, "__consumer_offsets") {
		t.Fatalf("internal partitions shown without --internal:\n%s", status)
	}
}

// TestCLINoBroker: every client command gives up after --timeout with exit
// code 3 when nothing answers, instead of hanging.
func TestCLINoBroker(t *testing.T) {
	b := fmt.Sprintf("--bootstrap=127.0.0.1:%d", freePort(t)) // nothing listens
	for _, args := range [][]string{
		{"produce", "t"},
		{"consume", "t"},
		{"topic", "list"},
		{"topic", "create", "t"},
		{"group", "list"},
		{"group", "describe", "g"},
		{"records", "delete", "t", "--before", "1"},
		{"cluster", "status"},
		{"cluster", "elect-leaders"},
		{"verify"},
		{"user", "list"},
		{"acl", "list"},
	} {
		fails(t, exitTimeout, "no broker answered", append(args, b, "--timeout", "2s")...)
	}
}

// TestCLIHelpEverywhere: -h works on every command and subcommand, and
// shell completion is there.
func TestCLIHelpEverywhere(t *testing.T) {
	var walk func(c *cobra.Command, path []string)
	n := 0
	walk = func(c *cobra.Command, path []string) {
		r := hf(t, "", append(path, "-h")...)
		if r.code != 0 || !strings.Contains(r.out, "Usage:") {
			t.Errorf("holdfast %s -h: exit %d\n%s%s", strings.Join(path, " "), r.code, r.out, r.err)
		}
		n++
		for _, s := range c.Commands() {
			if !s.Hidden && s.Name() != "help" {
				walk(s, append(append([]string(nil), path...), s.Name()))
			}
		}
	}
	walk(newRootCmd(), nil)
	if n < 25 {
		t.Fatalf("only %d commands", n)
	}
	if out := ok(t, "", "completion", "bash"); !strings.Contains(out, "holdfast") {
		t.Fatalf("bash completion: %s", out)
	}
	fails(t, exitUsage, `unknown command "nope"`, "nope")
	fails(t, exitUsage, "needs a subcommand", "group")
	if out := ok(t, "", "version"); !strings.HasPrefix(out, "holdfast ") {
		t.Fatalf("version: %q", out)
	}
}

// TestCLIReassignAndUnregister on a single node: the requests reach the
// broker and its answers come back as output or exit code 1. (Moves
// between brokers are tested in internal/broker; the CLI sends the same
// requests.)
func TestCLIReassignAndUnregister(t *testing.T) {
	b := "--bootstrap=" + startBroker(t)
	ok(t, "", "topic", "create", "mv", b)
	if out := ok(t, "", "topic", "reassign", "mv", "--partition", "0", "--replicas", "1", b); !strings.Contains(out, "moving mv-0 to 1") {
		t.Fatalf("reassign: %s", out)
	}
	row(t, ok(t, "", "topic", "reassign", "--list", b), "TOPIC", "PARTITION", "REPLICAS")
	fails(t, 1, "INVALID_REPLICA_ASSIGNMENT", "topic", "reassign", "mv", "--partition", "0", "--replicas", "2", b)
	fails(t, 2, "either --replicas ids or --cancel", "topic", "reassign", "mv", b)
	fails(t, 2, "not a broker id", "topic", "reassign", "mv", "--replicas", "x", b)
	r := hf(t, "", "cluster", "unregister", "--id", "7", b)
	if r.code != 1 || !regexp.MustCompile(`broker 7: [A-Z_]+`).MatchString(r.err) {
		t.Fatalf("unregister an unknown broker: exit %d\n%s", r.code, r.err)
	}
	fails(t, 2, "--id", "cluster", "unregister", b)
}

// TestCLISecurityCommands: user, acl and certs against a broker without
// security, and their usage errors. (With security they are run by
// TestSecurityDocSingleNode.)
func TestCLISecurityCommands(t *testing.T) {
	b := "--bootstrap=" + startBroker(t)
	if out := ok(t, "", "user", "set", "--name", "alice", "--password", "pw", b); out != "set SCRAM-SHA-512 for alice\n" {
		t.Fatalf("user set: %q", out)
	}
	r := hf(t, "", "user", "set", "--name", "bob", "--mechanism", "scram-sha-256", "--iterations", "4096", b)
	if r.code != exitUsage || !strings.Contains(r.err, "--password or HOLDFAST_PASSWORD") {
		t.Fatalf("user set without a password: exit %d\n%s", r.code, r.err)
	}
	cmd := exec.Command(binary, "user", "set", "--name", "bob", "--mechanism", "scram-sha-256", "--iterations", "4096", b)
	cmd.Env = append(os.Environ(), "HOLDFAST_PASSWORD=from-env")
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "set SCRAM-SHA-256 for bob\n" {
		t.Fatalf("user set with HOLDFAST_PASSWORD: %v %s", err, out)
	}
	list := ok(t, "", "user", "list", b)
	row(t, list, "alice", "SCRAM-SHA-512", "8192")
	row(t, list, "bob", "SCRAM-SHA-256", "4096")
	ok(t, "", "user", "delete", "--name", "bob", "--mechanism", "SCRAM-SHA-256", b)
	if list := ok(t, "", "user", "list", b); strings.Contains(list, "bob") {
		t.Fatalf("bob still listed:\n%s", list)
	}
	fails(t, exitFailed, "RESOURCE_NOT_FOUND", "user", "list", "--name", "bob", b)
	fails(t, exitUsage, `required flag(s) "name"`, "user", "set", "--password", "x", b)
	fails(t, exitUsage, "--mechanism", "user", "delete", "--name", "x", "--mechanism", "MD5", b)
	fails(t, exitUsage, "--iterations 100", "user", "set", "--name", "x", "--password", "y", "--iterations", "100", b)

	// Client quotas, kafka-configs' way.
	if out := ok(t, "", "quota", "alter", "--user", "alice", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152", b); out != "altered quotas of user=alice\n" {
		t.Fatalf("quota alter: %q", out)
	}
	ok(t, "", "quota", "alter", "--user", "alice", "--client-defaults", "--add-config", "request_percentage=25.5", b)
	ok(t, "", "quota", "alter", "--client", "app", "--add-config", "controller_mutation_rate=5", b)
	if out := ok(t, "", "quota", "alter", "--client-defaults", "--add-config", "producer_byte_rate=1", "--validate-only", b); !strings.HasPrefix(out, "validated") {
		t.Fatalf("quota alter --validate-only: %q", out)
	}
	quotas := ok(t, "", "quota", "describe", b)
	row(t, quotas, "user=alice", "consumer_byte_rate", "2097152")
	row(t, quotas, "user=alice", "producer_byte_rate", "1048576")
	row(t, quotas, "user=alice,client-id=<default>", "request_percentage", "25.5")
	row(t, quotas, "client-id=app", "controller_mutation_rate", "5")
	if strings.Contains(quotas, "\nclient-id=<default>") {
		t.Fatalf("validate-only quota was set:\n%s", quotas)
	}
	if out := ok(t, "", "quota", "describe", "--user", "alice", "--strict", b); strings.Contains(out, "request_percentage") || !strings.Contains(out, "producer_byte_rate") {
		t.Fatalf("quota describe --user alice --strict:\n%s", out)
	}
	ok(t, "", "quota", "alter", "--user", "alice", "--delete-config", "producer_byte_rate,consumer_byte_rate", b)
	if out := ok(t, "", "quota", "describe", "--user", "alice", "--strict", b); strings.Contains(out, "alice") {
		t.Fatalf("alice's quotas still listed:\n%s", out)
	}
	fails(t, exitFailed, "INVALID_REQUEST", "quota", "alter", "--user", "bob", "--add-config", "producer_byte_rate=1.5", b)
	fails(t, exitFailed, "Invalid configuration key", "quota", "alter", "--user", "bob", "--add-config", "speed=3", b)
	fails(t, exitUsage, "name the entity", "quota", "alter", "--add-config", "producer_byte_rate=1", b)
	fails(t, exitUsage, "not both", "quota", "alter", "--user", "a", "--user-defaults", "--add-config", "producer_byte_rate=1", b)
	fails(t, exitUsage, "is not a number", "quota", "alter", "--user", "a", "--add-config", "producer_byte_rate=fast", b)
	fails(t, exitUsage, "give --add-config", "quota", "alter", "--user", "a", b)
	// ip entities (KIP-612), kafka-configs --ip/--ip-defaults.
	if out := ok(t, "", "quota", "alter", "--ip", "10.1.2.3", "--add-config", "connection_creation_rate=20", b); out != "altered quotas of ip=10.1.2.3\n" {
		t.Fatalf("quota alter --ip: %q", out)
	}
	ok(t, "", "quota", "alter", "--ip-defaults", "--add-config", "connection_creation_rate=100", b)
	ipq := ok(t, "", "quota", "describe", "--ip", "10.1.2.3", b)
	row(t, ipq, "ip=10.1.2.3", "connection_creation_rate", "20")
	if strings.Contains(ipq, "<default>") {
		t.Fatalf("quota describe --ip 10.1.2.3 lists the default:\n%s", ipq)
	}
	row(t, ok(t, "", "quota", "describe", "--ip-defaults", b), "ip=<default>", "connection_creation_rate", "100")
	fails(t, exitUsage, "stands alone", "quota", "alter", "--ip", "10.1.2.3", "--user", "a", "--add-config", "connection_creation_rate=1", b)
	fails(t, exitFailed, "INVALID_REQUEST", "quota", "alter", "--ip", "10.1.2.3", "--add-config", "producer_byte_rate=1", b)

	// Without an authorizer the ACL APIs answer SECURITY_DISABLED.
	fails(t, exitFailed, "SECURITY_DISABLED", "acl", "list", b)
	fails(t, exitFailed, "SECURITY_DISABLED", "acl", "create", "--allow", "User:alice", "--operation", "read", "--topic", "t", b)
	fails(t, exitUsage, "give one of --allow", "acl", "create", "--operation", "read", "--topic", "t", b)
	fails(t, exitUsage, "give --operation", "acl", "create", "--allow", "User:a", "--topic", "t", b)
	fails(t, exitUsage, "give a resource", "acl", "create", "--allow", "User:a", "--operation", "read", b)
	fails(t, exitUsage, "want User:name", "acl", "create", "--allow", "alice", "--operation", "read", "--topic", "t", b)
	fails(t, exitUsage, `--operation "fly"`, "acl", "create", "--allow", "User:a", "--operation", "fly", "--topic", "t", b)
	fails(t, exitUsage, "give a resource", "acl", "delete", "--allow", "User:a", b)

	dir := filepath.Join(t.TempDir(), "certs")
	out := ok(t, "", "certs", "--dir", dir, "--nodes", "2", "--clients", "alice")
	if !strings.Contains(out, "made a CA") || !strings.Contains(out, "node-2") || !strings.Contains(out, "CN=alice, client") {
		t.Fatalf("certs:\n%s", out)
	}
	for _, f := range []string{"ca.pem", "ca.key", "node-1.pem", "node-2.crt", "node-2.key", "alice.pem", "alice.crt", "alice.key"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if f != "ca.pem" && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600 (a private key)", f, fi.Mode().Perm())
		}
	}
	if out := ok(t, "", "certs", "--dir", dir, "--nodes", "0", "--clients", "bob"); !strings.Contains(out, "using the CA") {
		t.Fatalf("certs with an existing CA:\n%s", out)
	}
	fails(t, exitUsage, "--clients", "certs", "--dir", dir, "--clients", "../evil")
	fails(t, exitUsage, "a node's name", "certs", "--dir", dir, "--clients", "node-3")
	// Only the node certificates name a node on the Raft transport.
	for name, want := range map[string]uint64{"node-1": 1, "node-2": 2, "alice": 0, "bob": 0} {
		raw, err := os.ReadFile(filepath.Join(dir, name+".crt"))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(raw)
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		var rules *auth.PrincipalMapper
		if node, err := rules.CertNode(cert); node != want || (want == 0) != (err != nil) {
			t.Errorf("%s's certificate: node %d, %v; want node %d", name, node, err, want)
		}
	}
	fails(t, exitUsage, "--days", "certs", "--dir", dir, "--days", "0")

	// A --command-config that cannot be used is a usage error.
	bad := filepath.Join(t.TempDir(), "client.properties")
	os.WriteFile(bad, []byte("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\nsasl.username=a\n"), 0o600)
	fails(t, exitUsage, "GSSAPI", "topic", "list", "--command-config", bad, b)
	os.WriteFile(bad, []byte("security.protocol=SSL\nssl.truststore.type=JKS\n"), 0o600)
	fails(t, exitUsage, "only PEM", "topic", "list", "--command-config", bad, b)
}

// TestCLIGroupDescribeConsumerProtocol: `group describe` shows a KIP-848
// group (group.protocol=consumer) with its state, assignor, members and
// the member owning each partition, not as Dead.
func TestCLIGroupDescribeConsumerProtocol(t *testing.T) {
	addr := startBroker(t)
	b := "--bootstrap=" + addr
	ok(t, "a\nb\nc\n", "produce", "g848", b)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("g848-readers"), kgo.ConsumeTopics("g848"),
		kgo.ServerSideBalancer(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ClientID("cli-848"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for got := 0; got < 2; {
		fs := cl.PollRecords(ctx, 2)
		if ctx.Err() != nil {
			t.Fatal("timed out consuming")
		}
		got += fs.NumRecords()
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	var desc string
	testwait.Poll(20*time.Second, func() bool {
		desc = ok(t, "", "group", "describe", "g848-readers", "--no-time-lag", b)
		return strings.Contains(desc, "state Stable")
	})
	if !strings.Contains(desc, "state Stable  protocol consumer/uniform") {
		t.Fatalf("a KIP-848 group described as:\n%s", desc)
	}
	p := row(t, desc, "g848", "0")
	member := p[len(p)-1]
	if member == "-" {
		t.Fatalf("partition 0 has no member:\n%s", desc)
	}
	row(t, desc, member, "-", "cli-848")
}

// TestDevClusterSettings: dev-cluster takes serve's settings for every node
// with --override (Kafka's names), and refuses the ones that tell nodes
// apart, security and names Holdfast does not know.
func TestDevClusterSettings(t *testing.T) {
	for _, bad := range []struct{ override, says string }{
		{"listeners=PLAINTEXT://:9092", "--listen"},
		{"node.id=7", "--node-id"},
		{"log.dirs=/tmp/x", "--data-dir"},
		{"ssl.keystore.location=/tmp/ks.pem", "PLAINTEXT only"},
		{"num.io.threads=8", "does not support"},
		{"num.partitions=many", "num.partitions"},
	} {
		r := hf(t, "", "dev-cluster", "--dir", t.TempDir(), "--base-port", "1", "--override", bad.override)
		if r.code != 2 || !strings.Contains(r.err, bad.says) {
			t.Errorf("dev-cluster --override %s: exit %d, stderr %q; want exit 2 naming %q", bad.override, r.code, r.err, bad.says)
		}
	}
	brokers, logs := startDevCluster(t, "--override", "num.partitions=5", "--override", "default.replication.factor=3")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, -1, -1, nil, "dc-defaults"); err != nil {
		t.Fatalf("create with the defaults: %v\n%s", err, logs())
	}
	td, err := adm.ListTopics(ctx, "dc-defaults")
	if err != nil {
		t.Fatal(err)
	}
	d := td["dc-defaults"]
	if len(d.Partitions) != 5 || len(d.Partitions[0].Replicas) != 3 {
		t.Fatalf("topic created with the defaults has %d partitions of %d replicas, want 5 of 3", len(d.Partitions), len(d.Partitions[0].Replicas))
	}
}

// TestCLIShareGroup: `group list` and `group describe` show a share group
// (KIP-932): its member and assignment, and per partition the share-
// partition start offset after the records were accepted.
func TestCLIShareGroup(t *testing.T) {
	addr := startBroker(t)
	b := "--bootstrap=" + addr
	ok(t, "a\nb\nc\n", "produce", "qshare", b)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ShareGroup("q-readers"), kgo.ConsumeTopics("qshare"), kgo.ClientID("cli-share"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Start from the log start: the group's share.auto.offset.reset.
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, "q-readers"
	res.Configs = []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "share.auto.offset.reset", Value: kmsg.StringPtr("earliest")}}
	req.Resources = append(req.Resources, res)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if resp, err := req.RequestWith(ctx, cl); err != nil || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("setting share.auto.offset.reset: %v %+v", err, resp)
	}
	for got := 0; got < 3; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("timed out consuming")
		}
		for _, r := range fs.Records() {
			r.Ack(kgo.AckAccept)
			got++
		}
	}
	if err := cl.FlushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	row(t, ok(t, "", "group", "list", b), "q-readers", "Stable", "share")
	var desc string
	testwait.Poll(20*time.Second, func() bool {
		desc = ok(t, "", "group", "describe", "q-readers", b)
		return strings.Contains(strings.Join(strings.Fields(desc), " "), "qshare 0 3 3 0")
	})
	if !strings.Contains(desc, "share group q-readers  state Stable") {
		t.Fatalf("share group described as:\n%s", desc)
	}
	row(t, desc, "qshare", "0", "3", "3", "0")
	if !strings.Contains(strings.Join(strings.Fields(desc), " "), "cli-share /127.0.0.1 1 qshare/0") {
		t.Fatalf("no member with qshare/0 in:\n%s", desc)
	}
}
