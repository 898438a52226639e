package console_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/auth"
	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/console"
	"holdfast/internal/wire"
)

// gatedMux is the admin listener as holdfast serve builds it: the login
// routes, /metrics and /debug/pprof behind the gate, the console at /.
func gatedMux(g *console.Gate, c *console.Console) http.Handler {
	mux := http.NewServeMux()
	g.Routes(mux)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "served\n") })
	mux.Handle("/metrics", g.Endpoint(auth.OpDescribe, true, ok))
	mux.Handle("/debug/pprof/", g.Endpoint(auth.OpAlter, false, ok))
	mux.Handle("/", c)
	return mux
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// login logs in through the login form; the client keeps the session
// cookie, and the session's CSRF token comes from a page's logout form.
func login(t *testing.T, base, user, pass string) (*http.Client, string, error) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	code, body := postWith(t, cl, base+"/login", url.Values{"user": {user}, "password": {pass}, "next": {"/lab"}})
	if code != http.StatusSeeOther {
		return nil, "", errors.New(body)
	}
	u, _ := url.Parse(base)
	for _, ck := range jar.Cookies(u) {
		if ck.Name == "holdfast_session" && ck.Value != "" {
			_, page := getWith(t, cl, base+"/lab")
			m := csrfInput.FindStringSubmatch(page)
			if m == nil {
				t.Fatalf("no CSRF token on the page:\n%s", page)
			}
			return cl, m[1], nil
		}
	}
	t.Fatalf("a login answered %d without a session cookie", code)
	return nil, "", nil
}

func postWith(t *testing.T, cl *http.Client, u string, form url.Values) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return do(t, cl, req)
}

func getWith(t *testing.T, cl *http.Client, u string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	return do(t, cl, req)
}

