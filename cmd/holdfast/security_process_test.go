package main

// The security walkthroughs of docs/security.md, run as written with the
// real binary and librdkafka's kcat: the commands are read from the doc,
// so a change there is tested here.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"holdfast/internal/testwait"
)

// docBlock returns the code block of docs/security.md that follows the
// comment <!-- quickstart: NAME ... -->, with ports renamed by ports
// (old -> new, as text).
func docBlock(t *testing.T, name string, ports map[string]string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- quickstart: " + regexp.QuoteMeta(name) + "\\b[^>]*-->\\s*```[a-z]*\\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/security.md has no code block after <!-- quickstart: %s -->", name)
	}
	block := string(m[1])
	for old, new := range ports {
		block = strings.ReplaceAll(block, old, new)
	}
	return block
}

// docEnv is the environment the doc's commands run in: the built binary
// as holdfast on PATH, and nothing of the caller's Holdfast settings.
func docEnv(extra ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "HOLDFAST_") {
			env = append(env, e)
		}
	}
	env = append(env, "PATH="+filepath.Dir(binary)+string(os.PathListSeparator)+os.Getenv("PATH"))
	return append(env, extra...)
}

// sh runs a script with bash in dir, stopping at the first failing
// command; it returns stdout and stderr.
func sh(t *testing.T, dir string, env []string, stdin, script string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// mustSh is sh for commands that must succeed; it returns stdout with
// runs of blanks made one space (tables compare as words).
func mustSh(t *testing.T, dir string, env []string, script string, logs func() string) string {
	t.Helper()
	out, errs, err := sh(t, dir, env, "", script)
	if err != nil {
		t.Fatalf("%s\n%v\n%s%s\nbroker logs:\n%s", script, err, out, errs, logs())
	}
	return regexp.MustCompile(`[ \t]+`).ReplaceAllString(out, " ")
}

// bgServe runs a `holdfast serve` line of the doc in the background in dir
// and waits for its "ready" log line.
func bgServe(t *testing.T, dir string, env []string, line string) func() string {
	t.Helper()
	cmd := exec.Command("bash", "-c", "exec "+line)
	cmd.Dir, cmd.Env = dir, env
	var mu sync.Mutex
	var logs bytes.Buffer
	w := writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(b) })
	cmd.Stdout, cmd.Stderr = w, w
	startUntilCleanup(t, cmd)
	read := func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }
	return read
}

// awaitReady waits for every broker's "ready" log line.
func awaitReady(t *testing.T, logs ...func() string) {
	t.Helper()
	for _, l := range logs {
		if !testwait.Poll(2*time.Minute, func() bool {
			if strings.Contains(l(), "msg=stopped") || strings.Contains(l(), "holdfast: ") {
				t.Fatalf("holdfast serve exited during start-up:\n%s", l())
			}
			return strings.Contains(l(), "msg=ready")
		}) {
			t.Fatalf("holdfast serve not ready after 2 minutes:\n%s", l())
		}
	}
}

func kcatPath(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("kcat"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("kcat not installed; .ci/run installs it with apt-get")
		}
		t.Skip("kcat not installed (apt-get install kcat)")
	}
}

// TestSecurityDocSingleNode is docs/security.md's secure single node, run
// as written: a development CA from `holdfast certs`, a server.properties
// with Kafka's names, a bootstrap admin, a user, a topic and ACLs made
// with the holdfast CLI through --command-config, then kcat over SASL_SSL
// with SCRAM-SHA-512 and over SSL with a client certificate. Then what
// must be refused is, and the console reads the secured broker.
func TestSecurityDocSingleNode(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	kcatPath(t)
	dir := t.TempDir()
	sasl, ssl, admin := strconv.Itoa(freePort(t)), strconv.Itoa(freePort(t)), strconv.Itoa(freePort(t))
	ports := map[string]string{"9093": sasl, "9094": ssl}
	env := docEnv("HOLDFAST_METRICS_LISTEN=127.0.0.1:" + admin)

	nolog := func() string { return "" }
	mustSh(t, dir, env, docBlock(t, "secure-setup", ports), nolog)
	if fi, err := os.Stat(filepath.Join(dir, "server.properties")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("server.properties: %v %v", fi, err)
	}
	logs := bgServe(t, dir, env, strings.TrimSpace(docBlock(t, "secure-serve", ports)))
	awaitReady(t, logs)
	for _, want := range []string{`listeners=SASL_SSL://\S+:` + sasl + `,SSL://\S+:` + ssl, "advertised=SASL_SSL://localhost:" + sasl + ",SSL://localhost:" + ssl,
		"inter_broker_listener=SSL", "authorizer=true"} {
		if !regexp.MustCompile(want).MatchString(logs()) {
			t.Errorf("ready line should say %s:\n%s", want, logs())
		}
	}

	out := mustSh(t, dir, env, docBlock(t, "secure-admin", ports), logs)
	for _, want := range []string{"created orders", "set SCRAM-SHA-512 for bob", "created ALLOW User:bob READ topic:literal:orders host=*",
		"created ALLOW User:bob WRITE topic:literal:orders host=*", "created ALLOW User:alice READ topic:literal:orders host=*"} {
		if !strings.Contains(out, want) {
			t.Errorf("the admin block should print %q:\n%s", want, out)
		}
	}
	clients := strings.Split(strings.TrimSpace(docBlock(t, "secure-clients", ports)), "\n")
	if len(clients) != 2 {
		t.Fatalf("secure-clients: want a produce and a consume line, got %q", clients)
	}
	mustSh(t, dir, env, clients[0], logs)
	if out, _, err := sh(t, dir, env, "", clients[1]); err != nil || out != "first order\n" {
		t.Fatalf("alice reads back %q, %v\nbroker logs:\n%s", out, err, logs())
	}

	// What the admin set up is there, seen through the CLI.
	adminEnv := append(env, "HOLDFAST_COMMAND_CONFIG=admin.properties", "HOLDFAST_BOOTSTRAP=localhost:"+sasl)
	if out := mustSh(t, dir, adminEnv, "holdfast user list", logs); !strings.Contains(out, "admin SCRAM-SHA-512 4096\n") || !strings.Contains(out, "bob SCRAM-SHA-512 8192\n") {
		t.Errorf("user list:\n%s", out)
	}
	if out := mustSh(t, dir, adminEnv, "holdfast acl list --topic orders", logs); strings.Count(out, "topic:literal:orders") != 3 {
		t.Errorf("acl list --topic orders: want 3 ACLs:\n%s", out)
	}

	// Refusals.
	// kc runs kcat; its messages are on stderr.
	kc := func(stdin string, args ...string) (string, error) {
		out, errs, err := sh(t, dir, env, stdin, "kcat "+strings.Join(args, " "))
		return out + errs, err
	}
	saslArgs := func(user, pass string) []string {
		return []string{"-b", "localhost:" + sasl, "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
			"-X", "sasl.username=" + user, "-X", "sasl.password=" + pass, "-X", "ssl.ca.location=certs/ca.pem"}
	}
	sslArgs := func(name string) []string {
		return []string{"-b", "localhost:" + ssl, "-X", "security.protocol=SSL", "-X", "ssl.ca.location=certs/ca.pem",
			"-X", "ssl.certificate.location=certs/" + name + ".crt", "-X", "ssl.key.location=certs/" + name + ".key"}
	}
	if out, err := kc("", append(saslArgs("bob", "wrong"), "-L", "-m", "5")...); err == nil {
		t.Errorf("kcat with a wrong password listed metadata:\n%s", out)
	} else if !strings.Contains(out, "Authentication failed") {
		t.Errorf("wrong password: kcat said %q", out)
	}
	if out, err := kc("x\n", append(sslArgs("alice"), "-P", "-t", "orders")...); err == nil {
		t.Errorf("alice produced with READ only:\n%s", out)
	} else if !strings.Contains(out, "Topic authorization failed") {
		t.Errorf("alice's produce: kcat said %q", out)
	}
	// mallory: a certificate from the same CA (reused by certs), no ACL.
	if out := mustSh(t, dir, env, "holdfast certs --dir certs --nodes 0 --clients mallory", logs); !strings.Contains(out, "using the CA in certs/ca.pem") {
		t.Errorf("certs with an existing CA:\n%s", out)
	}
	if out, err := kc("", append(sslArgs("mallory"), "-C", "-t", "orders", "-e")...); err == nil {
		t.Errorf("mallory read without an ACL:\n%s", out)
	}
	if out, err := kc("", "-b", "localhost:"+ssl, "-X", "security.protocol=SSL", "-X", "ssl.ca.location=certs/ca.pem", "-L", "-m", "5"); err == nil {
		t.Errorf("kcat without a client certificate listed metadata:\n%s", out)
	}
	// bob may read and write orders, not administer: exit code 1 with
	// Kafka's error name.
	bob := "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=bob\nsasl.password=bob-secret\nssl.ca.location=certs/ca.pem\n"
	if err := os.WriteFile(filepath.Join(dir, "bob.properties"), []byte(bob), 0o600); err != nil {
		t.Fatal(err)
	}
	r := hfIn(t, dir, "acl", "create", "--bootstrap", "localhost:"+sasl, "--command-config", "bob.properties", "--allow", "User:bob", "--operation", "all", "--cluster")
	if r.code != exitFailed || !strings.Contains(r.err, "CLUSTER_AUTHORIZATION_FAILED") {
		t.Errorf("bob creating an ACL: exit %d\n%s", r.code, r.err)
	}
	r = hfIn(t, dir, "topic", "list", "--bootstrap", "localhost:"+sasl, "--command-config", "bob.properties")
	if r.code != 0 || !strings.Contains(r.out, "orders") {
		t.Errorf("bob listing topics: exit %d\n%s%s", r.code, r.out, r.err)
	}
	// A refused login is exit code 1 and says so (not "no broker answered").
	if err := os.WriteFile(filepath.Join(dir, "wrong.properties"), []byte(strings.Replace(bob, "bob-secret", "wrong", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := hfIn(t, dir, "topic", "list", "--bootstrap", "localhost:"+sasl, "--command-config", "wrong.properties"); r.code != exitFailed || !strings.Contains(r.err, "refused this client's login: SASL_AUTHENTICATION_FAILED") {
		t.Errorf("a wrong password: exit %d\n%s", r.code, r.err)
	}
	// Without --command-config, a TLS listener does not answer.
	if r := hfIn(t, dir, "topic", "list", "--bootstrap", "localhost:"+sasl, "--timeout", "3s"); r.code == 0 {
		t.Errorf("topic list without credentials: exit 0\n%s", r.out)
	}
	if r := hfIn(t, dir, "topic", "list", "--command-config", "nope.properties"); r.code != exitUsage || !strings.Contains(r.err, "--command-config") {
		t.Errorf("a missing --command-config: exit %d\n%s", r.code, r.err)
	}

	// The console asks who you are, as the listeners do: bob, who may
	// read orders, sees it; nobody gets nothing.
	if page := httpGet("http://127.0.0.1:" + admin + "/topics"); strings.Contains(page, "orders") || !strings.Contains(page, "log in") {
		t.Errorf("the console answered without a login:\n%s", page)
	}
	var page string
	testwait.Poll(30*time.Second, func() bool {
		req, _ := http.NewRequest("GET", "http://127.0.0.1:"+admin+"/topics", nil)
		req.SetBasicAuth("bob", "bob-secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page = string(b)
		return strings.Contains(page, "orders")
	})
	if !strings.Contains(page, "orders") {
		t.Errorf("the console does not show topic orders to bob:\n%s\nbroker logs:\n%s", page, logs())
	}
	if l := logs(); strings.Contains(l, "SECURITY:") {
		t.Errorf("a broker whose listeners all authenticate and whose console is on loopback logged a security warning:\n%s", l)
	}
}

func httpGet(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// hfIn runs the binary in dir.
func hfIn(t *testing.T, dir string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir, cmd.Env = dir, docEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{out.String(), errb.String(), 0}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("holdfast %v: %v", args, err)
	}
	return r
}

// TestSecurityDocCluster is docs/security.md's secured three-node cluster,
// from its blocks: three processes with a SASL_SSL client listener, an
// mTLS inter-broker listener and Raft over mTLS; the admin block of the
// single-node walkthrough through node 2, bob writing through node 3 and
// reading through node 1.
func TestSecurityDocCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	kcatPath(t)
	dir := t.TempDir()
	env := docEnv()
	nolog := func() string { return "" }
	mustSh(t, dir, env, docBlock(t, "secure-cluster-certs", nil), nolog)
	client, raft, metricsPort := map[int]string{}, map[string]string{}, map[int]string{}
	for i := 1; i <= 3; i++ {
		client[i] = strconv.Itoa(freePort(t))
		metricsPort[i] = strconv.Itoa(freePort(t))
		raft[fmt.Sprintf("localhost:929%d", i)] = "localhost:" + strconv.Itoa(freePort(t))
	}
	placeholder := regexp.MustCompile(`[0-9-]N\b|nodeN|id N\b`)
	var logs []func() string
	for i := 1; i <= 3; i++ {
		n := strconv.Itoa(i)
		props := strings.NewReplacer("909N", client[i], "919N", strconv.Itoa(freePort(t)), "939N", metricsPort[i],
			"node-N", "node-"+n, "data-N", "data-"+n).Replace(docBlock(t, "secure-cluster-node", nil))
		line := strings.NewReplacer("nodeN", "node"+n, "--node-id N", "--node-id "+n).Replace(strings.TrimSpace(docBlock(t, "secure-cluster-serve", raft)))
		if placeholder.MatchString(props) || placeholder.MatchString(line) {
			t.Fatalf("docs/security.md has a placeholder this test does not fill:\n%s\n%s", props, line)
		}
		if err := os.WriteFile(filepath.Join(dir, "node"+n+".properties"), []byte(props), 0o600); err != nil {
			t.Fatal(err)
		}
		logs = append(logs, bgServe(t, dir, env, line)) // all at once: a new cluster forms with every voter up
	}
	all := func() string {
		var b strings.Builder
		for i, l := range logs {
			fmt.Fprintf(&b, "--- node %d\n%s", i+1, l())
		}
		return b.String()
	}
	awaitReady(t, logs...)

	// The bootstrap admin can log in once the new cluster's controller
	// has committed it: wait for that as a user would, with the doc's
	// admin.properties, before its admin block.
	admin := regexp.MustCompile(`(?s)cat > admin.properties <<'EOF'[^\n]*\n(.*?\n)EOF\n`).FindStringSubmatch(docBlock(t, "secure-admin", nil))
	if admin == nil {
		t.Fatal("docs/security.md's secure-admin block no longer writes admin.properties with a heredoc")
	}
	if err := os.WriteFile(filepath.Join(dir, "admin.properties"), []byte(admin[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	var r result
	if !testwait.Poll(time.Minute, func() bool {
		r = hfIn(t, dir, "cluster", "status", "--bootstrap", "localhost:"+client[2], "--command-config", "admin.properties", "--timeout", "5s")
		return r.code == 0 && strings.Count(r.out, " alive") == 3
	}) {
		t.Fatalf("cluster status as admin: exit %d\n%s%s\n%s", r.code, r.out, r.err, all())
	}

	// The single node's admin block, through node 2: a topic (replicated
	// to all three), bob, ACLs.
	out := mustSh(t, dir, env, docBlock(t, "secure-admin", map[string]string{"9093": client[2]}), all)
	if !strings.Contains(out, "created orders (1 partitions, replication factor 3)") {
		t.Errorf("admin block through node 2:\n%s", out)
	}
	adminEnv := append(env, "HOLDFAST_COMMAND_CONFIG=admin.properties", "HOLDFAST_BOOTSTRAP=localhost:"+client[1])
	if out := mustSh(t, dir, adminEnv, "holdfast cluster status", all); len(regexp.MustCompile(`(?m)^[123] localhost \d+ alive$`).FindAllString(out, -1)) != 3 {
		t.Errorf("cluster status: want 3 nodes alive:\n%s", out)
	}
	// bob writes through node 3 (the doc's line) and reads through node 1.
	produce := strings.Split(strings.TrimSpace(docBlock(t, "secure-clients", map[string]string{"localhost:9093": "localhost:" + client[3]})), "\n")[0]
	// Users and ACLs made through node 2 reach node 3 through the
	// metadata log: retry as a user would until they have.
	var pout, perrs string
	var perr error
	if !testwait.Poll(time.Minute, func() bool {
		pout, perrs, perr = sh(t, dir, env, "", produce)
		return perr == nil
	}) {
		t.Fatalf("%s\n%v\n%s%s\n%s", produce, perr, pout, perrs, all())
	}
	consume := "kcat -b localhost:" + client[1] + " -X security.protocol=SASL_SSL -X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=bob -X sasl.password=bob-secret -X ssl.ca.location=certs/ca.pem -C -t orders -e"
	if out, _, err := sh(t, dir, env, "", consume); err != nil || out != "first order\n" {
		t.Fatalf("bob reads back through node 1: %q, %v\n%s", out, err, all())
	}
	if l := all(); strings.Contains(l, "SECURITY:") {
		t.Errorf("a cluster with every listener and Raft authenticated logged a security warning:\n%s", l)
	}
	raftForgeries(t, dir, func(n int) string { return raft[fmt.Sprintf("localhost:929%d", n)] }, client, metricsPort, logs)
}

// TestServeWarnsBeyondLoopback: listening on every interface without
// authentication logs a clear warning (here with --override, Kafka's way
// of giving a config line on the command line); the zero-config localhost
// start does not (TestServeZeroConfig).
func TestServeWarnsBeyondLoopback(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	p := startProc(t, dir, fmt.Sprintf("127.0.0.1:%d", port), "--override", fmt.Sprintf("listeners=PLAINTEXT://0.0.0.0:%d", port),
		"--advertised", fmt.Sprintf("127.0.0.1:%d", port), "--metrics-listen", "")
	var l string
	testwait.Poll(5*time.Second, func() bool { l = p.logs.String(); return strings.Contains(l, "msg=ready") })
	if !strings.Contains(l, fmt.Sprintf("SECURITY: listener PLAINTEXT (PLAINTEXT) on 0.0.0.0:%d", port)) || !strings.Contains(l, "without authentication") {
		t.Fatalf("no warning for a PLAINTEXT listener on 0.0.0.0:\n%s", l)
	}
}

// startUntilCleanup starts cmd and stops it when the test ends: SIGTERM,
// then SIGKILL after 20 s.
func startUntilCleanup(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
}
