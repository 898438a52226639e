// Package metrics exposes a node's state as Prometheus metrics, named so a
// Kafka operator finds what they alert on (each help text names the Kafka
// MBean it corresponds to). Gauges are read from the broker when scraped;
// per-request counters are kept on the connection writer's side (OnReply),
// so the hot paths of the broker carry no metric bookkeeping.
//
// Internal topics (__consumer_offsets has 50 partitions) are summed per
// topic unless Options.InternalPartitions asks for every partition.
package metrics

import (
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/raft"
	"holdfast/internal/storage"
	"holdfast/internal/wire"
)

// Options adjust what is exported.
type Options struct {
	// InternalPartitions exports the per-partition series of internal
	// topics too; by default they are summed per topic.
	InternalPartitions bool
	// PartitionSeriesMax: when the node holds more partitions than this
	// (internal topics' summed ones not counted), the per-partition
	// series of every topic are summed per topic instead
	// (holdfast_topic_partitions, _size_bytes, _log_end_offset_sum,
	// _leaders): a scrape of 100,000 partitions' 1.5 million series took
	// ~20 s of a loaded node (issue 27). 0: no limit, every partition's
	// series, as Kafka's JMX exposes.
	PartitionSeriesMax int
}

// DefaultPartitionSeriesMax is serve's --metrics-partition-series-max.
const DefaultPartitionSeriesMax = 10000

