package topicconfig

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"holdfast/internal/storage"
)

// Every spec is complete: a validator, a broker value, and Kafka's default
// accepted by its own validator (a default the validator refused would make
// DescribeConfigs show a value AlterConfigs cannot set back).
func TestSpecsComplete(t *testing.T) {
	d := storage.DefaultConfig()
	names := Names()
	if !slices.IsSorted(names) || len(names) < 25 {
		t.Fatalf("Names: %d, sorted %v", len(names), slices.IsSorted(names))
	}
	for _, n := range names {
		s, ok := Lookup(n)
		if !ok || s.Name != n {
			t.Fatalf("Lookup(%q) = %q, %v", n, s.Name, ok)
		}
		if s.validate == nil || s.brokerValue == nil || s.Doc == "" {
			t.Errorf("%s: validate %v brokerValue %v doc %q", n, s.validate != nil, s.brokerValue != nil, s.Doc)
			continue
		}
		// file.delete.delay.ms refuses Kafka's default on purpose (its
		// Doc says why); every other default is a value one can set.
		if err := s.validate(s.KafkaDefault); err != nil && n != "file.delete.delay.ms" {
			t.Errorf("%s: Kafka's default %q refused: %v", n, s.KafkaDefault, err)
		}
		if err := s.validate(s.BrokerValue(d)); err != nil {
			t.Errorf("%s: broker value %q refused: %v", n, s.BrokerValue(d), err)
		}
	}
	if _, ok := Lookup("no.such"); ok {
		t.Fatal("Lookup of an unknown name succeeded")
	}
}

// A topic that overrides a config with the broker's own value gets the
// broker's log config back: DescribeConfigs' value, set back with
// AlterConfigs, changes nothing.
func TestBrokerValueRoundTrips(t *testing.T) {
	bases := map[string]storage.Config{"default": storage.DefaultConfig()}
	c := storage.DefaultConfig()
	c.Flush = storage.FlushPolicy{Mode: storage.FlushSync}
	c.RetentionMs = -1
	c.RetentionBytes = 1 << 30
	// Compact stays false: the broker's log defaults never compact
	// (log.cleanup.policy reaches topics as a dynamic override, Dynamic).
	c.MaxCompactionLag = time.Hour
	c.MinCleanableRatio = 0.25
	bases["changed"] = c
	c2 := storage.DefaultConfig()
	c2.Flush = storage.FlushPolicy{Mode: storage.FlushInterval, Interval: 250 * time.Millisecond}
	bases["interval"] = c2
	for bn, d := range bases {
		for _, n := range Names() {
			s, _ := Lookup(n)
			if s.apply == nil {
				continue
			}
			got := LogConfig(d, map[string]string{n: s.BrokerValue(d)}, func(name, v string, err error) {
				t.Errorf("%s/%s: %q refused: %v", bn, name, v, err)
			})
			// segment.index.bytes has no broker value of its own (Kafka's
			// fixed size): applying it sets the entries from the bytes.
			if n == "segment.index.bytes" {
				got.IndexMaxEntries = d.IndexMaxEntries
			}
			if !configEqual(got, d) {
				t.Errorf("%s/%s=%s: %+v, want %+v", bn, n, s.BrokerValue(d), got, d)
			}
		}
	}
}

func configEqual(a, b storage.Config) bool {
	return a.Flush == b.Flush && a.FlushMessages == b.FlushMessages && a.SegmentBytes == b.SegmentBytes &&
		a.SegmentMs == b.SegmentMs && a.SegmentJitter == b.SegmentJitter && a.RetentionMs == b.RetentionMs &&
		a.RetentionBytes == b.RetentionBytes && a.Compact == b.Compact && a.DeleteRetention == b.DeleteRetention &&
		a.MinCompactionLag == b.MinCompactionLag && a.MaxCompactionLag == b.MaxCompactionLag &&
		a.MinCleanableRatio == b.MinCleanableRatio && a.MaxMessageBytes == b.MaxMessageBytes &&
		a.IndexIntervalBytes == b.IndexIntervalBytes && a.IndexMaxEntries == b.IndexMaxEntries
}

