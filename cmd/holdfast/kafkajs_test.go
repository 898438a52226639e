package main

// kafkajs, the Node.js client, against the real binary: testdata/kafkajs/
// check.js does what an application does and prints what kafkajs saw as
// JSON; these tests start the brokers and judge it. kafkajs is installed
// by `npm ci` in testdata/kafkajs from its package-lock.json (.ci/run does
// it; README "Tests").

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"holdfast/internal/testwait"
)

// kafkajs returns node and the absolute testdata/kafkajs directory (see
// nodePackage).
func kafkajs(t *testing.T) (node, dir string) {
	t.Helper()
	return nodePackage(t, "kafkajs", "kafkajs")
}

// nodePackage returns node and the absolute testdata/<dir> directory, after
// checking that the pkg installed there is the one package-lock.json pins.
// Without node or the installed package the test is skipped, except under
// CI, where it fails.
func nodePackage(t *testing.T, name, pkg string) (node, dir string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short")
	}
	dir, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	missing := func(why string) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf("%s; .ci/run installs node and npm with apt-get and runs npm ci in %s", why, dir)
		}
		t.Skipf("%s (apt-get install nodejs npm; cd cmd/holdfast/testdata/%s && npm ci)", why, name)
	}
	node, err = exec.LookPath("node")
	if err != nil {
		missing("node is not installed")
	}
	var lock struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	var installed struct{ Version string }
	b, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		t.Fatal(err)
	}
	want := lock.Packages["node_modules/"+pkg].Version
	if want == "" {
		t.Fatalf("testdata/%s/package-lock.json pins no %s", name, pkg)
	}
	b, err = os.ReadFile(filepath.Join(dir, "node_modules", pkg, "package.json"))
	if err != nil {
		missing(pkg + " is not installed in testdata/" + name)
	}
	if err := json.Unmarshal(b, &installed); err != nil {
		t.Fatal(err)
	}
	if strings.TrimPrefix(installed.Version, "v") != want { // node-rdkafka writes v3.6.1
		t.Fatalf("testdata/%s has %s %s installed, package-lock.json pins %s: run npm ci there", name, pkg, installed.Version, want)
	}
	return node, dir
}

// runKafkajs runs `node check.js scenario opts` in testdata/kafkajs (see
// runNode).
func runKafkajs(t *testing.T, scenario string, opts any, logs func() string, out any) {
	t.Helper()
	runNode(t, "kafkajs", "kafkajs", scenario, opts, logs, out)
}

// runNode runs `node check.js scenario opts` in testdata/<name> and decodes
// its JSON into out; on failure it reports the client's log and the
// brokers'.
func runNode(t *testing.T, name, pkg, scenario string, opts any, logs func() string, out any) {
	t.Helper()
	node, dir := nodePackage(t, name, pkg)
	o, err := json.Marshal(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "check.js", scenario, string(o))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KAFKAJS_NO_PARTITIONER_WARNING=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node check.js %s in testdata/%s: %v\n%s\nbroker logs:\n%s", scenario, name, err, stderr.String(), logs())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("check.js printed %q: %v\n%s", stdout.String(), err, stderr.String())
	}
	t.Logf("%s log:\n%s", pkg, stderr.String())
}

type jsErr struct{ Name, Type, Message string }

type jsConsumed struct {
	Records []struct {
		Partition  int
		Offset     string
		Key, Value *string
	}
	TimedOut bool
	Crash    []jsErr
}

type jsOffsets []struct {
	Partition        int
	Low, High        string
	Offset           string // committed offsets
	BaseOffset       string // acknowledgements
	ErrorCode        int
	Leader, Replicas int
}

// checkConsumed compares what a consumer read, as "partition/offset/value"
// sorted, with want: a phantom record, a lost one or an offset that is not
// Kafka's all show.
func checkConsumed(t *testing.T, name string, c jsConsumed, want []string) {
	t.Helper()
	if c.TimedOut || c.Crash != nil {
		t.Errorf("%s: timed out %v, crashed %v after %d records", name, c.TimedOut, c.Crash, len(c.Records))
	}
	var got []string
	for _, r := range c.Records {
		v := "<nil>"
		if r.Value != nil {
			v = *r.Value
		}
		got = append(got, fmt.Sprintf("%d/%s/%s", r.Partition, r.Offset, v))
	}
	key := func(s string) string { // partition, then offset as a number
		p, o, _ := strings.Cut(s, "/")
		o, _, _ = strings.Cut(o, "/")
		n, _ := strconv.Atoi(o)
		return fmt.Sprintf("%s/%09d", p, n)
	}
	cmp := func(a, b string) int { return strings.Compare(key(a), key(b)) }
	slices.SortFunc(got, cmp)
	slices.SortFunc(want, cmp)
	if !slices.Equal(got, want) {
		t.Errorf("%s read (partition/offset/value)\n%v\nwant\n%v", name, got, want)
	}
}

