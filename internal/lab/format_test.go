package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"holdfast/internal/storage"
)

// TestResultFileFormat: the JSON names of a result file, which the
// console and files from earlier runs rely on, stay what they are.
func TestResultFileFormat(t *testing.T) {
	res := Result{Records: 1, Seconds: 2, Started: time.Unix(0, 0).UTC(), Rows: []Row{{
		Scenario: "s", Setting: "x", Default: true, Expect: ExpectNothing, Acked: 1, Fault: "f", Injected: true,
		Takeaway: "t", Error: "e", Seconds: 1, Events: []Event{{At: 1, What: "w", Fault: true}}, Acks: []Point{{At: 1, Acked: 1}},
	}}}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(mapsKeys(top)); !slices.Equal(got, []string{"ok", "records_per_row", "rows", "seconds", "started"}) {
		t.Fatalf("result keys %v", got)
	}
	var rows []map[string]json.RawMessage
	if err := json.Unmarshal(top["rows"], &rows); err != nil {
		t.Fatal(err)
	}
	want := []string{"acked", "acks", "duplicated", "error", "events", "expect", "fault", "holdfast_default", "injected", "lost",
		"pass", "profile", "scenario", "seconds", "setting", "takeaway", "verdict"}
	if got := slices.Sorted(mapsKeys(rows[0])); !slices.Equal(got, want) {
		t.Fatalf("row keys %v, want %v", got, want)
	}
	// A zero Started is left out (files from before it was recorded).
	b, _ = json.Marshal(Result{Rows: res.Rows})
	if strings.Contains(string(b), `"started"`) {
		t.Fatalf("zero started written: %s", b)
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestDecodeTextLimits: every free text of a row is bounded, and a file
// with counts past the limits is refused, not judged.
func TestDecodeTextLimits(t *testing.T) {
	long := strings.Repeat("x", maxTextLen+1)
	row := func(extra string) string {
		return `{"rows":[{"scenario":"a","setting":"b","expect":"loss","acked":1` + extra + `}]}`
	}
	for _, c := range []struct{ in, want string }{
		{row(`,"fault":"` + long + `"`), "a text over"},
		{row(`,"takeaway":"` + long + `"`), "a text over"},
		{row(`,"verdict":"` + long + `"`), "a text over"},
		{row(`,"error":"` + long + `"`), "a text over"},
		{row(`,"seconds":-1`), "out of range"},
		{row(`,"duplicated":-1`), "out of range"},
		{`{"rows":[{"scenario":"a","setting":"b","expect":"loss","acked":1099511627777}]}`, "out of range"},
		{`{"records_per_row":-1,"rows":[{"scenario":"a","setting":"b","expect":"loss"}]}`, "records_per_row"},
		{row(`,"events":[{"at":86401,"what":"x"}]`), "want 0..86400 s"},
		{row(`,"acks":[{"at":-1,"acked":1}]`), "point out of range"},
	} {
		if _, err := Decode(strings.NewReader(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.80s: %v, want %q", c.in, err, c.want)
		}
	}
	// Right at the limits: accepted, and judged again.
	ok := row(`,"fault":"` + strings.Repeat("x", maxTextLen) + `","injected":true,"lost":1`)
	res, err := Decode(strings.NewReader(ok))
	if err != nil || !res.OK || res.Rows[0].Verdict != "shown: loss" {
		t.Fatalf("at the limits: %+v %v", res, err)
	}
}

// TestLabClusterElectPreferred: after its leadership moved away, a
// preferred election (electPreferred, as the bit-flip scenario uses it)
// makes the preferred replica lead again.
func TestLabClusterElectPreferred(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := startCluster(ctx, t.TempDir(), quietLog(), clusterOptions{nodes: 3, flush: storage.FlushPolicy{Mode: storage.FlushSync}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if err := c.createTopic(ctx, "pref", 1, nil); err != nil {
		t.Fatal(err)
	}
	// The preferred replica is the first of the partition's replicas.
	var preferred int32
	if err := c.await(ctx, "the replicas of pref", func(md kadm.Metadata) error {
		p := md.Topics["pref"].Partitions[0]
		if len(p.Replicas) != 3 {
			return fmt.Errorf("replicas %v", p.Replicas)
		}
		preferred = p.Replicas[0]
		return nil
	}, "pref"); err != nil {
		t.Fatal(err)
	}
	if err := electPreferred(ctx, c, "pref", preferred); err != nil {
		t.Fatal(err)
	}
	c.isolate(preferred)
	other, err := c.leader(ctx, "pref", 0, preferred)
	if err != nil || other == preferred {
		t.Fatalf("leader after isolating %d: %d %v", preferred, other, err)
	}
	c.heal()
	if err := c.waitInSync(ctx, "pref"); err != nil {
		t.Fatal(err)
	}
	if err := electPreferred(ctx, c, "pref", preferred); err != nil {
		t.Fatal(err)
	}
	// One election, and it holds, as every node names it. Round 17's
	// failures read one node's Metadata: the replica isolated while
	// leading still named itself leader after the others had elected, so
	// the wait for the ISR and electPreferred passed on its view with no
	// election at all, and the next answer, from another node, named the
	// other replica (docs/benchmarks.md, round 18, h-elect).
	if l, err := c.agreedLeader(ctx, "pref", 0); err != nil || l != preferred {
		t.Fatalf("leader %d after the preferred election, want %d (%v)", l, preferred, err)
	}
}
