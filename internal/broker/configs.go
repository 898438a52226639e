package broker

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/controller"
	"holdfast/internal/storage"
	"holdfast/internal/wire"
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
			doc:      "Either \"delete\" or \"compact\" or both. \"delete\" discards old segments by retention.ms/retention.bytes. \"compact\" keeps the latest record of every key (Kafka's log cleaner, see docs/compaction.md) and refuses records without a key; with both, old segments are also deleted by retention.",
			validate: validateCleanupPolicy,
			apply: func(c *storage.Config, v string) error {
				c.Compact = slices.Contains(splitList(v), "compact")
				return nil
			},
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
			doc:      "How long the cleaner keeps a tombstone (and a transaction marker whose records are gone) after it first cleaned it: a consumer reading a compacted topic from the start within this time sees the delete.",
			validate: intRange(0, maxLong),
			apply: func(c *storage.Config, v string) error {
				n, err := parseInt(v, 0, maxLong)
				c.DeleteRetention = msDuration(n)
				return err
			},
			brokerValue:  func(b *Broker) string { return msString(b.cfg.LogDefaults.DeleteRetention) },
			kafkaDefault: "86400000",
		},
		{
			name: "file.delete.delay.ms", typ: kmsg.ConfigTypeLong, brokerName: "log.segment.delete.delay.ms",
			doc:          "Kafka waits this long before removing a deleted segment's files, for readers that may still use them. Holdfast removes them at once and a reader holding a segment keeps reading its open file, so only 0 is accepted.",
			validate:     refuseUnless("0", "Holdfast removes a deleted segment's files at once (a reader still holding the segment keeps its open file), so there is no delay to set"),
			brokerValue:  fixed("0"),
			kafkaDefault: "60000",
		},
		{
			name: "flush.messages", typ: kmsg.ConfigTypeLong, brokerName: "log.flush.interval.messages",
			doc:         "1 means fsync before every acknowledgement (Holdfast's flush=sync, the default). N > 1 under flush.ms > 0 (interval or os policy) starts an fsync in the background every N records, Kafka's meaning; under flush=sync every acknowledgement already waits for an fsync.",
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
			doc:      "On a compacted topic, the longest a record stays uncompacted: a log whose oldest dirty record is older is cleaned whatever its dirty ratio, and its active segment rolls this long after its first record.",
			validate: intRange(1, maxLong),
			apply: func(c *storage.Config, v string) error {
				n, err := parseInt(v, 1, maxLong)
				c.MaxCompactionLag = 0
				if n < maxLong {
					c.MaxCompactionLag = msDuration(n)
				}
				return err
			},
			brokerValue: func(b *Broker) string {
				if d := b.cfg.LogDefaults.MaxCompactionLag; d > 0 {
					return msString(d)
				}
				return strconv.FormatInt(maxLong, 10)
			},
			kafkaDefault: strconv.FormatInt(maxLong, 10),
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
			doc:      "A compacted log is cleaned when the bytes written since its last cleaning are at least this share of its (non-active) bytes.",
			validate: doubleRange(0, 1),
			apply: func(c *storage.Config, v string) error {
				f, err := strconv.ParseFloat(v, 64)
				c.MinCleanableRatio = f
				return err
			},
			brokerValue: func(b *Broker) string {
				return strconv.FormatFloat(b.cfg.LogDefaults.MinCleanableRatio, 'g', -1, 64)
			},
			kafkaDefault: "0.5",
		},
		{
			name: "min.compaction.lag.ms", typ: kmsg.ConfigTypeLong, brokerName: "log.cleaner.min.compaction.lag.ms",
			doc:      "On a compacted topic, the shortest time a record stays uncompacted: segments holding a younger record are not cleaned yet.",
			validate: intRange(0, maxLong),
			apply: func(c *storage.Config, v string) error {
				n, err := parseInt(v, 0, maxLong)
				c.MinCompactionLag = msDuration(n)
				return err
			},
			brokerValue: func(b *Broker) string { return msString(b.cfg.LogDefaults.MinCompactionLag) }, kafkaDefault: "0",
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
			doc:         "Holdfast does not preallocate segment files (a file's size is the data it holds, which recovery relies on), so only false is accepted.",
			validate:    refuseUnless("false", "Holdfast does not preallocate segment files: a segment's size is the data it holds, which its recovery relies on"),
			brokerValue: fixed("false"), kafkaDefault: "false",
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
			doc:      "The size at which a segment file is rolled (at least 14, Kafka's minimum: a segment then holds one batch each).",
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
			doc:      "The offset index of a segment holds at most this many bytes / 8 entries (Kafka's entry size; Holdfast's own bound is 1048576 entries); a segment rolls when its index is full.",
			validate: intRange(8, math.MaxInt32),
			apply: func(c *storage.Config, v string) error {
				n, err := parseInt(v, 8, math.MaxInt32)
				c.IndexMaxEntries = int(n / 8)
				return err
			},
			brokerValue: fixed("10485760"), kafkaDefault: "10485760",
		},
		{
			name: "segment.jitter.ms", typ: kmsg.ConfigTypeLong, brokerName: "log.roll.jitter.ms",
			doc:      "Each segment rolls a random time in [0, segment.jitter.ms) before segment.ms, so that segments created together do not all roll at once.",
			validate: intRange(0, maxLong),
			apply: func(c *storage.Config, v string) error {
				n, err := parseInt(v, 0, maxLong)
				c.SegmentJitter = msDuration(n)
				return err
			},
			brokerValue: func(b *Broker) string { return msString(b.cfg.LogDefaults.SegmentJitter) }, kafkaDefault: "0",
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
	minSegmentBytes        = 14
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
	if err == nil && n > 1 && n < maxLong {
		c.FlushMessages = n
	}
	return err
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
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
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
	return nil
}