// Each config's bounds, as Kafka's ConfigDef states them.
func TestValidateBounds(t *testing.T) {
	max := strconv.FormatInt(math.MaxInt64, 10)
	for _, c := range []struct {
		name      string
		ok, notOK []string
	}{
		{"cleanup.policy", []string{"delete", "compact", "compact,delete", " delete , compact "}, []string{"", " ", "none", "delete,", "compact;delete"}},
		{"compression.type", []string{"producer"}, []string{"gzip", "lz4", "none", ""}},
		{"delete.retention.ms", []string{"0", max}, []string{"-1", "x", "1.5"}},
		{"file.delete.delay.ms", []string{"0", " 0 "}, []string{"60000", "1"}},
		{"flush.messages", []string{"1", max}, []string{"0", "-1"}},
		{"flush.ms", []string{"0", "1000", max}, []string{"-1", "9223372036854775808"}},
		{"index.interval.bytes", []string{"0", "4096", "2147483647"}, []string{"-1", "2147483648"}},
		{"max.compaction.lag.ms", []string{"1", max}, []string{"0", "-1"}},
		{"max.message.bytes", []string{"0", "1048588", strconv.Itoa(MaxMessageBytes)}, []string{strconv.Itoa(MaxMessageBytes + 1), "-1"}},
		{"message.timestamp.type", []string{"CreateTime", "LogAppendTime"}, []string{"createtime", "", "NoTime"}},
		{"min.cleanable.dirty.ratio", []string{"0", "0.5", "1", "1e-3"}, []string{"-0.1", "1.01", "half", ""}},
		{"min.compaction.lag.ms", []string{"0", max}, []string{"-1"}},
		{"min.insync.replicas", []string{"1", "3", "2147483647"}, []string{"0", "-1", "2147483648"}},
		{"preallocate", []string{"false"}, []string{"true", ""}},
		{"local.retention.bytes", []string{"-2", "-1", "0", max}, []string{"-3"}},
		{"local.retention.ms", []string{"-2", "-1", "0"}, []string{"-3", "soon"}},
		{"remote.storage.enable", []string{"true", "false"}, []string{"yes", "TRUE", ""}},
		{"remote.storage.restore.starts", []string{"", "0:0", "10:2,20:3"}, []string{"10", "a:1", "1:b", "-1:0", "1:-1", "1:2147483648"}},
		{"retention.bytes", []string{"-1", "0", max}, []string{"-2"}},
		{"retention.ms", []string{"-1", "0", max}, []string{"-2"}},
		{"segment.bytes", []string{"14", "1073741824", "2147483647"}, []string{"13", "2147483648", "0"}},
		{"segment.index.bytes", []string{"8", "10485760"}, []string{"7", "0"}},
		{"segment.jitter.ms", []string{"0", "1000"}, []string{"-1"}},
		{"segment.ms", []string{"1", max}, []string{"0", "-1"}},
		{"unclean.leader.election.enable", []string{"false"}, []string{"true"}},
	} {
		if _, ok := Lookup(c.name); !ok {
			t.Errorf("%s: no such config", c.name)
			continue
		}
		for _, v := range c.ok {
			if err := Validate(map[string]string{c.name: v}); err != nil {
				t.Errorf("%s=%q refused: %v", c.name, v, err)
			}
		}
		for _, v := range c.notOK {
			err := Validate(map[string]string{c.name: v})
			if err == nil {
				t.Errorf("%s=%q accepted", c.name, v)
			} else if !strings.Contains(err.Error(), "configuration "+c.name) {
				t.Errorf("%s=%q: error %q does not name the config", c.name, v, err)
			}
		}
	}
}

// Validate names the first bad config in sorted order, whatever the map's
// iteration order: the same request always gets the same answer.
func TestValidateDeterministic(t *testing.T) {
	cfg := map[string]string{"segment.ms": "0", "retention.ms": "-5", "flush.ms": "-1"}
	for range 20 {
		if err := Validate(cfg); err == nil || !strings.Contains(err.Error(), "configuration flush.ms") {
			t.Fatalf("Validate: %v, want flush.ms first", err)
		}
	}
}

