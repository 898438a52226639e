// Package metrics exposes a node's state as Prometheus metrics. Values are
// read from the broker and the connection server when scraped, so the hot
// paths carry no metric bookkeeping beyond a few atomic counters.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/wire"
)

// New returns a registry with the node's metrics, Go runtime and process
// metrics. It installs srv.OnReply to time requests, so call it before Serve.
func New(b *broker.Broker, srv *wire.Server) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "holdfast_request_duration_seconds",
		Help:    "Time from decoding a request to writing its response, by Kafka API.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18), // 50µs .. ~6.5s
	}, []string{"api"})
	reg.MustRegister(latency)
	// Resolve the label once per key instead of per request.
	var byKey [kmsg.MaxKey + 1]prometheus.Observer
	for k := range byKey {
		byKey[k] = latency.WithLabelValues(kmsg.NameForKey(int16(k)))
	}
	srv.OnReply = func(key int16, took time.Duration) {
		if key >= 0 && int(key) < len(byKey) {
			byKey[key].Observe(took.Seconds())
		}
	}

	counter := func(name, help string, f func() int64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) }))
	}
	st := &srv.Stats
	counter("holdfast_connections_accepted_total", "Connections accepted.", st.Accepted.Load)
	counter("holdfast_connections_rejected_total", "Connections closed at accept because max.connections was reached.", st.Rejected.Load)
	counter("holdfast_requests_total", "Requests decoded.", st.Requests.Load)
	counter("holdfast_bad_frames_total", "Connections closed for an unreadable, oversized or unsupported frame.", st.BadFrames.Load)
	counter("holdfast_handler_panics_total", "Requests whose handler panicked: each closed its own connection (logged with the API and a stack).", st.Panics.Load)
	counter("holdfast_network_received_bytes_total", "Request bytes received.", st.BytesIn.Load)
	counter("holdfast_network_sent_bytes_total", "Response bytes sent.", st.BytesOut.Load)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "holdfast_connections_open", Help: "Open client connections."},
		func() float64 { return float64(st.Open.Load()) }))

	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("holdfast_raft_groups", "Raft groups on this node (partition replicas and the metadata group; 0 on a single node).",
		func() float64 { return float64(b.ReplicationStats().Groups) })
	gauge("holdfast_raft_groups_failed", "Raft groups stopped on this node by a failure and not yet repaired: they send and acknowledge nothing.",
		func() float64 { return float64(b.ReplicationStats().FailedGroups) })
	counter("holdfast_raft_replica_repairs_total", "Replicas whose storage failed, discarded and reopened to catch up from the others.",
		func() int64 { return b.ReplicationStats().Repairs })

	reg.MustRegister(&partitionCollector{b: b}, &groupCollector{b: b}, &cleanerCollector{b: b})
	return reg
}

var (
	labels       = []string{"topic", "partition"}
	descLogStart = prometheus.NewDesc("holdfast_partition_log_start_offset", "First offset still in the log.", labels, nil)
	descLogEnd   = prometheus.NewDesc("holdfast_partition_log_end_offset", "Next offset to be written.", labels, nil)
	descHW       = prometheus.NewDesc("holdfast_partition_high_watermark", "Committed offset: consumers read below it.", labels, nil)
	descDurable  = prometheus.NewDesc("holdfast_partition_durable_offset", "Every offset below it is fsynced.", labels, nil)
)

// partitionCollector reads the offsets of every partition at scrape time.
type partitionCollector struct{ b *broker.Broker }

func (c *partitionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLogStart
	ch <- descLogEnd
	ch <- descHW
	ch <- descDurable
}

func (c *partitionCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.b.PartitionStats() {
		l := []string{p.Topic, strconv.Itoa(int(p.Partition))}
		ch <- prometheus.MustNewConstMetric(descLogStart, prometheus.GaugeValue, float64(p.LogStart), l...)
		ch <- prometheus.MustNewConstMetric(descLogEnd, prometheus.GaugeValue, float64(p.LogEnd), l...)
		ch <- prometheus.MustNewConstMetric(descHW, prometheus.GaugeValue, float64(p.HighWatermark), l...)
		ch <- prometheus.MustNewConstMetric(descDurable, prometheus.GaugeValue, float64(p.Durable), l...)
	}
}

