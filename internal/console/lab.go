package console

// The durability lab page: the results of `holdfast lab` as a chart, a run
// started from the console (one at a time, cancellable, progress while it
// runs), and `holdfast lab --json` files loaded in. The last results are
// kept in a file (the data directory's console/lab-results.json) so they
// survive a restart. Starting, cancelling and loading change state: they
// are POSTs, same-origin only, to a Host that is this console's, and when
// the cluster's clients authenticate, by a user allowed to (Config.Authorize).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"holdfast/internal/auth"
	"holdfast/internal/lab"
	"holdfast/internal/storage"
)

// Lab run sizes the console accepts (records per row): the smallest takes
// seconds per scenario; the largest about ten times `holdfast lab`'s
// default.
const (
	LabMinRecords     = 100
	LabMaxRecords     = 20000
	LabDefaultRecords = 500
	labProgressLines  = 12
	// LabScenarioLimit bounds a run started from the console: this much
	// per scenario, then it is cancelled.
	LabScenarioLimit = 4 * time.Minute
	labFileName      = "lab-results.json"
)

// labSizes are the sizes the page offers.
var labSizes = []struct {
	Records int
	Label   string
}{
	{LabDefaultRecords, "quick"},
	{2000, "holdfast lab's default"},
	{LabMaxRecords, "large"},
}

var (
	// ErrLoginRequired: the request carries no login, or a wrong one
	// (401).
	ErrLoginRequired = errors.New("log in with a Kafka user and password of this cluster")
	// ErrDenied: the user may not do this (403).
	ErrDenied = errors.New("not authorized")
)

// labRecord is what is kept: the results and where they came from.
type labRecord struct {
	Source string     `json:"source"` // "run" (started from a console) or "file" (loaded)
	By     string     `json:"by"`     // who started the run or loaded the file
	At     time.Time  `json:"at"`     // when the run ended or the file was loaded
	Node   int32      `json:"node"`   // whose console
	File   string     `json:"file,omitempty"`
	Result lab.Result `json:"result"`
}

// labRun is the run in progress.
type labRun struct {
	By          string
	Started     time.Time
	Records     int
	Scenarios   []string
	Current     string // scenario running now
	Title       string
	Index, Of   int
	Rows        []lab.Row // judged rows of the scenarios done
	Lines       []string  // the last progress lines
	CancelledBy string
	cancel      context.CancelFunc
	done        chan struct{}
}

// labState is the page's state: the run in progress, the results kept,
// and how the last run that did not finish ended.
type labState struct {
	mu    sync.Mutex
	run   *labRun
	last  *labRecord
	ended string
	// saveErr: the results could not be written to LabDir, or the kept
	// ones not read from it.
	saveErr string
}

func (c *Console) labPath() string {
	if c.cfg.LabDir == "" {
		return ""
	}
	return filepath.Join(c.cfg.LabDir, labFileName)
}

// loadLab reads the kept results, if any; a file that does not read is
// logged and left alone (the next results replace it).
func (c *Console) loadLab() {
	p := c.labPath()
	if p == "" {
		return
	}
	b, err := os.ReadFile(p)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			c.cfg.Logger.Warn("console: reading the kept lab results", "path", p, "err", err)
			c.lab.saveErr = fmt.Sprintf("the kept lab results in %s do not read: %v", p, err)
		}
		return
	}
	var raw struct {
		labRecord
		Result json.RawMessage `json:"result"`
	}
	err = json.Unmarshal(b, &raw)
	var res lab.Result
	if err == nil {
		res, err = lab.Decode(bytes.NewReader(raw.Result))
	}
	if err != nil {
		c.cfg.Logger.Warn("console: the kept lab results do not read; ignoring them", "path", p, "err", err)
		c.lab.saveErr = fmt.Sprintf("the kept lab results in %s do not read (%v): they are ignored, and the next results replace them", p, err)
		return
	}
	rec := raw.labRecord
	rec.Result = res
	c.lab.last = &rec
}