// checkMarks compares watermarks (low-high) or committed offsets by
// partition.
func checkMarks(t *testing.T, name string, got jsOffsets, want []string) {
	t.Helper()
	var g []string
	for _, o := range got {
		if o.High != "" {
			g = append(g, o.Low+"-"+o.High)
		} else {
			g = append(g, o.Offset)
		}
	}
	if !slices.Equal(g, want) {
		t.Errorf("%s by partition: %v, want %v", name, g, want)
	}
}

func refusedWith(errs []jsErr, name, typ string) bool {
	for _, e := range errs {
		if (name == "" || e.Name == name) && (typ == "" || e.Type == typ) {
			return true
		}
	}
	return false
}

// plainResult is what check.js's plain scenario prints.
type plainResult struct {
	Version string
	Cluster struct {
		Brokers []struct {
			NodeID int `json:"nodeId"`
			Host   string
			Port   int
		}
	}
	Created, CreatedAgain                         bool
	Topics                                        []string
	Metadata                                      jsOffsets
	EmptyWatermarks, Watermarks, TxnWatermarks    jsOffsets
	Acked, AckedMore                              jsOffsets
	Committed, CommittedAfter                     jsOffsets
	First, Second, ReadCommitted, ReadUncommitted jsConsumed
}

// checkPlain judges the plain scenario: offsets from 0 with none skipped
// and none invented, the group's commits and its resumption, transactions
// read committed and uncommitted as Kafka lays them out (a control record
// after each transaction takes an offset; kafkajs must not show it).
func checkPlain(t *testing.T, r plainResult, nodes, rf int) {
	t.Helper()
	if len(r.Cluster.Brokers) != nodes {
		t.Errorf("describeCluster: %d brokers, want %d", len(r.Cluster.Brokers), nodes)
	}
	if !r.Created || r.CreatedAgain {
		t.Errorf("createTopics answered %v, then %v for the existing topic; want true, false", r.Created, r.CreatedAgain)
	}
	if !slices.Contains(r.Topics, "js-orders") {
		t.Errorf("listTopics: %v", r.Topics)
	}
	if len(r.Metadata) != 3 {
		t.Errorf("fetchTopicMetadata: %d partitions, want 3", len(r.Metadata))
	}
	for _, p := range r.Metadata {
		if p.Leader < 1 || p.Leader > nodes || p.Replicas != rf {
			t.Errorf("fetchTopicMetadata partition %d: leader %d, %d replicas; want one of the %d nodes and %d", p.Partition, p.Leader, p.Replicas, nodes, rf)
		}
	}
	checkMarks(t, "watermarks of the new topic", r.EmptyWatermarks, []string{"0-0", "0-0", "0-0"})

	// Record n went to partition n%3 with key kn, value vn, in order: its
	// offset is n/3.
	var want []string
	next := map[int]int{}
	var acks []string
	for send := range 4 {
		first := map[int]int{}
		for n := send * 10; n < send*10+10; n++ {
			p := n % 3
			if _, ok := first[p]; !ok {
				first[p] = next[p]
			}
			want = append(want, fmt.Sprintf("%d/%d/v%d", p, next[p], n))
			next[p]++
		}
		for p := range 3 {
			acks = append(acks, fmt.Sprintf("%d/%d", p, first[p]))
		}
	}
	var gotAcks []string
	for _, a := range append(slices.Clone(r.Acked), r.AckedMore...) {
		if a.ErrorCode != 0 {
			t.Errorf("produce to partition %d answered error %d", a.Partition, a.ErrorCode)
		}
		gotAcks = append(gotAcks, fmt.Sprintf("%d/%s", a.Partition, a.BaseOffset))
	}
	slices.Sort(gotAcks) // a send to several brokers is answered in any order
	slices.Sort(acks)
	if !slices.Equal(gotAcks, acks) {
		t.Errorf("base offsets acknowledged (partition/offset): %v, want %v", gotAcks, acks)
	}
	checkMarks(t, "watermarks after 30 records", r.Watermarks, []string{"0-10", "0-10", "0-10"})
	checkConsumed(t, "the group from the beginning", r.First, want[:30])
	checkMarks(t, "the group's committed offsets", r.Committed, []string{"10", "10", "10"})
	checkConsumed(t, "the group resuming after 10 more", r.Second, want[30:])
	checkMarks(t, "the group's committed offsets after", r.CommittedAfter, []string{"14", "13", "13"})

	// Committed t0-t2 (offsets 0-2, marker 3), aborted a0-a1 (4-5, marker
	// 6), committed t3 (7, marker 8).
	checkMarks(t, "watermarks of the transactional topic", r.TxnWatermarks, []string{"0-9"})
	checkConsumed(t, "read_committed", r.ReadCommitted, []string{"0/0/t0", "0/1/t1", "0/2/t2", "0/7/t3"})
	checkConsumed(t, "read_uncommitted", r.ReadUncommitted, []string{"0/0/t0", "0/1/t1", "0/2/t2", "0/4/a0", "0/5/a1", "0/7/t3"})
}

