// Package lab measures where a Kafka-style log loses or duplicates
// messages: each loss scenario of the classic analysis (producer acks,
// lost acknowledgements, the page cache, failover, consumer commits,
// replaced disks), once under Kafka's usual settings and once under
// Holdfast's defaults, on a local 3-node Holdfast cluster it starts in this
// process. Every row is counted by internal/verify: records produced with
// their own checksum and sequence, every acknowledgement kept, everything
// read back.
//
// A row under Holdfast's defaults passes when it lost and duplicated
// nothing. A row under Kafka's settings passes when it shows what the
// analysis says it can (a loss, or duplicates): one that shows nothing did
// not inject its fault, and says so instead of passing.
package lab

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"holdfast/internal/verify"
)

// Config is what Run runs.
type Config struct {
	// Records is the number of records each row produces (default 2000).
	Records int
	// Scenarios names the scenarios to run; empty: all.
	Scenarios []string
	// Dir is where the temporary directory goes ("": the system's).
	Dir string
	// Logger gets the brokers' logs (nil: discarded).
	Logger *slog.Logger
	// Progress, when set, is told what is happening (one short line at a
	// time).
	Progress func(line string)
	// Scenario, when set, is told when a scenario starts (rows nil) and
	// when it ends (its judged rows); i counts from 0 of n.
	Scenario func(i, n int, s Scenario, rows []Row)

	// noFault runs the scenarios without injecting their faults: for the
	// test that the lab notices.
	noFault bool
}

// Expectation is what a row must show to pass.
type Expectation string

const (
	ExpectNothing    Expectation = "nothing"    // no loss, no duplicate
	ExpectLoss       Expectation = "loss"       // acknowledged records lost
	ExpectDuplicates Expectation = "duplicates" // records delivered twice, none lost
	// ExpectNotUploaded: exactly the acknowledged records tiered storage
	// had not uploaded yet are lost (NotUploaded), none duplicated: a
	// restore from the object store after every disk is lost.
	ExpectNotUploaded Expectation = "not-uploaded"
)

// Row is one scenario under one setting.
type Row struct {
	Scenario string `json:"scenario"`
	Setting  string `json:"setting"`
	// Default: this row runs Holdfast's defaults (or, for consumers, the
	// way Holdfast recommends); it must lose and duplicate nothing.
	// Otherwise it runs Kafka's usual settings (or a common way of using
	// them) and must show what the analysis predicts.
	Default bool `json:"holdfast_default"`
	// Profile is "holdfast" for a Default row, "kafka" otherwise.
	Profile string      `json:"profile"`
	Expect  Expectation `json:"expect"`
	Acked   int         `json:"acked"`
	Lost    int         `json:"lost"`
	Dup     int         `json:"duplicated"`
	// NotUploaded: for ExpectNotUploaded, the acknowledged records the
	// remote log did not hold when the disks were lost.
	NotUploaded int `json:"not_uploaded,omitempty"`
	// Skipped says why the row could not run here (what it needs is not
	// installed); a skipped row passes, and says so.
	Skipped  string         `json:"skipped,omitempty"`
	Fault    string         `json:"fault"`    // what was injected, with the evidence it happened
	Injected bool           `json:"injected"` // the fault demonstrably happened
	Pass     bool           `json:"pass"`
	Verdict  string         `json:"verdict"`
	Takeaway string         `json:"takeaway"`
	Error    string         `json:"error,omitempty"`
	Report   *verify.Report `json:"report,omitempty"`
	Seconds  float64        `json:"seconds"`
	// Events are the faults injected and the scenario's steps, in order;
	// Acks the records acknowledged over the row's time (timeline.go).
	// Empty in files written before they were recorded.
	Events []Event `json:"events,omitempty"`
	Acks   []Point `json:"acks,omitempty"`

	tl *timeline // while the row runs
}

// mark records an event of the row now (a fault injected when fault).
func (r *Row) mark(what string, fault bool) { r.tl.mark(what, fault) }

// follow charts a producer run's acknowledgements over the row's time.
func (r *Row) follow(run interface{ Acked() int64 }) { r.tl.follow(run.Acked) }