// New returns the node's metrics, Go runtime and process metrics, with
// the Kafka names of the broker's (kafkanames.go). It installs srv.OnReply to count and time requests, so call it
// before Serve.
func New(b *broker.Broker, srv *wire.Server, opts ...Options) prometheus.Gatherer {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	rc := newRequestCounters()
	rc.topicName = b.TopicName
	reg.MustRegister(rc.latency, rc.errors, rc.bytesIn, rc.messagesIn, rc.bytesOut)
	srv.OnReply = rc.observe

	counter := func(name, help string, f func() int64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) }))
	}
	st := &srv.Stats
	counter("holdfast_connections_accepted_total", "Connections accepted.", st.Accepted.Load)
	counter("holdfast_connections_rejected_total", "Connections closed at accept because max.connections was reached.", st.Rejected.Load)
	counter("holdfast_connections_rejected_per_ip_total", "Connections closed at accept because their client address already held max.connections.per.ip (or its max.connections.per.ip.overrides entry).", st.RejectedPerIP.Load)
	counter("holdfast_connections_throttled_total", "Connections held unanswered for the throttle time, then closed, because their client address went over its connection_creation_rate quota (KIP-612).", st.Throttled.Load)
	counter("holdfast_connections_accept_delayed_total", "Connections that waited to be taken because max.connection.creation.rate was reached.", st.AcceptDelayed.Load)
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "holdfast_connection_accept_throttle_seconds_total",
		Help: "Time connections waited for max.connection.creation.rate (Kafka: connection-accept-throttle-time)."},
		func() float64 { return time.Duration(st.AcceptDelay.Load()).Seconds() }))
	counter("holdfast_requests_total", "Requests decoded (Kafka: kafka.network RequestsPerSec; by API: holdfast_request_duration_seconds_count).", st.Requests.Load)
	counter("holdfast_bad_frames_total", "Connections closed for an unreadable, oversized or unsupported frame.", st.BadFrames.Load)
	counter("holdfast_handler_panics_total", "Requests whose handler panicked: each closed its own connection (logged with the API and a stack).", st.Panics.Load)
	counter("holdfast_network_received_bytes_total", "Request bytes received.", st.BytesIn.Load)
	counter("holdfast_network_sent_bytes_total", "Response bytes sent.", st.BytesOut.Load)
	// Kafka's socket-server-metrics failed-/successful-authentication-total.
	counter("holdfast_failed_authentication_total", "TLS handshakes and SASL exchanges that failed (bad credentials, certificates, expired tokens).", st.AuthFailures.Load)
	counter("holdfast_successful_authentication_total", "SASL authentications that succeeded (re-authentications not counted).", st.AuthSuccesses.Load)
	counter("holdfast_preauth_frames_refused_total", "SASL listeners' connections closed for a frame above sasl.server.max.receive.size before (or while re-)authenticating, unread (Kafka: InvalidReceiveException).", st.PreAuthRefused.Load)
	counter("holdfast_preauth_timeouts_total", "SASL listeners' connections closed for not authenticating within --sasl-authentication-timeout.", st.AuthTimeouts.Load)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "holdfast_request_memory_pool_used_bytes",
		Help: "Request bytes held now of queued.max.request.bytes, by authenticated connections (Kafka: SocketServer MemoryPoolUsed)."},
		func() float64 { return float64(srv.MemoryPool().Used) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "holdfast_preauth_memory_pool_used_bytes",
		Help: "Request bytes held now of --preauth-queued-bytes, by SASL listeners' connections that have not authenticated."},
		func() float64 { return float64(srv.MemoryPool().PreAuthUsed) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "holdfast_connections_open", Help: "Open client connections."},
		func() float64 { return float64(st.Open.Load()) }))
	counter("holdfast_isr_shrinks_total", "Times the in-sync replica set of a partition this node leads got smaller (Kafka: ReplicaManager IsrShrinksPerSec; sampled every second).",
		func() int64 { return b.ReplicationEvents().IsrShrinks })
	counter("holdfast_isr_expands_total", "Times the in-sync replica set of a partition this node leads got larger (Kafka: ReplicaManager IsrExpandsPerSec; sampled every second).",
		func() int64 { return b.ReplicationEvents().IsrExpands })
	counter("holdfast_leader_elections_total", "Times this node became leader of a partition; summed over nodes, the cluster's elections (Kafka: ControllerStats LeaderElectionRateAndTimeMs).",
		func() int64 { return b.ReplicationEvents().LeaderElections })

	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("holdfast_raft_groups", "Raft groups on this node (partition replicas and the metadata group).",
		func() float64 { return float64(b.ReplicationStats().Groups) })
	gauge("holdfast_raft_groups_failed", "Raft groups stopped on this node by a failure and not yet repaired: they send and acknowledge nothing.",
		func() float64 { return float64(b.ReplicationStats().FailedGroups) })
	for _, role := range []string{"leader", "follower", "electing"} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "holdfast_raft_groups_ticking", Help: "Raft groups on this node that are not quiesced, by role: an idle node's groups all quiesce (they tick and heartbeat only while they carry traffic or elect).",
			ConstLabels: prometheus.Labels{"role": role},
		}, func() float64 {
			a := b.RaftActivity()
			switch role {
			case "leader":
				return float64(a.Leaders)
			case "follower":
				return float64(a.Followers)
			}
			return float64(a.Electing)
		}))
	}
	counter("holdfast_raft_silent_peer_ticks_total", "Raft ticks that found a peer not heard from for an election timeout: each ticks every group and wakes the quiesced ones that depend on that peer.",
		func() int64 { return int64(b.RaftActivity().SilentTicks) })
	for i, reason := range raft.StepDownReasons {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "holdfast_raft_quorum_step_downs_total", Help: "Raft leaders on this node that stepped down on their quorum check (no quorum of the group's voters heard within an election timeout), by why: peer_nodes_silent (nothing at all from the failing followers' nodes), answers_late (their nodes heard, appends out to them, no answer), nothing_in_flight (their nodes heard, nothing out, no answer).",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 { return float64(b.RaftHost().StepDowns()[i]) }))
	}
	gauge("holdfast_log_open_files", "Descriptors of data files (segments, indexes, checkpoints) this node holds open, against holdfast_log_open_files_budget (log.max.open.files: idle files are closed, and reopened on use, to stay within it).",
		func() float64 { n, _ := b.OpenFiles(); return float64(n) })
	gauge("holdfast_log_open_files_budget", "log.max.open.files: the descriptors of data files this node may hold open at once (0: no bound).",
		func() float64 { _, n := b.OpenFiles(); return float64(n) })
	counter("holdfast_log_open_file_evictions_total", "Idle data files whose descriptor was closed to stay within log.max.open.files (reopened on their next use).",
		func() int64 { e, _ := b.FileCacheActivity(); return e })
	counter("holdfast_log_open_file_reopens_total", "Data files opened again after their descriptor was closed while idle (log.max.open.files).",
		func() int64 { _, r := b.FileCacheActivity(); return r })
	gauge("holdfast_fetch_sessions", "Consumers' fetch sessions this broker keeps (KIP-227; Kafka: FetchSessionCache NumIncrementalFetchSessions), at most max.incremental.fetch.session.cache.slots.",
		func() float64 { return float64(b.FetchSessions()) })
	gauge("holdfast_share_partitions", "Share partitions (group, topic, partition) this node holds as partition leader (KIP-932).",
		func() float64 { return float64(b.ShareStats().Partitions) })
	gauge("holdfast_share_sessions", "Share sessions this broker keeps (Kafka: ShareSessionCache ShareSessionsCount), at most group.share.max.share.sessions.",
		func() float64 { return float64(b.ShareStats().Sessions) })
	gauge("holdfast_share_acquired_records", "Records acquired by share consumers and not yet acknowledged, on the share partitions this node leads.",
		func() float64 { return float64(b.ShareStats().Acquired) })
	counter("holdfast_share_acquisition_lock_timeouts_total", "Acquired records whose share.record.lock.duration.ms ran out before they were acknowledged (they are delivered again, or archived at share.delivery.count.limit).",
		func() int64 { return b.ShareStats().LockTimeouts })
	for i, typ := range []string{"gap", "accept", "release", "reject"} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "holdfast_share_record_acknowledgements_total", Help: "Records share consumers acknowledged, by type (Kafka: ShareGroupMetrics RecordAcknowledgementsPerSec ackType).",
			ConstLabels: prometheus.Labels{"ack_type": typ},
		}, func() float64 { return float64(b.ShareStats().Acks[i]) }))
	}
	for _, reason := range raft.RefusalReasons() {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "holdfast_raft_refused_total", Help: "Raft peer connections closed by this node, by reason: a failed TLS handshake, a certificate that is not a peer node's, a frame speaking for another node or carrying another node's message, a bad frame, another cluster, a connection limit, or a dialed node with another node's certificate (each logged, once a minute per remote host and reason).",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 { return float64(b.RaftTransportStats().RefusedBy[reason]) }))
	}
	counter("holdfast_raft_dropped_messages_total", "Raft messages to peers this node dropped unsent: a peer's send queue full (its sender behind: holdfast_raft_queue_full_drops_total) or a failed connection. A failed connection's report the peer unreachable to their groups, whose leaders then probe that follower with one append per heartbeat until it answers; of a full queue's only the appends do (flow control).",
		func() int64 { return b.RaftTransportStats().Dropped })
	for _, kind := range raft.DropKinds() {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "holdfast_raft_queue_full_drops_total", Help: "Raft messages dropped on a peer's full send queue (a slow peer: back-pressure), by kind; only a dropped append is reported to its group (its leader probes the follower instead of pipelining appends). Appends, snapshots and plain heartbeats wait in a queue bounded by count and bytes and go first; answers, votes and quiescing heartbeats in one of their own.",
			ConstLabels: prometheus.Labels{"kind": kind},
		}, func() float64 { return float64(b.RaftTransportStats().QueueFullBy[kind]) }))
	}
	counter("holdfast_raft_replica_repairs_total", "Replicas whose storage failed, discarded and reopened to catch up from the others.",
		func() int64 { return b.ReplicationStats().Repairs })
	counter("holdfast_raft_replica_repairs_deferred_total", "Repairs of replicas that failed for a full disk (ENOSPC) put off until the filesystem has room.",
		func() int64 { return b.ReplicationStats().RepairsDeferred })
	counter("holdfast_storage_corruptions_total", "Corrupt data found in this node's partition logs (a batch failing its CRC where no torn write can be: on a read for a consumer or a follower, by the scrubber, or at open); each such replica is discarded and copied again from the others.",
		func() int64 { return b.ReplicationStats().Corruptions })
	counter("holdfast_storage_scrubbed_bytes_total", "Bytes of partition logs the background scrubber read and CRC-checked (log.scrub.bytes.per.second).",
		func() int64 { return b.ReplicationStats().Scrubbed })

	reg.MustRegister(&partitionCollector{b: b, internal: o.InternalPartitions, max: o.PartitionSeriesMax}, &clusterCollector{b: b}, &groupCollector{b: b}, &fsyncCollector{b: b}, &cleanerCollector{b: b, internal: o.InternalPartitions}, &quotaCollector{b: b}, &tieredCollector{b: b})
	return withKafkaNames{reg}
}

