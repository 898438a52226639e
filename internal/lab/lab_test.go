package lab

import (
	"context"
	"strings"
	"testing"
	"time"

	"holdfast/internal/verify"
)

// TestJudge: a row passes only when it shows what its profile promises,
// and says why not otherwise.
func TestJudge(t *testing.T) {
	for _, c := range []struct {
		row  Row
		pass bool
		want string
	}{
		{Row{Default: true, Expect: ExpectNothing, Injected: true, Acked: 10}, true, "ok"},
		{Row{Default: true, Expect: ExpectNothing, Injected: true, Acked: 10, Lost: 1}, false, "FAIL: 1 lost"},
		{Row{Default: true, Expect: ExpectNothing, Injected: true, Acked: 10, Dup: 2}, false, "FAIL: 0 lost, 2 duplicated"},
		{Row{Default: true, Expect: ExpectNothing, Injected: false, Acked: 10, Fault: "no cut"}, false, "NOT SHOWN: the fault was not injected (no cut)"},
		{Row{Default: true, Expect: ExpectNothing, Injected: true}, false, "NOT SHOWN: nothing was acknowledged"},
		{Row{Expect: ExpectLoss, Injected: true, Acked: 10, Lost: 3}, true, "shown: loss"},
		{Row{Expect: ExpectLoss, Injected: true, Acked: 10}, false, "NOT SHOWN: expected a loss"},
		{Row{Expect: ExpectLoss, Injected: false, Acked: 10, Lost: 3}, false, "NOT SHOWN: the fault was not injected"},
		{Row{Expect: ExpectDuplicates, Injected: true, Acked: 10, Dup: 3}, true, "shown: duplicates"},
		{Row{Expect: ExpectDuplicates, Injected: true, Acked: 10}, false, "NOT SHOWN: expected duplicates"},
		{Row{Expect: ExpectDuplicates, Injected: true, Acked: 10, Dup: 3, Lost: 1}, false, "FAIL: expected duplicates only"},
		{Row{Expect: ExpectLoss, Injected: true, Acked: 10, Lost: 3, Report: &verify.Report{Counts: verify.Counts{Corrupt: 1}}}, false, "FAIL: "},
		{Row{Default: true, Expect: ExpectNothing, Error: "timeout"}, false, "ERROR: timeout"},
		{Row{Default: true, Expect: ExpectNotUploaded, Injected: true, Acked: 10, Lost: 3, NotUploaded: 3}, true, "ok: lost exactly the 3"},
		{Row{Default: true, Expect: ExpectNotUploaded, Injected: true, Acked: 10, Lost: 4, NotUploaded: 3}, false, "FAIL: 4 lost (3 were not uploaded)"},
		{Row{Default: true, Expect: ExpectNotUploaded, Injected: true, Acked: 10, Lost: 3, NotUploaded: 3, Dup: 1}, false, "FAIL: 3 lost"},
		{Row{Default: true, Expect: ExpectNotUploaded, Acked: 10, Fault: "no fault"}, false, "NOT SHOWN"},
		{Row{Default: true, Expect: ExpectNotUploaded, Skipped: "versitygw is not installed"}, true, "SKIPPED: versitygw"},
	} {
		r := c.row
		r.judge()
		if r.Pass != c.pass || !strings.HasPrefix(r.Verdict, c.want) {
			t.Errorf("%+v: pass %v verdict %q, want %v %q", c.row, r.Pass, r.Verdict, c.pass, c.want)
		}
	}
}

