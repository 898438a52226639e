package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"holdfast/internal/lab"
)

func init() { addCommand(newLabCmd) }

func newLabCmd() *cobra.Command {
	var (
		scenarios []string
		records   int
		jsonOut   bool
		list      bool
		logLevel  string
		dir       string
		events    bool
	)
	c := &cobra.Command{
		Use:   "lab",
		Short: "Measure where messages get lost: the classic loss scenarios, under Kafka's settings and Holdfast's defaults",
		Long: `Start a local 3-node Holdfast cluster in this process (in a temporary
directory, removed afterwards) and run each loss scenario of the classic
analysis twice: under Kafka's usual settings and under Holdfast's defaults.
Every record carries its producer, sequence and checksum; every
acknowledgement is kept; everything is read back and counted (as
'holdfast verify' does).

Scenarios:
` + scenarioList() + `
It prints one table: scenario, profile (kafka: Kafka's usual settings;
holdfast: Holdfast's defaults, or for consumers the way it recommends),
setting, acknowledged, lost, duplicated, the verdict and what to take
from it; then what each fault was, with the
evidence that it happened. A row under Kafka's settings must show the loss
or duplicates the analysis predicts: if it shows none, its fault did not
bite and the row says NOT SHOWN. Faults between nodes use the Raft
transport's fault seam, faults between client and broker a connection
wrapper, the power loss the storage layer's CrashFS: no root, no network
namespaces, nothing outside this process.

Exit codes: 0 every row under Holdfast's defaults lost and duplicated
nothing and every other row showed what it should; 1 otherwise; 2 bad
command line.`,
		Example: `  holdfast lab
  holdfast lab --scenario power-loss
  holdfast lab --records 20000 --json > lab.json`,
		Args: noArgs,
	}
	f := c.Flags()
	f.StringSliceVar(&scenarios, "scenario", nil, "run only this scenario (repeat or comma-separate for several)")
	f.IntVar(&records, "records", 2000, "records per row (100..1000000); the default takes about a minute in all")
	f.BoolVar(&jsonOut, "json", false, "print the rows as JSON")
	f.BoolVar(&list, "list", false, "list the scenarios and exit")
	f.StringVar(&logLevel, "log-level", "", "show the brokers' logs at this level (debug, info, warn, error); default none")
	f.StringVar(&dir, "dir", "", "where to make the temporary directory (default: the system's)")
	// For the web console, which runs the lab as a child process and
	// follows it: progress as JSON lines on stderr.
	f.BoolVar(&events, "events", false, "progress as JSON lines on stderr (for the web console)")
	f.MarkHidden("events")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
		if list {
			fmt.Fprint(out, scenarioList())
			return nil
		}
		if records < 100 || records > 1_000_000 {
			return usagef("--records %d: want 100..1000000", records)
		}
		known := map[string]bool{}
		for _, s := range lab.Scenarios() {
			known[s.Name] = true
		}
		for _, s := range scenarios {
			if !known[s] {
				return usagef("--scenario %q: not a scenario; 'holdfast lab --list' lists them", s)
			}
		}
		cfg := lab.Config{Records: records, Scenarios: scenarios, Dir: dir}
		if logLevel != "" {
			lg, err := newLogger(logLevel, "text")
			if err != nil {
				return usageError{err}
			}
			cfg.Logger = lg
		}
		cfg.Progress = func(line string) { fmt.Fprintln(errw, "lab:", line) }
		if events {
			enc := json.NewEncoder(errw)
			cfg.Progress = func(line string) { enc.Encode(labEvent{Line: line}) }
			cfg.Scenario = func(i, n int, s lab.Scenario, rows []lab.Row) {
				enc.Encode(labEvent{Scenario: s.Name, Index: i, Of: n, Done: rows != nil, Rows: rows})
			}
		}
		ctx, stop := signalContext()
		defer stop()
		res, err := lab.Run(ctx, cfg)
		if err != nil {
			return err
		}
		if jsonOut {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			if err := enc.Encode(res); err != nil {
				return err
			}
		} else if err := printLab(out, res); err != nil {
			return err
		}
		if !res.OK {
			var bad []string
			for _, r := range res.Rows {
				if !r.Pass {
					bad = append(bad, r.Scenario+" / "+r.Setting+": "+r.Verdict)
				}
			}
			return fmt.Errorf("lab failed:\n  %s", strings.Join(bad, "\n  "))
		}
		return nil
	}
	return c
}

// labEvent is one line of `holdfast lab --events`: a progress line, or a
// scenario starting or done (with its rows).
type labEvent struct {
	Line     string    `json:"line,omitempty"`
	Scenario string    `json:"scenario,omitempty"`
	Index    int       `json:"index,omitempty"`
	Of       int       `json:"of,omitempty"`
	Done     bool      `json:"done,omitempty"`
	Rows     []lab.Row `json:"rows,omitempty"`
}

func scenarioList() string {
	var b strings.Builder
	for _, s := range lab.Scenarios() {
		fmt.Fprintf(&b, "  %-15s %s\n", s.Name, s.Title)
	}
	return b.String()
}

func printLab(out io.Writer, res lab.Result) error {
	w := tw(out)
	fmt.Fprintln(w, "SCENARIO\tPROFILE\tSETTING\tACKED\tLOST\tDUPLICATED\tRESULT\tWHAT TO TAKE FROM IT")
	for _, r := range res.Rows {
		verdict := r.Verdict
		if i := strings.Index(verdict, ":"); i > 0 && r.Pass {
			verdict = verdict[:i] // "ok" or "shown"; the counts say the rest
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", r.Scenario, r.Profile, r.Setting, r.Acked, r.Lost, r.Dup, verdict, r.Takeaway)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nWhat was injected (%d records per row, %.0f s in all):\n", res.Records, res.Seconds)
	for _, r := range res.Rows {
		fmt.Fprintf(out, "  %s / %s: %s\n", r.Scenario, r.Setting, r.Fault)
	}
	if res.OK {
		restore := ""
		if slices.ContainsFunc(res.Rows, func(r lab.Row) bool { return r.Expect == lab.ExpectNotUploaded && r.Skipped == "" }) {
			restore = " (the restore from the object store: nothing that was uploaded)"
		}
		fmt.Fprintf(out, "\nOK: under Holdfast's defaults nothing was lost or duplicated%s; every other row showed what the analysis predicts.\n", restore)
	} else {
		fmt.Fprintln(out, "\nFAILED: see the RESULT column.")
	}
	return nil
}