// requestCounters are kept per answered request.
type requestCounters struct {
	latency           *prometheus.HistogramVec
	errors            *prometheus.CounterVec
	bytesIn, bytesOut *prometheus.CounterVec
	messagesIn        *prometheus.CounterVec
	byKey             [kmsg.MaxKey + 1]atomic.Pointer[prometheus.Observer] // created on first use: no series for APIs never called
	apiNames          [kmsg.MaxKey + 1]string
	topicName         func(id [16]byte) (string, bool)
	topicsMu          sync.RWMutex
	topics            map[string]*topicCounters
	byID              map[[16]byte]*topicCounters
	errMu             sync.Mutex
	errs              map[errKey]prometheus.Counter
}

type topicCounters struct{ bytesIn, messagesIn, bytesOut prometheus.Counter }

type errKey struct {
	api  int16
	code int16
}

func newRequestCounters() *requestCounters {
	rc := &requestCounters{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "holdfast_request_duration_seconds",
			Help:    "Time from decoding a request to writing its response, by Kafka API; _count is the request rate (Kafka: RequestMetrics TotalTimeMs, RequestsPerSec).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18), // 50µs .. ~6.5s
		}, []string{"api"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_errors_total",
			Help: "Error codes in responses, by Kafka API and error name (Kafka: RequestMetrics ErrorsPerSec).",
		}, []string{"api", "error"}),
		bytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_topic_bytes_in_total",
			Help: "Record batch bytes appended by producers, by topic (Kafka: BrokerTopicMetrics BytesInPerSec).",
		}, []string{"topic"}),
		messagesIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_topic_messages_in_total",
			Help: "Records appended by producers, by topic (Kafka: BrokerTopicMetrics MessagesInPerSec).",
		}, []string{"topic"}),
		bytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_topic_bytes_out_total",
			Help: "Record batch bytes sent to consumers, by topic (Kafka: BrokerTopicMetrics BytesOutPerSec).",
		}, []string{"topic"}),
		topics: map[string]*topicCounters{},
		byID:   map[[16]byte]*topicCounters{},
		errs:   map[errKey]prometheus.Counter{},
	}
	for k := range rc.apiNames {
		rc.apiNames[k] = kmsg.NameForKey(int16(k))
	}
	return rc
}

