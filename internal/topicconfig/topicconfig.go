// Package topicconfig is Kafka's topic-config model: which topic configs
// exist, their types and documentation, their broker-level defaults (from
// the broker's log defaults), how a value is validated, and how a topic's
// overrides become its partitions' storage.Config. Request handling
// (DescribeConfigs, AlterConfigs) lives in the broker; storing overrides
// in the controller.
package topicconfig

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/storage"
)

// Spec describes one topic config: its Kafka name and type, the broker
// config that supplies its default, how a value is validated and how it
// changes the log's storage.Config.
type Spec struct {
	Name       string
	Type       kmsg.ConfigType
	BrokerName string // the broker-level synonym (log.retention.ms, ...)
	Doc        string
	// KafkaDefault is Kafka's default; a broker value that differs is
	// reported as STATIC_BROKER_CONFIG.
	KafkaDefault string

	// validate checks a value, returning a message for INVALID_CONFIG.
	validate func(v string) error
	// apply sets the value on a log config; nil for configs stored and
	// reported but not acted on by the storage.
	apply func(cfg *storage.Config, v string) error
	// brokerValue is the broker-level value, from the broker's log
	// defaults.
	brokerValue func(d storage.Config) string
}

// BrokerValue is the config's broker-level value under the log defaults d
// (what a topic without an override gets).
func (s Spec) BrokerValue(d storage.Config) string { return s.brokerValue(d) }

func parseInt(v string, lo, hi int64) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("value %q is not a number", v)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("value %d must be in [%d, %d]", n, lo, hi)
	}
	return n, nil
}

func intRange(lo, hi int64) func(string) error {
	return func(v string) error { _, err := parseInt(v, lo, hi); return err }
}

func oneOf(vals ...string) func(string) error {
	return func(v string) error {
		if !slices.Contains(vals, v) {
			return fmt.Errorf("value %q must be one of %s", v, strings.Join(vals, ", "))
		}
		return nil
	}
}

func doubleRange(lo, hi float64) func(string) error {
	return func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < lo || f > hi {
			return fmt.Errorf("value %q must be a number in [%g, %g]", v, lo, hi)
		}
		return nil
	}
}

