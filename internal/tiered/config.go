// Package tiered is Holdfast's tiered storage (Kafka's KIP-405): the
// leader of a partition whose topic has remote.storage.enable uploads each
// closed segment to an S3-compatible object store, records it in the
// partition's own Raft group, and only then lets local retention
// (local.retention.ms / local.retention.bytes) delete it; a fetch below the
// local log start is served from the object store. docs/tiered-storage.md
// has the object layout and the commit rule.
package tiered

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"holdfast/internal/clock"
)

// Config is the broker's tiered-storage configuration. Off unless Enabled
// (remote.log.storage.system.enable, false by default as in Kafka).
type Config struct {
	// Enabled is remote.log.storage.system.enable.
	Enabled bool
	// Bucket, Prefix, Endpoint, Region and PathStyle say where objects
	// go (remote.log.storage.s3.*). Endpoint is a URL (http://host:port
	// or https://host); empty means AWS S3 in Region. Credentials come
	// from the standard chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY,
	// the shared credentials file, an instance role), never from here.
	Bucket    string
	Prefix    string
	Endpoint  string
	Region    string
	PathStyle bool
	// CacheDir holds segments downloaded for reads, at most CacheBytes
	// (remote.log.storage.cache.bytes) of them.
	CacheDir   string
	CacheBytes int64
	// TaskInterval is remote.log.manager.task.interval.ms: how often the
	// leader looks for segments to upload and local segments to delete.
	TaskInterval time.Duration
	// IOTimeout bounds each wait on the object store
	// (remote.log.storage.s3.io.timeout.ms): a connection, data sent and
	// not acknowledged, the answer to a request sent.
	IOTimeout time.Duration
	// RetryBackoffMax bounds the backoff between retries of a failed
	// upload (Kafka's remote.log.manager.task.retry.backoff.max.ms).
	RetryBackoffMax time.Duration
	// CopyMaxBytesPerSecond bounds the rate at which this node reads
	// segments for upload (Kafka's
	// remote.log.manager.copy.max.bytes.per.second, KIP-956), all
	// partitions together; <= 0: unlimited, Kafka's default. An upload
	// competes with produce for the disk, the CPU and the network.
	CopyMaxBytesPerSecond int64
	// OrphanSweepInterval: how often a partition's leader deletes the
	// objects of its partition that no committed manifest names (uploads
	// whose manifest never committed), besides once each time it becomes
	// the leader. Not a broker setting (tests shorten it).
	OrphanSweepInterval time.Duration
	// Clock drives the task (every TaskInterval), the upload retries'
	// backoff, the orphan sweeps and local retention by time; nil: the
	// broker's Config.Clock (the wall clock if that is nil too). Not a
	// broker setting.
	Clock clock.Clock
}

// Defaults.
const (
	DefaultCacheBytes      = 1 << 30
	DefaultTaskInterval    = 30 * time.Second // Kafka's remote.log.manager.task.interval.ms
	DefaultRetryBackoffMax = 30 * time.Second
	DefaultOrphanSweep     = time.Hour
	DefaultIOTimeout       = 30 * time.Second
)

func (c Config) withDefaults() Config {
	if c.CacheBytes <= 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.TaskInterval <= 0 {
		c.TaskInterval = DefaultTaskInterval
	}
	if c.OrphanSweepInterval <= 0 {
		c.OrphanSweepInterval = DefaultOrphanSweep
	}
	if c.IOTimeout <= 0 {
		c.IOTimeout = DefaultIOTimeout
	}
	if c.RetryBackoffMax <= 0 {
		c.RetryBackoffMax = DefaultRetryBackoffMax
	}
	if c.Prefix != "" && !strings.HasSuffix(c.Prefix, "/") {
		c.Prefix += "/"
	}
	return c
}

// Validate checks an enabled configuration before the broker starts.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	if c.Bucket == "" {
		return errors.New("remote.log.storage.system.enable is true but remote.log.storage.s3.bucket is not set")
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("remote.log.storage.s3.endpoint %q: want http://host[:port] or https://host[:port]", c.Endpoint)
		}
	}
	return nil
}