// keep makes rec the results shown and writes them to LabDir.
func (c *Console) keep(rec *labRecord) {
	c.lab.mu.Lock()
	c.lab.last = rec
	c.lab.saveErr = ""
	c.lab.mu.Unlock()
	c.save(rec)
}

// save writes rec where a restart finds it (keep has made it the last
// results already).
func (c *Console) save(rec *labRecord) {
	p := c.labPath()
	if p == "" {
		return
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err == nil {
		err = os.MkdirAll(filepath.Dir(p), 0o750)
	}
	if err == nil {
		_, err = storage.WriteFileAtomic(storage.OSFS(), p, b)
	}
	if err != nil {
		c.cfg.Logger.Error("console: keeping the lab results", "path", p, "err", err)
		c.lab.mu.Lock()
		c.lab.saveErr = fmt.Sprintf("these results are not kept across a restart: %v", err)
		c.lab.mu.Unlock()
	}
}

func (c *Console) labRunning() bool {
	c.lab.mu.Lock()
	defer c.lab.mu.Unlock()
	return c.lab.run != nil
}

// stopLab cancels a run in progress and waits for it to end (Close).
func (c *Console) stopLab() {
	c.lab.mu.Lock()
	r := c.lab.run
	if r != nil {
		r.CancelledBy = "this node's shutdown"
		r.cancel()
	}
	c.lab.mu.Unlock()
	if r != nil {
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			c.cfg.Logger.Warn("console: the lab run did not stop within a minute of its cancellation")
		}
	}
}

// --- actions ---

// action guards a state-changing request: a POST from this console's own
// pages (http.CrossOriginProtection: browsers say where a request comes
// from), to a Host that names this console (a DNS-rebinding page cannot),
// and, when the console asks who users are, from a user allowed to ALTER
// the CLUSTER.
func (c *Console) action(h func(w http.ResponseWriter, r *http.Request, who string)) http.Handler {
	return c.cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.cfg.LabRun == nil {
			c.labFail(w, r, http.StatusForbidden, "the console's lab actions are turned off (holdfast serve --console-lab=false)")
			return
		}
		if !c.hostAllowed(r.Host) {
			c.labFail(w, r, http.StatusForbidden, fmt.Sprintf("Host %q is not a name of this console: state changes are accepted for IP addresses, localhost and this machine's names", r.Host))
			return
		}
		from := remoteIP(r)
		who := "anonymous from " + from
		if id, ok := userOf(r); ok {
			// The gate let in a logged-in user with the session's CSRF
			// token; the lab is the cluster's administrators'.
			if !c.allowed(r, auth.OpAlter, auth.ResourceCluster, auth.ClusterName) {
				c.labFail(w, r, http.StatusForbidden, fmt.Sprintf("%v: %s may not ALTER the CLUSTER (CLUSTER_AUTHORIZATION_FAILED): a super user or an ACL is needed", ErrDenied, id.principal))
				return
			}
			who = id.principal.String() + " from " + from
		}
		h(w, r, who)
	}))
}

func remoteIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// hostAllowed: an IP address, localhost, or a name given in ActionHosts.
func (c *Console) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host == "" {
		return false
	}
	if net.ParseIP(host) != nil || strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	return slices.ContainsFunc(c.cfg.ActionHosts, func(h string) bool { return strings.EqualFold(h, host) })
}

// labFail answers a refused action: the lab page with the reason for a
// browser, the reason as text for anything else.
func (c *Console) labFail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if !strings.Contains(r.Header.Get("Accept"), "text/html") {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		fmt.Fprintln(w, msg)
		return
	}
	c.render(w, r, "lab", c.labView(r), errors.New(msg), status)
}

func (c *Console) seeLab(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/lab", http.StatusSeeOther)
}

