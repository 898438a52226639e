package broker

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/partition"
	"holdfast/internal/tiered"
)

// Tiered storage (internal/tiered, docs/tiered-storage.md): the broker
// starts its manager when remote.log.storage.system.enable is on, refuses
// remote.storage.enable on topics while it is off (Kafka's check), serves
// fetches below the local log start from the object store and answers
// ListOffsets' earliest and latest-tiered from the remote log.

// startTiered starts tiered storage when it is on.
func (b *Broker) startTiered() error {
	cfg := b.cfg.Tiered
	if !cfg.Enabled {
		return nil
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(b.cfg.DataDir, "remote-log-cache")
	}
	if cfg.Clock == nil {
		cfg.Clock = b.cfg.Clock
	}
	store, err := tiered.NewS3(cfg)
	if err != nil {
		return err
	}
	m, err := tiered.New(cfg, store, b.meta, b.replicas, b.cluster.Host(), b.cfg.LogDefaults, b.log)
	if err != nil {
		return err
	}
	m.Start()
	b.tiered = m
	b.closers = append(b.closers, m.Close)
	b.log.Info("tiered storage on", "bucket", cfg.Bucket, "prefix", cfg.Prefix, "endpoint", cfg.Endpoint, "region", cfg.Region)
	return nil
}

// checkRemoteStorage is Kafka's check of a topic's configs against the
// broker: remote.storage.enable needs remote.log.storage.system.enable.
func (b *Broker) checkRemoteStorage(configs map[string]string) error {
	if configs["remote.storage.enable"] == "true" && !b.cfg.Tiered.Enabled {
		return errCode(kerr.InvalidConfig, "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.")
	}
	return nil
}