func init() {
	register(kmsg.DescribeConfigs, 0, 4, (*Broker).handleDescribeConfigs)
	register(kmsg.AlterConfigs, 0, 2, (*Broker).handleAlterConfigs)
	register(kmsg.IncrementalAlterConfigs, 0, 1, (*Broker).handleIncrementalAlterConfigs)
}

// describedConfig is one config entry before it is shaped for a response.
type describedConfig = kmsg.DescribeConfigsResponseResourceConfig

func strp(s string) *string { return &s }

func (b *Broker) handleDescribeConfigs(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	synonyms := req.Version >= 1 && req.IncludeSynonyms
	docs := req.Version >= 3 && req.IncludeDocumentation
	for _, rr := range req.Resources {
		res := kmsg.NewDescribeConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		err := b.authorizeConfigs(r, rr.ResourceType, rr.ResourceName, auth.OpDescribeConfigs)
		switch {
		case err != nil:
		case rr.ResourceType == kmsg.ConfigResourceTypeTopic:
			var t controller.Topic
			if t, err = b.lookupConfigTopic(rr.ResourceName); err == nil {
				res.Configs = b.describeTopicConfigs(t, rr.ConfigNames, synonyms, docs)
			}
		case rr.ResourceType == kmsg.ConfigResourceTypeBroker:
			var cluster bool
			if cluster, err = b.checkBrokerResource(rr.ResourceName); err == nil && !cluster {
				res.Configs = b.describeBrokerConfigs(rr.ConfigNames, synonyms, docs)
			}
			// The cluster-wide default resource ("") lists dynamic defaults
			// only, and there are none.
		default:
			err = errCode(kerr.InvalidRequest, "Unsupported resource type %s for DescribeConfigs", rr.ResourceType)
		}
		if err != nil {
			res.ErrorCode, res.ErrorMessage = kafkaError(err)
			res.Configs = nil
		}
		if req.Version == 0 {
			for i := range res.Configs {
				res.Configs[i].IsDefault = res.Configs[i].Source == kmsg.ConfigSourceDefaultConfig
			}
		}
		resp.Resources = append(resp.Resources, res)
	}
	return wire.Respond(resp)
}

