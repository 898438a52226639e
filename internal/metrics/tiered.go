package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"holdfast/internal/broker"
)

// Tiered storage's figures (docs/tiered-storage.md), after Kafka's
// RemoteLogManager metrics (BrokerTopicMetrics RemoteCopyBytesPerSec and
// the like, here as counters Prometheus turns into rates), summed over the
// partitions this node leads. None when tiered storage is off.
var (
	descRemoteCopyBytes    = prometheus.NewDesc("holdfast_remote_copy_bytes_total", "Bytes of segments uploaded to the object store (Kafka's RemoteCopyBytesPerSec).", nil, nil)
	descRemoteCopyRequests = prometheus.NewDesc("holdfast_remote_copy_requests_total", "Segments uploaded (Kafka's RemoteCopyRequestsPerSec).", nil, nil)
	descRemoteCopyErrors   = prometheus.NewDesc("holdfast_remote_copy_errors_total", "Failed segment uploads, retried with backoff (Kafka's RemoteCopyErrorsPerSec).", nil, nil)
	descRemoteFetchBytes   = prometheus.NewDesc("holdfast_remote_fetch_bytes_total", "Bytes served to fetches from the remote log (Kafka's RemoteFetchBytesPerSec).", nil, nil)
	descRemoteFetchReqs    = prometheus.NewDesc("holdfast_remote_fetch_requests_total", "Fetches served from the remote log (Kafka's RemoteFetchRequestsPerSec).", nil, nil)
	descRemoteFetchErrors  = prometheus.NewDesc("holdfast_remote_fetch_errors_total", "Fetches of the remote log that failed (Kafka's RemoteFetchErrorsPerSec).", nil, nil)
	descRemoteCopyLagBytes = prometheus.NewDesc("holdfast_remote_copy_lag_bytes", "Bytes of closed, committed segments not uploaded yet (Kafka's RemoteCopyLagBytes).", nil, nil)
	descRemoteCopyLagSegs  = prometheus.NewDesc("holdfast_remote_copy_lag_segments", "Closed, committed segments not uploaded yet (Kafka's RemoteCopyLagSegments).", nil, nil)
	descRemoteLogSize      = prometheus.NewDesc("holdfast_remote_log_size_bytes", "Bytes in the remote log (Kafka's RemoteLogSizeBytes).", nil, nil)
	descRemoteStoreDown    = prometheus.NewDesc("holdfast_remote_storage_unavailable", "1 when the last upload failed: the object store is down or refuses, and the local disk holds the backlog.", nil, nil)
)

// descRemoteCopyThrottled: Holdfast's own, like the cleaner's
// holdfast_log_cleaner_throttled_seconds_total.
var descRemoteCopyThrottled = prometheus.NewDesc("holdfast_remote_copy_throttled_seconds_total", "Time uploads waited for remote.log.manager.copy.max.bytes.per.second.", nil, nil)

type tieredCollector struct{ b *broker.Broker }

func (c *tieredCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRemoteCopyBytes, descRemoteCopyRequests, descRemoteCopyErrors, descRemoteFetchBytes,
		descRemoteFetchReqs, descRemoteFetchErrors, descRemoteCopyLagBytes, descRemoteCopyLagSegs, descRemoteLogSize, descRemoteStoreDown} {
		ch <- d
	}
	ch <- descRemoteCopyThrottled
}

func (c *tieredCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.b.TieredStats()
	if s == nil {
		return
	}
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	counter(descRemoteCopyBytes, s.CopyBytes.Load())
	counter(descRemoteCopyRequests, s.CopyRequests.Load())
	counter(descRemoteCopyErrors, s.CopyErrors.Load())
	counter(descRemoteFetchBytes, s.FetchBytes.Load())
	counter(descRemoteFetchReqs, s.FetchRequests.Load())
	counter(descRemoteFetchErrors, s.FetchErrors.Load())
	gauge(descRemoteCopyLagBytes, s.CopyLagBytes.Load())
	gauge(descRemoteCopyLagSegs, s.CopyLagSegments.Load())
	gauge(descRemoteLogSize, s.RemoteLogSizeBytes.Load())
	down := int64(0)
	if s.StoreDown.Load() {
		down = 1
	}
	gauge(descRemoteStoreDown, down)
	ch <- prometheus.MustNewConstMetric(descRemoteCopyThrottled, prometheus.CounterValue, float64(s.CopyThrottledNanos.Load())/1e9)
}