func do(t *testing.T, cl *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestLoginACLs: with logins, the console shows each user what the
// broker's authorizer lets that user's Kafka client see. An in-process
// broker with ACLs (its plaintext clients, the console's own among them,
// are the super user ANONYMOUS): alice may READ topic public and DESCRIBE
// group g-alice; bob may READ public and secret. Without a login a page
// sends a browser to the login form and answers anything else 401; a
// wrong password is refused; alice does not see secret in any list, and
// its page and messages are refused (403, nothing of it shown), nor
// g-bob; bob sees secret's message; a POST without the session's CSRF
// token is 403; /metrics and /debug/pprof need a login allowed on the
// CLUSTER; logout ends the session.
func TestLoginACLs(t *testing.T) {
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
		c.Security.Authorizer = auth.NewAuthorizer([]auth.Principal{auth.Anonymous}, false)
	})
	n.CreateTopic("public", 1, nil)
	n.CreateTopic("secret", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := n.Client()
	for topic, v := range map[string]string{"public": "hello everyone", "secret": "classified record"} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	for group, topic := range map[string]string{"g-alice": "public", "g-bob": "secret"} {
		var offs kadm.Offsets
		offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 0, LeaderEpoch: -1})
		if _, err := adm.CommitOffsets(ctx, group, offs); err != nil {
			t.Fatal(err)
		}
	}
	acls := kadm.NewACLs().Allow("User:alice").AllowHosts().Topics("public").Groups("g-alice").Operations(kadm.OpRead)
	acls2 := kadm.NewACLs().Allow("User:bob").AllowHosts().Topics("public", "secret").Groups("g-bob").Operations(kadm.OpRead)
	for _, b := range []*kadm.ACLBuilder{acls, acls2} {
		res, err := adm.CreateACLs(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	brokertest.Await(t, "the ACLs applied", func() error {
		if !n.B.Authorized(auth.User("bob"), "127.0.0.1", auth.OpRead, auth.ResourceTopic, "secret") {
			return errors.New("not yet")
		}
		return nil
	})
	passwords := map[string]string{"alice": "alice-pw", "bob": "bob-pw"}
	gate, err := console.NewGate(console.GateConfig{Pages: true, Endpoints: true,
		Password:   func(u, p string) bool { return passwords[u] != "" && passwords[u] == p },
		Authorized: n.B.Authorized})
	if err != nil {
		t.Fatal(err)
	}
	c, err := console.New(console.Config{Broker: n.B, Seeds: []string{n.Addr}, Gate: gate})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := httptest.NewServer(gatedMux(gate, c))
	defer srv.Close()

	// No login.
	anon := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/", "/topics", "/topics/secret", "/messages?topic=secret", "/groups", "/configs", "/lab", "/lab/status", "/metrics", "/debug/pprof/"} {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		resp, err := anon.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("GET %s without a login: %d %v", path, resp.StatusCode, resp.Header)
		}
	}
	req, _ := http.NewRequest("GET", srv.URL+"/messages?topic=secret", nil)
	req.Header.Set("Accept", "text/html")
	if resp, err := anon.Do(req); err != nil || resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login?next=%2Fmessages%3Ftopic%3Dsecret" {
		t.Errorf("a browser without a login: %v %v", err, resp)
	}
	req, _ = http.NewRequest("GET", srv.URL+"/topics", nil)
	req.Header.Set("X-Console-Fragment", "1")
	if resp, err := anon.Do(req); err != nil || resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != "" {
		t.Errorf("a page's refresh without a login (no password dialog over the page): %v %v", err, resp)
	}
	if code, body := getWith(t, anon, srv.URL+"/login"); code != 200 || !strings.Contains(body, `<form method="post" action="/login"`) {
		t.Errorf("the login page: %d\n%s", code, body)
	}
	if code, _ := getWith(t, anon, srv.URL+"/static/console.css"); code != 200 {
		t.Errorf("the style sheet without a login: %d", code)
	}
	if _, _, err := login(t, srv.URL, "alice", "bob-pw"); err == nil || !strings.Contains(err.Error(), "wrong user or password") {
		t.Errorf("alice with bob's password: %v", err)
	}

	// alice: public only.
	alice, aliceToken, err := login(t, srv.URL, "alice", "alice-pw")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/topics", "/messages", "/groups"} {
		code, body := getWith(t, alice, srv.URL+path)
		if code != 200 || strings.Contains(body, "secret") || strings.Contains(body, "g-bob") {
			t.Errorf("alice's %s: %d, shows secret or g-bob:\n%s", path, code, body)
		}
		if !strings.Contains(body, "User:alice") {
			t.Errorf("alice's %s does not say who is logged in", path)
		}
	}
	if _, body := getWith(t, alice, srv.URL+"/"); strings.Contains(body, `id="node-usage"`) || !strings.Contains(body, "no disk and throughput per node") {
		t.Errorf("alice (no DESCRIBE on the CLUSTER) sees the nodes' disks:\n%s", body)
	}
	if _, body := getWith(t, alice, srv.URL+"/topics"); !strings.Contains(body, `href="/topics/public"`) {
		t.Errorf("alice's topics lack public:\n%s", body)
	}
	if _, body := getWith(t, alice, srv.URL+"/groups"); !strings.Contains(body, "g-alice") {
		t.Errorf("alice's groups lack g-alice:\n%s", body)
	}
	if _, body := getWith(t, alice, srv.URL+"/messages?topic=public&offset=earliest"); !strings.Contains(body, "hello everyone") {
		t.Errorf("alice cannot read public:\n%s", body)
	}
	for _, path := range []string{"/messages?topic=secret&offset=earliest", "/topics/secret", "/groups/g-bob"} {
		code, body := getWith(t, alice, srv.URL+path)
		if code != http.StatusForbidden || strings.Contains(body, "classified") || !strings.Contains(body, "AUTHORIZATION_FAILED") {
			t.Errorf("alice's %s: %d\n%s", path, code, body)
		}
	}
	if code, body := getWith(t, alice, srv.URL+"/configs"); code != 200 || !strings.Contains(body, "CLUSTER_AUTHORIZATION_FAILED") {
		t.Errorf("alice's configs: %d\n%s", code, body)
	}
	for _, path := range []string{"/metrics", "/debug/pprof/"} {
		if code, body := getWith(t, alice, srv.URL+path); code != http.StatusForbidden || !strings.Contains(body, "CLUSTER_AUTHORIZATION_FAILED") {
			t.Errorf("alice's %s: %d %s", path, code, body)
		}
	}

	// bob: secret too, also by HTTP Basic.
	bob, _, err := login(t, srv.URL, "bob", "bob-pw")
	if err != nil {
		t.Fatal(err)
	}
	if _, body := getWith(t, bob, srv.URL+"/topics"); !strings.Contains(body, `href="/topics/secret"`) {
		t.Errorf("bob's topics lack secret:\n%s", body)
	}
	if code, body := getWith(t, bob, srv.URL+"/messages?topic=secret&offset=earliest"); code != 200 || !strings.Contains(body, "classified record") {
		t.Errorf("bob cannot read secret: %d\n%s", code, body)
	}
	req, _ = http.NewRequest("GET", srv.URL+"/topics/secret", nil)
	req.SetBasicAuth("bob", "bob-pw")
	if code, body := do(t, anon, req); code != 200 || !strings.Contains(body, "Topic secret") {
		t.Errorf("bob by HTTP Basic: %d\n%s", code, body)
	}
	req, _ = http.NewRequest("POST", srv.URL+"/lab/run", nil)
	req.SetBasicAuth("bob", "bob-pw")
	if code, _ := do(t, anon, req); code != 401 {
		t.Errorf("a POST by HTTP Basic (no session, no CSRF token): %d", code)
	}

	// CSRF and logout.
	if code, _ := postWith(t, alice, srv.URL+"/logout", nil); code != http.StatusForbidden {
		t.Errorf("logout without the CSRF token: %d", code)
	}
	if code, _ := postWith(t, alice, srv.URL+"/logout", url.Values{"csrf": {"x" + aliceToken}}); code != http.StatusForbidden {
		t.Errorf("logout with a wrong CSRF token: %d", code)
	}
	if code, _ := postWith(t, alice, srv.URL+"/lab/run", nil); code != http.StatusForbidden {
		t.Errorf("a lab run without the CSRF token: %d", code)
	}
	if code, _ := getWith(t, alice, srv.URL+"/topics"); code != 200 {
		t.Errorf("refused POSTs ended the session: %d", code)
	}
	if code, _ := postWith(t, alice, srv.URL+"/logout", url.Values{"csrf": {aliceToken}}); code != http.StatusSeeOther {
		t.Errorf("logout: %d", code)
	}
	if code, _ := getWith(t, alice, srv.URL+"/topics"); code != 401 {
		t.Errorf("after logout: %d", code)
	}
}
