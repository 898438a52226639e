package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestDescribeConfigsOrigins: a broker given one setting in its config
// file, one by flag and one by environment variable reports each in
// DescribeConfigs as STATIC_BROKER_CONFIG, its synonym named and valued as
// that source wrote it (Kafka names the synonym by the file's key), and
// the documentation field says which source; a setting nobody set is
// DEFAULT_CONFIG. A topic's default from the file is STATIC_BROKER_CONFIG
// on the topic too. `holdfast cluster config` and `topic describe` show
// the origin.
func TestDescribeConfigsOrigins(t *testing.T) {
	dir := t.TempDir()
	props := filepath.Join(dir, "server.properties")
	if err := os.WriteFile(props, []byte("log.retention.hours=48\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOLDFAST_LOG_CLEANER_THREADS", "2") // startProc passes the test's environment on
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	startProc(t, dir, addr, "--listen", addr, "--metrics-listen", "", "--config", props, "--num-partitions", "4")

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// check finds name in rc and wants its value, source and first
	// synonym (kadm asks for synonyms).
	check := func(rc kadm.ResourceConfig, name, value string, src kmsg.ConfigSource, synName, synValue string) {
		t.Helper()
		for _, cf := range rc.Configs {
			if cf.Key != name {
				continue
			}
			if cf.MaybeValue() != value || cf.Source != src || len(cf.Synonyms) == 0 ||
				cf.Synonyms[0].Key != synName || cf.Synonyms[0].Source != src ||
				cf.Synonyms[0].Value == nil || *cf.Synonyms[0].Value != synValue {
				t.Errorf("%s %s = %q (%s), synonyms %+v; want %q (%s) from %s=%s", rc.Name, name, cf.MaybeValue(), cf.Source, cf.Synonyms, value, src, synName, synValue)
			}
			return
		}
		t.Errorf("%s: no config %s", rc.Name, name)
	}
	rcs, err := adm.DescribeBrokerConfigs(ctx, 1)
	if err != nil || len(rcs) != 1 || rcs[0].Err != nil {
		t.Fatalf("describe broker: %v %v", err, rcs)
	}
	static := kmsg.ConfigSourceStaticBrokerConfig
	check(rcs[0], "log.retention.ms", "172800000", static, "log.retention.hours", "48")
	check(rcs[0], "num.partitions", "4", static, "--num-partitions", "4")
	check(rcs[0], "log.cleaner.threads", "2", static, "HOLDFAST_LOG_CLEANER_THREADS", "2")
	check(rcs[0], "advertised.listeners", "PLAINTEXT://"+addr, static, "--listen", addr)
	// Not set anywhere: Holdfast's default, DEFAULT_CONFIG.
	check(rcs[0], "log.segment.bytes", "1073741824", kmsg.ConfigSourceDefaultConfig, "log.segment.bytes", "1073741824")
	check(rcs[0], "log.cleaner.enable", "true", kmsg.ConfigSourceDefaultConfig, "log.cleaner.enable", "true")

	// The documentation field (DescribeConfigs v3+) says it in words.
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.IncludeDocumentation = true
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeBroker, "1"
	res.ConfigNames = []string{"log.retention.ms", "num.partitions", "log.cleaner.threads"}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Resources) != 1 || len(resp.Resources[0].Configs) != 3 {
		t.Fatalf("describe with documentation: %v %+v", err, resp)
	}
	want := map[string]string{
		"log.retention.ms":    "Set in the config file " + props + " (log.retention.hours).",
		"num.partitions":      "Set on the command line (--num-partitions).",
		"log.cleaner.threads": "Set by the environment variable HOLDFAST_LOG_CLEANER_THREADS.",
	}
	for _, c := range resp.Resources[0].Configs {
		if c.Documentation == nil || !strings.HasSuffix(*c.Documentation, want[c.Name]) {
			t.Errorf("%s documentation %v, want it to end %q", c.Name, c.Documentation, want[c.Name])
		}
	}

	// A topic's retention.ms comes from the file's log.retention.hours.
	if cr, err := adm.CreateTopic(ctx, 1, 1, nil, "origins"); err != nil || cr.Err != nil {
		t.Fatalf("create: %v %v", err, cr.Err)
	}
	trcs, err := adm.DescribeTopicConfigs(ctx, "origins")
	if err != nil || len(trcs) != 1 || trcs[0].Err != nil {
		t.Fatalf("describe topic: %v %v", err, trcs)
	}
	check(trcs[0], "retention.ms", "172800000", static, "log.retention.hours", "48")
	check(trcs[0], "segment.bytes", "1073741824", kmsg.ConfigSourceDefaultConfig, "log.segment.bytes", "1073741824")

	// The CLI's tables.
	b := "--bootstrap=" + addr
	out := ok(t, "", "cluster", "config", "--broker", "1", b)
	row(t, out, "num.partitions", "4", "static_broker", "(flag:", "--num-partitions)")
	row(t, out, "log.retention.ms", "172800000", "static_broker", "(file:", "log.retention.hours)")
	row(t, out, "log.cleaner.threads", "2", "static_broker", "(env:", "HOLDFAST_LOG_CLEANER_THREADS)")
	row(t, out, "log.segment.bytes", "1073741824", "default")
	desc := ok(t, "", "topic", "describe", "origins", b)
	row(t, desc, "retention.ms", "172800000", "broker", "(file:", "log.retention.hours)")
}
