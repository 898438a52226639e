package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// secureProc runs `holdfast serve` with args in dir and waits until addr
// accepts TCP connections (a secured listener answers nothing else
// without credentials).
func secureProc(t *testing.T, dir, addr string, args ...string) func() string {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOLDFAST_OFFSETS_PARTITIONS=3")
	var mu sync.Mutex
	var logs bytes.Buffer
	w := writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(b) })
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	read := func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return read
		}
		select {
		case <-done:
			t.Fatalf("holdfast exited during start-up:\n%s", read())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("holdfast did not listen on %s:\n%s", addr, read())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func kcatPath(t *testing.T) string {
	t.Helper()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("kcat not installed; .ci/run installs it with apt-get")
		}
		t.Skip("kcat not installed (apt-get install kcat)")
	}
	return kcat
}

func runCmd(t *testing.T, dir, stdin string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), fmt.Errorf("%s %v: %w\n%s", filepath.Base(name), args, err, errb.String())
	}
	return out.String(), nil
}

// TestSecureServeKcat is the README's secure set-up, run as written: a
// development CA from `holdfast certs`, a server.properties with Kafka's
// names, a bootstrap admin, users and ACLs made with the holdfast CLI -
// then librdkafka's kcat over SASL_SSL with SCRAM-SHA-512 and over SSL
// with a client certificate, allowed and refused.
func TestSecureServeKcat(t *testing.T) {
	kcat := kcatPath(t)
	dir := t.TempDir()
	saslAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	sslAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	if out, err := runCmd(t, dir, "", binary, "certs", "--dir", "certs", "--nodes", "1", "--hosts", "127.0.0.1,localhost", "--clients", "alice,mallory"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	props := fmt.Sprintf(`# Kafka's names, as in a server.properties
listeners=SASL_SSL://%[1]s,SSL://%[2]s
advertised.listeners=SASL_SSL://%[1]s,SSL://%[2]s
inter.broker.listener.name=SSL
ssl.keystore.type=PEM
ssl.keystore.location=certs/node-1.pem
ssl.truststore.type=PEM
ssl.truststore.location=certs/ca.pem
listener.name.ssl.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]*).*$/$1/,DEFAULT
sasl.enabled.mechanisms=SCRAM-SHA-512
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:node-1
connections.max.reauth.ms=600000
# Holdfast's own flags in the same file
add-scram=SCRAM-SHA-512=[name=admin,password=admin-secret]
metrics-listen=
`, saslAddr, sslAddr)
	if err := os.WriteFile(filepath.Join(dir, "server.properties"), []byte(props), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nssl.truststore.location=certs/ca.pem\n" +
		`sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="admin-secret";` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "admin.properties"), []byte(admin), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := secureProc(t, dir, saslAddr, "--config", "server.properties")
	sslSeen := false
	for i := 0; i < 100 && !sslSeen; i++ {
		if c, err := net.Dial("tcp", sslAddr); err == nil {
			c.Close()
			sslSeen = true
		}
		time.Sleep(20 * time.Millisecond)
	}

	hf := func(args ...string) string {
		t.Helper()
		// holdfast CMD SUB --bootstrap ... --command-config ... FLAGS...
		full := append([]string{args[0], args[1], "--bootstrap", saslAddr, "--command-config", "admin.properties"}, args[2:]...)
		out, err := runCmd(t, dir, "", binary, full...)
		if err != nil {
			t.Fatalf("%v\n%s\nbroker log:\n%s", err, out, logs())
		}
		return out
	}
	hf("topic", "create", "--partitions", "1", "secured")
	hf("user", "set", "--name", "bob", "--password", "bob-secret")
	hf("acl", "create", "--allow", "User:alice", "--operation", "read,write,describe", "--topic", "secured")
	hf("acl", "create", "--allow", "User:bob", "--operation", "read", "--topic", "secured")
	if out := hf("user", "list"); !strings.Contains(out, "bob") || !strings.Contains(out, "admin") {
		t.Fatalf("user list:\n%s", out)
	}
	if out := hf("acl", "list"); !strings.Contains(out, "User:alice") || !strings.Contains(out, "User:bob") {
		t.Fatalf("acl list:\n%s", out)
	}

	saslArgs := func(user, pass string) []string {
		return []string{"-b", saslAddr, "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
			"-X", "sasl.username=" + user, "-X", "sasl.password=" + pass, "-X", "ssl.ca.location=certs/ca.pem"}
	}
	sslArgs := func(name string) []string {
		return []string{"-b", sslAddr, "-X", "security.protocol=SSL", "-X", "ssl.ca.location=certs/ca.pem",
			"-X", "ssl.certificate.location=certs/" + name + ".crt", "-X", "ssl.key.location=certs/" + name + ".key"}
	}
	kc := func(stdin string, args ...string) (string, error) { return runCmd(t, dir, stdin, kcat, args...) }

	// SASL_SSL, SCRAM-SHA-512: the admin writes and reads.
	if out, err := kc("one\ntwo\n", append(saslArgs("admin", "admin-secret"), "-P", "-t", "secured", "-X", "acks=all")...); err != nil {
		t.Fatalf("%v\n%s\nbroker log:\n%s", err, out, logs())
	}
	// SSL with a client certificate: alice (mapped from CN=alice) writes.
	if out, err := kc("three\n", append(sslArgs("alice"), "-P", "-t", "secured", "-X", "acks=all")...); err != nil {
		t.Fatalf("%v\n%s\nbroker log:\n%s", err, out, logs())
	}
	out, err := kc("", append(saslArgs("bob", "bob-secret"), "-C", "-t", "secured", "-o", "beginning", "-e")...)
	if err != nil || out != "one\ntwo\nthree\n" {
		t.Fatalf("bob reads back %q, %v\nbroker log:\n%s", out, err, logs())
	}
	out, err = kc("", append(sslArgs("alice"), "-C", "-t", "secured", "-o", "beginning", "-e")...)
	if err != nil || out != "one\ntwo\nthree\n" {
		t.Fatalf("alice reads back %q, %v", out, err)
	}

	// Refusals: a wrong password, bob writing (READ only), mallory (a
	// certificate from the CA but no ACL), no certificate at all.
	if out, err := kc("", append(saslArgs("bob", "wrong"), "-L")...); err == nil {
		t.Fatalf("kcat with a wrong password listed metadata:\n%s", out)
	} else if !strings.Contains(out, "Authentication failed") {
		t.Errorf("wrong password: kcat said %q", out)
	}
	if out, err := kc("x\n", append(saslArgs("bob", "bob-secret"), "-P", "-t", "secured")...); err == nil {
		t.Fatalf("bob produced without WRITE:\n%s", out)
	} else if !strings.Contains(out, "Topic authorization failed") {
		t.Errorf("bob's produce: kcat said %q", out)
	}
	if out, err := kc("x\n", append(sslArgs("mallory"), "-P", "-t", "secured")...); err == nil {
		t.Fatalf("mallory produced without an ACL:\n%s", out)
	}
	if out, err := kc("", "-b", sslAddr, "-X", "security.protocol=SSL", "-X", "ssl.ca.location=certs/ca.pem", "-L", "-m", "5"); err == nil {
		t.Fatalf("kcat without a client certificate listed metadata:\n%s", out)
	}
	if l := logs(); strings.Contains(l, "SECURITY:") {
		t.Errorf("a loopback-only secured broker logged a security warning:\n%s", l)
	}
}

// TestServeWarnsBeyondLoopback: listening on every interface without
// authentication logs a clear warning; the zero-config localhost start
// does not.
func TestServeWarnsBeyondLoopback(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	logs := secureProc(t, dir, fmt.Sprintf("127.0.0.1:%d", port), "--listen", fmt.Sprintf("0.0.0.0:%d", port),
		"--advertised", fmt.Sprintf("127.0.0.1:%d", port), "--metrics-listen", "")
	var l string
	for i := 0; i < 100; i++ {
		if l = logs(); strings.Contains(l, "msg=ready") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(l, "SECURITY: listener PLAINTEXT (PLAINTEXT) on 0.0.0.0") || !strings.Contains(l, "without authentication") {
		t.Fatalf("no warning for a PLAINTEXT listener on 0.0.0.0:\n%s", l)
	}
}