// Kafka's tiered-storage cross-checks (LogConfig.validateRemoteStorage*).
func TestValidateRemote(t *testing.T) {
	for _, c := range []struct {
		configs map[string]string
		err     string
	}{
		{map[string]string{"remote.storage.enable": "false", "cleanup.policy": "compact"}, ""},
		{map[string]string{"remote.storage.enable": "true", "cleanup.policy": "compact"}, "unsupported for the compacted topics"},
		{map[string]string{"remote.storage.enable": "true", "cleanup.policy": "delete,compact"}, "unsupported for the compacted topics"},
		{map[string]string{"remote.storage.enable": "true", "cleanup.policy": "delete"}, ""},
		{map[string]string{"remote.storage.enable": "true", "local.retention.ms": "1000", "retention.ms": "2000"}, ""},
		{map[string]string{"remote.storage.enable": "true", "local.retention.ms": "3000", "retention.ms": "2000"}, "Value must not be more than retention.ms property value: 2000"},
		{map[string]string{"remote.storage.enable": "true", "local.retention.ms": "-1", "retention.ms": "2000"}, "Value must not be -1 as retention.ms value is set as 2000"},
		{map[string]string{"remote.storage.enable": "true", "local.retention.ms": "-2", "retention.ms": "2000"}, ""},
		{map[string]string{"remote.storage.enable": "true", "local.retention.ms": "99999", "retention.ms": "-1"}, ""},
		{map[string]string{"remote.storage.enable": "true", "local.retention.bytes": "100", "retention.bytes": "10"}, "local.retention.bytes"},
		{map[string]string{"remote.storage.enable": "true", "local.retention.bytes": "10"}, ""},
		// Off: the local tier is not checked at all.
		{map[string]string{"local.retention.ms": "3000", "retention.ms": "2000"}, ""},
	} {
		err := Validate(c.configs)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("Validate(%v) = %v, want %q", c.configs, err, c.err)
		}
	}
}

// The overrides land on the storage fields they name.
func TestLogConfigApplies(t *testing.T) {
	d := storage.DefaultConfig()
	for _, c := range []struct {
		name, value string
		check       func(storage.Config) bool
	}{
		{"cleanup.policy", "compact", func(c storage.Config) bool { return c.Compact }},
		{"cleanup.policy", "delete", func(c storage.Config) bool { return !c.Compact }},
		{"delete.retention.ms", "1500", func(c storage.Config) bool { return c.DeleteRetention == 1500*time.Millisecond }},
		{"index.interval.bytes", "128", func(c storage.Config) bool { return c.IndexIntervalBytes == 128 }},
		{"max.compaction.lag.ms", "60000", func(c storage.Config) bool { return c.MaxCompactionLag == time.Minute }},
		{"max.compaction.lag.ms", strconv.FormatInt(math.MaxInt64, 10), func(c storage.Config) bool { return c.MaxCompactionLag == 0 }},
		{"max.message.bytes", "1000", func(c storage.Config) bool { return c.MaxMessageBytes == 1000 }},
		{"min.cleanable.dirty.ratio", "0.1", func(c storage.Config) bool { return c.MinCleanableRatio == 0.1 }},
		{"min.compaction.lag.ms", "20", func(c storage.Config) bool { return c.MinCompactionLag == 20*time.Millisecond }},
		{"retention.bytes", "4096", func(c storage.Config) bool { return c.RetentionBytes == 4096 }},
		{"retention.ms", "-1", func(c storage.Config) bool { return c.RetentionMs < 0 }},
		// Past what a Duration holds: forever, not a wrapped negative.
		{"retention.ms", strconv.FormatInt(math.MaxInt64, 10), func(c storage.Config) bool { return c.RetentionMs == math.MaxInt64 }},
		{"segment.bytes", "1048576", func(c storage.Config) bool { return c.SegmentBytes == 1<<20 }},
		{"segment.index.bytes", "800", func(c storage.Config) bool { return c.IndexMaxEntries == 100 }},
		{"segment.jitter.ms", "7", func(c storage.Config) bool { return c.SegmentJitter == 7*time.Millisecond }},
		{"segment.ms", "3600000", func(c storage.Config) bool { return c.SegmentMs == time.Hour }},
		{"flush.messages", "100", func(c storage.Config) bool { return c.FlushMessages == 100 && c.Flush == d.Flush }},
		{"flush.messages", strconv.FormatInt(math.MaxInt64, 10), func(c storage.Config) bool { return c.FlushMessages == d.FlushMessages }},
		{"flush.ms", "3600000", func(c storage.Config) bool {
			return c.Flush.Mode == storage.FlushInterval && c.Flush.Interval == time.Hour
		}},
		{"flush.ms", "3600001", func(c storage.Config) bool { return c.Flush.Mode == storage.FlushOS }},
		// Stored and reported only: the log config is the defaults.
		{"min.insync.replicas", "2", func(c storage.Config) bool { return configEqual(c, d) }},
		{"message.timestamp.type", "LogAppendTime", func(c storage.Config) bool { return configEqual(c, d) }},
		{"unknown.name", "1", func(c storage.Config) bool { return configEqual(c, d) }},
	} {
		got := LogConfig(d, map[string]string{c.name: c.value}, func(name, v string, err error) {
			t.Errorf("%s=%s refused: %v", name, v, err)
		})
		if !c.check(got) {
			t.Errorf("LogConfig(%s=%s) = %+v", c.name, c.value, got)
		}
	}
}

