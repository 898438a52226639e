package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"holdfast/internal/auth"
)

// webUser is a browser of the console: a cookie jar, no redirects
// followed, the session's CSRF token once logged in.
type webUser struct {
	t    *testing.T
	base string
	cl   *http.Client
	csrf string
}

func newWebUser(t *testing.T, base string) *webUser {
	jar, _ := cookiejar.New(nil)
	return &webUser{t: t, base: base, cl: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (u *webUser) do(method, path string, form url.Values, hdr ...string) (*http.Response, string) {
	u.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, u.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := u.cl.Do(req)
	if err != nil {
		u.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (u *webUser) get(path string, hdr ...string) (int, string) {
	u.t.Helper()
	resp, body := u.do("GET", path, nil, hdr...)
	return resp.StatusCode, body
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// login posts the login form; on success it keeps the session's CSRF token
// (from the page's logout form) and returns the Set-Cookie header.
func (u *webUser) login(user, pass string) (int, string) {
	u.t.Helper()
	resp, body := u.do("POST", "/login", url.Values{"user": {user}, "password": {pass}, "next": {"/topics"}})
	if resp.StatusCode != http.StatusSeeOther {
		return resp.StatusCode, body
	}
	if loc := resp.Header.Get("Location"); loc != "/topics" {
		u.t.Errorf("a login sent to %q, not back to /topics", loc)
	}
	_, page := u.get("/topics")
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		u.t.Fatalf("no CSRF token on the page after logging in as %s:\n%s", user, page)
	}
	u.csrf = m[1]
	return resp.StatusCode, resp.Header.Get("Set-Cookie")
}

// TestConsoleLogin: a real `holdfast serve` whose only Kafka listener is
// SASL_PLAINTEXT (SCRAM-SHA-512 and PLAIN) with ACLs; its console, on
// loopback with the default --admin-auth, asks for a login. Without one:
// a browser is sent to the login page, anything else gets 401, /metrics
// and /debug/pprof too, /healthz answers. A wrong password is refused.
// alice (SCRAM, READ on public) does not see orders in any list and its
// page and messages are refused; bob (SCRAM, READ on orders) and carol (a
// PLAIN user of the JAAS config) read its message. The session cookie is
// HttpOnly and SameSite=Strict; POSTs without the session's CSRF token are
// 403; logout ends the session. /debug/pprof needs ALTER on the CLUSTER
// (bob 403, admin 200); Prometheus scrapes /metrics with HTTP Basic.
func TestConsoleLogin(t *testing.T) {
	dir := t.TempDir()
	kafka := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	web := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	props := fmt.Sprintf(`listeners=SASL_PLAINTEXT://%s
sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="node" password="node-secret" user_node="node-secret" user_carol="carol-secret";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:node
add-scram=SCRAM-SHA-512=[name=admin,password=admin-secret]
`, kafka)
	adminProps := "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\nsasl.password=admin-secret\n"
	for name, body := range map[string]string{"server.properties": props, "admin.properties": adminProps} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	logs := bgServe(t, dir, docEnv(), "holdfast serve --config server.properties --metrics-listen "+web)
	awaitReady(t, logs)
	admin := func(args ...string) {
		t.Helper()
		if r := hfIn(t, dir, append(args, "--bootstrap", kafka, "--command-config", "admin.properties")...); r.code != 0 {
			t.Fatalf("holdfast %v: exit %d\n%s%s\nbroker logs:\n%s", args, r.code, r.out, r.err, logs())
		}
	}
	admin("topic", "create", "orders")
	admin("topic", "create", "public")
	admin("user", "set", "--name", "alice", "--password", "alice-secret")
	admin("user", "set", "--name", "bob", "--password", "bob-secret")
	admin("acl", "create", "--allow", "User:alice", "--operation", "read", "--topic", "public")
	admin("acl", "create", "--allow", "User:bob", "--operation", "read", "--topic", "orders")
	admin("acl", "create", "--allow", "User:carol", "--operation", "read", "--topic", "orders")
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka), kgo.SASL(scram.Auth{User: "admin", Pass: "admin-secret"}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("first order")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	base := "http://" + web

	// No login.
	anon := newWebUser(t, base)
	resp, _ := anon.do("GET", "/topics", nil, "Accept", "text/html")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login?next=%2Ftopics" {
		t.Errorf("a browser without a login: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, path := range []string{"/topics", "/messages?topic=orders&offset=earliest", "/metrics", "/debug/pprof/", "/debug/pprof/profile?seconds=1"} {
		if code, body := anon.get(path); code != 401 || strings.Contains(body, "first order") {
			t.Errorf("GET %s without a login: %d\n%s", path, code, body)
		}
	}
	if code, _ := anon.get("/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	if code, body := anon.get("/login"); code != 200 || !strings.Contains(body, `action="/login"`) {
		t.Errorf("the login page: %d\n%s", code, body)
	}
	// A real browser asking for a page lands on the login form.
	if chromium, err := exec.LookPath("chromium"); err == nil {
		dom := dumpDOM(t, chromium, base+"/topics", time.Second)
		if !strings.Contains(dom, `<form method="post" action="/login" class="browse" id="login">`) || !strings.Contains(dom, `value="/topics"`) || strings.Contains(dom, "orders") {
			t.Errorf("Chromium asking for /topics without a login:\n%s", dom)
		}
	}
	if code, body := anon.login("bob", "alice-secret"); code != 401 || !strings.Contains(body, "wrong user or password") {
		t.Errorf("bob with alice's password: %d\n%s", code, body)
	}
	if code, body := anon.login("mallory", "x"); code != 401 {
		t.Errorf("an unknown user: %d\n%s", code, body)
	}

	// alice may not DESCRIBE orders: it is nowhere, and refused.
	alice := newWebUser(t, base)
	code, cookie := alice.login("alice", "alice-secret")
	if code != http.StatusSeeOther {
		t.Fatalf("alice's login: %d\n%s\nbroker logs:\n%s", code, cookie, logs())
	}
	for _, attr := range []string{"holdfast_session=", "HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(cookie, attr) {
			t.Errorf("the session cookie lacks %s: %s", attr, cookie)
		}
	}
	for _, path := range []string{"/", "/topics", "/messages"} {
		if code, body := alice.get(path); code != 200 || strings.Contains(body, "orders") || !strings.Contains(body, "User:alice") {
			t.Errorf("alice's %s: %d\n%s", path, code, body)
		}
	}
	if _, body := alice.get("/topics"); !strings.Contains(body, `href="/topics/public"`) {
		t.Errorf("alice's topics lack public:\n%s", body)
	}
	for _, path := range []string{"/messages?topic=orders&offset=earliest", "/topics/orders"} {
		if code, body := alice.get(path); code != http.StatusForbidden || strings.Contains(body, "first order") || !strings.Contains(body, "TOPIC_AUTHORIZATION_FAILED") {
			t.Errorf("alice's %s: %d\n%s", path, code, body)
		}
	}

	// bob (SCRAM) and carol (PLAIN) may.
	for _, u := range []struct{ name, pass string }{{"bob", "bob-secret"}, {"carol", "carol-secret"}} {
		w := newWebUser(t, base)
		if code, body := w.login(u.name, u.pass); code != http.StatusSeeOther {
			t.Fatalf("%s's login: %d\n%s", u.name, code, body)
		}
		if _, body := w.get("/topics"); !strings.Contains(body, `href="/topics/orders"`) || strings.Contains(body, "public") {
			t.Errorf("%s's topics:\n%s", u.name, body)
		}
		if code, body := w.get("/messages?topic=orders&offset=earliest"); code != 200 || !strings.Contains(body, "first order") {
			t.Errorf("%s's messages of orders: %d\n%s", u.name, code, body)
		}
	}

	// CSRF, logout.
	for _, path := range []string{"/logout", "/lab/run"} {
		if resp, body := alice.do("POST", path, url.Values{}); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Errorf("POST %s without the CSRF token: %d %s", path, resp.StatusCode, body)
		}
	}
	if resp, body := alice.do("POST", "/lab/run", url.Values{"csrf": {alice.csrf}}); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "User:alice may not ALTER the CLUSTER") {
		t.Errorf("alice starting a lab run: %d %s", resp.StatusCode, body)
	}
	if resp, _ := alice.do("POST", "/logout", url.Values{"csrf": {alice.csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("logout: %d", resp.StatusCode)
	}
	if code, _ := alice.get("/topics"); code != 401 {
		t.Errorf("after logout: %d", code)
	}

	// /debug/pprof and /metrics by HTTP Basic (curl, Prometheus).
	basic := func(user, pass, path string) (int, string) {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.SetBasicAuth(user, pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := basic("bob", "bob-secret", "/debug/pprof/"); code != http.StatusForbidden || !strings.Contains(body, "CLUSTER_AUTHORIZATION_FAILED") {
		t.Errorf("bob's pprof: %d %s", code, body)
	}
	if code, _ := basic("admin", "admin-secret", "/debug/pprof/"); code != 200 {
		t.Errorf("admin's pprof: %d", code)
	}
	if code, body := basic("admin", "admin-secret", "/metrics"); code != 200 || !strings.Contains(body, "holdfast_partition_count") {
		t.Errorf("admin's /metrics: %d", code)
	}
	if code, _ := basic("admin", "wrong", "/metrics"); code != 401 {
		t.Errorf("/metrics with a wrong password: %d", code)
	}
}

// TestConsoleCertificateLogin: the admin listener over TLS with the SSL
// listener's settings (--admin-tls-listener SSL, ssl.client.auth=required,
// the CN as principal). A client certificate is the login: alice's
// browser lands on her pages with a Secure session cookie and does not see
// orders, bob's reads its message; without a certificate there is no
// connection; a POST still needs the session's CSRF token.
func TestConsoleCertificateLogin(t *testing.T) {
	dir := t.TempDir()
	kafka := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	web := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ca, err := auth.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certs := map[string]auth.Cert{}
	for _, name := range []string{"node-1", "alice", "bob"} {
		o := auth.CertOptions{CommonName: name}
		if name == "node-1" {
			o.Hosts = []string{"127.0.0.1", "localhost"}
		}
		if certs[name], err = ca.Issue(o); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string][]byte{"ca.pem": ca.CertPEM, "node-1.pem": certs["node-1"].Keystore(), "server.properties": []byte(fmt.Sprintf(`listeners=SSL://%s
ssl.keystore.type=PEM
ssl.keystore.location=node-1.pem
ssl.truststore.type=PEM
ssl.truststore.location=ca.pem
ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]*).*$/$1/,DEFAULT
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:node-1
`, kafka))}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, failed := runToExit(t, dir, "serve", "--config", "server.properties", "--metrics-listen", web, "--admin-tls-listener", "PLAIN"); !failed || !strings.Contains(out, "--admin-tls-listener PLAIN: not a listener of this node (SSL)") {
		t.Errorf("--admin-tls-listener naming no listener: %s", out)
	}
	logs := bgServe(t, dir, docEnv(), "holdfast serve --config server.properties --metrics-listen "+web+" --admin-tls-listener SSL")
	awaitReady(t, logs)
	if !strings.Contains(logs(), "console=https://"+web+"/") {
		t.Errorf("the ready line does not give the console's https address:\n%s", logs())
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	tlsFor := func(name string) *tls.Config {
		c := &tls.Config{RootCAs: roots}
		if name != "" {
			kp, err := tls.X509KeyPair(certs[name].CertPEM, certs[name].KeyPEM)
			if err != nil {
				t.Fatal(err)
			}
			c.Certificates = []tls.Certificate{kp}
		}
		return c
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka), kgo.DialTLSConfig(tlsFor("node-1")))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	if res, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:bob").AllowHosts().Topics("orders").Operations(kadm.OpRead)); err != nil || res[0].Err != nil {
		t.Fatalf("ACL: %v %v", err, res)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("first order")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	browser := func(name string) *webUser {
		u := newWebUser(t, "https://"+web)
		u.cl.Transport = &http.Transport{TLSClientConfig: tlsFor(name)}
		return u
	}
	if _, err := browser("").cl.Get("https://" + web + "/topics"); err == nil {
		t.Errorf("the admin listener served a client without a certificate")
	}
	alice := browser("alice")
	resp, body := alice.do("GET", "/topics", nil, "Accept", "text/html")
	if resp.StatusCode != 200 || !strings.Contains(body, "User:alice") || strings.Contains(body, "orders") {
		t.Errorf("alice's topics: %d\n%s", resp.StatusCode, body)
	}
	if ck := resp.Header.Get("Set-Cookie"); !strings.Contains(ck, "Secure") || !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Strict") {
		t.Errorf("the session cookie over TLS: %s", ck)
	}
	if code, body := alice.get("/messages?topic=orders&offset=earliest"); code != http.StatusForbidden || strings.Contains(body, "first order") {
		t.Errorf("alice's messages of orders: %d\n%s", code, body)
	}
	bob := browser("bob")
	if code, body := bob.get("/messages?topic=orders&offset=earliest", "Accept", "text/html"); code != 200 || !strings.Contains(body, "first order") {
		t.Errorf("bob's messages of orders: %d\n%s", code, body)
	}
	if resp, body := bob.do("POST", "/lab/run", url.Values{}); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("bob's POST without the CSRF token: %d %s", resp.StatusCode, body)
	}
}

// TestAdminLogins: where --admin-auth asks for logins. auto: the console
// when Kafka clients authenticate, /metrics and /debug/pprof then and
// beyond loopback; the zero-config start asks nothing.
func TestAdminLogins(t *testing.T) {
	for _, tc := range []struct {
		mode, listen, metrics string
		kafkaAuth             bool
		pages, endpoints      bool
		err                   string
	}{
		{mode: "auto", listen: "localhost:9095"},
		{mode: "auto", listen: "127.0.0.1:9095", kafkaAuth: true, pages: true, endpoints: true},
		{mode: "auto", listen: "0.0.0.0:9095", endpoints: true},
		{mode: "auto", listen: ":9095", endpoints: true},
		{mode: "auto", listen: "10.0.0.5:9095", kafkaAuth: true, pages: true, endpoints: true},
		{mode: "required", listen: "localhost:9095", pages: true, endpoints: true},
		{mode: "none", listen: "0.0.0.0:9095", kafkaAuth: true},
		{mode: "sometimes", listen: "localhost:9095", err: `--admin-auth "sometimes": want auto, required or none`},
		{mode: "auto", listen: "localhost:9095", metrics: "public", err: `--admin-auth-metrics "public": want login or open`},
	} {
		c := &serveConfig{adminAuth: tc.mode, metricsListen: tc.listen, adminAuthMetrics: tc.metrics}
		if c.adminAuthMetrics == "" {
			c.adminAuthMetrics = "login"
		}
		pages, endpoints, err := c.adminLogins(tc.kafkaAuth)
		switch {
		case tc.err != "":
			if err == nil || err.Error() != tc.err {
				t.Errorf("%+v: error %v, want %s", tc, err, tc.err)
			}
		case err != nil || pages != tc.pages || endpoints != tc.endpoints:
			t.Errorf("%+v: pages %v, endpoints %v, %v", tc, pages, endpoints, err)
		}
	}
}
