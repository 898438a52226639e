package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"holdfast/internal/auth"
	"holdfast/internal/brokertest"
	"holdfast/internal/console"
	"holdfast/internal/lab"
	"holdfast/internal/testwait"
)

// post sends a form to the console without following its redirect.
func post(t *testing.T, base, path string, form url.Values, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func labStatus(t *testing.T, base string) console.LabStatus {
	t.Helper()
	resp, err := http.Get(base + "/lab/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s console.LabStatus
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLabActions: what guards a lab run, with a runner that only waits
// for its cancellation (the runs themselves are TestConsoleLab's, in
// cmd/holdfast, against a real serve process): one run at a time, cancel,
// no loading during a run, bad sizes and scenarios refused, and requests
// from other sites, to other Host names, without a login or without the
// permission refused.
func TestLabActions(t *testing.T) {
	n := brokertest.Start(t)
	started := make(chan lab.Config, 2)
	run := func(ctx context.Context, cfg lab.Config) (lab.Result, error) {
		started <- cfg
		cfg.Scenario(0, len(cfg.Scenarios), lab.Scenarios()[0], nil)
		cfg.Progress("waiting to be cancelled")
		<-ctx.Done()
		return lab.Result{}, ctx.Err()
	}
	c, err := console.New(console.Config{Broker: n.B, Seeds: []string{n.Addr}, LabRun: run, LabDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := httptest.NewServer(c)
	defer srv.Close()

	if code, body, _ := post(t, srv.URL, "/lab/run", url.Values{"records": {"50"}}, nil); code != 400 || !strings.Contains(body, "want 100..20000") {
		t.Errorf("50 records: %d %s", code, body)
	}
	if code, body, _ := post(t, srv.URL, "/lab/run", url.Values{"scenario": {"nope"}}, nil); code != 400 || !strings.Contains(body, `scenario "nope"`) {
		t.Errorf("unknown scenario: %d %s", code, body)
	}
	// Another site's page, or a page whose name was rebound to this
	// address, cannot start a run.
	for _, h := range []map[string]string{{"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Host": "evil.example"}} {
		if code, body, _ := post(t, srv.URL, "/lab/run", nil, h); code != 403 {
			t.Errorf("%v: %d %s", h, code, body)
		}
	}
	if len(started) != 0 {
		t.Fatal("a refused request started a run")
	}

	code, _, hdr := post(t, srv.URL, "/lab/run", url.Values{"records": {"100"}, "scenario": {"lost-ack", "acks0-drop", "lost-ack"}}, map[string]string{"Origin": srv.URL, "Sec-Fetch-Site": "same-origin"})
	if code != http.StatusSeeOther || hdr.Get("Location") != "/lab" {
		t.Fatalf("start: %d %v", code, hdr)
	}
	cfg := <-started
	if cfg.Records != 100 || strings.Join(cfg.Scenarios, ",") != "lost-ack,acks0-drop" {
		t.Errorf("the run was asked for %d records of %v", cfg.Records, cfg.Scenarios)
	}
	if code, body, _ := post(t, srv.URL, "/lab/run", url.Values{"records": {"100"}}, nil); code != http.StatusConflict || !strings.Contains(body, "already going") {
		t.Errorf("a second run: %d %s", code, body)
	}
	if code, body, _ := post(t, srv.URL, "/lab/results", nil, map[string]string{"Content-Type": "application/json"}); code != http.StatusConflict {
		t.Errorf("loading during a run: %d %s", code, body)
	}
	// A browser gets the page with the reason.
	if code, body, _ := post(t, srv.URL, "/lab/run", nil, map[string]string{"Accept": "text/html"}); code != http.StatusConflict || !strings.Contains(body, `<p class="error">a lab run is already going`) {
		t.Errorf("a second run from a browser: %d %s", code, body)
	}
	s := labStatus(t, srv.URL)
	if !s.Running || s.Current != lab.Scenarios()[0].Name || s.Lines[0] != "waiting to be cancelled" || !strings.HasPrefix(s.By, "anonymous from 127.0.0.1") {
		t.Errorf("status during the run: %+v", s)
	}
	page := get(t, srv.URL+"/lab")
	for _, want := range []string{`id="lab-current">` + lab.Scenarios()[0].Name, `id="lab-cancel"`, `data-live="true"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page during a run has no %s:\n%s", want, page)
		}
	}
	if len(started) != 0 {
		t.Fatal("a second run started")
	}

	if code, _, _ := post(t, srv.URL, "/lab/cancel", nil, nil); code != http.StatusSeeOther {
		t.Fatalf("cancel: %d", code)
	}
	testwait.Until(t, 10*time.Second, "the run to end after its cancellation", func() bool { return !labStatus(t, srv.URL).Running })
	s = labStatus(t, srv.URL)
	if !strings.Contains(s.Ended, "cancelled by anonymous from 127.0.0.1") || s.Results != nil {
		t.Errorf("after the cancellation: %+v", s)
	}
	if code, _, _ := post(t, srv.URL, "/lab/cancel", nil, nil); code != http.StatusConflict {
		t.Errorf("cancel with no run: %d", code)
	}
	page = get(t, srv.URL+"/lab")
	for _, want := range []string{`id="lab-none"`, `data-live-stop`, `id="lab-start"`, `data-live="false"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page after the run has no %s:\n%s", want, page)
		}
	}
	if code, body, _ := post(t, srv.URL, "/lab/results", nil, map[string]string{"Content-Type": "text/plain"}); code != http.StatusUnsupportedMediaType {
		t.Errorf("results as text/plain: %d %s", code, body)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/lab/results", strings.NewReader(`{"run":"r1","acked":10,"lost":0}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 400 {
		t.Errorf("holdfast verify's JSON loaded as lab results: %v %v", err, resp.Status)
	} else {
		resp.Body.Close()
	}
	if resp, err := http.Get(srv.URL + "/lab/results.json"); err != nil || resp.StatusCode != 404 {
		t.Errorf("results.json without results: %v %v", err, resp.Status)
	}

	// With logins: none is 401, a wrong one too; a user without ALTER on
	// the CLUSTER 403; a session's POST without its CSRF token 403;
	// nothing starts.
	gate, err := console.NewGate(console.GateConfig{Pages: true,
		Password: func(u, p string) bool { return p == "pw" },
		Authorized: func(p auth.Principal, _ string, op auth.Operation, typ auth.ResourceType, _ string) bool {
			return p.Name == "admin" || typ != auth.ResourceCluster || op != auth.OpAlter
		}})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := console.New(console.Config{Broker: n.B, Seeds: []string{n.Addr}, LabRun: run, Gate: gate})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	srv2 := httptest.NewServer(gatedMux(gate, c2))
	defer srv2.Close()
	if code, _, _ := post(t, srv2.URL, "/lab/run", nil, nil); code != 401 {
		t.Errorf("anonymous: %d", code)
	}
	if _, _, err := login(t, srv2.URL, "admin", "wrong"); err == nil {
		t.Errorf("a wrong password logged in")
	}
	bob, bobToken, err := login(t, srv2.URL, "bob", "pw")
	if err != nil {
		t.Fatal(err)
	}
	if code, body := postWith(t, bob, srv2.URL+"/lab/run", url.Values{"csrf": {bobToken}}); code != 403 || !strings.Contains(body, "User:bob may not ALTER the CLUSTER") {
		t.Errorf("bob: %d %s", code, body)
	}
	admin, adminToken, err := login(t, srv2.URL, "admin", "pw")
	if err != nil {
		t.Fatal(err)
	}
	if code, body := postWith(t, admin, srv2.URL+"/lab/run", url.Values{"records": {"100"}}); code != 403 || !strings.Contains(body, "CSRF") {
		t.Errorf("admin without the CSRF token: %d %s", code, body)
	}
	if code, body := postWith(t, admin, srv2.URL+"/lab/run", url.Values{"records": {"100"}, "csrf": {bobToken}}); code != 403 || !strings.Contains(body, "CSRF") {
		t.Errorf("admin with bob's CSRF token: %d %s", code, body)
	}
	if len(started) != 0 {
		t.Fatal("a refused request started a run")
	}
	if code, body := postWith(t, admin, srv2.URL+"/lab/run", url.Values{"records": {"100"}, "csrf": {adminToken}}); code != http.StatusSeeOther {
		t.Fatalf("admin: %d %s", code, body)
	}
	<-started
	if code, body := getWith(t, admin, srv2.URL+"/lab/status"); code != 200 || !strings.Contains(body, `"by":"User:admin from 127.0.0.1"`) {
		t.Errorf("run by: %d %s", code, body)
	}
	if code, _, _ := post(t, srv2.URL, "/lab/cancel", nil, nil); code != 401 {
		t.Errorf("anonymous cancel: %d", code)
	}
	// Close cancels the run and waits for it.
	c2.Close()
	if code, body := getWith(t, admin, srv2.URL+"/lab/status"); code != 200 || !strings.Contains(body, "cancelled by this node's shutdown") {
		t.Errorf("after Close: %d %s", code, body)
	}

	// Without a runner, nothing changes state.
	c3, err := console.New(console.Config{Broker: n.B, Seeds: []string{n.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	srv3 := httptest.NewServer(c3)
	defer srv3.Close()
	if code, body, _ := post(t, srv3.URL, "/lab/run", nil, nil); code != 403 || !strings.Contains(body, "turned off") {
		t.Errorf("no runner: %d %s", code, body)
	}
	if page := get(t, srv3.URL+"/lab"); strings.Contains(page, `id="lab-start"`) || !strings.Contains(page, "--console-lab=false") {
		t.Errorf("the page without a runner offers runs:\n%s", page)
	}
}

func get(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d\n%s", u, resp.StatusCode, b)
	}
	return string(b)
}

// TestLabResultsPage: results a real `holdfast lab --json` wrote
// (testdata/lab-results.json; see testdata/README) loaded into the
// console: /lab/results.json gives them back as the lab printed them,
// /lab/status describes them, the page has every row's numbers, its bar and
// its timeline (each event, faults marked); they are kept across a new
// console; and bad files are refused with a reason, a kept file that does
// not read is said so on the page.
func TestLabResultsPage(t *testing.T) {
	n := brokertest.Start(t)
	raw, err := os.ReadFile("testdata/lab-results.json")
	if err != nil {
		t.Fatal(err)
	}
	want, err := lab.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	never := func(context.Context, lab.Config) (lab.Result, error) {
		return lab.Result{}, errors.New("not in this test")
	}
	open := func() (*console.Console, *httptest.Server) {
		c, err := console.New(console.Config{Broker: n.B, Seeds: []string{n.Addr}, LabRun: never, LabDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(c)
		t.Cleanup(func() { srv.Close(); c.Close() })
		return c, srv
	}
	_, srv := open()

	if page := get(t, srv.URL+"/lab"); !strings.Contains(page, `id="lab-none"`) {
		t.Errorf("the page with no results:\n%s", page)
	}
	// Bad files: each refused with what is wrong, nothing kept.
	for _, c := range []struct{ body, want string }{
		{``, "not the JSON of holdfast lab --json"},
		{`{"rows":[]}`, "no rows"},
		{`{"run":"r1","acked":10,"lost":0}`, "no rows"},
		{string(raw[:len(raw)/2]), "not the JSON of holdfast lab --json"},
		{strings.Replace(string(raw), `"expect": "loss"`, `"expect": "perhaps"`, 1), `expect "perhaps"`},
	} {
		req, _ := http.NewRequest("POST", srv.URL+"/lab/results", strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), c.want) {
			t.Errorf("%.40q: %d %s, want 400 with %q", c.body, resp.StatusCode, b, c.want)
		}
	}
	if s := labStatus(t, srv.URL); s.Results != nil {
		t.Fatalf("a bad file was kept: %+v", s.Results)
	}

	req, _ := http.NewRequest("POST", srv.URL+"/lab/results", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("loading the file: %s", resp.Status)
	}

	check := func(base string) {
		t.Helper()
		var got lab.Result
		if err := json.Unmarshal([]byte(get(t, base+"/lab/results.json")), &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("/lab/results.json is not the file's results:\n got %+v\nwant %+v", got, want)
		}
		s := labStatus(t, base)
		if s.Running || s.Results == nil || s.Results.Source != "file" || s.Results.Rows != len(want.Rows) || s.Results.OK != want.OK {
			t.Errorf("status: %+v", s)
		}
		page := get(t, base+"/lab")
		for _, r := range want.Rows {
			for _, w := range []string{
				fmt.Sprintf(`<tr class="labrow %s" data-scenario="%s" data-setting="%s"><td>%[1]s</td><td>%[3]s</td><td class="n acked">%d</td>`, r.Profile, r.Scenario, template.HTMLEscapeString(r.Setting), r.Acked),
				fmt.Sprintf(`data-label="%s · %s"`, r.Profile, template.HTMLEscapeString(r.Setting)),
			} {
				if !strings.Contains(page, w) {
					t.Errorf("%s / %s: the page has no %s", r.Scenario, r.Setting, w)
				}
			}
			if len(r.Events) == 0 || len(r.Acks) == 0 && r.Scenario != "consumer" {
				t.Errorf("%s / %s: the real lab recorded no timeline: %d events, %d points", r.Scenario, r.Setting, len(r.Events), len(r.Acks))
			}
			faults := 0
			for i, ev := range r.Events {
				class := "ev"
				if ev.Fault {
					class, faults = "ev fault", faults+1
				}
				w := fmt.Sprintf(`<span class="%s">%d. %.2f s %s</span>`, class, i+1, ev.At, template.HTMLEscapeString(ev.What))
				if !strings.Contains(page, w) {
					t.Errorf("%s / %s: the page has no %s", r.Scenario, r.Setting, w)
				}
			}
			if faults == 0 && r.Injected && r.Scenario != "consumer" {
				t.Errorf("%s / %s: its fault was injected but is not on its timeline: %+v", r.Scenario, r.Setting, r.Events)
			}
		}
		if got := strings.Count(page, `<polyline class="acked"`); got == 0 {
			t.Errorf("no acknowledgement curves on the page")
		}
	}
	check(srv.URL)
	// Kept: a new console on the same directory shows them.
	_, srv2 := open()
	check(srv2.URL)

	// A kept file that does not read: the page says so.
	if err := os.WriteFile(filepath.Join(dir, "lab-results.json"), []byte(`{"result":{"rows":[]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, srv3 := open()
	if page := get(t, srv3.URL+"/lab"); !strings.Contains(page, "lab-results.json do not read (no rows") {
		t.Errorf("a kept file that does not read:\n%s", page)
	}
	if resp, err := http.Get(srv3.URL + "/lab/results.json"); err != nil || resp.StatusCode != 404 {
		t.Errorf("results.json without results: %v %v", err, resp)
	}
}