func (rc *requestCounters) topic(name string) *topicCounters {
	rc.topicsMu.RLock()
	tc := rc.topics[name]
	rc.topicsMu.RUnlock()
	if tc != nil {
		return tc
	}
	rc.topicsMu.Lock()
	defer rc.topicsMu.Unlock()
	if tc = rc.topics[name]; tc == nil {
		tc = &topicCounters{rc.bytesIn.WithLabelValues(name), rc.messagesIn.WithLabelValues(name), rc.bytesOut.WithLabelValues(name)}
		rc.topics[name] = tc
	}
	return tc
}

// topicByID finds the counters of a topic named by id (Fetch v13+).
func (rc *requestCounters) topicByID(id [16]byte) *topicCounters {
	rc.topicsMu.RLock()
	tc := rc.byID[id]
	rc.topicsMu.RUnlock()
	if tc != nil || rc.topicName == nil {
		return tc
	}
	name, ok := rc.topicName(id)
	if !ok {
		return nil
	}
	tc = rc.topic(name)
	rc.topicsMu.Lock()
	rc.byID[id] = tc
	rc.topicsMu.Unlock()
	return tc
}

func (rc *requestCounters) countError(api, code int16) {
	k := errKey{api, code}
	rc.errMu.Lock()
	c := rc.errs[k]
	if c == nil {
		name := strconv.Itoa(int(code))
		if ke, ok := kerr.ErrorForCode(code).(*kerr.Error); ok {
			name = ke.Message
		}
		c = rc.errors.WithLabelValues(rc.apiNames[api], name)
		rc.errs[k] = c
	}
	rc.errMu.Unlock()
	c.Inc()
}

// observe is the server's OnReply.
func (rc *requestCounters) observe(req *wire.Request, resp kmsg.Response, took time.Duration) {
	key := req.Key
	if key < 0 || int(key) >= len(rc.byKey) {
		return
	}
	obs := rc.byKey[key].Load()
	if obs == nil {
		o := rc.latency.WithLabelValues(rc.apiNames[key])
		obs = &o
		rc.byKey[key].Store(obs)
	}
	(*obs).Observe(took.Seconds())
	var spliced *wire.Spliced
	if sp, ok := resp.(*wire.Spliced); ok {
		spliced, resp = sp, sp.Response
	}
	switch r := resp.(type) {
	case *kmsg.ProduceResponse:
		rc.produced(req.Body.(*kmsg.ProduceRequest), r)
	case *kmsg.FetchResponse:
		rc.fetched(r, spliced)
	case *kmsg.ApiVersionsResponse:
		// UNSUPPORTED_VERSION here is the negotiation KIP-511 defines (a
		// client asks with its newest version and retries with the one the
		// answer names), not a failure: counting it kept the error panel of
		// every dashboard lit by ordinary connects.
		if r.ErrorCode != kerr.UnsupportedVersion.Code {
			rc.walkErrors(key, reflect.ValueOf(resp))
		}
	default:
		rc.walkErrors(key, reflect.ValueOf(resp))
	}
}

// produced counts the bytes and records of the partitions appended.
func (rc *requestCounters) produced(req *kmsg.ProduceRequest, resp *kmsg.ProduceResponse) {
	for ti, t := range resp.Topics {
		var bytes, msgs int64
		for pi, p := range t.Partitions {
			if p.ErrorCode != 0 {
				rc.countError(kmsg.Produce.Int16(), p.ErrorCode)
				continue
			}
			if ti < len(req.Topics) && pi < len(req.Topics[ti].Partitions) {
				recs := req.Topics[ti].Partitions[pi].Records
				bytes += int64(len(recs))
				msgs += int64(recordCount(recs))
			}
		}
		if bytes > 0 {
			tc := rc.topic(t.Topic)
			tc.bytesIn.Add(float64(bytes))
			tc.messagesIn.Add(float64(msgs))
		}
	}
}

// recordCount reads the record count of a v2 record batch header.
func recordCount(batch []byte) int32 {
	const countAt = 57 // baseOffset 8, length 4, epoch 4, magic 1, crc 4, attributes 2, lastOffsetDelta 4, timestamps 16, producer 14
	if len(batch) < countAt+4 || batch[16] != 2 {
		return 0
	}
	return int32(batch[countAt])<<24 | int32(batch[countAt+1])<<16 | int32(batch[countAt+2])<<8 | int32(batch[countAt+3])
}