func MsString(d time.Duration) string {
	if d < 0 {
		return "-1"
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

func fixed(v string) func(storage.Config) string { return func(storage.Config) string { return v } }

const maxLong = math.MaxInt64

// flush.ms and flush.messages are mapped onto Holdfast's durability policy
// rather than Kafka's periodic flush: a topic override of flush.ms=0 or
// flush.messages=1 means flush=sync (fsync before ack), flush.ms=D (up to
// an hour) means flush=interval:D, a larger flush.ms means flush=os (the
// page cache, Kafka's default). Other flush.messages values are stored but
// ignored: the log fsyncs by time or per ack, never by message count. The
// broker-level values are reported from the broker's flush policy.
func brokerFlushMs(d storage.Config) string {
	switch p := d.Flush; p.Mode {
	case storage.FlushSync:
		return "0"
	case storage.FlushInterval:
		return strconv.FormatInt(p.Interval.Milliseconds(), 10)
	}
	return strconv.FormatInt(maxLong, 10)
}

func brokerFlushMessages(d storage.Config) string {
	if d.Flush.Mode == storage.FlushSync {
		return "1"
	}
	return strconv.FormatInt(maxLong, 10)
}

// specs are the topic configs Holdfast accepts, by Kafka name. Anything
// else is INVALID_CONFIG, as Kafka answers unknown names.
var specs = byName(specList)

func byName(l []Spec) map[string]Spec {
	m := make(map[string]Spec, len(l))
	for _, s := range l {
		m[s.Name] = s
	}
	return m
}

// specList is every topic config Holdfast accepts (specs indexes it by
// name).
var specList = []Spec{
	{
		Name: "cleanup.policy", Type: kmsg.ConfigTypeList, BrokerName: "log.cleanup.policy",
		Doc:      "Either \"delete\" or \"compact\" or both. \"delete\" discards old segments by retention.ms/retention.bytes. \"compact\" keeps the latest record of every key (Kafka's log cleaner, see docs/compaction.md) and refuses records without a key; with both, old segments are also deleted by retention.",
		validate: validateCleanupPolicy,
		apply: func(c *storage.Config, v string) error {
			c.Compact = slices.Contains(SplitList(v), "compact")
			return nil
		},
		brokerValue:  fixed("delete"),
		KafkaDefault: "delete",
	},
	{
		Name: "compression.type", Type: kmsg.ConfigTypeString, BrokerName: "compression.type",
		Doc:          "Holdfast stores batches as the producer compressed them (validated, never recompressed), so only \"producer\" is supported.",
		validate:     oneOf("producer"),
		brokerValue:  fixed("producer"),
		KafkaDefault: "producer",
	},
	{
		Name: "delete.retention.ms", Type: kmsg.ConfigTypeLong, BrokerName: "log.cleaner.delete.retention.ms",
		Doc:      "How long the cleaner keeps a tombstone (and a transaction marker whose records are gone) after it first cleaned it: a consumer reading a compacted topic from the start within this time sees the delete.",
		validate: intRange(0, maxLong),
		apply: func(c *storage.Config, v string) error {
			n, err := parseInt(v, 0, maxLong)
			if err != nil {
				return err
			}
			c.DeleteRetention = msDuration(n)
			return nil
		},
		brokerValue:  func(d storage.Config) string { return MsString(d.DeleteRetention) },
		KafkaDefault: "86400000",
	},
	{
		Name: "file.delete.delay.ms", Type: kmsg.ConfigTypeLong, BrokerName: "log.segment.delete.delay.ms",
		Doc:          "Kafka waits this long before removing a deleted segment's files, for readers that may still use them. Holdfast removes them at once and a reader holding a segment keeps reading its open file, so only 0 is accepted.",
		validate:     refuseUnless("0", "Holdfast removes a deleted segment's files at once (a reader still holding the segment keeps its open file), so there is no delay to set"),
		brokerValue:  fixed("0"),
		KafkaDefault: "60000",
	},
	{
		Name: "flush.messages", Type: kmsg.ConfigTypeLong, BrokerName: "log.flush.interval.messages",
		Doc:         "1 means fsync before every acknowledgement (Holdfast's flush=sync, the default). N > 1 under flush.ms > 0 (interval or os policy) starts an fsync in the background every N records, Kafka's meaning; under flush=sync every acknowledgement already waits for an fsync.",
		validate:    intRange(1, maxLong),
		apply:       applyFlushMessages,
		brokerValue: brokerFlushMessages, KafkaDefault: strconv.FormatInt(maxLong, 10),
	},
	{
		Name: "flush.ms", Type: kmsg.ConfigTypeLong, BrokerName: "log.flush.interval.ms",
		Doc:         "0 means fsync before every acknowledgement (flush=sync, Holdfast's default); up to an hour means fsync at most this long after an append (flush=interval); larger leaves flushing to the OS page cache (flush=os, Kafka's default, lossy on power failure).",
		validate:    intRange(0, maxLong),
		apply:       applyFlushMs,
		brokerValue: brokerFlushMs, KafkaDefault: strconv.FormatInt(maxLong, 10),
	},
	{
		Name: "index.interval.bytes", Type: kmsg.ConfigTypeInt, BrokerName: "log.index.interval.bytes",
		Doc:      "How many bytes of batches between entries of the offset index.",
		validate: intRange(0, math.MaxInt32),
		apply: func(c *storage.Config, v string) error {
			n, err := parseInt(v, 0, math.MaxInt32)
			if err != nil {
				return err
			}
			c.IndexIntervalBytes = int(n)
			return nil
		},
		brokerValue:  func(d storage.Config) string { return strconv.Itoa(d.IndexIntervalBytes) },
		KafkaDefault: "4096",
	},
	{
		Name: "max.compaction.lag.ms", Type: kmsg.ConfigTypeLong, BrokerName: "log.cleaner.max.compaction.lag.ms",
		Doc:      "On a compacted topic, the longest a record stays uncompacted: a log whose oldest dirty record is older is cleaned whatever its dirty ratio, and its active segment rolls this long after its first record.",
		validate: intRange(1, maxLong),
		apply: func(c *storage.Config, v string) error {
			n, err := parseInt(v, 1, maxLong)
			if err != nil {
				return err
			}
			c.MaxCompactionLag = 0
			if n < maxLong {
				c.MaxCompactionLag = msDuration(n)
			}
			return nil
		},
		brokerValue: func(d storage.Config) string {
			if d := d.MaxCompactionLag; d > 0 {
				return MsString(d)
			}
			return strconv.FormatInt(maxLong, 10)
		},
		KafkaDefault: strconv.FormatInt(maxLong, 10),
	},
	{
		Name: "max.message.bytes", Type: kmsg.ConfigTypeInt, BrokerName: "message.max.bytes",
		Doc:      "The largest record batch the topic accepts, after compression. Holdfast caps it at 64 MiB.",
		validate: intRange(0, MaxMessageBytes),
		apply: func(c *storage.Config, v string) error {
			n, err := parseInt(v, 0, MaxMessageBytes)
			if err != nil {
				return err
			}
			c.MaxMessageBytes = int(n)
			return nil
		},
		brokerValue:  func(d storage.Config) string { return strconv.Itoa(d.MaxMessageBytes) },
		KafkaDefault: "1048588",
	},
	{
		Name: "message.timestamp.type", Type: kmsg.ConfigTypeString, BrokerName: "log.message.timestamp.type",
		Doc:          "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch with the broker's append time.",
		validate:     oneOf("CreateTime", "LogAppendTime"),
		brokerValue:  fixed("CreateTime"),
		KafkaDefault: "CreateTime",
	},
	{
		Name: "min.cleanable.dirty.ratio", Type: kmsg.ConfigTypeDouble, BrokerName: "log.cleaner.min.cleanable.ratio",
		Doc:      "A compacted log is cleaned when the bytes written since its last cleaning are at least this share of its (non-active) bytes.",
		validate: doubleRange(0, 1),
		apply: func(c *storage.Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return err
			}
			c.MinCleanableRatio = f
			return nil
		},
		brokerValue: func(d storage.Config) string {
			return strconv.FormatFloat(d.MinCleanableRatio, 'g', -1, 64)
		},
		KafkaDefault: "0.5",
	},
	{
		Name: "min.compaction.lag.ms", Type: kmsg.ConfigTypeLong, BrokerName: "log.cleaner.min.compaction.lag.ms",
		Doc:      "On a compacted topic, the shortest time a record stays uncompacted: segments holding a younger record are not cleaned yet.",
		validate: intRange(0, maxLong),
		apply: func(c *storage.Config, v string) error {
			n, err := parseInt(v, 0, maxLong)
			if err != nil {
				return err
			}
			c.MinCompactionLag = msDuration(n)
			return nil
		},
		brokerValue: func(d storage.Config) string { return MsString(d.MinCompactionLag) }, KafkaDefault: "0",
	},
	{
		Name: "min.insync.replicas", Type: kmsg.ConfigTypeInt, BrokerName: "min.insync.replicas",
		Doc:          "With acks=all, a produce fails with NOT_ENOUGH_REPLICAS unless this many replicas are in sync. A single node has one replica.",
		validate:     intRange(1, math.MaxInt32),
		brokerValue:  fixed("1"),
		KafkaDefault: "1",
	},
	{
		Name: "preallocate", Type: kmsg.ConfigTypeBoolean, BrokerName: "log.preallocate",
		Doc:         "Holdfast does not preallocate segment files (a file's size is the data it holds, which recovery relies on), so only false is accepted.",
		validate:    refuseUnless("false", "Holdfast does not preallocate segment files: a segment's size is the data it holds, which its recovery relies on"),
		brokerValue: fixed("false"), KafkaDefault: "false",
	},
	{
		Name: "local.retention.bytes", Type: kmsg.ConfigTypeLong, BrokerName: "log.local.retention.bytes",
		Doc:          "With remote.storage.enable, the most bytes a partition keeps on the local disk (the local tier, KIP-405); older segments are deleted locally once they are in the object store. -2 means retention.bytes.",
		validate:     intRange(-2, maxLong),
		brokerValue:  fixed("-2"),
		KafkaDefault: "-2",
	},
	{
		Name: "local.retention.ms", Type: kmsg.ConfigTypeLong, BrokerName: "log.local.retention.ms",
		Doc:          "With remote.storage.enable, how long a segment stays on the local disk (the local tier, KIP-405) once it is in the object store. -2 means retention.ms.",
		validate:     intRange(-2, maxLong),
		brokerValue:  fixed("-2"),
		KafkaDefault: "-2",
	},
	{
		Name: "remote.storage.enable", Type: kmsg.ConfigTypeBoolean,
		Doc:          "Tiered storage (KIP-405): closed segments of the topic go to the object store (remote.log.storage.s3.*) and are read back from it for offsets the local tier deleted. Needs remote.log.storage.system.enable on the brokers; a compacted topic cannot enable it.",
		validate:     oneOf("true", "false"),
		brokerValue:  fixed("false"),
		KafkaDefault: "false",
	},
	{
		Name: "remote.storage.restore.from", Type: kmsg.ConfigTypeString,
		Doc:          "Holdfast's own, at creation only: restore the topic from the object store (docs/tiered-storage.md, Restore). The directory of the old topic's objects, <topic>-<topic id>, or the old topic's name when the bucket holds one incarnation of it; the broker stores the full directory. Needs remote.storage.enable=true.",
		validate:     func(v string) error { return nil },
		brokerValue:  fixed(""),
		KafkaDefault: "",
	},
	{
		Name: "remote.storage.restore.starts", Type: kmsg.ConfigTypeList,
		Doc:          "Holdfast's own, set by the broker when it creates a topic with remote.storage.restore.from: per partition, <offset>:<leader epoch>, where its log starts (the end of what the object store holds of it) and the highest leader epoch found there (new leaders' epochs are above it).",
		validate:     func(v string) error { _, err := ParseRestoreStarts(v); return err },
		brokerValue:  fixed(""),
		KafkaDefault: "",
	},
	{
		Name: "retention.bytes", Type: kmsg.ConfigTypeLong, BrokerName: "log.retention.bytes",
		Doc:      "The most bytes a partition keeps before deleting its oldest segments; -1 for no limit. Checked every log.retention.check.interval.ms.",
		validate: intRange(-1, maxLong),
		apply: func(c *storage.Config, v string) error {
			n, err := parseInt(v, -1, maxLong)
			if err != nil {
				return err
			}
			c.RetentionBytes = n
			return nil
		},
		brokerValue:  func(d storage.Config) string { return strconv.FormatInt(d.RetentionBytes, 10) },
		KafkaDefault: "-1",
	},
	{
		Name: "retention.ms", Type: kmsg.ConfigTypeLong, BrokerName: "log.retention.ms",
		Doc:      "How long a segment is kept after its newest record; -1 for no limit. Checked every log.retention.check.interval.ms.",
		validate: intRange(-1, maxLong),
		apply: func(c *storage.Config, v string) error {
			n, err := parseInt(v, -1, maxLong)
			if err != nil {
				return err
			}
			c.RetentionMs = msDuration(n)
			return nil
		},
		brokerValue:  func(d storage.Config) string { return MsString(d.RetentionMs) },
		KafkaDefault: "604800000",
	},
	{
		Name: "segment.bytes", Type: kmsg.ConfigTypeInt, BrokerName: "log.segment.bytes",
		Doc:      "The size at which a segment file is rolled (at least 14, Kafka's minimum: a segment then holds one batch each).",
		validate: intRange(MinSegmentBytes, math.MaxInt32),
		apply: func(c *storage.Config, v string) error {
			n, err := parseInt(v, MinSegmentBytes, math.MaxInt32)
			if err != nil {
				return err
			}
			c.SegmentBytes = n
			return nil
		},
		brokerValue:  func(d storage.Config) string { return strconv.FormatInt(d.SegmentBytes, 10) },
		KafkaDefault: "1073741824",
	},
	{
		Name: "segment.index.bytes", Type: kmsg.ConfigTypeInt, BrokerName: "log.index.size.max.bytes",
		Doc:      "The offset index of a segment holds at most this many bytes / 8 entries (Kafka's entry size; Holdfast's own bound is 1048576 entries); a segment rolls when its index is full.",
		validate: intRange(8, math.MaxInt32),
		apply: func(c *storage.Config, v string) error {
			n, err := parseInt(v, 8, math.MaxInt32)
			if err != nil {
				return err
			}
			c.IndexMaxEntries = int(n / 8)
			return nil
		},
		brokerValue: fixed("10485760"), KafkaDefault: "10485760",
	},
	{
		Name: "segment.jitter.ms", Type: kmsg.ConfigTypeLong, BrokerName: "log.roll.jitter.ms",
		Doc:      "Each segment rolls a random time in [0, segment.jitter.ms) before segment.ms, so that segments created together do not all roll at once.",
		validate: intRange(0, maxLong),
		apply: func(c *storage.Config, v string) error {
			n, err := parseInt(v, 0, maxLong)
			if err != nil {
				return err
			}
			c.SegmentJitter = msDuration(n)
			return nil
		},
		brokerValue: func(d storage.Config) string { return MsString(d.SegmentJitter) }, KafkaDefault: "0",
	},
	{
		Name: "segment.ms", Type: kmsg.ConfigTypeLong, BrokerName: "log.roll.ms",
		Doc:      "How long after its first record a segment is rolled, so retention can delete it.",
		validate: intRange(1, maxLong),
		apply: func(c *storage.Config, v string) error {
			n, err := parseInt(v, 1, maxLong)
			if err != nil {
				return err
			}
			c.SegmentMs = msDuration(n)
			return nil
		},
		brokerValue:  func(d storage.Config) string { return MsString(d.SegmentMs) },
		KafkaDefault: "604800000",
	},
	{
		Name: "unclean.leader.election.enable", Type: kmsg.ConfigTypeBoolean, BrokerName: "unclean.leader.election.enable",
		Doc:      "Holdfast never elects a replica that lacks committed data, so only false is accepted.",
		validate: oneOf("false"), brokerValue: fixed("false"), KafkaDefault: "false",
	},
}

// Storage limits that config validation reports instead of letting the
// storage clamp silently.
const (
	MinSegmentBytes = 14
	MaxMessageBytes = 64 << 20
)

func msDuration(ms int64) time.Duration {
	if ms < 0 {
		return -1
	}
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

func validateCleanupPolicy(v string) error {
	if strings.TrimSpace(v) == "" {
		return fmt.Errorf("value must be delete, compact or both")
	}
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "delete" && p != "compact" {
			return fmt.Errorf("invalid cleanup.policy %q: must be delete, compact or both", p)
		}
	}
	return nil
}

func applyFlushMs(c *storage.Config, v string) error {
	n, err := parseInt(v, 0, maxLong)
	if err != nil {
		return err
	}
	switch {
	case n == 0:
		c.Flush = storage.FlushPolicy{Mode: storage.FlushSync}
	case n <= time.Hour.Milliseconds():
		c.Flush = storage.FlushPolicy{Mode: storage.FlushInterval, Interval: time.Duration(n) * time.Millisecond}
	default:
		c.Flush = storage.FlushPolicy{Mode: storage.FlushOS}
	}
	return nil
}

func applyFlushMessages(c *storage.Config, v string) error {
	n, err := parseInt(v, 1, maxLong)
	if err != nil {
		return err
	}
	if n == 1 {
		c.Flush = storage.FlushPolicy{Mode: storage.FlushSync}
	}
	if n > 1 && n < maxLong {
		c.FlushMessages = n
	}
	return nil
}

// refuseUnless accepts only the one value Holdfast implements, and says why.
func refuseUnless(only, why string) func(string) error {
	return func(v string) error {
		if strings.TrimSpace(v) != only {
			return fmt.Errorf("%s; only %s is accepted", why, only)
		}
		return nil
	}
}

// splitList splits a comma-separated config list, trimming blanks.
func SplitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// RestoreStart is where a partition of a topic restored from the object
// store starts: its first offset and the highest leader epoch of its
// restored records.
type RestoreStart struct {
	Offset int64
	Epoch  int32
}

// ParseRestoreStarts parses remote.storage.restore.starts: one
// <offset>:<leader epoch> per partition, by partition.
func ParseRestoreStarts(v string) ([]RestoreStart, error) {
	var out []RestoreStart
	for _, f := range SplitList(v) {
		os, es, ok := strings.Cut(f, ":")
		o, oerr := strconv.ParseInt(os, 10, 64)
		e, eerr := strconv.ParseInt(es, 10, 32)
		if !ok || oerr != nil || eerr != nil || o < 0 || e < 0 {
			return nil, fmt.Errorf("not <offset>:<leader epoch>: %q", f)
		}
		out = append(out, RestoreStart{Offset: o, Epoch: int32(e)})
	}
	return out, nil
}

// RestoreStartOf is where partition i of a topic restored from the object
// store starts (zero: not restored).
func RestoreStartOf(configs map[string]string, i int32) RestoreStart {
	starts, err := ParseRestoreStarts(configs["remote.storage.restore.starts"])
	if err != nil || int(i) >= len(starts) {
		return RestoreStart{}
	}
	return starts[i]
}

// Validate checks every name and value of a topic's overrides; the error
// is the message of an INVALID_CONFIG answer.
func Validate(configs map[string]string) error {
	names := make([]string, 0, len(configs))
	for n := range configs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		spec, ok := specs[n]
		if !ok {
			return fmt.Errorf("Unknown topic config name: %s", n)
		}
		if err := spec.validate(configs[n]); err != nil {
			return fmt.Errorf("Invalid value %s for configuration %s: %v", configs[n], n, err)
		}
	}
	// Kafka's cross-check (LogConfig.validateValues).
	minLag, maxLag := int64(0), int64(maxLong)
	if v, ok := configs["min.compaction.lag.ms"]; ok {
		minLag, _ = parseInt(v, 0, maxLong)
	}
	if v, ok := configs["max.compaction.lag.ms"]; ok {
		maxLag, _ = parseInt(v, 1, maxLong)
	}
	if minLag > maxLag {
		return fmt.Errorf("conflict topic config setting min.compaction.lag.ms (%d) > max.compaction.lag.ms (%d)", minLag, maxLag)
	}
	return validateRemote(configs)
}