// TestKafkajsSingleNode: kafkajs's admin, idempotent producer, consumer
// group and transactions on one `holdfast serve`.
func TestKafkajsSingleNode(t *testing.T) {
	kafkajs(t)
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startProc(t, dir, addr, "--listen", addr, "--metrics-listen", "", "--override", "group.initial.rebalance.delay.ms=0")
	var r plainResult
	runKafkajs(t, "plain", map[string]any{"brokers": []string{addr}, "replicationFactor": 1}, p.logs.String, &r)
	checkPlain(t, r, 1, 1)
}

// TestKafkajsDevCluster: the same on a 3-node `holdfast dev-cluster`,
// every partition on all three nodes, kafkajs given all three.
func TestKafkajsDevCluster(t *testing.T) {
	kafkajs(t)
	brokers, logs := startDevCluster(t)
	var r plainResult
	runKafkajs(t, "plain", map[string]any{"brokers": brokers, "replicationFactor": 3}, logs, &r)
	checkPlain(t, r, 3, 3)
}

// startDevCluster runs a 3-node `holdfast dev-cluster` (with extra flags)
// until the test ends and waits until it has formed, as a user would; it
// returns the Kafka addresses and the cluster's log.
func startDevCluster(t *testing.T, extra ...string) (brokers []string, logs func() string) {
	t.Helper()
	dc := runDevCluster(t, extra...)
	for i := range 3 {
		brokers = append(brokers, fmt.Sprintf("127.0.0.1:%d", dc.base+i))
	}
	var r result
	if !testwait.Poll(time.Minute, func() bool {
		r = hfIn(t, dc.dir, "cluster", "status", "--bootstrap", brokers[0], "--timeout", "5s")
		return r.code == 0 && strings.Count(r.out, " alive") == 3
	}) {
		t.Fatalf("cluster status: exit %d\n%s%s\n%s", r.code, r.out, r.err, dc.Logs())
	}
	return brokers, dc.Logs
}