// startLab: POST /lab/run, records=N and scenario=NAME (repeated; none:
// all).
func (c *Console) startLab(w http.ResponseWriter, r *http.Request, who string) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		c.labFail(w, r, http.StatusBadRequest, "the form does not read: "+err.Error())
		return
	}
	records := LabDefaultRecords
	if v := r.PostForm.Get("records"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < LabMinRecords || n > LabMaxRecords {
			c.labFail(w, r, http.StatusBadRequest, fmt.Sprintf("records %q: want %d..%d records per row", v, LabMinRecords, LabMaxRecords))
			return
		}
		records = n
	}
	var names []string
	for _, s := range r.PostForm["scenario"] {
		if !slices.ContainsFunc(lab.Scenarios(), func(x lab.Scenario) bool { return x.Name == s }) {
			c.labFail(w, r, http.StatusBadRequest, fmt.Sprintf("scenario %q: not a scenario of the lab", s))
			return
		}
		if !slices.Contains(names, s) {
			names = append(names, s)
		}
	}
	if len(names) == 0 {
		for _, s := range lab.Scenarios() {
			names = append(names, s.Name)
		}
	}
	c.lab.mu.Lock()
	if cur := c.lab.run; cur != nil {
		c.lab.mu.Unlock()
		c.labFail(w, r, http.StatusConflict, fmt.Sprintf("a lab run is already going (started by %s at %s): one at a time; wait for it or cancel it", cur.By, cur.Started.UTC().Format(time.TimeOnly)))
		return
	}
	// Bounded: the lab gives each scenario 3 minutes; past this the run
	// is cancelled as if by a user.
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(names))*LabScenarioLimit)
	run := &labRun{By: who, Started: time.Now(), Records: records, Scenarios: names, Of: len(names), cancel: cancel, done: make(chan struct{})}
	c.lab.run, c.lab.ended = run, ""
	c.lab.mu.Unlock()
	c.cfg.Logger.Info("console: lab run started", "by", who, "records_per_row", records, "scenarios", strings.Join(names, ","))
	go c.runLab(ctx, run)
	c.seeLab(w, r)
}

func (c *Console) runLab(ctx context.Context, run *labRun) {
	defer close(run.done)
	defer run.cancel()
	cfg := lab.Config{Records: run.Records, Scenarios: run.Scenarios,
		Progress: func(line string) {
			c.lab.mu.Lock()
			run.Lines = append(run.Lines, line)
			if len(run.Lines) > labProgressLines {
				run.Lines = slices.Delete(run.Lines, 0, len(run.Lines)-labProgressLines)
			}
			c.lab.mu.Unlock()
		},
		Scenario: func(i, n int, s lab.Scenario, rows []lab.Row) {
			c.lab.mu.Lock()
			defer c.lab.mu.Unlock()
			if rows == nil {
				run.Current, run.Title, run.Index, run.Of = s.Name, s.Title, i, n
				return
			}
			run.Rows = append(run.Rows, rows...)
		},
	}
	res, err := c.cfg.LabRun(ctx, cfg)
	now := time.Now()
	var rec *labRecord
	if err == nil {
		rec = &labRecord{Source: "run", By: run.By, At: now.UTC(), Node: c.cfg.Broker.Config().NodeID, Result: res}
	}
	c.lab.mu.Lock()
	// The run's end and its results in one step: a status read between
	// them saw neither a run nor results (TestConsoleLab, a CI rehearsal).
	c.lab.run = nil
	if rec != nil {
		c.lab.last, c.lab.saveErr = rec, ""
	}
	switch {
	case err != nil && run.CancelledBy == "" && errors.Is(ctx.Err(), context.DeadlineExceeded):
		c.lab.ended = fmt.Sprintf("The run started by %s at %s was stopped after %s: over its limit of %s per scenario. The results below are from before it.",
			run.By, run.Started.UTC().Format(time.TimeOnly), now.Sub(run.Started).Round(time.Second), LabScenarioLimit)
	case err != nil && run.CancelledBy != "":
		c.lab.ended = fmt.Sprintf("The run started by %s at %s was cancelled by %s after %s; the results below are from before it.",
			run.By, run.Started.UTC().Format(time.TimeOnly), run.CancelledBy, now.Sub(run.Started).Round(time.Second))
	case err != nil:
		c.lab.ended = fmt.Sprintf("The run started by %s at %s failed after %s: %v. The results below are from before it.",
			run.By, run.Started.UTC().Format(time.TimeOnly), now.Sub(run.Started).Round(time.Second), err)
	}
	c.lab.mu.Unlock()
	if err != nil {
		c.cfg.Logger.Warn("console: lab run ended without results", "by", run.By, "cancelled_by", run.CancelledBy, "err", err)
		return
	}
	c.cfg.Logger.Info("console: lab run done", "by", run.By, "ok", res.OK, "rows", len(res.Rows), "seconds", int(res.Seconds))
	c.save(rec)
}