func (b *Broker) lookupConfigTopic(name string) (controller.Topic, error) {
	if err := validateTopicName(name); err != nil {
		return controller.Topic{}, errCode(kerr.InvalidTopicException, "%v", err)
	}
	t, ok := b.meta.Topic(name)
	if !ok {
		return t, errCode(kerr.UnknownTopicOrPartition, "Topic '%s' does not exist.", name)
	}
	return t, nil
}

// checkBrokerResource accepts this node's id, or "" for the cluster-wide
// defaults (cluster is then true).
func (b *Broker) checkBrokerResource(name string) (cluster bool, err error) {
	if name == "" {
		return true, nil
	}
	id, perr := strconv.ParseInt(name, 10, 32)
	if perr != nil {
		return false, errCode(kerr.InvalidRequest, "Broker id must be an integer, but it is: %s", name)
	}
	if int32(id) != b.cfg.NodeID {
		return false, errCode(kerr.InvalidRequest, "Unexpected broker id, expected %d, but received %s", b.cfg.NodeID, name)
	}
	return false, nil
}

// describeTopicConfigs lists t's configs (only names, if non-nil), sorted
// by name, with Kafka's sources: DYNAMIC_TOPIC_CONFIG for an override,
// STATIC_BROKER_CONFIG where the broker's setting differs from Kafka's
// default, DEFAULT_CONFIG otherwise.
func (b *Broker) describeTopicConfigs(t controller.Topic, names []string, synonyms, docs bool) []describedConfig {
	var out []describedConfig
	for _, name := range slices.Sorted(maps.Keys(topicConfigs)) {
		if names != nil && !slices.Contains(names, name) {
			continue
		}
		spec := topicConfigs[name]
		var chain []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym
		add := func(n, v string, src kmsg.ConfigSource) {
			syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
			syn.Name, syn.Value, syn.Source = n, strp(v), src
			chain = append(chain, syn)
		}
		if v, ok := t.Configs[name]; ok {
			add(name, v, kmsg.ConfigSourceDynamicTopicConfig)
		}
		if bv := spec.brokerValue(b); bv != spec.kafkaDefault {
			add(spec.brokerName, bv, kmsg.ConfigSourceStaticBrokerConfig)
		}
		add(spec.brokerName, spec.kafkaDefault, kmsg.ConfigSourceDefaultConfig)

		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name = name
		c.Value = chain[0].Value
		c.Source = chain[0].Source
		c.ConfigType = spec.typ
		if synonyms {
			c.ConfigSynonyms = chain
		}
		if docs {
			c.Documentation = strp(spec.doc)
		}
		out = append(out, c)
	}
	return out
}

// brokerConfig is one broker config DescribeConfigs reports. Broker configs
// are static (flags, environment): none is dynamically alterable yet.
type brokerConfig struct {
	name, kafkaDefault string
	typ                kmsg.ConfigType
	doc                string
	value              func(b *Broker) *string
}

func val(f func(b *Broker) string) func(*Broker) *string {
	return func(b *Broker) *string { return strp(f(b)) }
}