var (
	groupLabels   = []string{"group", "topic", "partition"}
	descCommitted = prometheus.NewDesc("holdfast_group_committed_offset", "A consumer group's committed offset.", groupLabels, nil)
	descLag       = prometheus.NewDesc("holdfast_group_lag", "Records between a group's committed offset and the high watermark.", groupLabels, nil)
	descMembers   = prometheus.NewDesc("holdfast_group_members", "Members of a consumer group.", []string{"group"}, nil)
)

// groupCollector reads the groups' committed offsets and lag at scrape time.
type groupCollector struct{ b *broker.Broker }

func (c *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCommitted
	ch <- descLag
	ch <- descMembers
}

func (c *groupCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[string]bool{}
	for _, g := range c.b.GroupLags() {
		l := []string{g.Group, g.Topic, strconv.Itoa(int(g.Partition))}
		ch <- prometheus.MustNewConstMetric(descCommitted, prometheus.GaugeValue, float64(g.Committed), l...)
		if g.Lag >= 0 {
			ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(g.Lag), l...)
		}
		if !seen[g.Group] {
			seen[g.Group] = true
			ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(g.Members), g.Group)
		}
	}
}

// The log cleaner, named after Kafka's kafka.log:type=LogCleaner and
// LogCleanerManager metrics.
var (
	descCleanerRuns        = prometheus.NewDesc("holdfast_log_cleaner_runs_total", "Cleaning passes completed.", nil, nil)
	descCleanerAborted     = prometheus.NewDesc("holdfast_log_cleaner_aborted_total", "Passes abandoned because the log changed under them (retried later).", nil, nil)
	descCleanerFailed      = prometheus.NewDesc("holdfast_log_cleaner_failed_total", "Passes that failed; their partition is then uncleanable until restart.", nil, nil)
	descCleanerRead        = prometheus.NewDesc("holdfast_log_cleaner_read_bytes_total", "Bytes the cleaner read.", nil, nil)
	descCleanerWritten     = prometheus.NewDesc("holdfast_log_cleaner_written_bytes_total", "Bytes the cleaner wrote.", nil, nil)
	descCleanerReclaimed   = prometheus.NewDesc("holdfast_log_cleaner_reclaimed_bytes_total", "Segment bytes freed by cleaning (before minus after).", nil, nil)
	descCleanerRecords     = prometheus.NewDesc("holdfast_log_cleaner_removed_records_total", "Records removed: superseded, keyless or of aborted transactions.", nil, nil)
	descCleanerTombstones  = prometheus.NewDesc("holdfast_log_cleaner_removed_tombstones_total", "Tombstones removed after delete.retention.ms.", nil, nil)
	descCleanerMarkers     = prometheus.NewDesc("holdfast_log_cleaner_removed_markers_total", "Transaction markers removed after delete.retention.ms.", nil, nil)
	descCleanerThrottled   = prometheus.NewDesc("holdfast_log_cleaner_throttled_seconds_total", "Time cleaner threads waited for log.cleaner.io.max.bytes.per.second.", nil, nil)
	descCleanerBufferUtil  = prometheus.NewDesc("holdfast_log_cleaner_max_buffer_utilization_percent", "Offset map use of the last pass, highest over threads (Kafka's max-buffer-utilization-percent).", nil, nil)
	descCleanerRecopy      = prometheus.NewDesc("holdfast_log_cleaner_recopy_percent", "Bytes kept of the segments the last pass rewrote (Kafka's cleaner-recopy-percent).", nil, nil)
	descCleanerCleanTime   = prometheus.NewDesc("holdfast_log_cleaner_max_clean_time_seconds", "Duration of the last pass, longest over threads (Kafka's max-clean-time-secs).", nil, nil)
	descCleanerMaxDirty    = prometheus.NewDesc("holdfast_log_cleaner_max_dirty_percent", "Dirty share of the dirtiest compacted partition (Kafka's max-dirty-percent).", nil, nil)
	descCleanerDelay       = prometheus.NewDesc("holdfast_log_cleaner_max_compaction_delay_seconds", "How far past max.compaction.lag.ms the most overdue partition is (Kafka's max-compaction-delay-secs).", nil, nil)
	descCleanerUncleanable = prometheus.NewDesc("holdfast_log_cleaner_uncleanable_partitions_count", "Partitions the cleaner gave up on until restart (Kafka's uncleanable-partitions-count).", nil, nil)
	descCleanerSinceRun    = prometheus.NewDesc("holdfast_log_cleaner_time_since_last_run_ms", "Milliseconds since the last pass ended (Kafka's time-since-last-run-ms).", nil, nil)
	descCleanerThreads     = prometheus.NewDesc("holdfast_log_cleaner_threads", "Cleaner threads running (0 with log.cleaner.enable=false).", nil, nil)
	descPartDirty          = prometheus.NewDesc("holdfast_partition_dirty_ratio", "A compacted partition's dirty share: bytes written since its last cleaning over its non-active bytes.", labels, nil)
	descPartFirstDirty     = prometheus.NewDesc("holdfast_partition_cleaner_checkpoint_offset", "A compacted partition's first dirty offset: the cleaner's progress.", labels, nil)
)

