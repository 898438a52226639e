package metrics_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/metrics"
	"holdfast/internal/raft"
	"holdfast/internal/testwait"
	"holdfast/internal/wire"
)

// startWithMetrics starts a broker whose server has the metrics' OnReply
// installed before it serves, as holdfast serve does.
func startWithMetrics(t *testing.T, opts metrics.Options) (*brokertest.Node, func() prometheus.Gatherer) {
	var reg prometheus.Gatherer
	n := brokertest.StartServing(t, func(b *broker.Broker, srv *wire.Server) { reg = metrics.New(b, srv, opts) })
	return n, func() prometheus.Gatherer { return reg }
}

type gathered []*dto.MetricFamily

// value finds the series of name whose labels include want; ok is false
// when there is none.
func (g gathered) value(name string, want map[string]string) (float64, bool) {
	for _, f := range g {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue metrics
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func gather(t *testing.T, reg prometheus.Gatherer) gathered {
	t.Helper()
	fs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return fs
}

// settled gathers until done says the counters caught up with what the
// client saw (the server counts a request after writing its response), or
// for 10 s, and returns the last gathering.
func settled(t *testing.T, reg prometheus.Gatherer, done func(gathered) bool) gathered {
	t.Helper()
	var g gathered
	testwait.Poll(10*time.Second, func() bool { g = gather(t, reg); return done(g) })
	return g
}

func must(t *testing.T, g gathered, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := g.value(name, labels)
	if !ok {
		t.Fatalf("no %s%v", name, labels)
	}
	return v
}

// TestPartitionAndGroupMetrics: after 10 records and a group commit at
// offset 4, the partition shows its offsets, size and leadership, the
// group its lag of 6, and the request counters the bytes and records that
// went in and out of the topic.
func TestPartitionAndGroupMetrics(t *testing.T) {
	n, reg := startWithMetrics(t, metrics.Options{})
	n.CreateTopic("m", 1, nil)
	cl := n.Client(kgo.DefaultProduceTopic("m"), kgo.ProducerLinger(0))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 10; i++ {
		if err := cl.ProduceSync(ctx, kgo.StringRecord("x")).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: "m", Partition: 0, At: 4, LeaderEpoch: -1})
	if resp, err := adm.CommitOffsets(ctx, "g", offs); err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
	// Read everything back, so bytes go out.
	cons := n.Client(kgo.ConsumeTopics("m"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for got := 0; got < 10; {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("timed out consuming")
		}
		got += fs.NumRecords()
	}

	// The server counts a request after writing its response, so the
	// client may see the response first: wait for the last ones.
	topic := map[string]string{"topic": "m"}
	g := settled(t, reg(), func(g gathered) bool {
		in, _ := g.value("holdfast_topic_messages_in_total", topic)
		out, _ := g.value("holdfast_topic_bytes_out_total", topic)
		size, _ := g.value("holdfast_log_size_bytes", map[string]string{"topic": "m", "partition": "0"})
		return in >= 10 && out >= size
	})
	tp := map[string]string{"topic": "m", "partition": "0"}
	for name, want := range map[string]float64{
		"holdfast_partition_high_watermark":   10,
		"holdfast_partition_durable_offset":   10,
		"holdfast_partition_leader":           1,
		"holdfast_partition_in_sync_replicas": 1,
		"holdfast_partition_replicas":         1,
		"holdfast_log_segments":               1,
	} {
		if got := must(t, g, name, tp); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := must(t, g, "holdfast_log_size_bytes", tp); got < 10*60 {
		t.Errorf("log size %v bytes for 10 batches", got)
	}
	gp := map[string]string{"group": "g", "topic": "m", "partition": "0"}
	if got := must(t, g, "holdfast_group_committed_offset", gp); got != 4 {
		t.Errorf("committed offset %v, want 4", got)
	}
	if got := must(t, g, "holdfast_group_lag", gp); got != 6 {
		t.Errorf("lag %v, want 6", got)
	}
	if got := must(t, g, "holdfast_group_lag_sum", map[string]string{"group": "g"}); got != 6 {
		t.Errorf("lag sum %v, want 6", got)
	}
	if got := must(t, g, "holdfast_topic_messages_in_total", topic); got != 10 {
		t.Errorf("messages in %v, want 10", got)
	}
	in := must(t, g, "holdfast_topic_bytes_in_total", topic)
	size := must(t, g, "holdfast_log_size_bytes", tp)
	if in != size {
		t.Errorf("bytes in %v, want the log's size %v (every produced byte is stored)", in, size)
	}
	if out := must(t, g, "holdfast_topic_bytes_out_total", topic); out < size {
		t.Errorf("bytes out %v, want at least the log's %v (all was read)", out, size)
	}
	if got := must(t, g, "holdfast_request_duration_seconds", map[string]string{"api": "Produce"}); got < 10 {
		t.Errorf("%v produce requests timed, want 10", got)
	}
	if _, ok := g.value("holdfast_request_duration_seconds", map[string]string{"api": "AlterClientQuotas"}); ok {
		t.Error("a latency series for an API never called")
	}
	if got := must(t, g, "holdfast_log_flush_duration_seconds", nil); got == 0 {
		t.Error("no fsync timed under flush=sync")
	}
	if got := must(t, g, "holdfast_log_write_bytes_total", map[string]string{"path": "page_cache"}); got == 0 {
		t.Error("no bytes written to segments through the page cache")
	}
	must(t, g, "holdfast_log_write_bytes_total", map[string]string{"path": "direct"}) // log.direct.io is off here
	for name, want := range map[string]float64{
		"holdfast_under_replicated_partitions":   0,
		"holdfast_under_min_isr_partition_count": 0,
		"holdfast_offline_partitions_count":      0,
		"holdfast_active_controller_count":       1,
		"holdfast_leader_count":                  4, // m and __consumer_offsets' 3
		"holdfast_partition_count":               4,
	} {
		if got := must(t, g, name, nil); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// TestErrorsAndInternalTopics: a refused produce is counted by its error
// name; __consumer_offsets is one summed series unless asked for.
func TestErrorsAndInternalTopics(t *testing.T) {
	for _, perPartition := range []bool{false, true} {
		n, reg := startWithMetrics(t, metrics.Options{InternalPartitions: perPartition})
		n.CreateTopic("one", 1, nil)
		// __consumer_offsets is created at the first group lookup, as in
		// Kafka.
		brokertest.Await(t, "the group coordinator", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return n.Admin().FindGroupCoordinators(ctx, "g").Error()
		})
		cl := n.Client()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		// Partition 7 of a one-partition topic.
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "one"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = 7
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := cl.Request(ctx, brokertest.Pin(req, 12)) // topics by name
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		resp := kresp.(*kmsg.ProduceResponse)
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("produce to partition 7: code %d", code)
		}
		// A client's first ApiVersions at a version the broker lacks
		// (KIP-511 negotiation) is answered UNSUPPORTED_VERSION and is
		// not an error to count.
		apiVersionsAbove(t, n.Addr)
		g := settled(t, reg(), func(g gathered) bool {
			_, ok := g.value("holdfast_errors_total", map[string]string{"api": "Produce", "error": "UNKNOWN_TOPIC_OR_PARTITION"})
			return ok
		})
		if v, ok := g.value("holdfast_errors_total", map[string]string{"api": "ApiVersions"}); ok {
			t.Errorf("ApiVersions negotiation counted as %v errors", v)
		}
		if got := must(t, g, "holdfast_errors_total", map[string]string{"api": "Produce", "error": "UNKNOWN_TOPIC_OR_PARTITION"}); got != 1 {
			t.Errorf("errors_total %v, want 1", got)
		}
		_, hasPartition := g.value("holdfast_partition_log_end_offset", map[string]string{"topic": "__consumer_offsets", "partition": "2"})
		parts, hasSum := g.value("holdfast_internal_topic_partitions", map[string]string{"topic": "__consumer_offsets"})
		if hasPartition != perPartition || hasSum == perPartition {
			t.Errorf("InternalPartitions=%v: per-partition series %v, summed series %v", perPartition, hasPartition, hasSum)
		}
		if !perPartition && parts != 3 {
			t.Errorf("internal topic partitions %v, want 3", parts)
		}
		var series int
		for _, f := range g {
			if strings.HasPrefix(f.GetName(), "holdfast_") {
				series += len(f.GetMetric())
			}
		}
		t.Logf("InternalPartitions=%v: %d holdfast_ series", perPartition, series)
	}
}

// TestGrafanaDashboard: the dashboard in docs/grafana parses and queries
// only metrics this package exports.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("../../docs/grafana/holdfast.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("holdfast.json: %v", err)
	}
	n, reg := startWithMetrics(t, metrics.Options{})
	n.CreateTopic("d", 1, nil)
	if err := n.Client(kgo.DefaultProduceTopic("d")).ProduceSync(t.Context(), kgo.StringRecord("x")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The produce is counted after its response is written: wait for it.
	g := settled(t, reg(), func(g gathered) bool {
		_, ok := g.value("holdfast_topic_bytes_in_total", map[string]string{"topic": "d"})
		return ok
	})
	for _, reason := range raft.RefusalReasons() {
		if v, ok := g.value("holdfast_raft_refused_total", map[string]string{"reason": reason}); !ok || v != 0 {
			t.Errorf("holdfast_raft_refused_total{reason=%q}: %v %v, want 0", reason, v, ok)
		}
	}
	exported := map[string]bool{}
	for _, f := range g {
		exported[f.GetName()] = true
	}
	// Series that exist only once something happened (a group commits,
	// internal topics are created at the first group lookup).
	for _, name := range []string{"holdfast_group_lag_sum", "holdfast_group_members", "holdfast_errors_total",
		"holdfast_internal_topic_size_bytes", "holdfast_internal_topic_partitions"} {
		exported[name] = true
	}
	used := 0
	re := regexp.MustCompile(`holdfast_[a-z_]+`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, name := range re.FindAllString(tg.Expr, -1) {
				used++
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
				if !exported[name] && !exported[base] {
					t.Errorf("panel %q queries %s, which is not exported", p.Title, name)
				}
			}
		}
	}
	if used < 20 {
		t.Fatalf("only %d metric references in the dashboard", used)
	}
}

// TestClientQuotaMetrics: a producer over its producer_byte_rate shows up
// with its rate, its quota and the throttle it was given.
func TestClientQuotaMetrics(t *testing.T) {
	n, reg := startWithMetrics(t, metrics.Options{})
	n.CreateTopic("q", 1, nil)
	entity := kadm.ClientQuotaEntity{{Type: "client-id", Name: kmsg.StringPtr("metered")}}
	res, err := n.Admin().AlterClientQuotas(t.Context(), []kadm.AlterClientQuotaEntry{{Entity: entity, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1000}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("alter client quotas: %v %v", err, res)
	}
	cl := n.Client(kgo.ClientID("metered"), kgo.DefaultProduceTopic("q"), kgo.ProducerBatchCompression(kgo.NoCompression()))
	// 30 KB at once against 1000 B/s over a 10 s window: throttled for
	// about 20 s (the response comes first; nothing else is sent).
	big := make([]byte, 30000)
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Value: big}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	l := map[string]string{"quota_type": "Produce", "user": "", "client_id": "metered"}
	g := gather(t, reg())
	if v := must(t, g, "holdfast_client_quota_limit", l); v != 1000 {
		t.Fatalf("limit %v", v)
	}
	if v := must(t, g, "holdfast_client_quota_byte_rate", l); v < 2000 {
		t.Fatalf("byte rate %v, want over 2000 (30 KB over at most 11 s)", v)
	}
	if v := must(t, g, "holdfast_client_quota_throttled_responses_total", l); v != 1 {
		t.Fatalf("throttled responses %v, want 1", v)
	}
	if v := must(t, g, "holdfast_client_quota_throttle_time_seconds_total", l); v < 15 || v > 25 {
		t.Fatalf("throttle time %v s, want about 20", v)
	}
}

// apiVersionsAbove sends one ApiVersions request at a version no broker
// has, as a newer client's first request, checks the answer
// (UNSUPPORTED_VERSION), then one at v0: the connection writes its
// answers in order and tells OnReply of each before writing the next, so
// once the second is read the first has been counted (or not).
func apiVersionsAbove(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for _, version := range []byte{99, 0} {
		// ApiVersions (18), correlation id 7, client id "m"; v99 as a
		// flexible header would also carry tags, which the broker never
		// reads for a version it lacks.
		body := []byte{0, 18, 0, version, 0, 0, 0, 7, 0, 1, 'm'}
		frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		if _, err := c.Write(append(frame, body...)); err != nil {
			t.Fatal(err)
		}
		var size [4]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			t.Fatal(err)
		}
		resp := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(c, resp); err != nil || len(resp) < 6 {
			t.Fatalf("ApiVersions v%d answer: %d bytes, %v", version, len(resp), err)
		}
		want := int16(0)
		if version == 99 {
			want = kerr.UnsupportedVersion.Code
		}
		if code := int16(binary.BigEndian.Uint16(resp[4:])); code != want {
			t.Fatalf("ApiVersions v%d answered code %d, want %d", version, code, want)
		}
	}
}