// validateRemote is Kafka's LogConfig checks of the tiered-storage
// configs: no remote storage on a compacted topic, and the local tier
// within the total retention.
func validateRemote(configs map[string]string) error {
	if configs["remote.storage.enable"] != "true" {
		return nil
	}
	if slices.Contains(SplitList(configs["cleanup.policy"]), "compact") {
		return fmt.Errorf("Remote log storage is unsupported for the compacted topics")
	}
	for _, c := range [][2]string{{"local.retention.ms", "retention.ms"}, {"local.retention.bytes", "retention.bytes"}} {
		local, lok := configs[c[0]]
		total, tok := configs[c[1]]
		if !lok || !tok {
			continue
		}
		l, _ := parseInt(local, -2, maxLong)
		t, _ := parseInt(total, -1, maxLong)
		if l == -2 || t == -1 {
			continue
		}
		if l == -1 {
			return fmt.Errorf("Invalid value %s for configuration %s: Value must not be -1 as %s value is set as %d.", local, c[0], c[1], t)
		}
		if l > t {
			return fmt.Errorf("Invalid value %s for configuration %s: Value must not be more than %s property value: %d", local, c[0], c[1], t)
		}
	}
	return nil
}

// Lookup returns the spec of topic config name.
func Lookup(name string) (Spec, bool) {
	s, ok := specs[name]
	return s, ok
}

