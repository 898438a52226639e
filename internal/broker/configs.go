package broker

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/storage"
)

// configSpec describes one topic config: its Kafka name and type, the
// broker config that supplies its default, how a value is validated and
// how it changes the log's storage.Config.
type configSpec struct {
	name       string
	typ        kmsg.ConfigType
	brokerName string // the broker-level synonym (log.retention.ms, ...)
	doc        string
	// validate checks a value, returning a message for INVALID_CONFIG.
	validate func(v string) error
	// apply sets the value on a log config; nil for configs stored and
	// reported but not acted on by the storage.
	apply func(cfg *storage.Config, v string) error
	// brokerValue is the broker-level value (from the broker's config).
	brokerValue func(b *Broker) string
	// kafkaDefault is Kafka's default; a broker value that differs is
	// reported as STATIC_BROKER_CONFIG.
	kafkaDefault string
}

func (s configSpec) brokerDefault(b *Broker) string { return s.brokerValue(b) }

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

func boolean(v string) error {
	if !strings.EqualFold(v, "true") && !strings.EqualFold(v, "false") {
		return fmt.Errorf("value %q must be true or false", v)
	}
	return nil
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

func msString(d time.Duration) string {
	if d < 0 {
		return "-1"
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

func fixed(v string) func(*Broker) string { return func(*Broker) string { return v } }

const maxLong = math.MaxInt64

// flush.ms and flush.messages are mapped onto Holdfast's durability policy
// rather than Kafka's periodic flush: a topic override of flush.ms=0 or
// flush.messages=1 means flush=sync (fsync before ack), flush.ms=D (up to
// an hour) means flush=interval:D, a larger flush.ms means flush=os (the
// page cache, Kafka's default). Other flush.messages values are stored but
// ignored: the log fsyncs by time or per ack, never by message count. The
// broker-level values are reported from the broker's flush policy.
func brokerFlushMs(b *Broker) string {
	switch p := b.cfg.LogDefaults.Flush; p.Mode {
	case storage.FlushSync:
		return "0"
	case storage.FlushInterval:
		return strconv.FormatInt(p.Interval.Milliseconds(), 10)
	}
	return strconv.FormatInt(maxLong, 10)
}

func brokerFlushMessages(b *Broker) string {
	if b.cfg.LogDefaults.Flush.Mode == storage.FlushSync {
		return "1"
	}
	return strconv.FormatInt(maxLong, 10)
}

// topicConfigs are the topic configs Holdfast accepts, by Kafka name.
// Anything else is INVALID_CONFIG, as Kafka answers unknown names.
var topicConfigs = map[string]configSpec{}

func init() {
	for _, s := range []configSpec{
		{
			name: "cleanup.policy", typ: kmsg.ConfigTypeList, brokerName: "log.cleanup.policy",
			doc:          "Either \"delete\" or \"compact\" or both. \"delete\" discards old segments by retention.ms/retention.bytes. \"compact\" is accepted and stored, but Holdfast does not compact logs yet: a compacted topic keeps every record.",
			validate:     validateCleanupPolicy,
			brokerValue:  fixed("delete"),
			kafkaDefault: "delete",
		},
		{
			name: "compression.type", typ: kmsg.ConfigTypeString, brokerName: "compression.type",
			doc:          "Holdfast stores batches as the producer compressed them (validated, never recompressed), so only \"producer\" is supported.",
			validate:     oneOf("producer"),
			brokerValue:  fixed("producer"),
			kafkaDefault: "producer",
		},
		{
			name: "delete.retention.ms", typ: kmsg.ConfigTypeLong, brokerName: "log.cleaner.delete.retention.ms",
			doc:          "How long delete tombstones are kept on compacted topics. Stored; takes effect when compaction is implemented.",
			validate:     intRange(0, maxLong),
			brokerValue:  fixed("86400000"),
			kafkaDefault: "86400000",
		},
		{
			name: "file.delete.delay.ms", typ: kmsg.ConfigTypeLong, brokerName: "log.segment.delete.delay.ms",
			doc:          "Delay before a deleted segment file is removed. Stored; Holdfast removes segments when retention deletes them.",
			validate:     intRange(0, maxLong),
			brokerValue:  fixed("60000"),
			kafkaDefault: "60000",
		},
		{
			name: "flush.messages", typ: kmsg.ConfigTypeLong, brokerName: "log.flush.interval.messages",
			doc:         "1 means fsync before every acknowledgement (Holdfast's flush=sync, the default). Other values are stored but ignored: Holdfast fsyncs per acknowledgement or by time (flush.ms), never by message count.",
			validate:    intRange(1, maxLong),
			apply:       applyFlushMessages,
			brokerValue: brokerFlushMessages, kafkaDefault: strconv.FormatInt(maxLong, 10),
		},
		{
			name: "flush.ms", typ: kmsg.ConfigTypeLong, brokerName: "log.flush.interval.ms",
			doc:         "0 means fsync before every acknowledgement (flush=sync, Holdfast's default); up to an hour means fsync at most this long after an append (flush=interval); larger leaves flushing to the OS page cache (flush=os, Kafka's default, lossy on power failure).",
			validate:    intRange(0, maxLong),
			apply:       applyFlushMs,
			brokerValue: brokerFlushMs, kafkaDefault: strconv.FormatInt(maxLong, 10),
		},
		{
			name: "index.interval.bytes", typ: kmsg.ConfigTypeInt, brokerName: "log.index.interval.bytes",
			doc:      "How many bytes of batches between entries of the offset index.",
			validate: intRange(0, math.MaxInt32),
			apply: func(c *storage.Config, v string) error {
				n, err := parseInt(v, 0, math.MaxInt32)
				c.IndexIntervalBytes = int(n)
				return err
			},
			brokerValue:  func(b *Broker) string { return strconv.Itoa(b.cfg.LogDefaults.IndexIntervalBytes) },
			kafkaDefault: "4096",
		},
		{
			name: "max.compaction.lag.ms", typ: kmsg.ConfigTypeLong, brokerName: "log.cleaner.max.compaction.lag.ms",
			doc:      "Stored; takes effect when compaction is implemented.",
			validate: intRange(1, maxLong), brokerValue: fixed(strconv.FormatInt(maxLong, 10)), kafkaDefault: strconv.FormatInt(maxLong, 10),
		},
		{
			name: "max.message.bytes", typ: kmsg.ConfigTypeInt, brokerName: "message.max.bytes",
			doc:      "The largest record batch the topic accepts, after compression. Holdfast caps it at 64 MiB.",
			validate: intRange(0, storageMaxMessageBytes),
			apply: func(c *storage.Config, v string) error {
				n, err := parseInt(v, 0, storageMaxMessageBytes)
				c.MaxMessageBytes = int(n)
				return err
			},
			brokerValue:  func(b *Broker) string { return strconv.Itoa(b.cfg.LogDefaults.MaxMessageBytes) },
			kafkaDefault: "1048588",
		},
		{
			name: "message.timestamp.type", typ: kmsg.ConfigTypeString, brokerName: "log.message.timestamp.type",
			doc:          "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch with the broker's append time.",
			validate:     oneOf("CreateTime", "LogAppendTime"),
			brokerValue:  fixed("CreateTime"),
			kafkaDefault: "CreateTime",
		},
		{
			name: "min.cleanable.dirty.ratio", typ: kmsg.ConfigTypeDouble, brokerName: "log.cleaner.min.cleanable.ratio",
			doc:      "Stored; takes effect when compaction is implemented.",
			validate: doubleRange(0, 1), brokerValue: fixed("0.5"), kafkaDefault: "0.5",
		},
		{
			name: "min.compaction.lag.ms", typ: kmsg.ConfigTypeLong, brokerName: "log.cleaner.min.compaction.lag.ms",
			doc:      "Stored; takes effect when compaction is implemented.",
			validate: intRange(0, maxLong), brokerValue: fixed("0"), kafkaDefault: "0",
		},
		{
			name: "min.insync.replicas", typ: kmsg.ConfigTypeInt, brokerName: "min.insync.replicas",
			doc:          "With acks=all, a produce fails with NOT_ENOUGH_REPLICAS unless this many replicas are in sync. A single node has one replica.",
			validate:     intRange(1, math.MaxInt32),
			brokerValue:  fixed("1"),
			kafkaDefault: "1",
		},
		{
			name: "preallocate", typ: kmsg.ConfigTypeBoolean, brokerName: "log.preallocate",
			doc:      "Stored; Holdfast does not preallocate segment files.",
			validate: boolean, brokerValue: fixed("false"), kafkaDefault: "false",
		},
		{
			name: "retention.bytes", typ: kmsg.ConfigTypeLong, brokerName: "log.retention.bytes",
			doc:      "The most bytes a partition keeps before deleting its oldest segments; -1 for no limit. Checked every log.retention.check.interval.ms.",
			validate: intRange(-1, maxLong),
			apply: func(c *storage.Config, v string) error {
				n, err := parseInt(v, -1, maxLong)
				c.RetentionBytes = n
				return err
			},
			brokerValue:  func(b *Broker) string { return strconv.FormatInt(b.cfg.LogDefaults.RetentionBytes, 10) },
			kafkaDefault: "-1",
		},
		{
			name: "retention.ms", typ: kmsg.ConfigTypeLong, brokerName: "log.retention.ms",
			doc:      "How long a segment is kept after its newest record; -1 for no limit. Checked every log.retention.check.interval.ms.",
			validate: intRange(-1, maxLong),
			apply: func(c *storage.Config, v string) error {
				n, err := parseInt(v, -1, maxLong)
				c.RetentionMs = msDuration(n)
				return err
			},
			brokerValue:  func(b *Broker) string { return msString(b.cfg.LogDefaults.RetentionMs) },
			kafkaDefault: "604800000",
		},
		{
			name: "segment.bytes", typ: kmsg.ConfigTypeInt, brokerName: "log.segment.bytes",
			doc:      "The size at which a segment file is rolled. Holdfast's minimum is 1024.",
			validate: intRange(minSegmentBytes, math.MaxInt32),
			apply: func(c *storage.Config, v string) error {
				n, err := parseInt(v, minSegmentBytes, math.MaxInt32)
				c.SegmentBytes = n
				return err
			},
			brokerValue:  func(b *Broker) string { return strconv.FormatInt(b.cfg.LogDefaults.SegmentBytes, 10) },
			kafkaDefault: "1073741824",
		},
		{
			name: "segment.index.bytes", typ: kmsg.ConfigTypeInt, brokerName: "log.index.size.max.bytes",
			doc:      "Stored; Holdfast sizes its indexes itself.",
			validate: intRange(4, math.MaxInt32), brokerValue: fixed("10485760"), kafkaDefault: "10485760",
		},
		{
			name: "segment.jitter.ms", typ: kmsg.ConfigTypeLong, brokerName: "log.roll.jitter.ms",
			doc:      "Stored; Holdfast rolls segments at exactly segment.ms.",
			validate: intRange(0, maxLong), brokerValue: fixed("0"), kafkaDefault: "0",
		},
		{
			name: "segment.ms", typ: kmsg.ConfigTypeLong, brokerName: "log.roll.ms",
			doc:      "How long after its first record a segment is rolled, so retention can delete it.",
			validate: intRange(1, maxLong),
			apply: func(c *storage.Config, v string) error {
				n, err := parseInt(v, 1, maxLong)
				c.SegmentMs = msDuration(n)
				return err
			},
			brokerValue:  func(b *Broker) string { return msString(b.cfg.LogDefaults.SegmentMs) },
			kafkaDefault: "604800000",
		},
		{
			name: "unclean.leader.election.enable", typ: kmsg.ConfigTypeBoolean, brokerName: "unclean.leader.election.enable",
			doc:      "Holdfast never elects a replica that lacks committed data, so only false is accepted.",
			validate: oneOf("false"), brokerValue: fixed("false"), kafkaDefault: "false",
		},
	} {
		topicConfigs[s.name] = s
	}
}

// Storage limits that config validation reports instead of letting the
// storage clamp silently.
const (
	minSegmentBytes        = 1024
	storageMaxMessageBytes = 64 << 20
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
	if err == nil && n == 1 {
		c.Flush = storage.FlushPolicy{Mode: storage.FlushSync}
	}
	return err
}

// validateTopicConfigs checks every name and value; the error is the
// message of an INVALID_CONFIG answer.
func validateTopicConfigs(configs map[string]string) error {
	names := make([]string, 0, len(configs))
	for n := range configs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		spec, ok := topicConfigs[n]
		if !ok {
			return fmt.Errorf("Unknown topic config name: %s", n)
		}
		if err := spec.validate(configs[n]); err != nil {
			return fmt.Errorf("Invalid value %s for configuration %s: %v", configs[n], n, err)
		}
	}
	return nil
}
