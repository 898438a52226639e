package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Limits on a results file read by Decode: far above what a run writes
// (13 rows of a few KiB each), low enough that a file cannot make the
// console hold much.
const (
	MaxFileBytes = 1 << 20
	maxFileRows  = 64
	maxNameLen   = 200  // scenario, setting
	maxTextLen   = 4000 // fault, takeaway, verdict, error
	maxCount     = 1 << 40
	maxSeconds   = 24 * 3600 // a row's time
)

// Decode reads what `holdfast lab --json` printed. It checks the file is
// a lab result within the limits above, and judges its rows again from
// their counts and evidence (Result.Judge): the verdicts shown are this
// version's, not whatever the file says.
func Decode(r io.Reader) (Result, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return Result{}, err
	}
	if len(b) > MaxFileBytes {
		return Result{}, fmt.Errorf("larger than %d bytes: not the output of holdfast lab --json", MaxFileBytes)
	}
	var res Result
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&res); err != nil {
		return Result{}, fmt.Errorf("not the JSON of holdfast lab --json: %w", err)
	}
	if dec.More() {
		return Result{}, errors.New("more than one JSON value: want the output of one holdfast lab --json")
	}
	if err := res.check(); err != nil {
		return Result{}, err
	}
	res.Judge()
	return res, nil
}

func (res *Result) check() error {
	switch {
	case len(res.Rows) == 0:
		return errors.New("no rows: not the output of holdfast lab --json")
	case len(res.Rows) > maxFileRows:
		return fmt.Errorf("%d rows: at most %d", len(res.Rows), maxFileRows)
	case res.Records < 0 || res.Records > maxCount || res.Seconds < 0:
		return errors.New("records_per_row or seconds out of range")
	}
	seen := map[[2]string]bool{}
	for i, r := range res.Rows {
		at := fmt.Sprintf("row %d (%s / %s)", i+1, clip(r.Scenario), clip(r.Setting))
		for _, f := range []struct {
			name, v string
			max     int
		}{{"scenario", r.Scenario, maxNameLen}, {"setting", r.Setting, maxNameLen}} {
			if f.v == "" || len(f.v) > f.max {
				return fmt.Errorf("%s: %s must be 1..%d bytes", at, f.name, f.max)
			}
		}
		for _, v := range []string{r.Fault, r.Takeaway, r.Verdict, r.Error, r.Skipped} {
			if len(v) > maxTextLen {
				return fmt.Errorf("%s: a text over %d bytes", at, maxTextLen)
			}
		}
		switch r.Expect {
		case ExpectNothing, ExpectLoss, ExpectDuplicates, ExpectNotUploaded:
		default:
			return fmt.Errorf("%s: expect %q: want nothing, loss, duplicates or not-uploaded", at, clip(string(r.Expect)))
		}
		if r.Acked < 0 || r.Lost < 0 || r.Dup < 0 || r.Acked > maxCount || r.Lost > maxCount || r.Dup > maxCount || r.Seconds < 0 {
			return fmt.Errorf("%s: acked, lost, duplicated or seconds out of range", at)
		}
		if r.Lost > r.Acked {
			return fmt.Errorf("%s: %d lost of %d acknowledged", at, r.Lost, r.Acked)
		}
		if r.NotUploaded < 0 || r.NotUploaded > r.Acked {
			return fmt.Errorf("%s: %d not uploaded of %d acknowledged", at, r.NotUploaded, r.Acked)
		}
		if len(r.Events) > maxEvents || len(r.Acks) > maxPoints {
			return fmt.Errorf("%s: at most %d events and %d points", at, maxEvents, maxPoints)
		}
		for _, ev := range r.Events {
			if ev.At < 0 || ev.At > maxSeconds || ev.What == "" || len(ev.What) > maxNameLen {
				return fmt.Errorf("%s: an event at %v s of %d bytes: want 0..%d s and 1..%d bytes", at, ev.At, len(ev.What), maxSeconds, maxNameLen)
			}
		}
		for _, p := range r.Acks {
			if p.At < 0 || p.At > maxSeconds || p.Acked < 0 || p.Acked > maxCount {
				return fmt.Errorf("%s: an acknowledgement point out of range", at)
			}
		}
		k := [2]string{r.Scenario, r.Setting}
		if seen[k] {
			return fmt.Errorf("%s: twice in the file", at)
		}
		seen[k] = true
	}
	return nil
}

// clip shortens a value quoted in an error message.
func clip(s string) string {
	if len(s) <= 40 {
		return s
	}
	i := 40
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}