// fetched counts the record bytes sent per topic: a partition's records are
// either in the response or, sent by sendfile, a placeholder standing for
// a file range.
func (rc *requestCounters) fetched(resp *kmsg.FetchResponse, sp *wire.Spliced) {
	next := 0
	for _, t := range resp.Topics {
		var bytes int64
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				rc.countError(kmsg.Fetch.Int16(), p.ErrorCode)
			}
			rb := p.RecordBatches
			if sp != nil && next < len(sp.Placeholders) && len(rb) > 0 && len(rb) == len(sp.Placeholders[next]) && &rb[0] == &sp.Placeholders[next][0] {
				bytes += int64(sp.Ranges[next].Len)
				next++
				continue
			}
			bytes += int64(len(rb))
		}
		if bytes == 0 {
			continue
		}
		if t.Topic != "" {
			rc.topic(t.Topic).bytesOut.Add(float64(bytes))
		} else if tc := rc.topicByID(t.TopicID); tc != nil {
			tc.bytesOut.Add(float64(bytes))
		}
	}
}

// walkErrors counts every non-zero ErrorCode field in a response of the
// other APIs (admin and group requests: not the hot path).
func (rc *requestCounters) walkErrors(key int16, v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			rc.walkErrors(key, v.Elem())
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			if !t.Field(i).IsExported() {
				continue
			}
			if t.Field(i).Name == "ErrorCode" && f.Kind() == reflect.Int16 {
				if c := int16(f.Int()); c != 0 {
					rc.countError(key, c)
				}
				continue
			}
			if k := f.Kind(); k == reflect.Slice || k == reflect.Struct || k == reflect.Pointer {
				rc.walkErrors(key, f)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		for i := 0; i < v.Len(); i++ {
			rc.walkErrors(key, v.Index(i))
		}
	}
}

var (
	labels       = []string{"topic", "partition"}
	descLogStart = prometheus.NewDesc("holdfast_partition_log_start_offset", "First offset still in the log (Kafka: Log LogStartOffset).", labels, nil)
	descLogEnd   = prometheus.NewDesc("holdfast_partition_log_end_offset", "Next offset to be written (Kafka: Log LogEndOffset).", labels, nil)
	descHW       = prometheus.NewDesc("holdfast_partition_high_watermark", "Committed offset: consumers read below it.", labels, nil)
	descDurable  = prometheus.NewDesc("holdfast_partition_durable_offset", "Every offset below it is fsynced.", labels, nil)
	descSize     = prometheus.NewDesc("holdfast_log_size_bytes", "Bytes of the partition's log on disk (Kafka: Log Size).", labels, nil)
	descSegments = prometheus.NewDesc("holdfast_log_segments", "Segments of the partition's log (Kafka: Log NumLogSegments).", labels, nil)
	descLeader   = prometheus.NewDesc("holdfast_partition_leader", "1 if this node leads the partition.", labels, nil)
	descISR      = prometheus.NewDesc("holdfast_partition_in_sync_replicas", "In-sync replicas of a partition this node leads (Kafka: Partition InSyncReplicasCount).", labels, nil)
	descReplicas = prometheus.NewDesc("holdfast_partition_replicas", "Replicas of the partition (Kafka: Partition ReplicasCount).", labels, nil)
	// Tiered storage per partition (Kafka's RemoteLogManager figures, which
	// Kafka reports per topic: sum by topic for its view), from the leader
	// only, so a sum over the cluster counts each partition once.
	descRemoteSize    = prometheus.NewDesc("holdfast_partition_remote_log_size_bytes", "Bytes in the remote log of a tiered partition this node leads (Kafka: RemoteLogSizeBytes).", labels, nil)
	descRemoteSegs    = prometheus.NewDesc("holdfast_partition_remote_log_segments", "Segments in the remote log of a tiered partition this node leads.", labels, nil)
	descRemoteLagB    = prometheus.NewDesc("holdfast_partition_remote_copy_lag_bytes", "Bytes of closed segments of a tiered partition this node leads not uploaded yet (Kafka: RemoteCopyLagBytes).", labels, nil)
	descRemoteLagSegs = prometheus.NewDesc("holdfast_partition_remote_copy_lag_segments", "Closed segments of a tiered partition this node leads not uploaded yet (Kafka: RemoteCopyLagSegments).", labels, nil)
	descFollower      = prometheus.NewDesc("holdfast_replica_lag_records", "Records a follower of a partition this node leads is behind the log end (its Raft match offset; Kafka: FetcherLagMetrics ConsumerLag, which the follower reports).", append(labels, "replica"), nil)

	internalLabels  = []string{"topic"}
	descIntParts    = prometheus.NewDesc("holdfast_internal_topic_partitions", "Partitions of an internal topic held here (per-partition series: --metrics-internal-partitions).", internalLabels, nil)
	descIntSize     = prometheus.NewDesc("holdfast_internal_topic_size_bytes", "Bytes on disk of an internal topic's partitions held here.", internalLabels, nil)
	descIntLogEnd   = prometheus.NewDesc("holdfast_internal_topic_log_end_offset_sum", "Sum of the log end offsets of an internal topic's partitions held here: its growth is the records written to it.", internalLabels, nil)
	topicLabels     = []string{"topic"}
	descTopicParts  = prometheus.NewDesc("holdfast_topic_partitions", "Partitions of a topic held here, when the node holds more than --metrics-partition-series-max partitions and their per-partition series are summed per topic.", topicLabels, nil)
	descTopicSize   = prometheus.NewDesc("holdfast_topic_size_bytes", "Bytes on disk of a topic's partitions held here (summed per topic past --metrics-partition-series-max partitions).", topicLabels, nil)
	descTopicLogEnd = prometheus.NewDesc("holdfast_topic_log_end_offset_sum", "Sum of the log end offsets of a topic's partitions held here: its growth is the records written to them (summed per topic past --metrics-partition-series-max partitions).", topicLabels, nil)
	descTopicLeads  = prometheus.NewDesc("holdfast_topic_leaders", "Partitions of a topic this node leads (summed per topic past --metrics-partition-series-max partitions).", topicLabels, nil)
	descURP         = prometheus.NewDesc("holdfast_under_replicated_partitions", "Partitions this node leads with fewer in-sync replicas than replicas (Kafka: ReplicaManager UnderReplicatedPartitions).", nil, nil)
	descUnderMinISR = prometheus.NewDesc("holdfast_under_min_isr_partition_count", "Partitions this node leads with fewer in-sync replicas than min.insync.replicas: acks=all writes fail (Kafka: ReplicaManager UnderMinIsrPartitionCount).", nil, nil)
	descPartCount   = prometheus.NewDesc("holdfast_partition_count", "Partitions with a replica on this node (Kafka: ReplicaManager PartitionCount).", nil, nil)
	descLeaderCount = prometheus.NewDesc("holdfast_leader_count", "Partitions this node leads (Kafka: ReplicaManager LeaderCount).", nil, nil)
)

