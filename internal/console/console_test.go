package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/brokertest"
	"holdfast/internal/console"
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
	if resp, err := http.Get(srv.URL + "/topics/nope"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("unknown topic: %v", err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "UNKNOWN_TOPIC_OR_PARTITION") {
			t.Errorf("unknown topic page:\n%s", body)
		}
	}
}
