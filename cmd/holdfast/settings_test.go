package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/testwait"
	"holdfast/internal/wire"
)

func TestReadProperties(t *testing.T) {
	in := "# comment\n! also a comment\n\na=1\nb : two\nc three\nd = spaced value \ne=first \\\n   second\nlistener.security.protocol.map=A:B,C:D\n"
	props, err := readProperties(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range props {
		got[p.key] = p.value
	}
	want := map[string]string{"a": "1", "b": "two", "c": "three", "d": "spaced value", "e": "first second", "listener.security.protocol.map": "A:B,C:D"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if props[4].line != 8 {
		t.Errorf("continued line reported at line %d, want 8", props[4].line)
	}
}

// loadServe parses args, environment and file as `serve` does.
func loadServe(t *testing.T, file string, args ...string) (*serveConfig, []string, error) {
	t.Helper()
	return loadServeOverrides(t, file, nil, args...)
}

func loadServeOverrides(t *testing.T, file string, overrides []string, args ...string) (*serveConfig, []string, error) {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	sc := &serveConfig{}
	s := newSettings(fs)
	sc.register(s)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	path := ""
	if file != "" {
		path = filepath.Join(t.TempDir(), "server.properties")
		if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	unsupported, err := s.load(path, overrides)
	sc.origins = s.configOrigins(describedAs) // as serve does
	return sc, unsupported, err
}

// TestSettingsOrigins: load records which source set each setting (the
// one that won), under every broker config name it is described by, with
// the name and value as that source wrote them; a passthrough security
// name too, without the value where it may be a password.
func TestSettingsOrigins(t *testing.T) {
	t.Setenv("HOLDFAST_NUM_PARTITIONS", "5")
	t.Setenv("HOLDFAST_RETENTION", "2h")
	file := "num.partitions=7\nlog.segment.bytes=4096\nsuper.users=User:a\nssl.keystore.password=hunter2\n"
	sc, _, err := loadServeOverrides(t, file, []string{"log.cleaner.threads=3"}, "--node-id", "9", "--flush", "os")
	if err != nil {
		t.Fatal(err)
	}
	path := ""
	for _, o := range sc.origins {
		if o.Kind == broker.OriginFile {
			path = o.File
		}
	}
	if !strings.HasSuffix(path, "server.properties") {
		t.Fatalf("file origin's path %q", path)
	}
	type want struct{ kind, name, value string }
	for name, w := range map[string]want{
		"node.id":               {broker.OriginFlag, "--node-id", "9"},
		"broker.id":             {broker.OriginFlag, "--node-id", "9"},
		"holdfast.flush.policy": {broker.OriginFlag, "--flush", "os"},
		"num.partitions":        {broker.OriginEnv, "HOLDFAST_NUM_PARTITIONS", "5"}, // the environment wins over the file
		"log.retention.ms":      {broker.OriginEnv, "HOLDFAST_RETENTION", "2h"},
		"log.retention.hours":   {broker.OriginEnv, "HOLDFAST_RETENTION", "2h"},
		"log.segment.bytes":     {broker.OriginFile, "log.segment.bytes", "4096"},
		"log.cleaner.threads":   {broker.OriginFlag, "--override log.cleaner.threads", "3"},
		"super.users":           {broker.OriginFile, "super.users", "User:a"},
		"ssl.keystore.password": {broker.OriginFile, "ssl.keystore.password", ""},
	} {
		o, ok := sc.origins[name]
		v := ""
		if o.Value != nil {
			v = *o.Value
		}
		if !ok || o.Kind != w.kind || o.Name != w.name || v != w.value {
			t.Errorf("%s: origin %+v (value %q), want %+v", name, o, v, w)
		}
	}
	for _, name := range []string{"log.dirs", "log.cleaner.enable", "advertised.listeners"} {
		if o, ok := sc.origins[name]; ok {
			t.Errorf("%s set by nobody has origin %+v", name, o)
		}
	}
}

// TestKafkaServerProperties: Apache Kafka's own server.properties is
// accepted; the settings Holdfast has are taken under Kafka's names and
// units, the others reported, each once.
func TestKafkaServerProperties(t *testing.T) {
	file, err := os.ReadFile("testdata/server.properties")
	if err != nil {
		t.Fatal(err)
	}
	sc, unsupported, err := loadServe(t, string(file)+"num.io.threads=16\n")
	if err != nil {
		t.Fatal(err)
	}
	cfg, lim, sec, err := sc.brokerConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sec.close()
	// The CONTROLLER listener (controller.listener.names) is Kafka's
	// controller quorum: Holdfast's runs Raft on --peers, so only the
	// PLAINTEXT listener is served.
	if len(sec.listeners) != 1 || sec.listeners[0].bind != ":9092" || sec.listeners[0].wire.Name != "PLAINTEXT" ||
		cfg.AdvertisedHost != "localhost" || cfg.AdvertisedPort != 9092 || cfg.Security.InterBrokerListener != "PLAINTEXT" {
		t.Errorf("listeners: %+v, advertised %s:%d, inter-broker %s", sec.listeners, cfg.AdvertisedHost, cfg.AdvertisedPort, cfg.Security.InterBrokerListener)
	}
	if cfg.DataDir != "/tmp/kraft-combined-logs" || cfg.NodeID != 1 || cfg.NumPartitions != 3 {
		t.Errorf("log.dirs %q, node.id %d, num.partitions %d", cfg.DataDir, cfg.NodeID, cfg.NumPartitions)
	}
	if cfg.LogDefaults.RetentionMs != 48*time.Hour || cfg.LogDefaults.SegmentBytes != 1<<30 || cfg.RetentionCheckInterval != 5*time.Minute {
		t.Errorf("retention %v, segment %d, check %v", cfg.LogDefaults.RetentionMs, cfg.LogDefaults.SegmentBytes, cfg.RetentionCheckInterval)
	}
	if lim.MaxRequestBytes != 104857600 {
		t.Errorf("socket.request.max.bytes: %d", lim.MaxRequestBytes)
	}
	if len(cfg.Peers) != 0 {
		t.Errorf("one controller voter (this node) is single-node mode, got peers %v", cfg.Peers)
	}
	want := "num.io.threads num.network.threads " +
		"num.recovery.threads.per.data.dir offsets.topic.replication.factor process.roles socket.receive.buffer.bytes " +
		"socket.send.buffer.bytes transaction.state.log.min.isr transaction.state.log.replication.factor"
	if got := strings.Join(unsupported, " "); got != want {
		t.Errorf("unsupported:\n got %s\nwant %s", got, want)
	}
}

// TestSettingsPrecedence: flag, then environment, then file, then default;
// flag names work in the file too; a typo is an error, not a warning.
func TestSettingsPrecedence(t *testing.T) {
	t.Setenv("HOLDFAST_NUM_PARTITIONS", "5")
	t.Setenv("HOLDFAST_RETENTION", "2h")
	file := "num.partitions=7\nlog.retention.ms=60000\nsegment-bytes=2048\nlog.segment.bytes=4096\nnode-id=4\n"
	sc, _, err := loadServe(t, file, "--node-id", "9")
	if err != nil {
		t.Fatal(err)
	}
	if sc.nodeID != 9 || sc.numParts != 5 || sc.retention != 2*time.Hour || sc.segBytes != 4096 {
		t.Errorf("node-id %d (flag 9), num-partitions %d (env 5), retention %v (env 2h), segment-bytes %d (file, last line 4096)", sc.nodeID, sc.numParts, sc.retention, sc.segBytes)
	}
	if _, _, err := loadServe(t, "segmnt-bytes=1\n"); err == nil || !strings.Contains(err.Error(), `unknown setting "segmnt-bytes"`) {
		t.Errorf("typo: %v", err)
	}
	if _, _, err := loadServe(t, "log.retention.ms=soon\n"); err == nil || !strings.Contains(err.Error(), "whole number of milliseconds") {
		t.Errorf("bad Kafka duration: %v", err)
	}
}

// TestOverride: --override sets a line of the file from the command line,
// by Kafka's name or a flag's; it wins over the file and the environment,
// conflicts with the same flag given directly, and takes security
// settings to the security builder.
func TestOverride(t *testing.T) {
	t.Setenv("HOLDFAST_NUM_PARTITIONS", "5")
	file := "log.retention.hours=1\nssl.client.auth=requested\nsuper.users=User:a\n"
	sc, _, err := loadServeOverrides(t, file, []string{"log.retention.ms=120000", "num.partitions=9", "ssl.client.auth=required", "add-scram=SCRAM-SHA-256=[name=a,password=b]"})
	if err != nil {
		t.Fatal(err)
	}
	if sc.retention != 2*time.Minute || sc.numParts != 9 {
		t.Errorf("retention %v (override 2m), num-partitions %d (override 9)", sc.retention, sc.numParts)
	}
	if sc.security["ssl.client.auth"] != "required" || sc.security["super.users"] != "User:a" {
		t.Errorf("security settings: %v", sc.security)
	}
	if len(sc.addScram) != 1 || sc.addScram[0].User != "a" || sc.addScram[0].Mechanism != "SCRAM-SHA-256" {
		t.Errorf("add-scram: %v", sc.addScram.String())
	}
	if _, _, err := loadServeOverrides(t, "", []string{"listeners=PLAINTEXT://127.0.0.1:9"}, "--listen", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "sets --listen, which the command line sets too") {
		t.Errorf("--override and the flag it sets: %v", err)
	}
	if _, _, err := loadServeOverrides(t, "", []string{"no-equals"}); err == nil || !strings.Contains(err.Error(), "want key=value") {
		t.Errorf("--override without =: %v", err)
	}
	// A password is never repeated in an error.
	if _, _, err := loadServeOverrides(t, "add-scram=SCRAM-SHA-512=[name=a,password=hunter2\n", nil); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("bad add-scram: %v", err)
	}
}

// TestServeWithServerProperties starts the real binary on Kafka's
// server.properties: it runs, takes num.partitions from it, and reports
// the settings it ignores once, by name.
func TestServeWithServerProperties(t *testing.T) {
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	abs, _ := filepath.Abs("testdata/server.properties")
	t.Setenv("HOLDFAST_DATA_DIR", filepath.Join(dir, "data")) // the environment overrides the file's log.dirs
	p := startProc(t, dir, addr, "--config", abs, "--listen", addr, "--advertised", addr, "--metrics-listen", "")
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("auto"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := t.Context()
	if err := cl.ProduceSync(ctx, kgo.StringRecord("x")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	td, err := kadm.NewClient(cl).ListTopics(ctx, "auto")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(td["auto"].Partitions); n != 3 {
		t.Errorf("auto-created topic has %d partitions, want num.partitions=3 from the file", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err != nil {
		t.Errorf("data dir from HOLDFAST_DATA_DIR: %v", err)
	}
	// As in Kafka, the first group request creates __consumer_offsets;
	// taking over its partitions is logged once, not per partition.
	if _, err := kadm.NewClient(cl).FetchOffsets(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	const summary = `coordinator partitions changed" topic=__consumer_offsets`
	testwait.Poll(30*time.Second, func() bool { return strings.Contains(p.logs.String(), summary) })
	logs := p.logs.String()
	if n := strings.Count(logs, "num.network.threads"); n != 1 {
		t.Errorf("num.network.threads reported %d times, want once:\n%s", n, logs)
	}
	// Its 3 partitions are elected one by one, so on a busy machine the
	// summary may come in two steps; never one line per partition.
	created, summaries := strings.Count(logs, `created topic" topic=__consumer_offsets`), strings.Count(logs, summary)
	if created != 1 || summaries < 1 || summaries >= 3 || strings.Count(logs, "__consumer_offsets") != created+summaries {
		t.Errorf("%d creation and %d summary lines about __consumer_offsets (of 3 partitions), want one creation and fewer summaries than partitions:\n%s", created, summaries, logs)
	}
}

// TestReadmeListsEverySetting keeps the README's settings table true: every
// serve flag and each of its Kafka names is in it.
func TestReadmeListsEverySetting(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	s := newSettings(fs)
	(&serveConfig{}).register(s)
	for _, st := range s.all {
		if !strings.Contains(string(readme), "`--"+st.flag+"`") {
			t.Errorf("README.md does not list --%s", st.flag)
		}
		for _, k := range st.kafka {
			if !strings.Contains(string(readme), "`"+k.name+"`") {
				t.Errorf("README.md does not name %s (--%s)", k.name, st.flag)
			}
		}
	}
}

// TestMaxConnectionsPerIPSettings: max.connections.per.ip and its
// overrides under Kafka's names and syntax; Kafka's 0 only with overrides;
// Kafka's unlimited default one setting away.
func TestMaxConnectionsPerIPSettings(t *testing.T) {
	limits := func(file string) (wire.Limits, error) {
		t.Helper()
		sc, _, err := loadServe(t, file)
		if err != nil {
			t.Fatal(err)
		}
		_, lim, sec, err := sc.brokerConfig(nil)
		if err == nil {
			sec.close()
		}
		return lim, err
	}
	lim, err := limits("")
	if err != nil || lim.MaxConnectionsPerIP != 1000 || len(lim.MaxConnectionsPerIPOverrides) != 0 {
		t.Fatalf("default: %d %v (%v), want 1000 and no overrides", lim.MaxConnectionsPerIP, lim.MaxConnectionsPerIPOverrides, err)
	}
	lim, err = limits("max.connections.per.ip=2147483647\nmax.connection.creation.rate=50\n")
	if err != nil || lim.MaxConnectionsPerIP != wire.UnlimitedPerIP || lim.MaxConnectionCreationRate != 50 {
		t.Fatalf("Kafka's default: %d, rate %d (%v)", lim.MaxConnectionsPerIP, lim.MaxConnectionCreationRate, err)
	}
	lim, err = limits("max.connections.per.ip=0\nmax.connections.per.ip.overrides=localhost:9,10.0.0.1:5, [::1]:7\n")
	want := map[netip.Addr]int{netip.MustParseAddr("10.0.0.1"): 5, netip.MustParseAddr("::1"): 7}
	if err != nil || lim.MaxConnectionsPerIP >= 0 || lim.MaxConnectionsPerIPOverrides[netip.MustParseAddr("10.0.0.1")] != 5 || lim.MaxConnectionsPerIPOverrides[netip.MustParseAddr("::1")] != 7 ||
		lim.MaxConnectionsPerIPOverrides[netip.MustParseAddr("127.0.0.1")] != 9 {
		t.Fatalf("zero with overrides: %d %v (%v), want none but %v and localhost's", lim.MaxConnectionsPerIP, lim.MaxConnectionsPerIPOverrides, err, want)
	}
	for file, msg := range map[string]string{
		"max.connections.per.ip=0\n":                                "only with",
		"max.connections.per.ip=-1\n":                               "must not be negative",
		"max.connection.creation.rate=0\n":                          "must be positive",
		"max.connections.per.ip.overrides=10.0.0.1\n":               "is not host:count",
		"max.connections.per.ip.overrides=10.0.0.1:many\n":          "want a count",
		"max.connections.per.ip.overrides=no.such.host.invalid:3\n": "no.such.host.invalid",
	} {
		if _, err := limits(file); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want an error with %q", file, err, msg)
		}
	}
}

// TestPreAuthSettings: sasl.server.max.receive.size under Kafka's name, as
// a flag and from the environment; the pre-authentication budget and
// timeout by their flag names (in the file too); bad values refused.
func TestPreAuthSettings(t *testing.T) {
	limits := func(file string, args ...string) (wire.Limits, error) {
		t.Helper()
		sc, _, err := loadServe(t, file, args...)
		if err != nil {
			t.Fatal(err)
		}
		_, lim, sec, err := sc.brokerConfig(nil)
		if err == nil {
			sec.close()
		}
		return lim, err
	}
	lim, err := limits("")
	if err != nil || lim.MaxPreAuthBytes != 512<<10 || lim.MaxPreAuthQueuedBytes != 16<<20 || lim.AuthTimeout != 30*time.Second {
		t.Fatalf("defaults: %d %d %v (%v)", lim.MaxPreAuthBytes, lim.MaxPreAuthQueuedBytes, lim.AuthTimeout, err)
	}
	lim, err = limits("sasl.server.max.receive.size=65536\npreauth-queued-bytes=1048576\nsasl-authentication-timeout=5s\n")
	if err != nil || lim.MaxPreAuthBytes != 65536 || lim.MaxPreAuthQueuedBytes != 1<<20 || lim.AuthTimeout != 5*time.Second {
		t.Fatalf("from the file: %d %d %v (%v)", lim.MaxPreAuthBytes, lim.MaxPreAuthQueuedBytes, lim.AuthTimeout, err)
	}
	if lim, err = limits("sasl.server.max.receive.size=65536\n", "--sasl-max-receive-size", "4096"); err != nil || lim.MaxPreAuthBytes != 4096 {
		t.Fatalf("the flag over the file: %d (%v)", lim.MaxPreAuthBytes, err)
	}
	for file, msg := range map[string]string{
		"sasl.server.max.receive.size=0\n":                                  "want 1..",
		"sasl.server.max.receive.size=2000000\nmax-request-bytes=1000000\n": "want 1..",
		"preauth-queued-bytes=1000\n":                                       "at least one frame",
		"sasl-authentication-timeout=0s\n":                                  "must be positive",
	} {
		if _, err := limits(file); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want an error with %q", file, err, msg)
		}
	}
	t.Setenv("HOLDFAST_SASL_MAX_RECEIVE_SIZE", "8192")
	if lim, err = limits("sasl.server.max.receive.size=65536\n"); err != nil || lim.MaxPreAuthBytes != 8192 {
		t.Fatalf("the environment over the file: %d (%v)", lim.MaxPreAuthBytes, err)
	}
}

// TestAddScramAddsUp: --add-scram values from the command line,
// --override, the environment and the file add up (a broker started with
// one more user on the command line kept the file's admin only after
// this); for the same user and mechanism the higher precedence wins.
func TestAddScramAddsUp(t *testing.T) {
	file := "add-scram=SCRAM-SHA-512=[name=admin,password=admin-secret]\nadd-scram=SCRAM-SHA-512=[name=bob,password=from-file]\n"
	t.Setenv("HOLDFAST_ADD_SCRAM", "SCRAM-SHA-256=[name=carol,password=carol-secret]")
	sc, _, err := loadServeOverrides(t, file, []string{"add-scram=SCRAM-SHA-512=[name=dave,password=dave-secret]"},
		"--add-scram", "SCRAM-SHA-512=[name=alice,password=alice-secret]", "--add-scram", "SCRAM-SHA-512=[name=bob,password=from-flag]")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sc.addScram.String(), "SCRAM-SHA-256=carol,SCRAM-SHA-512=admin,SCRAM-SHA-512=alice,SCRAM-SHA-512=bob,SCRAM-SHA-512=dave"; got != want {
		t.Fatalf("users %s, want %s", got, want)
	}
	for _, c := range sc.addScram {
		if c.User == "bob" && (!c.VerifyPassword("from-flag") || c.VerifyPassword("from-file")) {
			t.Fatal("bob's password is the file's, not the command line's")
		}
	}
	// The file alone, and the flag alone, as before.
	t.Setenv("HOLDFAST_ADD_SCRAM", "")
	os.Unsetenv("HOLDFAST_ADD_SCRAM")
	if sc, _, err = loadServe(t, file); err != nil || sc.addScram.String() != "SCRAM-SHA-512=admin,SCRAM-SHA-512=bob" {
		t.Fatalf("file only: %s (%v)", sc.addScram.String(), err)
	}
	if sc, _, err = loadServe(t, "", "--add-scram", "SCRAM-SHA-512=[name=alice,password=alice-secret]"); err != nil || sc.addScram.String() != "SCRAM-SHA-512=alice" {
		t.Fatalf("flag only: %s (%v)", sc.addScram.String(), err)
	}
}