// TestKafkaNames: the names the common Kafka dashboards query (the JMX
// exporter's broker, replica manager, controller, request and log series,
// kafka-exporter's consumer groups) are exported, each with the value of
// the holdfast_* series behind it.
func TestKafkaNames(t *testing.T) {
	n, reg := startWithMetrics(t, metrics.Options{})
	n.CreateTopic("k", 1, nil)
	cl := n.Client(kgo.DefaultProduceTopic("k"), kgo.ProducerLinger(0))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		if err := cl.ProduceSync(ctx, kgo.StringRecord("x")).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: "k", Partition: 0, At: 1, LeaderEpoch: -1})
	if resp, err := kadm.NewClient(cl).CommitOffsets(ctx, "kg", offs); err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
	g := settled(t, reg(), func(g gathered) bool {
		v, _ := g.value("kafka_server_brokertopicmetrics_messagesin_total", map[string]string{"topic": "k"})
		return v >= 3
	})
	tp := map[string]string{"topic": "k", "partition": "0"}
	for _, c := range []struct {
		kafka string
		want  float64
		l     map[string]string
	}{
		{"kafka_server_brokertopicmetrics_messagesin_total", 3, map[string]string{"topic": "k"}},
		{"kafka_server_replicamanager_underreplicatedpartitions", 0, nil},
		{"kafka_server_replicamanager_leadercount", -1, nil},
		{"kafka_server_replicamanager_partitioncount", -1, nil},
		{"kafka_controller_kafkacontroller_activecontrollercount", 1, nil},
		{"kafka_controller_kafkacontroller_offlinepartitionscount", 0, nil},
		{"kafka_log_log_logendoffset", 3, tp},
		{"kafka_log_log_size", -1, tp},
		{"kafka_network_requestmetrics_requests_total", -1, map[string]string{"request": "Produce"}},
		{"kafka_server_socket_server_metrics_connection_count", -1, nil},
		{"kafka_consumergroup_current_offset", 1, map[string]string{"consumergroup": "kg", "topic": "k", "partition": "0"}},
		{"kafka_consumergroup_lag", 2, map[string]string{"consumergroup": "kg", "topic": "k", "partition": "0"}},
		{"kafka_consumergroup_lag_sum", 2, map[string]string{"consumergroup": "kg"}},
	} {
		v, ok := g.value(c.kafka, c.l)
		if !ok {
			t.Errorf("%s%v not exported", c.kafka, c.l)
		} else if c.want >= 0 && v != c.want {
			t.Errorf("%s%v = %v, want %v", c.kafka, c.l, v, c.want)
		}
	}
	if v, _ := g.value("kafka_network_requestmetrics_requests_total", map[string]string{"request": "Produce"}); v < 3 {
		t.Errorf("Produce requests counted %v, want at least 3", v)
	}
}

