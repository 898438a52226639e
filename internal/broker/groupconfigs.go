package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/metadata"
	"holdfast/internal/share"
)

// Group configs (the GROUP config resource, KIP-848 / KIP-932): dynamic
// per-group overrides kept in the metadata (metadata/groupconfigs.go).
// The share-group ones are read by share partitions' leaders at each use
// (share.auto.offset.reset when a share partition with no state starts).

// groupConfigSpec is one group config: its broker default and a check.
type groupConfigSpec struct {
	def   func(b *Broker) string
	check func(v string) error
	doc   string
}

func intRange(lo, hi int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("must be an integer in [%d, %d]", lo, hi)
		}
		return nil
	}
}

var groupConfigSpecs = map[string]groupConfigSpec{
	"share.auto.offset.reset": {
		def: func(*Broker) string { return "latest" },
		check: func(v string) error {
			if v != "latest" && v != "earliest" {
				return fmt.Errorf("must be latest or earliest (by_duration is not implemented)")
			}
			return nil
		},
		doc: "Where a share partition with no state starts: latest or earliest.",
	},
	"share.record.lock.duration.ms": {
		def: func(b *Broker) string { return strconv.FormatInt(b.cfg.Share.RecordLockDuration.Milliseconds(), 10) },
		// Kafka bounds it by group.share.{min,max}.record.lock.duration.ms.
		check: intRange(1000, 3600000),
		doc:   "How long records acquired by a share consumer stay locked to it.",
	},
	"share.delivery.count.limit": {
		def:   func(b *Broker) string { return strconv.Itoa(int(b.cfg.Share.DeliveryCountLimit)) },
		check: intRange(2, 10),
		doc:   "How many times a record is delivered before it is archived.",
	},
	"share.isolation.level": {
		def: func(*Broker) string { return "read_uncommitted" },
		check: func(v string) error {
			if v != "read_uncommitted" {
				return fmt.Errorf("only read_uncommitted is implemented")
			}
			return nil
		},
		doc: "Share groups read uncommitted records (read_committed is not implemented).",
	},
}

// ShareConfig is the broker's share-group config (group.share.*).
type ShareConfig struct {
	RecordLockDuration time.Duration // group.share.record.lock.duration.ms (30 s)
	DeliveryCountLimit int16         // group.share.delivery.count.limit (5)
	// PartitionMaxRecordLocks is group.share.partition.max.record.locks
	// (2000): how many offsets one share partition keeps in flight.
	PartitionMaxRecordLocks int64
	SessionTimeout          time.Duration // group.share.session.timeout.ms (45 s)
	HeartbeatInterval       time.Duration // group.share.heartbeat.interval.ms (5 s)
	MaxSize                 int           // group.share.max.size (200)
	MaxShareSessions        int           // group.share.max.share.sessions (2000)
}

// DefaultShareConfig is Kafka 4.x's defaults.
func DefaultShareConfig() ShareConfig {
	var c ShareConfig
	c.defaults()
	return c
}

func (c *ShareConfig) defaults() {
	if c.RecordLockDuration <= 0 {
		c.RecordLockDuration = 30 * time.Second
	}
	if c.DeliveryCountLimit <= 0 {
		c.DeliveryCountLimit = 5
	}
	if c.PartitionMaxRecordLocks <= 0 {
		c.PartitionMaxRecordLocks = 2000
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 45 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 5 * time.Second
	}
	if c.MaxSize <= 0 {
		c.MaxSize = 200
	}
	if c.MaxShareSessions <= 0 {
		c.MaxShareSessions = 2000
	}
}

// shareSettings is group's share settings: its overrides over the
// broker's defaults.
func (b *Broker) shareSettings(group string) share.GroupSettings {
	c := b.cfg.Share
	s := share.GroupSettings{Settings: share.Settings{
		LockDuration:       c.RecordLockDuration,
		DeliveryCountLimit: c.DeliveryCountLimit,
		MaxInFlight:        c.PartitionMaxRecordLocks,
	}, AutoReset: "latest"}
	o := b.meta.GroupConfigs(group)
	if v, err := strconv.ParseInt(o["share.record.lock.duration.ms"], 10, 64); err == nil && v > 0 {
		s.LockDuration = time.Duration(v) * time.Millisecond
	}
	if v, err := strconv.ParseInt(o["share.delivery.count.limit"], 10, 16); err == nil && v > 0 {
		s.DeliveryCountLimit = int16(v)
	}
	if v := o["share.auto.offset.reset"]; v != "" {
		s.AutoReset = v
	}
	return s
}

// describeGroupConfigs lists group's configs (only names, if non-nil).
func (b *Broker) describeGroupConfigs(group string, names []string, synonyms, docs bool) []describedConfig {
	o := b.meta.GroupConfigs(group)
	var out []describedConfig
	for _, name := range slices.Sorted(maps.Keys(groupConfigSpecs)) {
		if names != nil && !slices.Contains(names, name) {
			continue
		}
		spec := groupConfigSpecs[name]
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name, c.Value, c.Source = name, strp(spec.def(b)), kmsg.ConfigSourceDefaultConfig
		if v, ok := o[name]; ok {
			c.Value, c.Source = strp(v), kmsg.ConfigSourceGroupConfig
		}
		c.ConfigType = kmsg.ConfigTypeString
		if name != "share.auto.offset.reset" && name != "share.isolation.level" {
			c.ConfigType = kmsg.ConfigTypeInt
		}
		if synonyms {
			syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
			syn.Name, syn.Value, syn.Source = c.Name, c.Value, c.Source
			c.ConfigSynonyms = append(c.ConfigSynonyms, syn)
		}
		if docs {
			c.Documentation = strp(spec.doc)
		}
		out = append(out, c)
	}
	return out
}

// setGroupConfigs validates configs as group's complete override set and,
// unless validateOnly, stores it through the controller.
func (b *Broker) setGroupConfigs(group string, configs map[string]string, validateOnly bool) error {
	if group == "" {
		return errCode(kerr.InvalidRequest, "a group config resource needs a group id")
	}
	for k, v := range configs {
		spec, ok := groupConfigSpecs[k]
		if !ok {
			return errCode(kerr.InvalidConfig, "Unknown group config name: %s", k)
		}
		if err := spec.check(v); err != nil {
			return errCode(kerr.InvalidConfig, "Invalid value %s for configuration %s: %v", v, k, err)
		}
	}
	if validateOnly {
		return nil
	}
	if !b.cluster.IsController() {
		return errCode(kerr.NotController, "this node is not the controller")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return b.cluster.Propose(ctx, metadata.Command{Op: metadata.OpGroupConfigs, Name: group, Configs: configs})
}

// incrementalGroupConfigs is IncrementalAlterConfigs on a group.
func (b *Broker) incrementalGroupConfigs(rr kmsg.IncrementalAlterConfigsRequestResource, validateOnly bool) error {
	b.alterMu.Lock()
	defer b.alterMu.Unlock()
	configs := b.meta.GroupConfigs(rr.ResourceName)
	if configs == nil {
		configs = map[string]string{}
	}
	if err := editConfigs(configs, rr.Configs, func(string) (string, bool) { return "", false }); err != nil {
		return err
	}
	return b.setGroupConfigs(rr.ResourceName, configs, validateOnly)
}
