package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"holdfast/internal/console"
	"holdfast/internal/lab"
	"holdfast/internal/testwait"
)

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 30 * time.Second}

func postForm(t *testing.T, u string, form url.Values, user, pass string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func getLabStatus(t *testing.T, base string) console.LabStatus {
	t.Helper()
	var s console.LabStatus
	if err := json.Unmarshal([]byte(httpGet(base+"/lab/status")), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func awaitLabIdle(t *testing.T, base string, within time.Duration, logs fmt.Stringer) console.LabStatus {
	t.Helper()
	var s console.LabStatus
	if !testwait.Poll(within, func() bool { s = getLabStatus(t, base); return !s.Running }) {
		t.Fatalf("the lab run is still going after %s: %+v\nbroker logs:\n%s", within, s, logs)
	}
	return s
}

// labRowsShown checks that the lab page shows every row of res with its
// numbers, in the table and in the chart.
func labRowsShown(t *testing.T, page string, res lab.Result) {
	t.Helper()
	for _, r := range res.Rows {
		esc := template.HTMLEscapeString
		lost, dup := "", ""
		if r.Lost > 0 {
			lost = " bad"
		}
		if r.Dup > 0 {
			dup = " warn"
		}
		row := fmt.Sprintf(`<td>%s</td><td>%s</td><td class="n acked">%d</td><td class="n lost%s">%d</td><td class="n dup%s">%d</td>`,
			r.Profile, esc(r.Setting), r.Acked, lost, r.Lost, dup, r.Dup)
		if !strings.Contains(page, row) {
			t.Errorf("%s / %s: the page has no %s:\n%s", r.Scenario, r.Setting, row, page)
		}
		var bar string
		switch {
		case r.Lost > 0 && r.Dup == 0:
			bar = fmt.Sprintf("%d lost of %d", r.Lost, r.Acked)
		case r.Dup > 0 && r.Lost == 0:
			bar = fmt.Sprintf("%d duplicated of %d", r.Dup, r.Acked)
		case r.Lost == 0 && r.Dup == 0:
			bar = fmt.Sprintf("0 lost, 0 duplicated of %d", r.Acked)
		}
		if !strings.Contains(page, bar) || !strings.Contains(page, esc(r.Fault)) || !strings.Contains(page, esc(r.Takeaway)) {
			t.Errorf("%s / %s: the page lacks its chart text %q, fault or takeaway", r.Scenario, r.Setting, bar)
		}
		for i, ev := range r.Events {
			class := "ev"
			if ev.Fault {
				class = "ev fault"
			}
			if w := fmt.Sprintf(`<span class="%s">%d. %.2f s %s</span>`, class, i+1, ev.At, esc(ev.What)); !strings.Contains(page, w) {
				t.Errorf("%s / %s: the page's timeline has no %s", r.Scenario, r.Setting, w)
			}
		}
	}
}

// TestConsoleLab: a lab run started through a real serve process's console
// (one scenario, the smallest size: the lab runs as the serve process's
// child), a second start refused while it runs, the page showing the rows
// of the run's JSON; a `holdfast lab --json` file loaded; the results
// still there after a restart; and the chart as Chromium draws it.
func TestConsoleLab(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the lab")
	}
	dir, tmp := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp) // where the serve process's lab runs go
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	web := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startProc(t, dir, addr, "--listen", addr, "--metrics-listen", web)
	base := "http://" + web

	// Meanwhile, the CLI runs another scenario: the file to load.
	cliOut := make(chan []byte, 1)
	go func() {
		cmd := exec.Command(binary, "lab", "--scenario", "lost-ack", "--records", "100", "--json", "--dir", t.TempDir())
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("holdfast lab: %v", err)
		}
		cliOut <- out
	}()

	if code, body := postForm(t, base+"/lab/run", url.Values{"records": {"100"}, "scenario": {"acks0-drop"}}, "", ""); code != http.StatusSeeOther {
		t.Fatalf("starting a run: %d %s", code, body)
	}
	if code, body := postForm(t, base+"/lab/run", url.Values{"records": {"100"}}, "", ""); code != http.StatusConflict || !strings.Contains(body, "already going") {
		t.Errorf("a second run while one goes: %d %s", code, body)
	}
	s := awaitLabIdle(t, base, 3*time.Minute, p.logs)
	if s.Ended != "" || s.Results == nil || s.Results.Source != "run" || s.Results.Rows != 2 {
		t.Fatalf("after the run: %+v\nbroker logs:\n%s", s, p.logs)
	}
	var res lab.Result
	if err := json.Unmarshal([]byte(httpGet(base+"/lab/results.json")), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 || res.Records != 100 || res.Started.IsZero() {
		t.Fatalf("the run's JSON: %+v", res)
	}
	for _, r := range res.Rows {
		if r.Scenario != "acks0-drop" || r.Acked != 100 || !r.Injected {
			t.Errorf("row %+v", r)
		}
		// Its timeline: the two faults, and the acknowledgements rising
		// to what was acknowledged.
		var faults []string
		for _, ev := range r.Events {
			if ev.Fault {
				faults = append(faults, ev.What)
			}
		}
		if len(faults) != 2 || len(r.Acks) < 2 || r.Acks[len(r.Acks)-1].Acked != int64(r.Acked) {
			t.Errorf("%s timeline: faults %q, %d points, last %+v", r.Setting, faults, len(r.Acks), r.Acks[len(r.Acks)-1:])
		}
	}
	page := httpGet(base + "/lab")
	labRowsShown(t, page, res)
	if want := map[bool]string{true: `<b id="lab-verdict">OK</b>`, false: `<b id="lab-verdict">FAILED</b>`}[res.OK]; !strings.Contains(page, want) {
		t.Errorf("the page has no %s", want)
	}
	if !strings.Contains(page, "Run from node 1's console by anonymous from 127.0.0.1") {
		t.Errorf("the page does not say who ran it:\n%s", page)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("the lab run left %v in its temporary directory", left)
	}

	// A file from holdfast lab --json, loaded as a browser's form sends it.
	out := <-cliOut
	var file lab.Result
	if err := json.Unmarshal(out, &file); err != nil {
		t.Fatalf("holdfast lab --json: %v\n%s", err, out)
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", "lab.json")
	fw.Write(out)
	mw.Close()
	req, _ := http.NewRequest("POST", base+"/lab/results", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("loading lab.json: %s", resp.Status)
	}
	page = httpGet(base + "/lab")
	labRowsShown(t, page, file)
	if !strings.Contains(page, "Loaded from lab.json by anonymous from 127.0.0.1") || strings.Contains(page, `data-scenario="acks0-drop"`) {
		t.Errorf("the page after loading lab.json:\n%s", page)
	}

	// Kept across a restart.
	p.kill()
	<-p.done
	startProc(t, dir, addr, "--listen", addr, "--metrics-listen", web)
	page = httpGet(base + "/lab")
	labRowsShown(t, page, file)

	// What a browser draws: a bar per row, lost in red, duplicates in amber.
	dom := dumpDOM(t, chromiumPath(t), base+"/lab", time.Second)
	for _, r := range file.Rows {
		class, rect := "ok", `<rect class="zero" `
		switch {
		case r.Error != "":
			class, rect = "err", ""
		case r.Lost > 0:
			class, rect = "loss", `<rect class="lost" x="\d+" y="\d+" width="[\d.]+"`
		case r.Dup > 0:
			class, rect = "dup", `<rect class="dup" x="[\d.]+" y="\d+" width="[\d.]+"`
		}
		mustMatch(t, "lab", dom, `<g class="bar `+class+map[bool]string{true: " holdfast", false: ""}[r.Default]+`" data-label="`+
			regexp.QuoteMeta(r.Profile+" · "+r.Setting)+`">[^\n]*?`+rect)
		if len(r.Acks) > 0 {
			mustMatch(t, "lab", dom, `<g class="lane`+map[bool]string{true: " holdfast", false: ""}[r.Default]+`" data-label="`+
				regexp.QuoteMeta(r.Profile+" · "+r.Setting)+`">[^\n]*?<polyline class="acked" points="[\d., ]+"`)
		}
	}
}