// partitionCollector reads every partition at scrape time.
type partitionCollector struct {
	b        *broker.Broker
	internal bool
	max      int // Options.PartitionSeriesMax
}

func (c *partitionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLogStart, descLogEnd, descHW, descDurable, descSize, descSegments, descLeader, descISR, descReplicas, descFollower,
		descRemoteSize, descRemoteSegs, descRemoteLagB, descRemoteLagSegs, descIntParts, descIntSize, descIntLogEnd,
		descTopicParts, descTopicSize, descTopicLogEnd, descTopicLeads, descURP, descUnderMinISR, descPartCount, descLeaderCount} {
		ch <- d
	}
}

func (c *partitionCollector) Collect(ch chan<- prometheus.Metric) {
	type agg struct {
		parts, leaders int
		size, logEnds  int64
	}
	internal := map[string]*agg{}
	var urp, underMin, count, leaders int
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	stats := c.b.PartitionStats()
	// Past the limit every topic is summed, not the first so many
	// partitions: which series exist does not depend on their order.
	perPartition := 0
	for _, p := range stats {
		if !p.Internal || c.internal {
			perPartition++
		}
	}
	var summed map[string]*agg
	if c.max > 0 && perPartition > c.max {
		summed = map[string]*agg{}
	}
	for _, p := range stats {
		count++
		if p.IsLeader {
			leaders++
		}
		if p.UnderReplicated() {
			urp++
		}
		if p.UnderMinISR() {
			underMin++
		}
		if p.Internal && !c.internal {
			a := internal[p.Topic]
			if a == nil {
				a = &agg{}
				internal[p.Topic] = a
			}
			a.parts++
			a.size += p.SizeBytes
			a.logEnds += p.LogEnd
			continue
		}
		if summed != nil {
			a := summed[p.Topic]
			if a == nil {
				a = &agg{}
				summed[p.Topic] = a
			}
			a.parts++
			a.size += p.SizeBytes
			a.logEnds += p.LogEnd
			if p.IsLeader {
				a.leaders++
			}
			continue
		}
		l := []string{p.Topic, strconv.Itoa(int(p.Partition))}
		gauge(descLogStart, float64(p.LogStart), l...)
		gauge(descLogEnd, float64(p.LogEnd), l...)
		gauge(descHW, float64(p.HighWatermark), l...)
		gauge(descDurable, float64(p.Durable), l...)
		gauge(descSize, float64(p.SizeBytes), l...)
		gauge(descSegments, float64(p.Segments), l...)
		gauge(descReplicas, float64(p.Replicas), l...)
		lead := 0.0
		if p.IsLeader {
			lead = 1
			gauge(descISR, float64(p.ISR), l...)
			if r := p.Remote; r != nil {
				gauge(descRemoteSize, float64(r.SizeBytes), l...)
				gauge(descRemoteSegs, float64(r.Segments), l...)
				gauge(descRemoteLagB, float64(r.LagBytes), l...)
				gauge(descRemoteLagSegs, float64(r.LagSegments), l...)
			}
		}
		for _, f := range p.FollowerLag {
			gauge(descFollower, float64(f.Records), append(l, strconv.Itoa(int(f.Replica)))...)
		}
		gauge(descLeader, lead, l...)
	}
	for t, a := range internal {
		gauge(descIntParts, float64(a.parts), t)
		gauge(descIntSize, float64(a.size), t)
		gauge(descIntLogEnd, float64(a.logEnds), t)
	}
	for t, a := range summed {
		gauge(descTopicParts, float64(a.parts), t)
		gauge(descTopicSize, float64(a.size), t)
		gauge(descTopicLogEnd, float64(a.logEnds), t)
		gauge(descTopicLeads, float64(a.leaders), t)
	}
	gauge(descURP, float64(urp))
	gauge(descUnderMinISR, float64(underMin))
	gauge(descPartCount, float64(count))
	gauge(descLeaderCount, float64(leaders))
}