// Names lists every topic config, sorted.
func Names() []string { return slices.Sorted(maps.Keys(specs)) }

// LogConfig is the log configuration of a topic's partitions: the broker's
// log defaults with the topic's overrides on top. Overrides were validated
// on the way in; one that no longer parses is skipped and reported to bad
// (if set) rather than fatal.
func LogConfig(defaults storage.Config, overrides map[string]string, bad func(name, value string, err error)) storage.Config {
	cfg := defaults
	for _, name := range slices.Sorted(maps.Keys(overrides)) {
		spec, ok := specs[name]
		if !ok || spec.apply == nil {
			continue
		}
		if err := spec.apply(&cfg, overrides[name]); err != nil && bad != nil {
			bad(name, overrides[name], err)
		}
	}
	// flush.messages=1 asks for an fsync per message: the strongest
	// policy wins over whatever flush.ms says.
	if overrides["flush.messages"] == "1" {
		cfg.Flush = storage.FlushPolicy{Mode: storage.FlushSync}
	}
	return cfg
}

// Value is the effective value of a topic config: the topic's override,
// else the broker's default (as DescribeConfigs shows it); "" for an
// unknown name.
func Value(defaults storage.Config, overrides map[string]string, name string) string {
	if v, ok := overrides[name]; ok {
		return v
	}
	if spec, ok := specs[name]; ok {
		return spec.brokerValue(defaults)
	}
	return ""
}