var brokerConfigs = []brokerConfig{
	{name: "node.id", typ: kmsg.ConfigTypeInt, kafkaDefault: "-1", doc: "This node's id.",
		value: val(func(b *Broker) string { return strconv.Itoa(int(b.cfg.NodeID)) })},
	{name: "broker.id", typ: kmsg.ConfigTypeInt, kafkaDefault: "-1", doc: "This node's id (the same as node.id).",
		value: val(func(b *Broker) string { return strconv.Itoa(int(b.cfg.NodeID)) })},
	{name: "log.dirs", typ: kmsg.ConfigTypeString, doc: "The data directory: partition logs and the node's metadata.",
		value: val(func(b *Broker) string { return b.cfg.DataDir })},
	{name: "advertised.listeners", typ: kmsg.ConfigTypeString, doc: "The address clients are told to connect to.",
		value: val(func(b *Broker) string {
			var out []string
			for _, e := range b.cfg.Security.Listeners {
				out = append(out, e.Name+"://"+net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port))))
			}
			return strings.Join(out, ",")
		})},
	{name: "inter.broker.listener.name", typ: kmsg.ConfigTypeString, doc: "The listener nodes use to reach each other; node-to-node APIs are served only there.",
		value: val(func(b *Broker) string { return b.cfg.Security.InterBrokerListener })},
	{name: "listener.security.protocol.map", typ: kmsg.ConfigTypeString, doc: "Each listener's security protocol.",
		value: val(func(b *Broker) string {
			var out []string
			for _, e := range b.cfg.Security.Listeners {
				out = append(out, e.Name+":"+e.Protocol)
			}
			return strings.Join(out, ",")
		})},
	{name: "authorizer.class.name", typ: kmsg.ConfigTypeString, kafkaDefault: "", doc: "Set when ACLs are enforced.",
		value: func(b *Broker) *string {
			if b.cfg.Security.Authorizer == nil {
				return strp("")
			}
			return strp("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
		}},
	{name: "broker.rack", typ: kmsg.ConfigTypeString, doc: "The node's rack.",
		value: func(b *Broker) *string {
			if b.cfg.Rack == "" {
				return nil
			}
			return strp(b.cfg.Rack)
		}},
	{name: "auto.create.topics.enable", typ: kmsg.ConfigTypeBoolean, kafkaDefault: "true", doc: "Whether Metadata requests create unknown topics (when the client allows it).",
		value: val(func(b *Broker) string { return strconv.FormatBool(b.cfg.AutoCreateTopics) })},
	{name: "num.partitions", typ: kmsg.ConfigTypeInt, kafkaDefault: "1", doc: "Partitions of auto-created topics and of CreateTopics with -1.",
		value: val(func(b *Broker) string { return strconv.Itoa(int(b.cfg.NumPartitions)) })},
	{name: "default.replication.factor", typ: kmsg.ConfigTypeInt, kafkaDefault: "1", doc: "A single node keeps one replica of every partition.",
		value: val(fixed("1"))},
	{name: "offsets.topic.num.partitions", typ: kmsg.ConfigTypeInt, kafkaDefault: "50", doc: "Partitions of __consumer_offsets.",
		value: val(func(b *Broker) string { return strconv.Itoa(int(b.cfg.OffsetsTopicPartitions)) })},
	{name: "delete.topic.enable", typ: kmsg.ConfigTypeBoolean, kafkaDefault: "true", doc: "Topics can be deleted.",
		value: val(fixed("true"))},
	{name: "log.retention.check.interval.ms", typ: kmsg.ConfigTypeLong, kafkaDefault: "300000", doc: "How often retention runs over every log.",
		value: val(func(b *Broker) string { return msString(b.retentionInterval()) })},
	{name: "log.cleaner.enable", typ: kmsg.ConfigTypeBoolean, kafkaDefault: "true", doc: "Whether the log cleaner compacts cleanup.policy=compact topics (the internal topics too).",
		value: val(func(b *Broker) string { return strconv.FormatBool(b.cleanerConfig().Enable) })},
	{name: "log.cleaner.threads", typ: kmsg.ConfigTypeInt, kafkaDefault: "1", doc: "Cleaner threads: partitions cleaned at once.",
		value: val(func(b *Broker) string { return strconv.Itoa(b.cleanerConfig().Threads) })},
	{name: "log.cleaner.dedupe.buffer.size", typ: kmsg.ConfigTypeLong, kafkaDefault: "134217728", doc: "Memory for the cleaner's offset maps, shared by its threads (24 bytes per key, 90% full at most); a dirty section with more keys is cleaned over several passes.",
		value: val(func(b *Broker) string { return strconv.FormatInt(b.cleanerConfig().DedupeBufferSize, 10) })},
	{name: "log.cleaner.io.buffer.size", typ: kmsg.ConfigTypeInt, kafkaDefault: "524288", doc: "The cleaner's read and write buffer per thread (grows to the largest batch).",
		value: val(func(b *Broker) string { return strconv.Itoa(b.cleanerConfig().IOBufferSize) })},
	{name: "log.cleaner.io.max.bytes.per.second", typ: kmsg.ConfigTypeDouble, kafkaDefault: "1.7976931348623157E308", doc: "The cleaner's read plus write rate, all threads together.",
		value: val(func(b *Broker) string {
			if r := b.cleanerConfig().IOMaxBytesPerSecond; r > 0 {
				return strconv.FormatFloat(r, 'g', -1, 64)
			}
			return "1.7976931348623157E308"
		})},
	{name: "log.cleaner.backoff.ms", typ: kmsg.ConfigTypeLong, kafkaDefault: "15000", doc: "How long an idle cleaner thread sleeps before it looks for dirty logs again.",
		value: val(func(b *Broker) string { return msString(b.cleanerConfig().Backoff) })},
	{name: "offsets.topic.segment.bytes", typ: kmsg.ConfigTypeInt, kafkaDefault: "104857600", doc: "segment.bytes of __consumer_offsets when it is created.",
		value: val(func(b *Broker) string { return strconv.FormatInt(b.cfg.OffsetsTopicSegmentBytes, 10) })},
	{name: "transaction.state.log.segment.bytes", typ: kmsg.ConfigTypeInt, kafkaDefault: "104857600", doc: "segment.bytes of __transaction_state when it is created.",
		value: val(func(b *Broker) string { return strconv.FormatInt(b.cfg.TxnTopicSegmentBytes, 10) })},
}