// judge sets Profile, Pass and Verdict.
func (r *Row) judge() {
	r.Profile = "kafka"
	if r.Default {
		r.Profile = "holdfast"
	}
	switch {
	case r.Error != "":
		r.Pass, r.Verdict = false, "ERROR: "+r.Error
	case r.Skipped != "":
		r.Pass, r.Verdict = true, "SKIPPED: "+r.Skipped
	case !r.Injected:
		r.Pass, r.Verdict = false, "NOT SHOWN: the fault was not injected ("+r.Fault+")"
	case r.Acked == 0:
		r.Pass, r.Verdict = false, "NOT SHOWN: nothing was acknowledged"
	case r.Report != nil && r.Report.Corrupt+r.Report.BadAck+r.Report.OffsetConflict > 0:
		r.Pass, r.Verdict = false, "FAIL: "+r.Report.String()
	case r.Expect == ExpectNotUploaded && (r.Lost != r.NotUploaded || r.Dup > 0):
		r.Pass, r.Verdict = false, fmt.Sprintf("FAIL: %d lost (%d were not uploaded), %d duplicated", r.Lost, r.NotUploaded, r.Dup)
	case r.Expect == ExpectNotUploaded:
		r.Pass, r.Verdict = true, fmt.Sprintf("ok: lost exactly the %d records not uploaded yet, none that were", r.NotUploaded)
	case r.Expect == ExpectNothing && (r.Lost > 0 || r.Dup > 0):
		r.Pass, r.Verdict = false, fmt.Sprintf("FAIL: %d lost, %d duplicated", r.Lost, r.Dup)
	case r.Expect == ExpectNothing:
		r.Pass, r.Verdict = true, "ok: nothing lost or duplicated"
	case r.Expect == ExpectLoss && r.Lost == 0:
		r.Pass, r.Verdict = false, "NOT SHOWN: expected a loss, lost nothing: the fault did not bite"
	case r.Expect == ExpectLoss:
		r.Pass, r.Verdict = true, "shown: loss"
	case r.Expect == ExpectDuplicates && r.Dup == 0:
		r.Pass, r.Verdict = false, "NOT SHOWN: expected duplicates, got none: the fault did not bite"
	case r.Expect == ExpectDuplicates && r.Lost > 0:
		r.Pass, r.Verdict = false, fmt.Sprintf("FAIL: expected duplicates only, also lost %d", r.Lost)
	default:
		r.Pass, r.Verdict = true, "shown: duplicates"
	}
}

// Result is a lab run.
type Result struct {
	Rows    []Row   `json:"rows"`
	OK      bool    `json:"ok"`
	Records int     `json:"records_per_row"`
	Seconds float64 `json:"seconds"`
	// Started is when the run began (zero in files written before it was
	// recorded).
	Started time.Time `json:"started,omitzero"`
}

// Judge sets every row's profile, verdict and pass from its counts and
// evidence, and OK from the rows: what Run does, for results read back
// from a file (whose verdicts are not taken on trust).
func (res *Result) Judge() {
	res.OK = len(res.Rows) > 0
	for i := range res.Rows {
		res.Rows[i].judge()
		res.OK = res.OK && res.Rows[i].Pass
	}
}

// Scenario is one loss scenario of the classic analysis.
type Scenario struct {
	Name  string
	Title string
	run   func(ctx context.Context, e *env) []Row
}

// Scenarios lists every scenario, in the order the lab runs them.
func Scenarios() []Scenario { return scenarios }

// Run runs the scenarios cfg names (all by default), each on its own
// cluster in a temporary directory that is removed afterwards.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Records <= 0 {
		cfg.Records = 2000
	}
	var run []Scenario
	for _, name := range cfg.Scenarios {
		i := slices.IndexFunc(scenarios, func(s Scenario) bool { return s.Name == name })
		if i < 0 {
			var names []string
			for _, s := range scenarios {
				names = append(names, s.Name)
			}
			return Result{}, fmt.Errorf("no scenario %q; there are: %s", name, strings.Join(names, ", "))
		}
		run = append(run, scenarios[i])
	}
	if len(run) == 0 {
		run = scenarios
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	dir, err := os.MkdirTemp(cfg.Dir, "holdfast-lab-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	res := Result{OK: true, Records: cfg.Records, Started: start.UTC().Truncate(time.Millisecond)}
	for si, s := range run {
		e := &env{cfg: cfg, dir: filepath.Join(dir, s.Name), log: log.With("scenario", s.Name), n: cfg.Records, scenario: s.Name}
		e.progress("%s: %s", s.Name, s.Title)
		if cfg.Scenario != nil {
			cfg.Scenario(si, len(run), s, nil)
		}
		sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		rows := s.run(sctx, e)
		cancel()
		e.closeAll()
		for i := range rows {
			rows[i].Scenario = s.Name
			rows[i].judge()
			res.OK = res.OK && rows[i].Pass
			e.progress("%s / %s: acked %d, lost %d, duplicated %d: %s", s.Name, rows[i].Setting, rows[i].Acked, rows[i].Lost, rows[i].Dup, rows[i].Verdict)
		}
		res.Rows = append(res.Rows, rows...)
		if cfg.Scenario != nil {
			cfg.Scenario(si, len(run), s, slices.Clone(rows))
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// env is what a scenario runs with.
type env struct {
	cfg      Config
	dir      string
	log      *slog.Logger
	n        int
	scenario string

	mu       sync.Mutex
	clusters []*cluster
	nextDir  int
}

func (e *env) progress(format string, args ...any) {
	if e.cfg.Progress != nil {
		e.cfg.Progress(fmt.Sprintf(format, args...))
	}
}

// cluster starts a 3-node cluster in a new directory of the scenario's;
// it is stopped when the scenario ends.
func (e *env) cluster(ctx context.Context, o clusterOptions) (*cluster, error) {
	e.mu.Lock()
	e.nextDir++
	dir := filepath.Join(e.dir, fmt.Sprintf("cluster-%d", e.nextDir))
	e.mu.Unlock()
	if o.nodes == 0 {
		o.nodes = 3
	}
	c, err := startCluster(ctx, dir, e.log, o)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.clusters = append(e.clusters, c)
	e.mu.Unlock()
	return c, nil
}

func (e *env) closeAll() {
	for _, c := range e.clusters {
		c.close()
	}
	e.clusters = nil
}

// failed is a row that could not run.
func failed(r Row, err error) Row {
	r.Error = err.Error()
	return r
}