// planRestore checks a new topic's remote.storage.restore.from (Restore,
// docs/tiered-storage.md) and resolves it against the object store: the
// stored configs name the old topic's full key directory and, in
// remote.storage.restore.starts, where each partition's log starts.
// It returns how many partitions the objects hold (0: not a restore) and
// the highest producer id whose state the restore brings back (-1: none).
func (b *Broker) planRestore(ctx context.Context, configs map[string]string) (int32, int64, error) {
	if _, ok := configs["remote.storage.restore.starts"]; ok {
		return 0, -1, errCode(kerr.InvalidConfig, "remote.storage.restore.starts is set by the broker, from remote.storage.restore.from")
	}
	from, ok := configs["remote.storage.restore.from"]
	if !ok {
		return 0, -1, nil
	}
	if b.tiered == nil || configs["remote.storage.enable"] != "true" {
		return 0, -1, errCode(kerr.InvalidConfig, "remote.storage.restore.from needs remote.storage.enable=true on the topic and remote.log.storage.system.enable on the brokers")
	}
	if from == "" {
		return 0, -1, errCode(kerr.InvalidConfig, "remote.storage.restore.from is empty: name the old topic, or its <topic>-<topic id> directory in the object store")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	dir, starts, maxPID, err := b.tiered.PlanRestore(ctx, from)
	if err != nil {
		return 0, -1, errCode(kerr.InvalidConfig, "remote.storage.restore.from=%s: %v", from, err)
	}
	offs := make([]string, len(starts))
	for i, s := range starts {
		offs[i] = strconv.FormatInt(s.Offset, 10) + ":" + strconv.FormatInt(int64(s.Epoch), 10)
	}
	configs["remote.storage.restore.from"] = dir
	configs["remote.storage.restore.starts"] = strings.Join(offs, ",")
	b.log.Info("topic restore planned from the object store", "from", dir, "partitions", len(starts), "start_offsets", configs["remote.storage.restore.starts"])
	return int32(len(starts)), maxPID, nil
}

// checkRestoreUnchanged keeps a topic's restore configs as they were at
// its creation (its partitions' logs started where they said): an
// AlterConfigs that leaves them out (a full replacement, a deletion) keeps
// them, one that changes them is refused.
func checkRestoreUnchanged(old, next map[string]string) error {
	for _, n := range []string{"remote.storage.restore.from", "remote.storage.restore.starts"} {
		v, ok := next[n]
		switch {
		case !ok && old[n] != "":
			next[n] = old[n]
		case ok && v != old[n]:
			return errCode(kerr.InvalidConfig, "%s is set only when a topic is created", n)
		}
	}
	return nil
}

// logStartOffset is p's log start as clients see it: the remote log start
// when the topic is tiered.
func (b *Broker) logStartOffset(p *partition.Partition) int64 {
	if b.tiered == nil {
		return p.LogStartOffset()
	}
	return b.tiered.LogStart(p)
}

// latestTiered is ListOffsets' -5 (KIP-1005): the highest offset in the
// remote log, -1 if nothing is there.
func (b *Broker) latestTiered(p *partition.Partition) int64 {
	if b.tiered == nil {
		return -1
	}
	mf, ok := b.tiered.Manifest(p)
	if !ok {
		return -1
	}
	return mf.End() - 1
}

// earliestPendingUpload is ListOffsets' -6 (KIP-1023), as Kafka answers
// it: on a tiered topic the offset after the remote log (no lower than
// the log start); the log start if nothing was ever uploaded; -1 if the
// remote log is not known (a restore pending) or the topic is not tiered.
func (b *Broker) earliestPendingUpload(p *partition.Partition) (int64, int16) {
	if b.tiered == nil {
		return -1, 0
	}
	if t, ok := b.meta.Topic(p.Topic()); !ok || t.ID != p.TopicID() || !b.tiered.Enabled(t) {
		return -1, 0
	}
	if b.tiered.RestorePending(p) {
		return -1, kerr.OffsetNotAvailable.Code
	}
	start := b.logStartOffset(p)
	if highest := b.latestTiered(p); highest >= 0 {
		return max(highest+1, start), 0
	}
	if p.LogStartOffset() == start {
		return start, 0 // nothing uploaded yet
	}
	return -1, 0
}

// offsetForTimestamp is ListOffsets by timestamp: on a tiered topic the
// remote log first (its segments' time indexes), then the local log, as
// Kafka searches. timeoutMs is the request's (v10; 0: 30 s).
func (b *Broker) offsetForTimestamp(ctx context.Context, p *partition.Partition, ts int64, timeoutMs int32) (int64, int64, error) {
	if b.tiered != nil {
		d := 30 * time.Second
		if timeoutMs > 0 {
			d = time.Duration(timeoutMs) * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		off, fts, found, err := b.tiered.OffsetForTimestamp(ctx, p, ts)
		if err != nil || found {
			return off, fts, err
		}
	}
	return p.OffsetForTimestamp(ts)
}

// The tiered-storage broker configs DescribeConfigs shows (static: set by
// flags, HOLDFAST_* or server.properties; credentials are never among
// them).
func init() {
	str := func(name, def, doc string, f func(c tiered.Config) string) brokerConfig {
		return brokerConfig{name: name, typ: kmsg.ConfigTypeString, kafkaDefault: def, doc: doc,
			value: val(func(b *Broker) string { return f(b.cfg.Tiered) })}
	}
	brokerConfigs = append(brokerConfigs,
		brokerConfig{name: "remote.log.storage.system.enable", typ: kmsg.ConfigTypeBoolean, kafkaDefault: "false",
			doc:   "Tiered storage (KIP-405): topics with remote.storage.enable upload closed segments to the object store and read them back from it.",
			value: val(func(b *Broker) string { return strconv.FormatBool(b.cfg.Tiered.Enabled) })},
		str("remote.log.storage.s3.bucket", "", "Tiered storage: the bucket.", func(c tiered.Config) string { return c.Bucket }),
		str("remote.log.storage.s3.prefix", "", "Tiered storage: the key prefix of every object.", func(c tiered.Config) string { return c.Prefix }),
		str("remote.log.storage.s3.endpoint", "", "Tiered storage: the object store's URL; empty: AWS S3.", func(c tiered.Config) string { return c.Endpoint }),
		str("remote.log.storage.s3.region", "", "Tiered storage: the region.", func(c tiered.Config) string { return c.Region }),
		brokerConfig{name: "remote.log.storage.s3.path.style", typ: kmsg.ConfigTypeBoolean, kafkaDefault: "false",
			doc:   "Tiered storage: path-style requests (http://host/bucket/key).",
			value: val(func(b *Broker) string { return strconv.FormatBool(b.cfg.Tiered.PathStyle) })},
	)
}

// deleteRemoteRecords is DeleteRecords on a tiered topic: the remote log
// start moves to off first (committed in the partition's Raft group), so
// that no remote segment serves what was deleted. It reports whether it
// failed (sp's error code set).
func (b *Broker) deleteRemoteRecords(ctx context.Context, p *partition.Partition, off int64, sp *kmsg.DeleteRecordsResponseTopicPartition) bool {
	if err := b.tiered.DeleteRecords(ctx, p, off); err != nil {
		b.log.Warn("delete records: remote log start", "topic", p.Topic(), "partition", p.Index(), "offset", off, "err", err)
		sp.ErrorCode = kerr.KafkaStorageError.Code
		if errors.Is(err, context.DeadlineExceeded) {
			sp.ErrorCode = kerr.RequestTimedOut.Code
		}
		return true
	}
	return false
}

// TieredStats are tiered storage's figures (metrics); nil when it is off.
func (b *Broker) TieredStats() *tiered.Stats {
	if b.tiered == nil {
		return nil
	}
	return b.tiered.Stats()
}