// LogAppendTime reports whether message.timestamp.type is LogAppendTime:
// the broker then stamps each batch with its append time.
func LogAppendTime(defaults storage.Config, overrides map[string]string) bool {
	return Value(defaults, overrides, "message.timestamp.type") == "LogAppendTime"
}

// MinInsyncReplicas is min.insync.replicas: acks=all produce fails with
// NOT_ENOUGH_REPLICAS when fewer replicas are in sync.
func MinInsyncReplicas(defaults storage.Config, overrides map[string]string) int32 {
	n, err := parseInt(Value(defaults, overrides, "min.insync.replicas"), 1, math.MaxInt32)
	if err != nil {
		return 1
	}
	return int32(n)
}

// Internal is what an internal topic is created with, as in Kafka:
// compacted, with its own segment size (offsets.topic.segment.bytes,
// transaction.state.log.segment.bytes; 0 keeps the default) so that the
// active segment rolls and the cleaner gets to the history.
func Internal(segmentBytes int64) map[string]string {
	c := map[string]string{"cleanup.policy": "compact"}
	if segmentBytes > 0 {
		c["segment.bytes"] = strconv.FormatInt(min(max(segmentBytes, MinSegmentBytes), math.MaxInt32), 10)
	}
	return c
}

// Dynamic are the dynamic broker configs that stand in for a topic's
// missing overrides (kafka-configs.sh --entity-type brokers: a broker's
// own, then the cluster-wide default), by topic config name. nil: none.
type Dynamic map[string]string