// TestKafkajsSecurity: one broker with a SASL_SSL listener (SCRAM-SHA-512
// and PLAIN) and an SSL listener that requires a client certificate, ACLs
// on; the users and ACLs made with kafkajs's admin client as the super
// user (the SCRAM user bob with the CLI: kafkajs has no
// AlterUserScramCredentials). bob (SCRAM), carol (PLAIN, a JAAS user) and
// bob over PLAIN write; bob and alice (her certificate) read with their
// groups; wrong passwords, an unknown user, no certificate, writes to
// topics without WRITE, a topic creation without CREATE and a group
// without READ are refused with Kafka's errors, and nothing refused lands.
func TestKafkajsSecurity(t *testing.T) {
	kafkajs(t)
	dir := t.TempDir()
	env := docEnv()
	nolog := func() string { return "" }
	mustSh(t, dir, env, "holdfast certs --dir certs --nodes 1 --hosts localhost,127.0.0.1 --clients alice", nolog)
	sasl, ssl := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	props := fmt.Sprintf(`listeners=SASL_SSL://%[1]s,SSL://%[2]s
inter.broker.listener.name=SSL
ssl.keystore.type=PEM
ssl.keystore.location=certs/node-1.pem
ssl.truststore.type=PEM
ssl.truststore.location=certs/ca.pem
listener.name.ssl.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]*).*$/$1/,DEFAULT
sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_carol="carol-secret";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:node-1
add-scram=SCRAM-SHA-512=[name=admin,password=admin-secret]
group.initial.rebalance.delay.ms=0
`, sasl, ssl)
	admin := "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\nsasl.password=admin-secret\nssl.ca.location=certs/ca.pem\n"
	for name, body := range map[string]string{"server.properties": props, "admin.properties": admin} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	logs := bgServe(t, dir, env, "holdfast serve --config server.properties --metrics-listen ''")
	awaitReady(t, logs)
	if r := hfIn(t, dir, "user", "set", "--bootstrap", sasl, "--command-config", "admin.properties", "--name", "bob", "--password", "bob-secret"); r.code != 0 {
		t.Fatalf("user set bob: exit %d\n%s%s\n%s", r.code, r.out, r.err, logs())
	}

	var r struct {
		Version                                       string
		Created                                       bool
		Acls                                          []string
		Acked                                         map[string]jsOffsets
		BobConsumed                                   jsConsumed
		AliceConsumed                                 jsConsumed
		Watermarks, WatermarksAfter, SecretWatermarks jsOffsets
		Refused                                       map[string][]jsErr
		CarolRecords                                  int
		CarolAnswered                                 []string
	}
	runKafkajs(t, "secure", map[string]any{"sasl": sasl, "ssl": ssl, "certs": filepath.Join(dir, "certs")}, logs, &r)

	if !r.Created {
		t.Error("createTopics as admin answered false")
	}
	wantACLs := []string{
		"User:alice ALLOW READ GROUP:js-alice", "User:alice ALLOW READ TOPIC:js-orders",
		"User:bob ALLOW READ GROUP:js-bob", "User:bob ALLOW READ TOPIC:js-orders", "User:bob ALLOW WRITE TOPIC:js-orders",
		"User:carol ALLOW WRITE TOPIC:js-orders",
	}
	if !slices.Equal(r.Acls, wantACLs) {
		t.Errorf("describeAcls:\n%v\nwant\n%v", r.Acls, wantACLs)
	}
	for who, base := range map[string]string{"bob-scram": "0", "carol-plain": "3", "bob-plain": "5"} {
		if a := r.Acked[who]; len(a) != 1 || a[0].Partition != 0 || a[0].BaseOffset != base || a[0].ErrorCode != 0 {
			t.Errorf("%s's write acknowledged %+v, want partition 0 at offset %s", who, a, base)
		}
	}
	want := []string{"0/0/m0", "0/1/m1", "0/2/m2", "0/3/m3", "0/4/m4", "0/5/m5"}
	checkConsumed(t, "bob (SCRAM-SHA-512) with group js-bob", r.BobConsumed, want)
	checkConsumed(t, "alice (SSL, client certificate) with group js-alice", r.AliceConsumed, want)
	checkMarks(t, "js-orders watermarks", r.Watermarks, []string{"0-6", "0-0"})

	for name, want := range map[string][2]string{
		"scramWrongPassword": {"KafkaJSSASLAuthenticationError", ""},
		"plainWrongPassword": {"KafkaJSSASLAuthenticationError", ""},
		"unknownUser":        {"KafkaJSSASLAuthenticationError", ""},
		"noClientCert":       {"KafkaJSConnectionError", ""},
		"bobWritesSecret":    {"", "TOPIC_AUTHORIZATION_FAILED"},
		"aliceWritesOrders":  {"", "TOPIC_AUTHORIZATION_FAILED"},
		"bobCreatesTopic":    {"", "TOPIC_AUTHORIZATION_FAILED"},
		"carolJoinsGroup":    {"KafkaJSGroupCoordinatorNotFound", ""},
	} {
		errs, ok := r.Refused[name]
		if !ok {
			t.Errorf("check.js did not report %s", name)
		} else if errs == nil {
			t.Errorf("%s: kafkajs succeeded", name)
		} else if !refusedWith(errs, want[0], want[1]) {
			t.Errorf("%s: kafkajs said %+v, want %s %s", name, errs, want[0], want[1])
		}
	}
	if !slices.Contains(r.CarolAnswered, "GroupCoordinator GROUP_AUTHORIZATION_FAILED") {
		t.Errorf("carol's consumer (no READ on its group) was answered %v, want GroupCoordinator GROUP_AUTHORIZATION_FAILED", r.CarolAnswered)
	}
	if r.CarolRecords != 0 {
		t.Errorf("carol, without READ, read %d records", r.CarolRecords)
	}
	checkMarks(t, "js-orders watermarks after the refusals", r.WatermarksAfter, []string{"0-6", "0-0"})
	checkMarks(t, "js-secret watermarks", r.SecretWatermarks, []string{"0-0"})
	if n := strings.Count(logs(), `msg="SASL authentication failed"`); n < 3 {
		t.Errorf("the broker logged %d refused logins, want at least 3 (two wrong passwords, an unknown user)", n)
	}
}

// syncBuffer is a bytes.Buffer a child process writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