var (
	descController = prometheus.NewDesc("holdfast_active_controller_count", "1 on the node that is the active controller (Kafka: KafkaController ActiveControllerCount).", nil, nil)
	descOffline    = prometheus.NewDesc("holdfast_offline_partitions_count", "Partitions with no live leader, reported by the active controller (Kafka: KafkaController OfflinePartitionsCount).", nil, nil)
	descBrokers    = prometheus.NewDesc("holdfast_brokers", "Brokers registered in the cluster metadata.", nil, nil)
	descFenced     = prometheus.NewDesc("holdfast_fenced_brokers", "Registered brokers fenced for missing heartbeats (Kafka: KafkaController FencedBrokerCount).", nil, nil)
	descTopics     = prometheus.NewDesc("holdfast_global_topic_count", "Topics in the cluster, reported by the active controller (Kafka: KafkaController GlobalTopicCount).", nil, nil)
	descGlobalPart = prometheus.NewDesc("holdfast_global_partition_count", "Partitions in the cluster, reported by the active controller (Kafka: KafkaController GlobalPartitionCount).", nil, nil)
)

type clusterCollector struct{ b *broker.Broker }

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descController, descOffline, descBrokers, descFenced, descTopics, descGlobalPart} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	cs := c.b.ClusterStats()
	gauge := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	ctl := 0
	if cs.Controller {
		ctl = 1
	}
	gauge(descController, ctl)
	gauge(descOffline, cs.OfflinePartitions)
	gauge(descBrokers, cs.Brokers)
	gauge(descFenced, cs.FencedBrokers)
	gauge(descTopics, cs.Topics)
	gauge(descGlobalPart, cs.Partitions)
}

var descFsync = prometheus.NewDesc("holdfast_log_flush_duration_seconds", "Duration of each fdatasync (or syncfs covering several logs) of the group-commit cycle (Kafka: LogFlushStats LogFlushRateAndTimeMs).", nil, nil)

var descLogWrites = prometheus.NewDesc("holdfast_log_write_bytes_total", "Bytes written to partition log segments, by path: direct (O_DIRECT, log.direct.io) or page_cache.", []string{"path"}, nil)

var (
	descCacheHits      = prometheus.NewDesc("holdfast_log_cache_hits_total", "Fetches of a partition log's records answered from the read cache of recently written segment bytes (log.direct.io.cache.bytes; cf. Kafka Streams' record-cache hit ratio).", nil, nil)
	descCacheMisses    = prometheus.NewDesc("holdfast_log_cache_misses_total", "Fetches of a partition log's records, with log.direct.io, that the read cache did not hold: sent from the file (sendfile).", nil, nil)
	descCacheReadBytes = prometheus.NewDesc("holdfast_log_cache_fetch_bytes_total", "Record bytes fetched with log.direct.io, by source: cache (memory) or file (sendfile).", []string{"source"}, nil)
	descCacheBytes     = prometheus.NewDesc("holdfast_log_cache_bytes", "Memory held by the read cache of recently written segment bytes.", nil, nil)
	descCacheLimit     = prometheus.NewDesc("holdfast_log_cache_limit_bytes", "The read cache's budget (log.direct.io.cache.bytes; used with log.direct.io only).", nil, nil)
	descCacheEvictions = prometheus.NewDesc("holdfast_log_cache_evictions_total", "Chunks of segment bytes dropped from the read cache to stay within its budget.", nil, nil)
)

var descJournal = prometheus.NewDesc("holdfast_log_journal_total", "The data journal's work (log.journal.enable), by kind: rounds (sync cycles that wrote it), journaled (log syncs it made durable), old_path (log syncs in those cycles that took the write-out and syncfs), checkpoints, cuts.", []string{"kind"}, nil)