func TestHelpers(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{-1, "-1"}, {-time.Hour, "-1"}, {0, "0"}, {1500 * time.Microsecond, "1"}, {time.Hour, "3600000"}} {
		if got := MsString(c.d); got != c.want {
			t.Errorf("MsString(%v) = %q, want %q", c.d, got, c.want)
		}
	}
	for _, c := range []struct {
		in   string
		want []string
	}{{"", nil}, {" , ,", nil}, {"a", []string{"a"}}, {" a , b,,c ", []string{"a", "b", "c"}}} {
		if got := SplitList(c.in); !slices.Equal(got, c.want) {
			t.Errorf("SplitList(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, c := range []struct {
		in   int64
		want string
	}{{0, "-"}, {1, "14"}, {14, "14"}, {1 << 20, "1048576"}, {1 << 40, "2147483647"}, {-5, "-"}} {
		got, ok := Internal(c.in)["segment.bytes"]
		if c.want == "-" && ok || c.want != "-" && got != c.want {
			t.Errorf("Internal(%d) segment.bytes = %q (%v), want %q", c.in, got, ok, c.want)
		}
	}
	if err := Validate(Internal(1 << 40)); err != nil {
		t.Fatalf("Internal's configs do not validate: %v", err)
	}
}

func TestRestoreStarts(t *testing.T) {
	starts, err := ParseRestoreStarts("100:3, 0:0 ,7:1")
	if err != nil || !slices.Equal(starts, []RestoreStart{{100, 3}, {0, 0}, {7, 1}}) {
		t.Fatalf("ParseRestoreStarts: %v %v", starts, err)
	}
	if s, err := ParseRestoreStarts(""); err != nil || s != nil {
		t.Fatalf("empty: %v %v", s, err)
	}
	for _, bad := range []string{"1", "1:", ":1", "1:2:3", "x:1", "-1:0", "0:-1"} {
		if _, err := ParseRestoreStarts(bad); err == nil {
			t.Errorf("ParseRestoreStarts(%q) accepted", bad)
		}
	}
	cfg := map[string]string{"remote.storage.restore.starts": "100:3,0:0,7:1"}
	for i, want := range []RestoreStart{{100, 3}, {0, 0}, {7, 1}, {}, {}} {
		if got := RestoreStartOf(cfg, int32(i)); got != want {
			t.Errorf("RestoreStartOf(%d) = %v, want %v", i, got, want)
		}
	}
	// A value that no longer parses is "not restored", never a panic.
	if got := RestoreStartOf(map[string]string{"remote.storage.restore.starts": "junk"}, 0); got != (RestoreStart{}) {
		t.Fatalf("junk: %v", got)
	}
}

// Dynamic broker configs: broker names in, topic names out, the later
// layer winning, a topic's override over both.
func TestDynamic(t *testing.T) {
	if s, ok := BrokerSpec("log.retention.ms"); !ok || s.Name != "retention.ms" {
		t.Fatalf("BrokerSpec(log.retention.ms) = %q %v", s.Name, ok)
	}
	for _, n := range []string{"", "retention.ms", "remote.storage.enable", "num.io.threads"} {
		if s, ok := BrokerSpec(n); ok {
			t.Errorf("BrokerSpec(%q) = %q", n, s.Name)
		}
	}
	for _, c := range []struct {
		configs map[string]string
		err     string
	}{
		{nil, ""},
		{map[string]string{"log.retention.ms": "1000", "log.cleanup.policy": "compact"}, ""},
		{map[string]string{"log.retention.ms": "-7"}, "Invalid value -7 for configuration log.retention.ms"},
		{map[string]string{"num.io.threads": "8", "log.dirs": "/x"}, "Cannot update these configs dynamically: log.dirs, num.io.threads"},
		{map[string]string{"retention.ms": "1000"}, "Cannot update these configs dynamically: retention.ms"},
	} {
		err := ValidateBroker(c.configs)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("ValidateBroker(%v) = %v, want %q", c.configs, err, c.err)
		}
	}
	if d := NewDynamic(nil, map[string]string{"num.io.threads": "8"}); d != nil {
		t.Fatalf("NewDynamic of no topic defaults = %v, want nil", d)
	}
	d := NewDynamic(
		map[string]string{"log.retention.ms": "1000", "log.segment.bytes": "2048"}, // cluster-wide
		map[string]string{"log.retention.ms": "2000", "num.io.threads": "8"},       // this broker
	)
	if len(d) != 2 || d["retention.ms"] != "2000" || d["segment.bytes"] != "2048" {
		t.Fatalf("NewDynamic = %v", d)
	}
	under := d.Under(map[string]string{"segment.bytes": "4096", "cleanup.policy": "compact"})
	if len(under) != 3 || under["retention.ms"] != "2000" || under["segment.bytes"] != "4096" || under["cleanup.policy"] != "compact" {
		t.Fatalf("Under = %v", under)
	}
	if d["segment.bytes"] != "2048" {
		t.Fatal("Under changed the dynamic defaults")
	}
	own := map[string]string{"retention.ms": "5"}
	if got := Dynamic(nil).Under(own); len(got) != 1 || got["retention.ms"] != "5" {
		t.Fatalf("nil Under = %v", got)
	}
	cfg := LogConfig(storage.DefaultConfig(), d.Under(nil), nil)
	if cfg.RetentionMs != 2*time.Second || cfg.SegmentBytes != 2048 {
		t.Fatalf("LogConfig under dynamic defaults: retention %v segment %d", cfg.RetentionMs, cfg.SegmentBytes)
	}
}