// TestLabNoticesMissingFault runs the scenarios whose Kafka-settings rows
// must lose (acks=1 failover, page cache and power loss, commit before
// processing) without injecting their faults: no row may pass, and each
// must say that its fault was not shown rather than report a clean run.
func TestLabNoticesMissingFault(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several 3-node clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{Records: 300, Scenarios: []string{"acks1-failover", "power-loss", "consumer"}, noFault: true,
		Dir: t.TempDir(), Progress: func(l string) { t.Log(l) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || len(res.Rows) != 7 {
		t.Fatalf("lab without faults: ok=%v, %d rows", res.OK, len(res.Rows))
	}
	for _, r := range res.Rows {
		t.Logf("%s / %s: acked %d lost %d dup %d: %s", r.Scenario, r.Setting, r.Acked, r.Lost, r.Dup, r.Verdict)
		if r.Pass || !strings.HasPrefix(r.Verdict, "NOT SHOWN") {
			t.Errorf("%s / %s passed or failed for another reason without its fault: %s (%s)", r.Scenario, r.Setting, r.Verdict, r.Error)
		}
		for _, ev := range r.Events {
			if ev.Fault {
				t.Errorf("%s / %s: a fault on its timeline without a fault: %+v", r.Scenario, r.Setting, ev)
			}
		}
		if r.Error == "" && (r.Lost != 0 || r.Dup != 0) {
			t.Errorf("%s / %s: %d lost, %d duplicated without a fault", r.Scenario, r.Setting, r.Lost, r.Dup)
		}
	}
}

// TestDecode: a results file is read within its limits and judged again
// from its counts: a file cannot pass a row that lost records.
func TestDecode(t *testing.T) {
	good := `{"rows":[
	 {"scenario":"acks1-failover","setting":"acks=1","expect":"loss","acked":2000,"lost":699,"fault":"cut","injected":true,"pass":true},
	 {"scenario":"acks1-failover","setting":"acks=all","holdfast_default":true,"expect":"nothing","acked":2000,"lost":3,"fault":"cut","injected":true,"pass":true,"verdict":"ok"}],
	 "ok":true,"records_per_row":2000,"seconds":12}`
	res, err := Decode(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || !res.Rows[0].Pass || res.Rows[0].Profile != "kafka" || res.Rows[1].Pass || res.Rows[1].Verdict != "FAIL: 3 lost, 0 duplicated" || res.Rows[1].Profile != "holdfast" {
		t.Fatalf("judged again: %+v", res)
	}
	for _, c := range []struct{ in, want string }{
		{`{"rows":[]}`, "no rows"},
		{`{"run":"x","acked":3}`, "no rows"},
		{`[1,2]`, "not the JSON"},
		{`{"rows":[{"scenario":"a","setting":"b","expect":"loss","acked":1}]} {}`, "more than one"},
		{`{"rows":[{"scenario":"a","setting":"b","expect":"maybe","acked":1}]}`, `expect "maybe"`},
		{`{"rows":[{"scenario":"","setting":"b","expect":"loss","acked":1}]}`, "scenario must be"},
		{`{"rows":[{"scenario":"a","setting":"b","expect":"loss","acked":1,"lost":2}]}`, "2 lost of 1"},
		{`{"rows":[{"scenario":"a","setting":"b","expect":"loss","acked":-1}]}`, "out of range"},
		{`{"rows":[{"scenario":"a","setting":"b","expect":"loss"},{"scenario":"a","setting":"b","expect":"loss"}]}`, "twice"},
		{`{"rows":[{"scenario":"a","setting":"` + strings.Repeat("x", 300) + `","expect":"loss"}]}`, "setting must be"},
		{`{"rows":[` + strings.Repeat(`{"scenario":"a","setting":"b","expect":"loss"},`, 70) + `{}]}`, "rows: at most"},
		{strings.Repeat(" ", MaxFileBytes+1), "larger than"},
		{`{"rows":[{"scenario":"a","setting":"b","expect":"loss","events":[{"at":-1,"what":"x"}]}]}`, "an event at -1 s"},
		{`{"rows":[{"scenario":"a","setting":"b","expect":"loss","events":[{"at":1,"what":""}]}]}`, "an event at 1 s of 0 bytes"},
		{`{"rows":[{"scenario":"a","setting":"b","expect":"loss","acks":[{"at":1,"acked":-5}]}]}`, "acknowledgement point out of range"},
		{`{"rows":[{"scenario":"a","setting":"b","expect":"loss","events":[` + strings.Repeat(`{"at":1,"what":"x"},`, maxEvents) + `{"at":1,"what":"x"}]}]}`, "at most 32 events"},
	} {
		if _, err := Decode(strings.NewReader(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.60s: %v, want %q", c.in, err, c.want)
		}
	}
}