// cancelLab: POST /lab/cancel.
func (c *Console) cancelLab(w http.ResponseWriter, r *http.Request, who string) {
	c.lab.mu.Lock()
	run := c.lab.run
	if run != nil && run.CancelledBy == "" {
		run.CancelledBy = who
		run.cancel()
	}
	c.lab.mu.Unlock()
	if run == nil {
		c.labFail(w, r, http.StatusConflict, "no lab run is going")
		return
	}
	c.cfg.Logger.Info("console: lab run cancelled", "by", who, "started_by", run.By)
	c.seeLab(w, r)
}

// loadLab: POST /lab/results, the output of `holdfast lab --json` as a
// form's file (field "file") or as the body (Content-Type
// application/json).
func (c *Console) loadResults(w http.ResponseWriter, r *http.Request, who string) {
	if c.labRunning() {
		c.labFail(w, r, http.StatusConflict, "a lab run is going: its results will replace what is shown; load the file after it")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, lab.MaxFileBytes+64<<10)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var (
		res  lab.Result
		name string
		err  error
	)
	switch ct {
	case "application/json":
		res, err = lab.Decode(r.Body)
	case "multipart/form-data":
		f, fh, ferr := r.FormFile("file")
		if ferr != nil {
			c.labFail(w, r, http.StatusBadRequest, "no file: choose the output of holdfast lab --json ("+ferr.Error()+")")
			return
		}
		defer f.Close()
		name = fh.Filename
		res, err = lab.Decode(f)
	default:
		c.labFail(w, r, http.StatusUnsupportedMediaType, "send the output of holdfast lab --json as application/json or as a form's file")
		return
	}
	if err != nil {
		c.labFail(w, r, http.StatusBadRequest, "the file does not read as holdfast lab --json output: "+err.Error())
		return
	}
	if len(name) > 200 {
		name = name[:200]
	}
	c.cfg.Logger.Info("console: lab results loaded", "by", who, "file", name, "rows", len(res.Rows))
	c.keep(&labRecord{Source: "file", By: who, At: time.Now().UTC(), Node: c.cfg.Broker.Config().NodeID, File: name, Result: res})
	c.seeLab(w, r)
}

// --- reads ---