// Value: the override, else the broker's value; MinInsyncReplicas falls
// back to 1 on a value that no longer parses.
func TestValue(t *testing.T) {
	d := storage.DefaultConfig()
	d.Flush = storage.FlushPolicy{Mode: storage.FlushSync}
	for _, c := range []struct {
		overrides map[string]string
		name      string
		want      string
	}{
		{nil, "flush.ms", "0"},
		{nil, "flush.messages", "1"},
		{map[string]string{"flush.ms": "10"}, "flush.ms", "10"},
		{nil, "compression.type", "producer"},
		{nil, "no.such", ""},
		{map[string]string{"no.such": "x"}, "no.such", "x"},
		{nil, "retention.ms", MsString(d.RetentionMs)},
	} {
		if got := Value(d, c.overrides, c.name); got != c.want {
			t.Errorf("Value(%v, %s) = %q, want %q", c.overrides, c.name, got, c.want)
		}
	}
	if n := MinInsyncReplicas(d, map[string]string{"min.insync.replicas": "zero"}); n != 1 {
		t.Fatalf("MinInsyncReplicas of junk = %d", n)
	}
	if LogAppendTime(d, nil) || LogAppendTime(d, map[string]string{"message.timestamp.type": "CreateTime"}) {
		t.Fatal("LogAppendTime without the override")
	}
}
