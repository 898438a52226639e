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
	// Kafka's socket-server-metrics failed-/successful-authentication-total.
	counter("holdfast_failed_authentication_total", "TLS handshakes and SASL exchanges that failed (bad credentials, certificates, expired tokens).", st.AuthFailures.Load)
	counter("holdfast_successful_authentication_total", "SASL authentications that succeeded (re-authentications not counted).", st.AuthSuccesses.Load)
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

	reg.MustRegister(&partitionCollector{b: b}, &groupCollector{b: b})
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
