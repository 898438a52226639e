package console_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/brokertest"
	"holdfast/internal/console"
	"holdfast/internal/testwait"
)

// TestPages serves every page from an in-process broker (the browser test
// in cmd/holdfast renders them in Chromium): each answers 200 with what
// the broker holds, and the live-refresh fragment is the page's <main>.
func TestPages(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("web", 1, nil)
	cl := n.Client(kgo.DefaultProduceTopic("web"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, v := range []string{"a", `{"x":1}`, "c"} {
		if err := cl.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: "web", Partition: 0, At: 1, LeaderEpoch: -1})
	if _, err := kadm.NewClient(cl).CommitOffsets(ctx, "viewers", offs); err != nil {
		t.Fatal(err)
	}
	c, err := console.New(console.Config{Broker: n.B, Seeds: []string{n.Addr}, LagSampleInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := httptest.NewServer(c)
	defer srv.Close()
	get := func(path string, fragment bool) string {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if fragment {
			req.Header.Set("X-Console-Fragment", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d\n%s", path, resp.StatusCode, body)
		}
		if strings.Contains(string(body), `class="error"`) {
			t.Fatalf("%s shows an error:\n%s", path, body)
		}
		return string(body)
	}
	for path, want := range map[string]string{
		"/":               `<b id="offline">0</b>`,
		"/topics":         `<a href="/topics/web">web</a>`,
		"/topics/web":     `<td class="n end">3</td><td class="n committed">3</td><td class="n fsynced">3</td>`,
		"/groups":         `<td class="n lag">2</td>`,
		"/groups/viewers": `<b id="total-lag">2</b>`,
		"/messages?topic=web&offset=1&format=json": "<pre class=\"value\">{\n  &#34;x&#34;: 1\n}</pre>",
		"/configs":           `<td>num.partitions</td>`,
		"/static/console.js": "X-Console-Fragment",
	} {
		if body := get(path, false); !strings.Contains(body, want) {
			t.Errorf("%s: no %q in\n%s", path, want, body)
		}
	}
	frag := get("/topics/web", true)
	if strings.Contains(frag, "<html") || !strings.Contains(frag, "Topic web") {
		t.Errorf("fragment is not the page's main:\n%s", frag)
	}
	if resp, err := http.Get(srv.URL + "/topics/nope"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown topic: %v %v", err, resp.Status)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "UNKNOWN_TOPIC_OR_PARTITION") {
			t.Errorf("unknown topic page:\n%s", body)
		}
	}
}

// TestClusterTopicPage: on a 3-node cluster the topic page names the
// leader and shows each replica's acknowledged offset from it, and this
// node's own replica's offsets.
func TestClusterTopicPage(t *testing.T) {
	nodes := brokertest.StartCluster(t, 3)
	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.Addr)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("rep"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	testwait.For(t, 60*time.Second, "topic rep created and two records produced", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := adm.CreateTopics(ctx, 1, 3, nil, "rep")
		if err == nil {
			err = resp.Error()
		}
		if err == nil || strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
			err = cl.ProduceSync(ctx, kgo.StringRecord("x"), kgo.StringRecord("y")).FirstErr()
		}
		return err
	})
	c, err := console.New(console.Config{Broker: nodes[0].B, Seeds: []string{nodes[0].Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := httptest.NewServer(c)
	defer srv.Close()
	// Every replica acknowledged both records (the log end as the leader
	// sees it), and node 1 shows its own replica's offsets.
	acked := regexp.MustCompile(`data-replica="(\d)">.*?<td>(leader|follower)</td>\s*<td class="n">(\d+)</td>`)
	var body string
	testwait.For(t, 60*time.Second, "the topic page to show three caught-up replicas", func() error {
		resp, err := http.Get(srv.URL + "/topics/rep")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		ms := acked.FindAllStringSubmatch(strings.ReplaceAll(body, "\n", " "), -1)
		leaders, caughtUp := 0, 0
		for _, m := range ms {
			if m[2] == "leader" {
				leaders++
			}
			if m[3] == ms[0][3] && m[3] != "0" {
				caughtUp++
			}
		}
		if len(ms) == 3 && leaders == 1 && caughtUp == 3 && strings.Contains(body, `<td class="n fsynced">`) {
			return nil
		}
		return fmt.Errorf("%d replicas with an acked offset, want 3, one leader, all equal:\n%s", len(ms), body)
	})
	if !strings.Contains(body, "1 <small>this node</small>") {
		t.Errorf("node 1's replica not marked:\n%s", body)
	}
}

// TestBrowseAcrossPartitions: the message browser reads every partition
// at once and merges by timestamp, from the start, from a time, and the
// newest; a search by key, value or header keeps the matches among at most
// the records it may scan, and says when it stopped at that bound.
func TestBrowseAcrossPartitions(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("spread", 3, nil)
	cl := n.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 12; i++ {
		r := &kgo.Record{Topic: "spread", Partition: int32(i % 3), Key: []byte(fmt.Sprintf("key%02d", i)), Value: []byte(fmt.Sprintf("v%02d", i)), Timestamp: t0.Add(time.Duration(i) * time.Second)}
		switch i {
		case 4, 7:
			r.Value = append(r.Value, " needle"...)
		case 5:
			r.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}}
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	c, err := console.New(console.Config{Broker: n.B, Seeds: []string{n.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := httptest.NewServer(c)
	defer srv.Close()
	row := regexp.MustCompile(`<tr><td class="n">(\d+)</td><td class="n">(\d+)</td><td>[^<]*</td><td>key(\d+)</td>`)
	keys := func(query string) (string, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/messages?topic=spread&" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d\n%s", query, resp.StatusCode, b)
		}
		var ks []string
		for _, m := range row.FindAllStringSubmatch(string(b), -1) {
			ks = append(ks, m[3])
		}
		return strings.Join(ks, ","), string(b)
	}
	for query, want := range map[string]string{
		"offset=earliest":             "00,01,02,03,04,05,06,07,08,09,10,11",
		"offset=earliest&max=4":       "00,01,02,03",
		"max=3":                       "09,10,11",
		"offset=2":                    "06,07,08,09,10,11",
		"partition=1&offset=earliest": "01,04,07,10",
		"timestamp=" + t0.Add(8*time.Second).Format(time.RFC3339): "08,09,10,11",
		"offset=earliest&value=needle":                            "04,07",
		"offset=earliest&header=trace%3Dab":                       "05",
		"offset=earliest&key=key1":                                "10,11",
	} {
		if got, body := keys(query); got != want {
			t.Errorf("%s: keys %s, want %s\n%s", query, got, want, body)
		}
	}
	got, body := keys("offset=earliest&value=needle&scan=6")
	if got != "04" || !strings.Contains(body, "scanned 6 records (at most 6") || !strings.Contains(body, "more may match further on") {
		t.Errorf("a search bounded to 6 records: keys %s\n%s", got, body)
	}
}

// TestNodeUsageCharts: the cluster page shows each node's bytes on disk,
// its volume and charts of size, bytes written and records per second,
// from the console's samples (DescribeLogDirs and high watermarks): after
// records are written the size and the records rate grow.
func TestNodeUsageCharts(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("disk", 1, nil)
	c, err := console.New(console.Config{Broker: n.B, Seeds: []string{n.Addr}, LagSampleInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := httptest.NewServer(c)
	defer srv.Close()
	page := func() string {
		resp, err := http.Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	sizeRe := regexp.MustCompile(`<td class="n" id="node-1-size">([^<]+)</td>`)
	recsRe := regexp.MustCompile(`aria-label="node 1: records per second"><text x="0" y="-3">max ([0-9]+)/s</text>`)
	before := sizeRe.FindStringSubmatch(page())
	if before == nil {
		t.Fatalf("no size for node 1:\n%s", page())
	}
	cl := n.Client(kgo.DefaultProduceTopic("disk"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 200; i++ {
		cl.Produce(ctx, &kgo.Record{Value: bytes.Repeat([]byte("x"), 1000)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	brokertest.Await(t, "the size and records rate to grow", func() error {
		body := page()
		m, r := sizeRe.FindStringSubmatch(body), recsRe.FindStringSubmatch(body)
		if m == nil || r == nil {
			return fmt.Errorf("no size or records chart in\n%s", body)
		}
		if m[1] == before[1] || !strings.HasSuffix(m[1], "KiB") && !strings.HasSuffix(m[1], "MiB") || r[1] == "0" {
			return fmt.Errorf("size %s (before %s), records max %s/s", m[1], before[1], r[1])
		}
		if !strings.Contains(body, `aria-label="node 1: bytes written per second"`) || !strings.Contains(body, `class="meter"`) {
			return fmt.Errorf("no bytes-written chart or volume meter")
		}
		return nil
	})
}
