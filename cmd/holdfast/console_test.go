package main

// The web console, rendered by a real browser: headless Chromium loads each
// page from a real broker process and the test reads the DOM it built.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium not installed; .ci/run installs it with apt-get")
	}
	t.Skip("chromium not installed (apt-get install chromium)")
	return ""
}

// dumpDOM loads url in headless Chromium and returns the DOM after its
// scripts ran for budget of virtual time.
func dumpDOM(t *testing.T, chromium, url string, budget time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(), fmt.Sprintf("--virtual-time-budget=%d", budget.Milliseconds()), "--dump-dom", url}
	out, err := exec.CommandContext(ctx, chromium, args...).Output()
	if err != nil {
		t.Fatalf("chromium %s: %v", url, err)
	}
	return string(out)
}

// screenshot saves url as rendered by headless Chromium to a PNG in
// $HOLDFAST_SCREENSHOTS (to look at) or a temporary directory, and checks
// it is a PNG of some size.
func screenshot(t *testing.T, chromium, url, name string) string {
	t.Helper()
	dir := os.Getenv("HOLDFAST_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, name+".png")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--hide-scrollbars",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=1000", "--window-size=1280,1500", "--screenshot=" + path, url}
	if out, err := exec.CommandContext(ctx, chromium, args...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot %s: %v\n%s", url, err, out)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 10000 || !strings.HasPrefix(string(b), "\x89PNG") {
		t.Fatalf("screenshot of %s: %d bytes, %v", url, len(b), err)
	}
	return path
}

func mustMatch(t *testing.T, page, dom, re string) []string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("%s: no match for %s in the DOM:\n%s", page, re, dom)
	}
	return m
}