// cleanerConfig is the cleaner's effective config.
func (b *Broker) cleanerConfig() CleanerConfig {
	if b.cfg.LogCleaner == (CleanerConfig{}) {
		return DefaultCleanerConfig()
	}
	return b.cfg.LogCleaner
}

// retentionInterval is log.retention.check.interval.ms with its default.
func (b *Broker) retentionInterval() time.Duration {
	if b.cfg.RetentionCheckInterval > 0 {
		return b.cfg.RetentionCheckInterval
	}
	return 5 * time.Minute
}

// describeBrokerConfigs lists the node's configs: the ones above plus the
// broker-level defaults of every topic config.
func (b *Broker) describeBrokerConfigs(names []string, synonyms, docs bool) []describedConfig {
	all := slices.Clone(brokerConfigs)
	seen := map[string]bool{}
	for _, c := range all {
		seen[c.name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(topicConfigs)) {
		spec := topicConfigs[name]
		if seen[spec.brokerName] {
			continue
		}
		seen[spec.brokerName] = true
		all = append(all, brokerConfig{name: spec.brokerName, typ: spec.typ, kafkaDefault: spec.kafkaDefault,
			doc: "The default of the topic config " + spec.name + ". " + spec.doc, value: val(spec.brokerValue)})
	}
	all = append(all, brokerConfig{name: "holdfast.flush.policy", typ: kmsg.ConfigTypeString, kafkaDefault: "sync",
		doc:   "Holdfast's durability policy: sync (fsync with group commit before every acknowledgement), interval:<duration>, or os (page cache only, Kafka's behaviour).",
		value: val(func(b *Broker) string { return b.cfg.LogDefaults.Flush.String() })})
	slices.SortFunc(all, func(x, y brokerConfig) int { return strings.Compare(x.name, y.name) })

	var out []describedConfig
	for _, bc := range all {
		if names != nil && !slices.Contains(names, bc.name) {
			continue
		}
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name = bc.name
		c.Value = bc.value(b)
		c.ReadOnly = true
		c.ConfigType = bc.typ
		c.Source = kmsg.ConfigSourceStaticBrokerConfig
		if c.Value != nil && *c.Value == bc.kafkaDefault {
			c.Source = kmsg.ConfigSourceDefaultConfig
		}
		if synonyms {
			syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
			syn.Name, syn.Value, syn.Source = c.Name, c.Value, c.Source
			c.ConfigSynonyms = append(c.ConfigSynonyms, syn)
		}
		if docs {
			c.Documentation = strp(bc.doc)
		}
		out = append(out, c)
	}
	return out
}

// resourceKey identifies a config resource within one request.
type resourceKey struct {
	typ  kmsg.ConfigResourceType
	name string
}

func (b *Broker) handleAlterConfigs(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	alterEach(req.Resources,
		func(rr kmsg.AlterConfigsRequestResource) resourceKey {
			return resourceKey{rr.ResourceType, rr.ResourceName}
		},
		func(rr kmsg.AlterConfigsRequestResource) error {
			if err := b.authorizeConfigs(r, rr.ResourceType, rr.ResourceName, auth.OpAlterConfigs); err != nil {
				return err
			}
			return b.alterConfigs(rr, req.ValidateOnly)
		},
		func(rr kmsg.AlterConfigsRequestResource, err error) {
			res := kmsg.NewAlterConfigsResponseResource()
			res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
			res.ErrorCode, res.ErrorMessage = kafkaError(err)
			resp.Resources = append(resp.Resources, res)
		})
	return wire.Respond(resp)
}

// alterEach runs alter for every resource of an AlterConfigs or
// IncrementalAlterConfigs request and reports each result in order; a
// resource named twice in one request is refused, as Kafka does, since
// which of the two should win is undefined.
func alterEach[R any](resources []R, key func(R) resourceKey, alter func(R) error, report func(R, error)) {
	dup := map[resourceKey]int{}
	for _, rr := range resources {
		dup[key(rr)]++
	}
	for _, rr := range resources {
		var err error
		if dup[key(rr)] > 1 {
			err = errCode(kerr.InvalidRequest, "Error due to duplicate resources in the request")
		} else {
			err = alter(rr)
		}
		report(rr, err)
	}
}

// alterConfigs replaces a resource's whole set of overrides (the legacy,
// non-incremental AlterConfigs: anything not listed reverts to default).
func (b *Broker) alterConfigs(rr kmsg.AlterConfigsRequestResource, validateOnly bool) error {
	configs := map[string]string{}
	for _, c := range rr.Configs {
		if _, dup := configs[c.Name]; dup {
			return errCode(kerr.InvalidRequest, "Error due to duplicate config keys")
		}
		if c.Value == nil {
			return errCode(kerr.InvalidRequest, "Null value not supported for : %s", c.Name)
		}
		configs[c.Name] = *c.Value
	}
	switch rr.ResourceType {
	case kmsg.ConfigResourceTypeTopic:
		if _, err := b.lookupConfigTopic(rr.ResourceName); err != nil {
			return err
		}
		return b.applyTopicConfigs(rr.ResourceName, configs, validateOnly)
	case kmsg.ConfigResourceTypeBroker:
		return b.alterBrokerConfigs(rr.ResourceName, slices.Sorted(maps.Keys(configs)))
	}
	return errCode(kerr.InvalidRequest, "Unsupported resource type %s for AlterConfigs", rr.ResourceType)
}

// alterBrokerConfigs refuses every change: broker configs are static.
func (b *Broker) alterBrokerConfigs(name string, names []string) error {
	if _, err := b.checkBrokerResource(name); err != nil {
		return err
	}
	if len(names) == 0 {
		return nil
	}
	return errCode(kerr.InvalidConfig, "Cannot update these configs dynamically: %s (Holdfast broker configs are set by flags and HOLDFAST_* variables)", strings.Join(names, ", "))
}

// applyTopicConfigs validates configs as the topic's complete override set
// and, unless validateOnly, stores it and applies it to the open logs.
func (b *Broker) applyTopicConfigs(name string, configs map[string]string, validateOnly bool) error {
	if err := validateTopicConfigs(configs); err != nil {
		return errCode(kerr.InvalidConfig, "%v", err)
	}
	if validateOnly {
		return nil
	}
	_, err := b.setTopicConfigs(name, configs)
	return err
}

func (b *Broker) handleIncrementalAlterConfigs(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	alterEach(req.Resources,
		func(rr kmsg.IncrementalAlterConfigsRequestResource) resourceKey {
			return resourceKey{rr.ResourceType, rr.ResourceName}
		},
		func(rr kmsg.IncrementalAlterConfigsRequestResource) error {
			if err := b.authorizeConfigs(r, rr.ResourceType, rr.ResourceName, auth.OpAlterConfigs); err != nil {
				return err
			}
			return b.incrementalAlterConfigs(rr, req.ValidateOnly)
		},
		func(rr kmsg.IncrementalAlterConfigsRequestResource, err error) {
			res := kmsg.NewIncrementalAlterConfigsResponseResource()
			res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
			res.ErrorCode, res.ErrorMessage = kafkaError(err)
			resp.Resources = append(resp.Resources, res)
		})
	return wire.Respond(resp)
}

func (b *Broker) incrementalAlterConfigs(rr kmsg.IncrementalAlterConfigsRequestResource, validateOnly bool) error {
	seen := map[string]bool{}
	for _, c := range rr.Configs {
		if seen[c.Name] {
			return errCode(kerr.InvalidRequest, "Error due to duplicate config keys")
		}
		seen[c.Name] = true
		if c.Op < kmsg.IncrementalAlterConfigOpSet || c.Op > kmsg.IncrementalAlterConfigOpSubtract {
			return errCode(kerr.InvalidRequest, "Unknown alter config operation %d for %s", int8(c.Op), c.Name)
		}
	}
	switch rr.ResourceType {
	case kmsg.ConfigResourceTypeTopic:
	case kmsg.ConfigResourceTypeBroker:
		return b.alterBrokerConfigs(rr.ResourceName, slices.Sorted(maps.Keys(seen)))
	default:
		return errCode(kerr.InvalidRequest, "Unsupported resource type %s for IncrementalAlterConfigs", rr.ResourceType)
	}

	// Read, modify and write under topicsMu so concurrent incremental
	// changes to one topic do not lose each other's updates.
	b.topicsMu.Lock()
	defer b.topicsMu.Unlock()
	t, err := b.lookupConfigTopic(rr.ResourceName)
	if err != nil {
		return err
	}
	configs := maps.Clone(t.Configs)
	for _, c := range rr.Configs {
		spec, known := topicConfigs[c.Name]
		if c.Op != kmsg.IncrementalAlterConfigOpDelete && !known {
			return errCode(kerr.InvalidConfig, "Unknown topic config name: %s", c.Name)
		}
		switch c.Op {
		case kmsg.IncrementalAlterConfigOpSet:
			if c.Value == nil {
				return errCode(kerr.InvalidRequest, "Null value not supported for : %s", c.Name)
			}
			configs[c.Name] = *c.Value
		case kmsg.IncrementalAlterConfigOpDelete:
			delete(configs, c.Name)
		case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
			if spec.typ != kmsg.ConfigTypeList {
				return errCode(kerr.InvalidConfig, "Config value append is not allowed for config key: %s", c.Name)
			}
			if c.Value == nil {
				return errCode(kerr.InvalidRequest, "Null value not supported for : %s", c.Name)
			}
			cur, ok := configs[c.Name]
			if !ok {
				cur = spec.brokerValue(b)
			}
			configs[c.Name] = editList(cur, *c.Value, c.Op == kmsg.IncrementalAlterConfigOpAppend)
		}
	}
	if err := validateTopicConfigs(configs); err != nil {
		return errCode(kerr.InvalidConfig, "%v", err)
	}
	if validateOnly {
		return nil
	}
	t, err = b.meta.SetTopicConfigs(t.Name, configs)
	if err != nil {
		return err
	}
	b.applyLogConfigs(t)
	b.log.Info("altered topic configs", "topic", t.Name, "configs", configs)
	return nil
}

// editList appends the items of delta missing from the comma-separated
// list cur, or subtracts them from it.
func editList(cur, delta string, add bool) string {
	items := splitList(cur)
	for _, d := range splitList(delta) {
		i := slices.Index(items, d)
		switch {
		case add && i < 0:
			items = append(items, d)
		case !add && i >= 0:
			items = slices.Delete(items, i, i+1)
		}
	}
	return strings.Join(items, ",")
}
