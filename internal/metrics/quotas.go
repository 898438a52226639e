package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"holdfast/internal/broker"
	"holdfast/internal/quota"
)

// Client quota metrics, one series per (quota type, user, client-id) rate
// the node tracks, named after Kafka's kafka.server:type=Produce|Fetch|
// Request|ControllerMutation,user=,client-id= sensors. A label is empty
// when the matching quota does not name that side (a quota on a client id
// alone is shared by every user).
var (
	quotaLabels        = []string{"quota_type", "user", "client_id"}
	descQuotaByteRate  = prometheus.NewDesc("holdfast_client_quota_byte_rate", "Bytes per second over the quota window of a client with a byte-rate quota (Kafka: type=Produce|Fetch byte-rate).", quotaLabels, nil)
	descQuotaReqTime   = prometheus.NewDesc("holdfast_client_quota_request_time_percent", "Percent of one thread's time spent in request handlers for a client with a request_percentage quota (Kafka: type=Request request-time).", quotaLabels, nil)
	descQuotaMutations = prometheus.NewDesc("holdfast_client_quota_mutation_rate", "Partitions created or deleted per second by a client with a controller_mutation_rate quota (Kafka: type=ControllerMutation mutation-rate).", quotaLabels, nil)
	descQuotaLimit     = prometheus.NewDesc("holdfast_client_quota_limit", "The quota that applies to the client (bytes/s, percent, or partitions/s).", quotaLabels, nil)
	descQuotaThrottled = prometheus.NewDesc("holdfast_client_quota_throttled_responses_total", "Responses throttled for the quota.", quotaLabels, nil)
	descQuotaThrottle  = prometheus.NewDesc("holdfast_client_quota_throttle_time_seconds_total", "Throttle time imposed for the quota: throttle_time_ms answered, the connection muted as long (Kafka: throttle-time).", quotaLabels, nil)
)

type quotaCollector struct{ b *broker.Broker }

func (c *quotaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQuotaByteRate, descQuotaReqTime, descQuotaMutations, descQuotaLimit, descQuotaThrottled, descQuotaThrottle} {
		ch <- d
	}
}

func (c *quotaCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.b.QuotaStats() {
		l := []string{s.Type.String(), s.User, s.ClientID}
		var rate *prometheus.Desc
		switch s.Type {
		case quota.Produce, quota.Fetch:
			rate = descQuotaByteRate
		case quota.Request:
			rate = descQuotaReqTime
		case quota.ControllerMutation:
			rate = descQuotaMutations
		}
		ch <- prometheus.MustNewConstMetric(rate, prometheus.GaugeValue, s.Value, l...)
		ch <- prometheus.MustNewConstMetric(descQuotaLimit, prometheus.GaugeValue, s.Quota, l...)
		ch <- prometheus.MustNewConstMetric(descQuotaThrottled, prometheus.CounterValue, float64(s.Throttled), l...)
		ch <- prometheus.MustNewConstMetric(descQuotaThrottle, prometheus.CounterValue, s.ThrottleTime.Seconds(), l...)
	}
}