// TestFollowerLag: the leader reports each follower's lag in records; a
// stopped follower falls behind by exactly what was written after it
// stopped, under its Kafka name too.
func TestFollowerLag(t *testing.T) {
	nodes := brokertest.StartCluster(t, 3)
	// RF=3 needs every broker registered first.
	brokertest.Await(t, "three registered brokers", func() error {
		md, err := nodes[0].Metadata()
		if err == nil && len(md.Brokers) != 3 {
			err = fmt.Errorf("%d brokers", len(md.Brokers))
		}
		return err
	})
	brokertest.CreateClusterTopic(t, nodes, "f", 1, 3, nil)
	md, err := nodes[0].Metadata("f")
	if err != nil {
		t.Fatal(err)
	}
	leaderID := md.Topics[0].Partitions[0].Leader
	var leader, follower *brokertest.Node
	for _, n := range nodes {
		if n.Cfg.NodeID == leaderID {
			leader = n
		} else {
			follower = n
		}
	}
	cl := leader.Client(kgo.DefaultProduceTopic("f"), kgo.ProducerLinger(0), kgo.RequiredAcks(kgo.AllISRAcks()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	produce := func(k int) {
		for i := 0; i < k; i++ {
			if err := cl.ProduceSync(ctx, kgo.StringRecord("x")).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(2)
	reg := metrics.New(leader.B, wire.NewServer(leader.B, wire.Limits{}, nil))
	lag := func(g gathered, name, replica string) (float64, bool) {
		return g.value(name, map[string]string{"topic": "f", "partition": "0", "replica": replica})
	}
	fid := strconv.Itoa(int(follower.Cfg.NodeID))
	settled(t, reg, func(g gathered) bool { v, ok := lag(g, "holdfast_replica_lag_records", fid); return ok && v == 0 })
	follower.Stop()
	produce(5)
	g := settled(t, reg, func(g gathered) bool { v, _ := lag(g, "holdfast_replica_lag_records", fid); return v == 5 })
	if v, ok := lag(g, "holdfast_replica_lag_records", fid); !ok || v != 5 {
		t.Errorf("holdfast_replica_lag_records for the stopped follower: %v %v, want 5", v, ok)
	}
	if v, ok := lag(g, "kafka_server_fetcherlagmetrics_consumerlag", fid); !ok || v != 5 {
		t.Errorf("kafka_server_fetcherlagmetrics_consumerlag for the stopped follower: %v %v, want 5", v, ok)
	}
}

// TestPartitionSeriesMax: past --metrics-partition-series-max partitions
// the per-partition series (and their Kafka-named copies) give way to
// per-topic sums; at or under it they are as before.
func TestPartitionSeriesMax(t *testing.T) {
	for _, max := range []int{3, 2} {
		n, reg := startWithMetrics(t, metrics.Options{PartitionSeriesMax: max})
		n.CreateTopic("s", 3, nil)
		cl := n.Client(kgo.DefaultProduceTopic("s"), kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		for i := int32(0); i < 3; i++ {
			for k := int32(0); k <= i; k++ { // i+1 records to partition i: 6 in all
				if err := cl.ProduceSync(ctx, &kgo.Record{Partition: i, Value: []byte("x")}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
		cancel()
		summedWanted := max < 3
		g := settled(t, reg(), func(g gathered) bool {
			if summedWanted {
				v, _ := g.value("holdfast_topic_log_end_offset_sum", map[string]string{"topic": "s"})
				return v == 6
			}
			v, _ := g.value("holdfast_partition_log_end_offset", map[string]string{"topic": "s", "partition": "2"})
			return v == 3
		})
		_, perPartition := g.value("holdfast_partition_log_end_offset", map[string]string{"topic": "s", "partition": "0"})
		_, kafkaPerPartition := g.value("kafka_log_log_logendoffset", map[string]string{"topic": "s", "partition": "0"})
		_, summed := g.value("holdfast_topic_partitions", map[string]string{"topic": "s"})
		if perPartition == summedWanted || kafkaPerPartition == summedWanted || summed != summedWanted {
			t.Fatalf("max %d: per-partition series %v (Kafka's name %v), per-topic sums %v", max, perPartition, kafkaPerPartition, summed)
		}
		if summedWanted {
			for name, want := range map[string]float64{"holdfast_topic_partitions": 3, "holdfast_topic_leaders": 3, "holdfast_topic_log_end_offset_sum": 6} {
				if got := must(t, g, name, map[string]string{"topic": "s"}); got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
			if got := must(t, g, "holdfast_topic_size_bytes", map[string]string{"topic": "s"}); got <= 0 {
				t.Errorf("holdfast_topic_size_bytes = %v", got)
			}
		}
		// The node-wide counts do not change with the limit.
		if got := must(t, g, "holdfast_partition_count", nil); got != 3 {
			t.Errorf("max %d: holdfast_partition_count = %v, want 3", max, got)
		}
	}
}