func TestConsoleInChromium(t *testing.T) {
	chromium := chromiumPath(t)
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	web := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	startProc(t, dir, addr, "--listen", addr, "--metrics-listen", web, "--console-lag-sample-interval", "200ms")
	base := "http://" + web

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	ret := "3600000"
	if resp, err := adm.CreateTopics(ctx, 2, 1, map[string]*string{"retention.ms": &ret}, "orders"); err != nil || resp.Error() != nil {
		t.Fatalf("create: %v %v", err, resp.Error())
	}
	for i := 0; i < 10; i++ {
		r := &kgo.Record{Topic: "orders", Partition: 1, Key: []byte(fmt.Sprintf("k%d", i)),
			Value:   []byte(fmt.Sprintf(`{"order":%d,"item":"book"}`, i)),
			Headers: []kgo.RecordHeader{{Key: "source", Value: []byte("web-test")}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: "orders", Partition: 1, At: 3, LeaderEpoch: -1})
	if resp, err := adm.CommitOffsets(ctx, "billing", offs); err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}

	dom := dumpDOM(t, chromium, base+"/", time.Second)
	mustMatch(t, "cluster", dom, "Cluster "+regexp.QuoteMeta(md.Cluster))
	mustMatch(t, "cluster", dom, `<td>1</td><td>`+regexp.QuoteMeta(addr)+`</td><td></td>\s*<td><span class="ok">alive</span></td><td>controller</td>`)
	mustMatch(t, "cluster", dom, `<b id="under-replicated">0</b>`)

	dom = dumpDOM(t, chromium, base+"/topics", time.Second)
	mustMatch(t, "topics", dom, `<a href="/topics/orders">orders</a>.*?</td>\s*<td class="n">2</td><td class="n">1</td>`)

	// The partition's leader, epoch, offsets and this node's end,
	// committed and fsynced offsets, and the topic's config; and the page
	// refreshes itself in place.
	dom = dumpDOM(t, chromium, base+"/topics/orders", 8*time.Second)
	m := mustMatch(t, "topic", dom, `(?s)data-partition="1" data-replica="1">\s*<td rowspan="1">1</td><td rowspan="1">1</td><td rowspan="1">(\d+)</td>.*?<td class="n hw" rowspan="1">(\d+)</td>.*?<td class="n end">(\d+)</td><td class="n committed">(\d+)</td><td class="n fsynced">(\d+)</td>`)
	if m[2] != "10" || m[3] != "10" || m[4] != "10" || m[5] != "10" {
		t.Fatalf("partition 1: high watermark %s, end %s, committed %s, fsynced %s; want 10", m[2], m[3], m[4], m[5])
	}
	mustMatch(t, "topic", dom, `<td>retention.ms</td><td>3600000</td><td>topic</td>`)
	if r := mustMatch(t, "topic", dom, `data-refreshes="(\d+)"`); r[1] == "0" {
		t.Fatalf("the page never refreshed itself:\n%s", dom)
	}

	dom = dumpDOM(t, chromium, base+"/groups", time.Second)
	mustMatch(t, "groups", dom, `<a href="/groups/billing">billing</a></td><td>Empty</td><td class="n">0</td><td>1</td><td class="n lag">7</td>`)
	time.Sleep(500 * time.Millisecond) // a few lag samples
	dom = dumpDOM(t, chromium, base+"/groups/billing", time.Second)
	mustMatch(t, "group", dom, `<b id="total-lag">7</b>`)
	mustMatch(t, "group", dom, `<td>1</td><td class="n committed">3</td><td class="n">10</td><td class="n lag">7</td>`)
	mustMatch(t, "group", dom, `<svg class="chart"[^>]*>.*<polyline points="[^"]+"`)
	if tl := mustMatch(t, "group", dom, `<b id="time-lag">([^<]+)</b>`); tl[1] == "0s" {
		t.Fatalf("time lag 0s with 7 records behind")
	}

	// The message browser: from an offset as JSON, from a time as hex.
	dom = dumpDOM(t, chromium, base+"/messages?topic=orders&partition=1&offset=8&format=json", time.Second)
	mustMatch(t, "messages", dom, `<td class="n">8</td><td>[^<]+</td><td>k8</td><td><code>source=web-test</code> </td><td><pre class="value">\{\n  "order": 8,\n  "item": "book"\n\}</pre>`)
	if n := strings.Count(dom, `<pre class="value">`); n != 2 {
		t.Fatalf("from offset 8 of 10: %d records", n)
	}
	dom = dumpDOM(t, chromium, base+"/messages?topic=orders&partition=1&timestamp="+time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)+"&format=hex&max=1", time.Second)
	mustMatch(t, "messages", dom, `<td>k0</td>.*<pre class="value">00000000  7b 22 6f 72 64 65 72 22`)

	dom = dumpDOM(t, chromium, base+"/configs", time.Second)
	mustMatch(t, "configs", dom, `<td>log.retention.ms</td><td>604800000</td><td>default</td>`)
	// Where a static setting came from: --listen on the command line.
	mustMatch(t, "configs", dom, `<td>advertised.listeners</td><td>PLAINTEXT://`+regexp.QuoteMeta(addr)+`</td><td>broker \(flag: --listen\)</td>`)

	// The forms that change the cluster (their effects are tested over
	// HTTP in internal/console): rendered, with their fields, and not
	// refreshed away under the user's typing.
	dom = dumpDOM(t, chromium, base+"/topics/orders", time.Second)
	mustMatch(t, "topic", dom, `<a href="/topics/orders/edit" id="edit-topic">`)
	dom = dumpDOM(t, chromium, base+"/topics/orders/edit", 4*time.Second)
	mustMatch(t, "topicedit", dom, `<form method="post" action="/topics/orders/produce" class="browse" id="produce">`)
	mustMatch(t, "topicedit", dom, `<input name="count" type="number" min="3" value="3">`)
	mustMatch(t, "topicedit", dom, `id="delete-topic"`)
	mustMatch(t, "topicedit", dom, `data-live="false"`)
	dom = dumpDOM(t, chromium, base+"/groups/billing/reset", time.Second)
	mustMatch(t, "groupreset", dom, `<option>orders</option>`)
	dom = dumpDOM(t, chromium, base+"/security", time.Second)
	mustMatch(t, "security", dom, `no authorizer is configured`)
	mustMatch(t, "security", dom, `id="user-create"`)
	mustMatch(t, "security", dom, `id="quota-set"`)
	// Every partition at once, searched.
	dom = dumpDOM(t, chromium, base+"/messages?topic=orders&offset=earliest&value=%22order%22%3A3", time.Second)
	mustMatch(t, "messages", dom, `<td class="n">1</td><td class="n">3</td><td>[^<]+</td><td>k3</td>`)
	mustMatch(t, "messages", dom, `orders: 2 partitions, merged by timestamp;\s*scanned 10 records \(at most 1000, shared between the partitions\); 1 matched`)
	// Each node's disk and throughput, charted from the console's samples.
	dom = dumpDOM(t, chromium, base+"/", time.Second)
	mustMatch(t, "cluster", dom, `<td class="n" id="node-1-size">[0-9.]+ (B|KiB|MiB)</td>`)
	mustMatch(t, "cluster", dom, `aria-label="node 1: records per second"><text x="0" y="-3">max [0-9]+/s</text>`)
	for name, path := range map[string]string{"cluster": "/", "messages-search": "/messages?topic=orders&offset=earliest&header=source", "topic-edit": "/topics/orders/edit", "security": "/security", "group-reset": "/groups/billing/reset"} {
		screenshot(t, chromium, base+path, name)
	}
}