type cleanerCollector struct{ b *broker.Broker }

func (c *cleanerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCleanerRuns, descCleanerAborted, descCleanerFailed, descCleanerRead, descCleanerWritten,
		descCleanerReclaimed, descCleanerRecords, descCleanerTombstones, descCleanerMarkers, descCleanerThrottled, descCleanerBufferUtil,
		descCleanerRecopy, descCleanerCleanTime, descCleanerMaxDirty, descCleanerDelay, descCleanerUncleanable, descCleanerSinceRun,
		descCleanerThreads, descPartDirty, descPartFirstDirty} {
		ch <- d
	}
}

func (c *cleanerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.b.CleanerStats()
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter(descCleanerRuns, float64(s.Runs))
	counter(descCleanerAborted, float64(s.Aborted))
	counter(descCleanerFailed, float64(s.Failed))
	counter(descCleanerRead, float64(s.BytesRead))
	counter(descCleanerWritten, float64(s.BytesWritten))
	counter(descCleanerReclaimed, float64(s.BytesReclaimed))
	counter(descCleanerRecords, float64(s.RecordsRemoved))
	counter(descCleanerTombstones, float64(s.TombstonesRemoved))
	counter(descCleanerMarkers, float64(s.MarkersRemoved))
	counter(descCleanerThrottled, s.Throttled.Seconds())
	gauge(descCleanerBufferUtil, 100*s.MaxBufferUtilization)
	gauge(descCleanerRecopy, s.RecopyPercent)
	gauge(descCleanerCleanTime, s.MaxCleanTime.Seconds())
	gauge(descCleanerMaxDirty, s.MaxDirtyPercent)
	gauge(descCleanerDelay, s.MaxCompactionDelay.Seconds())
	gauge(descCleanerUncleanable, float64(s.Uncleanable))
	gauge(descCleanerSinceRun, float64(s.SinceLastRun.Milliseconds()))
	threads := 0
	if s.Enabled {
		threads = s.Threads
	}
	gauge(descCleanerThreads, float64(threads))
	for _, p := range s.Partitions {
		l := []string{p.Topic, strconv.Itoa(int(p.Partition))}
		ch <- prometheus.MustNewConstMetric(descPartDirty, prometheus.GaugeValue, p.DirtyRatio, l...)
		ch <- prometheus.MustNewConstMetric(descPartFirstDirty, prometheus.GaugeValue, float64(p.FirstDirty), l...)
	}
}