// BrokerSpec is the topic config whose broker-level default is the broker
// config name (log.retention.ms is retention.ms's); only these can be
// changed while the brokers run.
func BrokerSpec(name string) (Spec, bool) {
	for _, s := range specs {
		if s.BrokerName == name && name != "" {
			return s, true
		}
	}
	return Spec{}, false
}

// ValidateBroker checks dynamic broker configs (broker names); the error
// is the message of an INVALID_CONFIG answer.
func ValidateBroker(configs map[string]string) error {
	var static []string
	for _, n := range slices.Sorted(maps.Keys(configs)) {
		spec, ok := BrokerSpec(n)
		if !ok {
			static = append(static, n)
			continue
		}
		if err := spec.validate(configs[n]); err != nil {
			return fmt.Errorf("Invalid value %s for configuration %s: %v", configs[n], n, err)
		}
	}
	if len(static) > 0 {
		return fmt.Errorf("Cannot update these configs dynamically: %s (only the topic defaults, log.retention.ms and the like, change while Holdfast runs; the others are set by flags and HOLDFAST_* variables)", strings.Join(static, ", "))
	}
	return nil
}

// NewDynamic turns layers of dynamic broker configs (broker names, the
// later layer winning: the cluster-wide default, then the broker's own)
// into topic-config defaults. Names that are not a topic default are left
// out (ValidateBroker refused them on the way in).
func NewDynamic(layers ...map[string]string) Dynamic {
	var d Dynamic
	for _, l := range layers {
		for n, v := range l {
			if spec, ok := BrokerSpec(n); ok {
				if d == nil {
					d = Dynamic{}
				}
				d[spec.Name] = v
			}
		}
	}
	return d
}

// Under is overrides with the dynamic defaults under them: what the topic
// gets. Without dynamic defaults it is overrides itself (no copy).
func (d Dynamic) Under(overrides map[string]string) map[string]string {
	if len(d) == 0 {
		return overrides
	}
	out := maps.Clone(map[string]string(d))
	maps.Copy(out, overrides)
	return out
}