type fsyncCollector struct{ b *broker.Broker }

func (c *fsyncCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descFsync
	ch <- descLogWrites
	ch <- descCacheHits
	ch <- descCacheMisses
	ch <- descCacheReadBytes
	ch <- descCacheBytes
	ch <- descCacheLimit
	ch <- descCacheEvictions
	ch <- descJournal
}

func (c *fsyncCollector) Collect(ch chan<- prometheus.Metric) {
	ws := c.b.SegmentWrites()
	ch <- prometheus.MustNewConstMetric(descLogWrites, prometheus.CounterValue, float64(ws.DirectBytes), "direct")
	ch <- prometheus.MustNewConstMetric(descLogWrites, prometheus.CounterValue, float64(ws.CachedBytes), "page_cache")
	rc := c.b.ReadCacheStats()
	ch <- prometheus.MustNewConstMetric(descCacheHits, prometheus.CounterValue, float64(rc.Hits))
	ch <- prometheus.MustNewConstMetric(descCacheMisses, prometheus.CounterValue, float64(rc.Misses))
	ch <- prometheus.MustNewConstMetric(descCacheReadBytes, prometheus.CounterValue, float64(rc.HitBytes), "cache")
	ch <- prometheus.MustNewConstMetric(descCacheReadBytes, prometheus.CounterValue, float64(rc.MissBytes), "file")
	ch <- prometheus.MustNewConstMetric(descCacheBytes, prometheus.GaugeValue, float64(rc.Bytes))
	ch <- prometheus.MustNewConstMetric(descCacheLimit, prometheus.GaugeValue, float64(rc.Limit))
	ch <- prometheus.MustNewConstMetric(descCacheEvictions, prometheus.CounterValue, float64(rc.Evictions))
	js := c.b.JournalStats()
	for kind, v := range map[string]int64{"rounds": js.Rounds, "journaled": js.Journaled, "old_path": js.OldPath, "checkpoints": js.Checkpoints, "cuts": js.Cuts} {
		ch <- prometheus.MustNewConstMetric(descJournal, prometheus.CounterValue, float64(v), kind)
	}
	s := c.b.FsyncLatency()
	bounds := storage.HistogramBounds()
	buckets := make(map[float64]uint64, len(bounds))
	var cum uint64
	for i, b := range bounds {
		cum += uint64(s.Counts[i])
		buckets[b.Seconds()] = cum
	}
	total := cum + uint64(s.Counts[len(bounds)])
	ch <- prometheus.MustNewConstHistogram(descFsync, total, s.Sum.Seconds(), buckets)
}

var (
	groupLabels   = []string{"group", "topic", "partition"}
	descCommitted = prometheus.NewDesc("holdfast_group_committed_offset", "A consumer group's committed offset.", groupLabels, nil)
	descLag       = prometheus.NewDesc("holdfast_group_lag", "Records between a group's committed offset and the high watermark (kafka-consumer-groups.sh LAG).", groupLabels, nil)
	descLagSum    = prometheus.NewDesc("holdfast_group_lag_sum", "A consumer group's lag summed over its partitions.", []string{"group"}, nil)
	descMembers   = prometheus.NewDesc("holdfast_group_members", "Members of a consumer group.", []string{"group"}, nil)
)

// groupCollector reads the groups' committed offsets and lag at scrape time.
type groupCollector struct{ b *broker.Broker }

func (c *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCommitted
	ch <- descLag
	ch <- descLagSum
	ch <- descMembers
}

func (c *groupCollector) Collect(ch chan<- prometheus.Metric) {
	members := map[string]int{}
	sums := map[string]int64{}
	for _, g := range c.b.GroupLags() {
		l := []string{g.Group, g.Topic, strconv.Itoa(int(g.Partition))}
		ch <- prometheus.MustNewConstMetric(descCommitted, prometheus.GaugeValue, float64(g.Committed), l...)
		if g.Lag >= 0 {
			ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(g.Lag), l...)
			sums[g.Group] += g.Lag
		}
		members[g.Group] = g.Members
	}
	for g, n := range members {
		ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(n), g)
		ch <- prometheus.MustNewConstMetric(descLagSum, prometheus.GaugeValue, float64(sums[g]), g)
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

type cleanerCollector struct {
	b        *broker.Broker
	internal bool // per-partition series of internal topics too
}

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
		if p.Internal && !c.internal {
			continue // summed nowhere: an internal topic's cleaning shows in the totals
		}
		l := []string{p.Topic, strconv.Itoa(int(p.Partition))}
		ch <- prometheus.MustNewConstMetric(descPartDirty, prometheus.GaugeValue, p.DirtyRatio, l...)
		ch <- prometheus.MustNewConstMetric(descPartFirstDirty, prometheus.GaugeValue, float64(p.FirstDirty), l...)
	}
}
