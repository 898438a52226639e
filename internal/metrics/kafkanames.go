package metrics

import (
	"cmp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// kafkaName is one holdfast_* family exported a second time under the name
// the Kafka dashboards people already run query: the Prometheus JMX
// exporter's lower-cased MBean names as the common broker configurations
// (Strimzi's, Confluent's examples) write them, and kafka-exporter's
// consumer-group names. labels renames labels (holdfast's -> Kafka's).
type kafkaName struct {
	from, to string
	labels   map[string]string
	// count: a histogram family exported as the counter of its samples
	// (Kafka's RequestsPerSec next to our request_duration histogram).
	count bool
}

// kafkaNames lists them: one table, so a dashboard author finds what
// holdfast_* series stands behind each Kafka name here.
var kafkaNames = []kafkaName{
	{from: "holdfast_topic_messages_in_total", to: "kafka_server_brokertopicmetrics_messagesin_total"},
	{from: "holdfast_topic_bytes_in_total", to: "kafka_server_brokertopicmetrics_bytesin_total"},
	{from: "holdfast_topic_bytes_out_total", to: "kafka_server_brokertopicmetrics_bytesout_total"},
	{from: "holdfast_under_replicated_partitions", to: "kafka_server_replicamanager_underreplicatedpartitions"},
	{from: "holdfast_under_min_isr_partition_count", to: "kafka_server_replicamanager_underminisrpartitioncount"},
	{from: "holdfast_partition_count", to: "kafka_server_replicamanager_partitioncount"},
	{from: "holdfast_leader_count", to: "kafka_server_replicamanager_leadercount"},
	{from: "holdfast_replica_lag_records", to: "kafka_server_fetcherlagmetrics_consumerlag"},
	{from: "holdfast_active_controller_count", to: "kafka_controller_kafkacontroller_activecontrollercount"},
	{from: "holdfast_offline_partitions_count", to: "kafka_controller_kafkacontroller_offlinepartitionscount"},
	{from: "holdfast_fenced_brokers", to: "kafka_controller_kafkacontroller_fencedbrokercount"},
	{from: "holdfast_global_topic_count", to: "kafka_controller_kafkacontroller_globaltopiccount"},
	{from: "holdfast_global_partition_count", to: "kafka_controller_kafkacontroller_globalpartitioncount"},
	{from: "holdfast_log_size_bytes", to: "kafka_log_log_size"},
	{from: "holdfast_partition_log_end_offset", to: "kafka_log_log_logendoffset"},
	{from: "holdfast_partition_log_start_offset", to: "kafka_log_log_logstartoffset"},
	{from: "holdfast_log_segments", to: "kafka_log_log_numlogsegments"},
	{from: "holdfast_partition_in_sync_replicas", to: "kafka_cluster_partition_insyncreplicascount"},
	{from: "holdfast_partition_replicas", to: "kafka_cluster_partition_replicascount"},
	{from: "holdfast_request_duration_seconds", to: "kafka_network_requestmetrics_requests_total", labels: map[string]string{"api": "request"}, count: true},
	{from: "holdfast_errors_total", to: "kafka_network_requestmetrics_errors_total", labels: map[string]string{"api": "request"}},
	{from: "holdfast_connections_open", to: "kafka_server_socket_server_metrics_connection_count"},
	// kafka-exporter's (danielqsj) consumer-group series.
	{from: "holdfast_group_lag", to: "kafka_consumergroup_lag", labels: map[string]string{"group": "consumergroup"}},
	{from: "holdfast_group_lag_sum", to: "kafka_consumergroup_lag_sum", labels: map[string]string{"group": "consumergroup"}},
	{from: "holdfast_group_committed_offset", to: "kafka_consumergroup_current_offset", labels: map[string]string{"group": "consumergroup"}},
	{from: "holdfast_group_members", to: "kafka_consumergroup_members", labels: map[string]string{"group": "consumergroup"}},
}

// withKafkaNames gathers g and adds the Kafka-named copies of the families
// kafkaNames lists. It copies at scrape time instead of counting twice on
// the produce and fetch paths.
type withKafkaNames struct{ g prometheus.Gatherer }

func (k withKafkaNames) Gather() ([]*dto.MetricFamily, error) {
	fams, err := k.g.Gather()
	byName := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	out := fams
	for _, kn := range kafkaNames {
		f, ok := byName[kn.from]
		if !ok {
			continue
		}
		out = append(out, kn.copyOf(f))
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out, err
}

// copyOf is f under kn's names. The copy shares f's values and unchanged
// label pairs (nothing changes a gathered family afterwards): a
// reflective proto.Clone of every series was a sixth of a scrape's CPU with
// 10,000 partitions.
func (kn kafkaName) copyOf(f *dto.MetricFamily) *dto.MetricFamily {
	c := &dto.MetricFamily{
		Name: proto.String(kn.to),
		Help: proto.String("Kafka's name for " + kn.from + ": " + f.GetHelp()),
		Type: f.Type,
		Unit: f.Unit,
	}
	if kn.count {
		c.Type = dto.MetricType_COUNTER.Enum()
	}
	ms := make([]dto.Metric, len(f.Metric)) // one allocation for the family's series
	c.Metric = make([]*dto.Metric, len(f.Metric))
	for i, m := range f.Metric {
		nm := &ms[i]
		nm.Label = m.Label
		if len(kn.labels) > 0 {
			nm.Label = make([]*dto.LabelPair, len(m.Label))
			for j, lp := range m.Label {
				if to, ok := kn.labels[lp.GetName()]; ok {
					lp = &dto.LabelPair{Name: proto.String(to), Value: lp.Value}
				}
				nm.Label[j] = lp
			}
			slices.SortFunc(nm.Label, func(a, b *dto.LabelPair) int { return cmp.Compare(a.GetName(), b.GetName()) })
		}
		nm.Gauge, nm.Counter, nm.Summary, nm.Untyped, nm.Histogram = m.Gauge, m.Counter, m.Summary, m.Untyped, m.Histogram
		nm.TimestampMs = m.TimestampMs
		if kn.count {
			nm.Counter = &dto.Counter{Value: proto.Float64(float64(m.GetHistogram().GetSampleCount()))}
			nm.Histogram = nil
		}
		c.Metric[i] = nm
	}
	return c
}