// labJSON: GET /lab/results.json, the kept results as `holdfast lab
// --json` prints them.
func (c *Console) labJSON(w http.ResponseWriter, _ *http.Request) {
	c.lab.mu.Lock()
	last := c.lab.last
	c.lab.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	if last == nil {
		http.Error(w, "no lab results yet", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(last.Result)
}

// LabStatus is GET /lab/status: what the page shows, for scripts.
type LabStatus struct {
	Running   bool      `json:"running"`
	By        string    `json:"by,omitempty"`
	Started   time.Time `json:"started,omitzero"`
	Records   int       `json:"records_per_row,omitempty"`
	Scenarios []string  `json:"scenarios,omitempty"`
	Current   string    `json:"current,omitempty"`
	Index     int       `json:"index,omitempty"`
	Of        int       `json:"of,omitempty"`
	RowsDone  int       `json:"rows_done,omitempty"`
	Lines     []string  `json:"lines,omitempty"`
	// Ended says how the last run that left no results ended.
	Ended string `json:"ended,omitempty"`
	// Results: the kept results' source, author, time and verdict.
	Results *LabResultsInfo `json:"results,omitempty"`
}

// LabResultsInfo describes the kept results.
type LabResultsInfo struct {
	Source string    `json:"source"`
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	File   string    `json:"file,omitempty"`
	OK     bool      `json:"ok"`
	Rows   int       `json:"rows"`
}

func (c *Console) labStatus() LabStatus {
	c.lab.mu.Lock()
	defer c.lab.mu.Unlock()
	var s LabStatus
	if r := c.lab.run; r != nil {
		s = LabStatus{Running: true, By: r.By, Started: r.Started.UTC(), Records: r.Records, Scenarios: slices.Clone(r.Scenarios),
			Current: r.Current, Index: r.Index, Of: r.Of, RowsDone: len(r.Rows), Lines: slices.Clone(r.Lines)}
	}
	s.Ended = c.lab.ended
	if l := c.lab.last; l != nil {
		s.Results = &LabResultsInfo{Source: l.Source, By: l.By, At: l.At, File: l.File, OK: l.Result.OK, Rows: len(l.Result.Rows)}
	}
	return s
}

func (c *Console) labStatusJSON(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(c.labStatus())
}

// --- the page ---

type labView struct {
	Actions   bool   // runs can be started here
	Login     bool   // the console asks who users are
	CSRF      string // the session's token, for the forms
	TempDir   string // where runs put their clusters
	Scenarios []lab.Scenario
	Sizes     []labSize
	Min, Max  int
	Run       *labRunView
	Ended     string
	SaveErr   string
	Results   *labResultsView
}

type labSize struct {
	Records int
	Label   string
	On      bool
}

type labRunView struct {
	LabStatus
	Title   string
	Elapsed time.Duration
	Step    int // Index+1
	Chart   labChart
}

type labResultsView struct {
	labRecord
	Failed int
	Chart  labChart
	Groups []labGroup
}

// labGroup is one scenario's rows, Kafka's settings first.
type labGroup struct {
	Name, Title string
	Rows        []labRow
	Timeline    *labTimeline // nil: the rows recorded none (older files)
}

type labRow struct {
	lab.Row
	Class string // ok, bad: the verdict's colour
	Word  string // the verdict's first word: ok, shown, NOT SHOWN, FAIL, ERROR
}

func verdictWord(r lab.Row) (word, class string) {
	word = r.Verdict
	if i := strings.Index(word, ":"); i > 0 {
		word = word[:i]
	}
	if r.Pass {
		return word, "ok"
	}
	return word, "bad"
}

func (c *Console) labPage(_ context.Context, r *http.Request) (any, error) {
	return c.labView(r), nil
}

func (c *Console) labView(r *http.Request) labView {
	st := c.labStatus()
	id, login := userOf(r)
	v := labView{Actions: c.cfg.LabRun != nil, Login: login, CSRF: id.csrf, TempDir: os.TempDir(), Scenarios: lab.Scenarios(),
		Min: LabMinRecords, Max: LabMaxRecords, Ended: st.Ended}
	if c.cfg.LabTempDir != "" {
		v.TempDir = c.cfg.LabTempDir
	}
	for _, s := range labSizes {
		v.Sizes = append(v.Sizes, labSize{s.Records, s.Label, s.Records == LabDefaultRecords})
	}
	c.lab.mu.Lock()
	last, run, saveErr := c.lab.last, c.lab.run, c.lab.saveErr
	var done []lab.Row
	if run != nil {
		done = slices.Clone(run.Rows)
	}
	c.lab.mu.Unlock()
	v.SaveErr = saveErr
	if run != nil {
		v.Run = &labRunView{LabStatus: st, Title: run.Title, Elapsed: time.Since(run.Started), Step: st.Index + 1, Chart: chartRows(done)}
	}
	if last != nil {
		rv := &labResultsView{labRecord: *last, Chart: chartRows(last.Result.Rows), Groups: groupRows(last.Result.Rows)}
		for _, r := range last.Result.Rows {
			if !r.Pass {
				rv.Failed++
			}
		}
		v.Results = rv
	}
	return v
}

// groupRows puts rows under their scenario, in the lab's order, each
// scenario's Kafka rows before Holdfast's.
func groupRows(rows []lab.Row) []labGroup {
	var gs []labGroup
	for _, r := range rows {
		i := slices.IndexFunc(gs, func(g labGroup) bool { return g.Name == r.Scenario })
		if i < 0 {
			gs = append(gs, labGroup{Name: r.Scenario, Title: scenarioTitle(r.Scenario)})
			i = len(gs) - 1
		}
		word, class := verdictWord(r)
		gs[i].Rows = append(gs[i].Rows, labRow{Row: r, Word: word, Class: class})
	}
	for i := range gs {
		slices.SortStableFunc(gs[i].Rows, func(a, b labRow) int { return boolInt(a.Default) - boolInt(b.Default) })
		gs[i].Timeline = timelineChart(gs[i].Rows)
	}
	return gs
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func scenarioTitle(name string) string {
	for _, s := range lab.Scenarios() {
		if s.Name == name {
			return s.Title
		}
	}
	return ""
}

// --- the chart ---

// labChart is the overview: per scenario, one bar per row, lost (red)
// and duplicated (amber) as a share of what was acknowledged, Kafka's
// setting above Holdfast's default. Geometry is computed here; the
// template only places it (and escapes every text).
type labChart struct {
	Width, Height   int
	Left, Plot      int // label column, bar area
	Ticks           []labTick
	Groups          []labChartGroup
	AxisTop, AxisHi int
}

type labTick struct {
	X     float64
	Label string
}

type labChartGroup struct {
	Y     int
	Name  string
	Bars  []labBar
	Shade bool
	H     int
}

type labBar struct {
	Y              int
	Label          string // profile · setting
	LostW, DupW    float64
	DupX, TextX    float64
	Text           string
	Class          string // ok: nothing lost or duplicated; loss; dup
	Pass, Holdfast bool
	Zero           bool // measured: nothing lost or duplicated (a green mark, not an empty bar)
	Verdict        string
}

const (
	chartLeft  = 300
	chartPlot  = 440
	chartRight = 300
	barH       = 16
	barGap     = 6
	groupGap   = 14
)

func chartRows(rows []lab.Row) labChart {
	ch := labChart{Left: chartLeft, Plot: chartPlot, Width: chartLeft + chartPlot + chartRight}
	for _, p := range []int{0, 25, 50, 75, 100} {
		ch.Ticks = append(ch.Ticks, labTick{X: float64(chartLeft) + float64(p)/100*chartPlot, Label: strconv.Itoa(p) + "%"})
	}
	y := 24
	for i, g := range groupRows(rows) {
		grp := labChartGroup{Y: y, Name: g.Name, Shade: i%2 == 0}
		by := y + 18
		for _, r := range g.Rows {
			b := labBar{Y: by, Label: r.Profile + " · " + r.Setting, Pass: r.Pass, Holdfast: r.Default, Class: "ok"}
			b.Verdict, _ = verdictWord(r.Row)
			if r.Acked > 0 {
				b.LostW = share(r.Lost, r.Acked)
				b.DupW = min(share(r.Dup, r.Acked), chartPlot-b.LostW)
			}
			b.DupX = chartLeft + b.LostW
			b.TextX = chartLeft + chartPlot + 10
			switch {
			case r.Error != "":
				b.Class, b.Text = "err", "error: no figures"
			case r.Lost > 0 && r.Dup > 0:
				b.Class, b.Text = "loss", fmt.Sprintf("%s lost, %s duplicated of %d", pct(r.Lost, r.Acked), pct(r.Dup, r.Acked), r.Acked)
			case r.Lost > 0:
				b.Class, b.Text = "loss", fmt.Sprintf("%d lost of %d (%s)", r.Lost, r.Acked, pct(r.Lost, r.Acked))
			case r.Dup > 0:
				b.Class, b.Text = "dup", fmt.Sprintf("%d duplicated of %d (%s)", r.Dup, r.Acked, pct(r.Dup, r.Acked))
			default:
				b.Zero = r.Acked > 0
				b.Text = fmt.Sprintf("0 lost, 0 duplicated of %d", r.Acked)
			}
			grp.Bars = append(grp.Bars, b)
			by += barH + barGap
		}
		grp.H = by - y + 2
		ch.Groups = append(ch.Groups, grp)
		y = by + groupGap
	}
	ch.Height = y + 10
	ch.AxisTop, ch.AxisHi = 18, y-groupGap+4
	return ch
}

// share is n/of of the bar area, at least 2 px when n > 0 (a loss must
// show).
func share(n, of int) float64 {
	if n <= 0 {
		return 0
	}
	return max(2, min(float64(chartPlot), float64(n)/float64(of)*chartPlot))
}

func pct(n, of int) string {
	p := float64(n) / float64(of) * 100
	switch {
	case p >= 10:
		return fmt.Sprintf("%.0f%%", p)
	case p >= 1:
		return fmt.Sprintf("%.1f%%", p)
	}
	return fmt.Sprintf("%.2f%%", p)
}

// --- the timeline ---

// labTimeline is one scenario's rows over time: per row a lane with the
// records acknowledged so far (a line rising to the row's total) and its
// events as vertical marks, faults in red, numbered as in the list under
// the chart. One time axis for the scenario's rows.
type labTimeline struct {
	Width, Height int
	Left, Plot    int
	Ticks         []labTick
	Lanes         []labLane
	AxisY         int
}

type labLane struct {
	Y, H      int // the plot area's top and height
	Label     string
	Holdfast  bool
	Points    string // polyline points
	MaxAcked  int64
	Events    []labMark
	NoSamples bool
}

type labMark struct {
	N     int // 1-based, as in the list
	X     float64
	Y1    int // the mark's top
	Y2    int
	TextY int // its number's baseline: raised when marks crowd
	At    float64
	What  string
	Fault bool
}

const (
	tlLeft  = 230
	tlPlot  = 770
	tlRight = 40
	laneH   = 54
	laneGap = 34
)

func timelineChart(rows []labRow) *labTimeline {
	var end float64
	recorded := false
	for _, r := range rows {
		if len(r.Events) > 0 || len(r.Acks) > 0 {
			recorded = true
		}
		end = max(end, r.Seconds)
		for _, e := range r.Events {
			end = max(end, e.At)
		}
		for _, p := range r.Acks {
			end = max(end, p.At)
		}
	}
	if !recorded || end <= 0 {
		return nil
	}
	step := niceStep(end / 6)
	tl := &labTimeline{Left: tlLeft, Plot: tlPlot, Width: tlLeft + tlPlot + tlRight}
	x := func(at float64) float64 { return tlLeft + at/end*tlPlot }
	y := 26
	for _, r := range rows {
		ln := labLane{Y: y, H: laneH, Label: r.Profile + " · " + r.Setting, Holdfast: r.Default}
		for _, p := range r.Acks {
			ln.MaxAcked = max(ln.MaxAcked, p.Acked)
		}
		var pts strings.Builder
		for _, p := range r.Acks {
			py := float64(y + laneH)
			if ln.MaxAcked > 0 {
				py -= float64(p.Acked) / float64(ln.MaxAcked) * laneH
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(p.At), py)
		}
		ln.Points = strings.TrimSpace(pts.String())
		ln.NoSamples = len(r.Acks) == 0
		lastX, level := -100.0, 0
		for i, e := range r.Events {
			mx := x(e.At)
			if mx-lastX < 12 && level < 2 {
				level++
			} else {
				level = 0
			}
			lastX = mx
			ln.Events = append(ln.Events, labMark{N: i + 1, X: mx, Y1: y - 2, Y2: y + laneH, TextY: y - 4 - 9*level, At: e.At, What: e.What, Fault: e.Fault})
		}
		tl.Lanes = append(tl.Lanes, ln)
		y += laneH + laneGap
	}
	tl.AxisY = y - laneGap + 4
	for i := 0; float64(i)*step <= end; i++ {
		t := float64(i) * step
		tl.Ticks = append(tl.Ticks, labTick{X: x(t), Label: strconv.FormatFloat(t, 'g', 4, 64) + " s"})
	}
	tl.Height = tl.AxisY + 18
	return tl
}

// niceStep is 1, 2 or 5 times a power of ten, at least d.
func niceStep(d float64) float64 {
	if d <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(d)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= d {
			return m * p
		}
	}
	return 10 * p
}
