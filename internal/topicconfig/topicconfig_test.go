package topicconfig

import (
	"strings"
	"testing"
	"time"

	"holdfast/internal/storage"
)

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		configs map[string]string
		err     string
	}{
		{map[string]string{"retention.ms": "1000", "cleanup.policy": "compact,delete"}, ""},
		{map[string]string{"no.such.config": "1"}, "Unknown topic config name: no.such.config"},
		{map[string]string{"segment.bytes": "13"}, "must be in [14,"},
		{map[string]string{"cleanup.policy": "compact,forever"}, "invalid cleanup.policy"},
		{map[string]string{"preallocate": "true"}, "only false is accepted"},
		{map[string]string{"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"}, "min.compaction.lag.ms (5000) > max.compaction.lag.ms (1000)"},
	} {
		err := Validate(c.configs)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("Validate(%v) = %v, want %q", c.configs, err, c.err)
		}
	}
}

func TestLogConfig(t *testing.T) {
	d := storage.DefaultConfig()
	for _, c := range []struct {
		overrides map[string]string
		want      storage.FlushPolicy
	}{
		{nil, d.Flush},
		{map[string]string{"flush.ms": "0"}, storage.FlushPolicy{Mode: storage.FlushSync}},
		{map[string]string{"flush.ms": "250"}, storage.FlushPolicy{Mode: storage.FlushInterval, Interval: 250 * time.Millisecond}},
		{map[string]string{"flush.ms": "9223372036854775807"}, storage.FlushPolicy{Mode: storage.FlushOS}},
		// flush.messages=1 (an fsync per message) wins over flush.ms.
		{map[string]string{"flush.ms": "9223372036854775807", "flush.messages": "1"}, storage.FlushPolicy{Mode: storage.FlushSync}},
	} {
		if got := LogConfig(d, c.overrides, nil).Flush; got != c.want {
			t.Errorf("LogConfig(%v).Flush = %v, want %v", c.overrides, got, c.want)
		}
	}
	var bad []string
	cfg := LogConfig(d, map[string]string{"retention.ms": "oops", "segment.bytes": "4096", "cleanup.policy": "compact"},
		func(name, _ string, _ error) { bad = append(bad, name) })
	if cfg.SegmentBytes != 4096 || !cfg.Compact || cfg.RetentionMs != d.RetentionMs || len(bad) != 1 || bad[0] != "retention.ms" {
		t.Fatalf("segment.bytes %d compact %v retention %v bad %v", cfg.SegmentBytes, cfg.Compact, cfg.RetentionMs, bad)
	}
	if Value(d, nil, "message.timestamp.type") != "CreateTime" || !LogAppendTime(d, map[string]string{"message.timestamp.type": "LogAppendTime"}) {
		t.Fatal("message.timestamp.type")
	}
	if MinInsyncReplicas(d, map[string]string{"min.insync.replicas": "2"}) != 2 || MinInsyncReplicas(d, nil) != 1 {
		t.Fatal("min.insync.replicas")
	}
	if c := Internal(1 << 40); c["segment.bytes"] != "2147483647" || c["cleanup.policy"] != "compact" {
		t.Fatalf("Internal: %v", c)
	}
}
