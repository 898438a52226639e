package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"holdfast/internal/broker"
	"holdfast/internal/cluster"
	"holdfast/internal/group"
	"holdfast/internal/metadata"
	"holdfast/internal/metrics"
	"holdfast/internal/quota"
	"holdfast/internal/raft"
	"holdfast/internal/storage"
	"holdfast/internal/tiered"
	"holdfast/internal/wire"
)

func init() { addCommand(newServeCmd) }

// serveConfig is every `serve` setting as the command line, the
// environment and the --config file leave it. register lists them (with
// their Kafka names); brokerConfig checks them and maps them onto the
// broker's and the server's configs.
type serveConfig struct {
	unknownEnv                                                            []string // HOLDFAST_* variables that set nothing (reported)
	config                                                                string
	overrides                                                             []string
	listen, advertised, dataDir, rack, flush, replicaSelector             string
	peers, raftListen, join                                               string
	metricsListen, logLevel, logFormat                                    string
	adminAuth, adminAuthMetrics, adminTLS                                 string
	nodeID, numParts, offsetParts, txnParts, defaultRF, fetchSessionSlots int
	maxMsg, maxReq, maxConns, imbalancePct                                int
	maxConnsPerIP, maxConnRate                                            int
	maxConnsPerIPOverrides                                                string
	saslMaxReceive                                                        int
	preAuthQueued                                                         int64
	authTimeout                                                           time.Duration
	groupMaxSize, offsetMetaMax, indexInterval                            int
	cgMaxSize                                                             int
	cgSession, cgHeartbeat                                                time.Duration
	cgAssignors, cgMigration                                              string
	shareLock, shareSession, shareHeartbeat                               time.Duration
	shareDeliveries, shareMaxSize, shareSessions                          int
	shareLocks                                                            int64
	txnAbortIv, txnIDExpiry, offsRetCheck                                 time.Duration
	segBytes, retBytes, maxQueued, dioCache, scrubRate                    int64
	autoCreate, rebalance, ctrlShut, directIO, verifyReads, logJournal    bool
	raftSolo                                                              bool
	console, consoleLab, consoleActions, metricsInternal                  bool
	metricsPartitionMax                                                   int
	consoleSample                                                         time.Duration
	txnMax, retention, segmentMs, retentionCheck, idle                    time.Duration
	imbalanceIv, ctrlShutMax, hbInterval, session, replicaLag             time.Duration
	groupInitialDelay, groupMinSession, groupMaxSession, offsRet          time.Duration
	// The log cleaner (docs/compaction.md).
	cleanerOn                                       bool
	cleanerThreads, cleanerIOBuf                    int
	cleanerMem, offsetsSeg, txnSeg                  int64
	cleanerRate, cleanableRatio                     float64
	cleanerBackoff, deleteRetention, minLag, maxLag time.Duration
	// Metadata snapshots (docs/architecture.md).
	metaSnapBytes    int64
	metaSnapInterval time.Duration
	// Descriptor budget (docs/storage.md).
	maxOpenFiles, maxBrokerParts int
	// Go's soft memory limit (broker/memlimit.go).
	memoryLimit int64
	// Replicas opened before the node listens (docs/storage.md).
	syncOpens int
	// Client quota windows (docs/quotas.md).
	quotaWindows, ctrlQuotaWindows       int
	quotaWindowSize, ctrlQuotaWindowSize time.Duration
	// security are the Kafka security settings by name (ssl.*, sasl.*,
	// listener.name.*, ...: kafkaSecurityKey), for buildSecurity.
	security props
	addScram scramFlag
	// origins is where each setting came from (settings.configOrigins),
	// for DescribeConfigs' sources; nil when not loaded by settings.
	origins map[string]broker.ConfigOrigin
	// remote is tiered storage (docs/tiered-storage.md).
	remote tiered.Config
}

func (c *serveConfig) register(s *settings) {
	def := broker.DefaultConfig()
	lim := wire.DefaultLimits()
	ms, sec, mins, hours := time.Millisecond, time.Second, time.Minute, time.Hour
	s.String(&c.listen, "listen", "localhost:9092", "Kafka listeners: host:port (PLAINTEXT), or Kafka's NAME://host:port,... with security (docs/security.md)", kafka("listeners"))
	s.String(&c.advertised, "advertised", "", "what clients are told, by listener: host:port or NAME://host:port,...; default: the listen address", kafka("advertised.listeners"))
	s.String(&c.dataDir, "data-dir", def.DataDir, "where logs and metadata live", kafkaConverted("log.dirs", oneDir), kafka("log.dir"))
	s.Int(&c.nodeID, "node-id", int(def.NodeID), "this node's id", kafka("node.id"), kafka("broker.id"))
	s.String(&c.rack, "rack", "", "rack of this node", kafka("broker.rack"))
	s.Int(&c.fetchSessionSlots, "fetch-session-slots", broker.DefaultFetchSessionSlots, "fetch sessions this broker keeps (KIP-227); a consumer without one sends full fetches", kafka("max.incremental.fetch.session.cache.slots"))
	s.String(&c.replicaSelector, "replica-selector", "", "rack-aware (or Kafka's class name): consumers with client.rack read from an in-sync replica in their rack; default: from the leader", kafka("replica.selector.class"))
	s.String(&c.flush, "flush", "sync", "durability: sync (fsync before ack, group commit), interval:<duration>, or os (page cache only, Kafka's default)",
		kafkaConverted("log.flush.interval.ms", func(v string) (string, error) {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return "", errors.New("want a positive number of milliseconds")
			}
			return fmt.Sprintf("interval:%dms", n), nil
		}))
	s.Bool(&c.directIO, "log-direct-io", def.DirectIO, "write partition logs' large sync-cycle write-outs with O_DIRECT, past the page cache (docs/storage.md; falls back to the page cache where the filesystem refuses it)", kafka("log.direct.io"))
	s.Bool(&c.logJournal, "log-journal", def.LogJournal, "make each sync cycle's new bytes durable with one write and one fdatasync of a node-wide data journal, segments written behind (docs/storage.md; off by default)", kafka("log.journal.enable"))
	s.Bool(&c.raftSolo, "raft-solo-path", def.RaftSoloPath, "a partition whose only replica is this node takes its batches without etcd raft's per-entry work, each committed once its sync cycle made it durable (docs/replication.md; on by default)", kafka("raft.solo.path.enable"))
	s.Int64(&c.dioCache, "log-direct-io-cache-bytes", storage.DefaultReadCacheBytes, "with --log-direct-io: memory for the newest segment bytes written, so fetches of recent data are served from memory instead of the disk (0: none; one budget per process)", kafka("log.direct.io.cache.bytes"))
	s.Bool(&c.autoCreate, "auto-create-topics", def.AutoCreateTopics, "create topics on first use (a Metadata request that allows it)", kafka("auto.create.topics.enable"))
	s.Int(&c.numParts, "num-partitions", int(def.NumPartitions), "partitions of auto-created topics", kafka("num.partitions"))
	s.Int(&c.offsetParts, "offsets-partitions", int(def.OffsetsTopicPartitions), "partitions of __consumer_offsets", kafka("offsets.topic.num.partitions"))
	s.Int(&c.txnParts, "txn-partitions", int(def.Txn.StatePartitions), "partitions of __transaction_state", kafka("transaction.state.log.num.partitions"))
	s.Duration(&c.txnMax, "txn-max-timeout", def.Txn.MaxTimeout, "longest transaction timeout a producer may ask for", kafkaDuration("transaction.max.timeout.ms", ms))
	s.Duration(&c.txnAbortIv, "txn-abort-interval", def.Txn.AbortInterval, "how often timed-out transactions are aborted", kafkaDuration("transaction.abort.timed.out.transaction.cleanup.interval.ms", ms))
	s.Duration(&c.txnIDExpiry, "txn-id-expiration", def.Txn.IDExpiration, "how long an idle transactional id is kept", kafkaDuration("transactional.id.expiration.ms", ms))
	s.Int64(&c.segBytes, "segment-bytes", def.LogDefaults.SegmentBytes, "default segment size", kafka("log.segment.bytes"))
	s.Duration(&c.segmentMs, "segment-ms", def.LogDefaults.SegmentMs, "default age at which a segment rolls", kafkaDuration("log.roll.ms", ms), kafkaDuration("log.roll.hours", hours))
	s.Duration(&c.retention, "retention", def.LogDefaults.RetentionMs, "default retention time, negative for unlimited",
		kafkaDuration("log.retention.ms", ms), kafkaDuration("log.retention.minutes", mins), kafkaDuration("log.retention.hours", hours))
	s.Int64(&c.retBytes, "retention-bytes", def.LogDefaults.RetentionBytes, "default retention size per partition, -1 unlimited", kafka("log.retention.bytes"))
	s.Duration(&c.retentionCheck, "retention-check-interval", def.RetentionCheckInterval, "how often retention runs", kafkaDuration("log.retention.check.interval.ms", ms))
	s.Int64(&c.metaSnapBytes, "metadata-snapshot-bytes", def.MetadataSnapshot.MaxBytes, "bytes of metadata log between metadata snapshots (or the last snapshot's size, if larger): what a restart replays at most", kafka("metadata.log.max.record.bytes.between.snapshots"))
	s.Duration(&c.metaSnapInterval, "metadata-snapshot-interval", def.MetadataSnapshot.MaxInterval, "longest time between metadata snapshots while the metadata changes (0: bytes only)", kafkaDuration("metadata.log.max.snapshot.interval.ms", ms))
	s.Bool(&c.verifyReads, "log-verify-reads", true, "check the CRC of log bytes before handing them to a consumer or a follower, once per process (false: Kafka's behaviour, a corrupt replica keeps serving the bad batch)", kafka("log.verify.reads"))
	s.Int64(&c.scrubRate, "log-scrub-bytes-per-second", def.LogScrubBytesPerSecond, "how fast the background scrubber reads partition logs to check their CRCs (a corrupt replica is copied again from the others); 0 = off, as Kafka", kafka("log.scrub.bytes.per.second"))
	s.Int(&c.indexInterval, "index-interval-bytes", def.LogDefaults.IndexIntervalBytes, "bytes between offset index entries", kafka("log.index.interval.bytes"))
	s.Int(&c.maxMsg, "max-message-bytes", def.LogDefaults.MaxMessageBytes, "largest record batch accepted", kafka("message.max.bytes"))
	s.Int(&c.maxReq, "max-request-bytes", int(lim.MaxRequestBytes), "largest request frame", kafka("socket.request.max.bytes"))
	s.Int(&c.maxConns, "max-connections", lim.MaxConnections, "connection limit", kafka("max.connections"))
	s.Int(&c.maxOpenFiles, "log-max-open-files", 0, "descriptors of data files (segments, indexes, checkpoints) held open at once: idle files are closed and reopened on use, so any number of partitions fits, and the descriptors left stay for connections (0: the open-file limit less --max-connections and a reserve of 256; -1: no bound)", kafka("log.max.open.files"))
	s.Int64(&c.memoryLimit, "memory-limit", -1, "the Go runtime's soft memory limit in bytes: the collector runs more often as the process nears it, so idle replicas cost their live heap rather than twice it (-1: none, Go's default; 0: derived from the replicas this node holds, 64 MiB + 8 KiB per replica + the direct-I/O read cache and the log cleaner's map once made, followed as replicas come and go, and never below the heap the last collection left live plus as much again of its part above 8 KiB per replica, plus the runtime's own memory and 16 MiB: for nodes with many idle replicas, it may cost CPU under load; the GOMEMLIMIT environment variable, when set, wins)")
	s.Int(&c.syncOpens, "startup-sync-opens", 1000, "at start-up, a node with up to this many replicas opens them all before it listens (as Kafka); with more it listens at once and opens them in the background, a replica not yet open answering NOT_LEADER_OR_FOLLOWER (retried by clients) and opened first when asked for (-1: always in the background)")
	s.Int(&c.maxBrokerParts, "max-broker-partitions", 0, "partition replicas a broker may hold: a CreateTopics or CreatePartitions that would place more is refused with POLICY_VIOLATION (0 or -1: no limit, as Kafka's default; descriptors do not bound it: --log-max-open-files)", kafka("max.broker.partitions"))
	s.Int(&c.maxConnsPerIP, "max-connections-per-ip", lim.MaxConnectionsPerIP, "connections one client address may hold (the cluster's other nodes exempt on the inter-broker listener); 2147483647: no limit (Kafka's default); 0: only the overrides' addresses", kafka("max.connections.per.ip"))
	s.Int(&c.maxConnRate, "max-connection-creation-rate", wire.UnlimitedPerIP, "new connections per second across this broker, a second's worth at once; past it the listener waits before taking the next (the cluster's other nodes exempt on the inter-broker listener); 2147483647: no limit", kafka("max.connection.creation.rate"))
	s.String(&c.maxConnsPerIPOverrides, "max-connections-per-ip-overrides", "", "per-address limits, host:count,... (host names resolved at start)", kafka("max.connections.per.ip.overrides"))
	s.Int64(&c.maxQueued, "max-queued-bytes", lim.MaxQueuedBytes, "request bytes held in memory across all connections", kafka("queued.max.request.bytes"))
	s.Duration(&c.idle, "idle-timeout", lim.IdleTimeout, "close connections idle this long", kafkaDuration("connections.max.idle.ms", ms))
	s.Int(&c.saslMaxReceive, "sasl-max-receive-size", int(lim.MaxPreAuthBytes), "SASL listeners: largest frame a client may send before it has authenticated (and while it re-authenticates); a larger one closes the connection unread", kafka("sasl.server.max.receive.size"))
	s.Int64(&c.preAuthQueued, "preauth-queued-bytes", lim.MaxPreAuthQueuedBytes, "SASL listeners: request bytes held in memory for connections that have not authenticated, all together (apart from --max-queued-bytes, which they never use)")
	s.Duration(&c.authTimeout, "sasl-authentication-timeout", lim.AuthTimeout, "SASL listeners: close a connection not authenticated this long after it was accepted (TLS handshake included; Kafka has no such bound)")
	s.Duration(&c.groupInitialDelay, "group-initial-rebalance-delay", def.Groups.InitialRebalanceDelay, "how long a new group waits for more members before its first rebalance", kafkaDuration("group.initial.rebalance.delay.ms", ms))
	s.Duration(&c.groupMinSession, "group-min-session-timeout", def.Groups.MinSessionTimeout, "shortest session timeout a consumer may ask for", kafkaDuration("group.min.session.timeout.ms", ms))
	s.Duration(&c.groupMaxSession, "group-max-session-timeout", def.Groups.MaxSessionTimeout, "longest session timeout a consumer may ask for", kafkaDuration("group.max.session.timeout.ms", ms))
	s.Int(&c.groupMaxSize, "group-max-size", def.Groups.MaxSize, "most members in one consumer group", kafka("group.max.size"))
	s.Duration(&c.cgSession, "group-consumer-session-timeout", def.Groups.ConsumerSessionTimeout, "KIP-848 consumer groups: a member silent this long is removed", kafkaDuration("group.consumer.session.timeout.ms", ms))
	s.Duration(&c.cgHeartbeat, "group-consumer-heartbeat-interval", def.Groups.ConsumerHeartbeatInterval, "KIP-848 consumer groups: how often members heartbeat", kafkaDuration("group.consumer.heartbeat.interval.ms", ms))
	s.Int(&c.cgMaxSize, "group-consumer-max-size", def.Groups.ConsumerMaxSize, "KIP-848 consumer groups: most members in one group", kafka("group.consumer.max.size"))
	s.String(&c.cgAssignors, "group-consumer-assignors", strings.Join(def.Groups.ConsumerAssignors, ","), "KIP-848 consumer groups: server-side assignors members may ask for (uniform, range), the first the default", kafka("group.consumer.assignors"))
	s.String(&c.cgMigration, "group-consumer-migration-policy", def.Groups.ConsumerMigrationPolicy, "online conversion of groups with members between the classic and the consumer protocol: bidirectional, upgrade, downgrade or disabled", kafka("group.consumer.migration.policy"))
	s.Duration(&c.shareLock, "group-share-record-lock-duration", def.Share.RecordLockDuration, "share groups (KIP-932): how long a record acquired by a share consumer stays locked to it (a group's share.record.lock.duration.ms overrides it)", kafkaDuration("group.share.record.lock.duration.ms", ms))
	s.Int(&c.shareDeliveries, "group-share-delivery-count-limit", int(def.Share.DeliveryCountLimit), "share groups: deliveries of a record before it is archived (a group's share.delivery.count.limit overrides it)", kafka("group.share.delivery.count.limit"))
	s.Int64(&c.shareLocks, "group-share-partition-max-record-locks", def.Share.PartitionMaxRecordLocks, "share groups: most records in flight per share partition", kafka("group.share.partition.max.record.locks"))
	s.Duration(&c.shareSession, "group-share-session-timeout", def.Share.SessionTimeout, "share groups: a member silent this long is removed", kafkaDuration("group.share.session.timeout.ms", ms))
	s.Duration(&c.shareHeartbeat, "group-share-heartbeat-interval", def.Share.HeartbeatInterval, "share groups: how often members heartbeat", kafkaDuration("group.share.heartbeat.interval.ms", ms))
	s.Int(&c.shareMaxSize, "group-share-max-size", def.Share.MaxSize, "share groups: most members in one group", kafka("group.share.max.size"))
	s.Int(&c.shareSessions, "group-share-max-share-sessions", def.Share.MaxShareSessions, "share groups: share sessions one broker keeps", kafka("group.share.max.share.sessions"))
	s.Duration(&c.offsRet, "offsets-retention", def.Groups.OffsetRetention, "how long an empty group's committed offsets are kept", kafkaDuration("offsets.retention.minutes", mins))
	s.Duration(&c.offsRetCheck, "offsets-retention-check-interval", def.Groups.RetentionCheckInterval, "how often expired committed offsets are removed", kafkaDuration("offsets.retention.check.interval.ms", ms))
	s.Int(&c.offsetMetaMax, "offset-metadata-max-bytes", def.Groups.MaxMetadataBytes, "largest metadata string of a committed offset", kafka("offset.metadata.max.bytes"))
	s.Bool(&c.cleanerOn, "log-cleaner-enable", def.LogCleaner.Enable, "compact cleanup.policy=compact topics, __consumer_offsets and __transaction_state included", kafka("log.cleaner.enable"))
	s.Int(&c.cleanerThreads, "log-cleaner-threads", def.LogCleaner.Threads, "partitions compacted at once (1..64)", kafka("log.cleaner.threads"))
	s.Int64(&c.cleanerMem, "log-cleaner-dedupe-buffer-size", def.LogCleaner.DedupeBufferSize, "bytes of the cleaner's offset maps, shared by its threads (24 per key)", kafka("log.cleaner.dedupe.buffer.size"))
	s.Int(&c.cleanerIOBuf, "log-cleaner-io-buffer-size", def.LogCleaner.IOBufferSize, "read and write buffer per cleaner thread", kafka("log.cleaner.io.buffer.size"))
	s.Float64(&c.cleanerRate, "log-cleaner-io-max-bytes-per-second", 0, "cleaner reads plus writes per second, all threads together; 0 = unlimited", kafka("log.cleaner.io.max.bytes.per.second"))
	s.Duration(&c.cleanerBackoff, "log-cleaner-backoff", def.LogCleaner.Backoff, "how often idle cleaner threads look for dirty logs", kafkaDuration("log.cleaner.backoff.ms", ms))
	s.Float64(&c.cleanableRatio, "log-cleaner-min-cleanable-ratio", def.LogDefaults.MinCleanableRatio, "default min.cleanable.dirty.ratio of compacted topics", kafka("log.cleaner.min.cleanable.ratio"))
	s.Duration(&c.deleteRetention, "log-cleaner-delete-retention", def.LogDefaults.DeleteRetention, "default delete.retention.ms: how long tombstones stay after their first cleaning", kafkaDuration("log.cleaner.delete.retention.ms", ms))
	s.Duration(&c.minLag, "log-cleaner-min-compaction-lag", def.LogDefaults.MinCompactionLag, "default min.compaction.lag.ms", kafkaDuration("log.cleaner.min.compaction.lag.ms", ms))
	s.Duration(&c.maxLag, "log-cleaner-max-compaction-lag", 0, "default max.compaction.lag.ms; 0 = none", kafkaConverted("log.cleaner.max.compaction.lag.ms", func(v string) (string, error) {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n <= 0 {
			return "", errors.New("want a positive number of milliseconds")
		}
		if n > int64(time.Duration(1<<62)/time.Millisecond) {
			return "0", nil // Kafka's Long.MAX: none
		}
		return (time.Duration(n) * time.Millisecond).String(), nil
	}))
	s.Int(&c.quotaWindows, "quota-window-num", 11, "samples the client quota rates are measured over", kafka("quota.window.num"))
	s.Duration(&c.quotaWindowSize, "quota-window-size", time.Second, "length of each client quota sample", kafkaDuration("quota.window.size.seconds", sec))
	s.Int(&c.ctrlQuotaWindows, "controller-quota-window-num", 11, "controller_mutation_rate burst: this many windows of the quota", kafka("controller.quota.window.num"))
	s.Duration(&c.ctrlQuotaWindowSize, "controller-quota-window-size", time.Second, "controller_mutation_rate window length", kafkaDuration("controller.quota.window.size.seconds", sec))
	s.Int64(&c.offsetsSeg, "offsets-segment-bytes", def.OffsetsTopicSegmentBytes, "segment.bytes of __consumer_offsets when it is created", kafka("offsets.topic.segment.bytes"))
	s.Int64(&c.txnSeg, "txn-segment-bytes", def.TxnTopicSegmentBytes, "segment.bytes of __transaction_state when it is created", kafka("transaction.state.log.segment.bytes"))
	s.String(&c.peers, "peers", "", "the controller quorum's Raft addresses as the cluster was formed, id@host:port,... (the same on every node; the quorum then changes with holdfast cluster add-controller / remove-controller); empty = single node",
		kafkaConverted("controller.quorum.voters", func(v string) (string, error) {
			if !strings.Contains(v, ",") {
				return "", nil // one voter, this node: a single node, a cluster of one
			}
			return v, nil
		}))
	s.String(&c.raftListen, "raft-listen", "", "Raft listener address; default: this node's --peers entry (required on a broker-only node)")
	s.String(&c.join, "join", "", "a node joining a running cluster (--node-id not in --peers): Kafka addresses of running brokers to register through, host:port,...; it is a broker (a metadata observer) until holdfast cluster add-controller makes it a voter")
	s.Int(&c.defaultRF, "default-replication-factor", 0, "replicas of new topics; 0 = 1 single-node, min(3, nodes) in a cluster", kafka("default.replication.factor"))
	s.Bool(&c.rebalance, "auto-leader-rebalance", def.AutoLeaderRebalance, "cluster: move leadership back to preferred replicas by itself", kafka("auto.leader.rebalance.enable"))
	s.Duration(&c.imbalanceIv, "leader-imbalance-check-interval", def.LeaderImbalanceCheckInterval, "cluster: how often to check leader balance", kafkaDuration("leader.imbalance.check.interval.seconds", sec))
	s.Int(&c.imbalancePct, "leader-imbalance-per-broker-percentage", def.LeaderImbalancePerBrokerPct, "cluster: share of a broker's preferred partitions it may not lead before they move back", kafka("leader.imbalance.per.broker.percentage"))
	s.Bool(&c.ctrlShut, "controlled-shutdown", def.ControlledShutdown, "cluster: on stop, hand this node's leaderships to caught-up replicas first", kafka("controlled.shutdown.enable"))
	s.Duration(&c.ctrlShutMax, "controlled-shutdown-max-wait", def.ControlledShutdownMaxWait, "cluster: longest wait for those transfers before stopping anyway")
	s.Duration(&c.hbInterval, "broker-heartbeat-interval", def.BrokerHeartbeatInterval, "how often a broker heartbeats the controller", kafkaDuration("broker.heartbeat.interval.ms", ms))
	s.Duration(&c.replicaLag, "replica-lag-time-max", raft.DefaultReplicaLagMax, "a follower not caught up to its leader's log end for this long leaves the ISR (what Metadata lists and acks=all counts against min.insync.replicas)", kafkaDuration("replica.lag.time.max.ms", ms))
	s.Duration(&c.session, "broker-session-timeout", def.BrokerSessionTimeout, "the controller fences a broker not heard from this long", kafkaDuration("broker.session.timeout.ms", ms))
	s.String(&c.metricsListen, "metrics-listen", "localhost:9095", "admin listener: web console (/), Prometheus /metrics, /healthz and /debug/pprof; empty to disable")
	s.String(&c.adminAuth, "admin-auth", "auto", "logins on the admin listener (Kafka users of this cluster; docs/security.md): auto = the console asks for one when any Kafka listener authenticates, /metrics and /debug/pprof also when the admin listener is beyond loopback; required = everything but /healthz asks; none = nothing asks")
	s.String(&c.adminAuthMetrics, "admin-auth-metrics", "login", "/metrics when --admin-auth asks for logins there: login (a scraper sends HTTP Basic credentials of a user allowed to DESCRIBE the CLUSTER) or open")
	s.String(&c.adminTLS, "admin-tls-listener", "", "serve the admin listener over TLS with this Kafka listener's TLS settings (keystore, truststore, ssl.client.auth, ssl.principal.mapping.rules): a client certificate it verifies logs its principal in to the console; empty = plain HTTP")
	s.Bool(&c.console, "console", true, "serve the web console at / of the admin listener")
	s.Bool(&c.consoleActions, "console-actions", true, "let the web console change the cluster through the Kafka API (create, alter and delete topics, produce, delete records, reset offsets, ACLs, users, quotas); with logins each user only as that user's ACLs allow")
	s.Bool(&c.consoleLab, "console-lab", true, "let the web console start durability lab runs (a holdfast lab child process, one at a time) and load lab results; with authenticating clients only a user allowed to ALTER the CLUSTER may")
	s.Duration(&c.consoleSample, "console-lag-sample-interval", 10*time.Second, "how often the console samples consumer group lag for its lag-over-time charts")
	s.Int(&c.metricsPartitionMax, "metrics-partition-series-max", metrics.DefaultPartitionSeriesMax, "past this many partitions on the node, /metrics sums the per-partition series per topic (holdfast_topic_partitions, _size_bytes, _log_end_offset_sum, _leaders) so a scrape stays cheap; 0 = every partition's series always")
	s.Bool(&c.metricsInternal, "metrics-internal-partitions", false, "export per-partition metrics of internal topics too (by default summed per topic: __consumer_offsets has 50 partitions)")
	s.String(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	s.String(&c.logFormat, "log-format", "text", "text or json")
	s.Secret(&c.addScram, "add-scram", "create a SCRAM user at start if it does not exist, repeatable, as kafka-storage's --add-scram: SCRAM-SHA-512=[name=admin,password=...]")
	c.security = props{}
	s.Passthrough(kafkaSecurityKey, c.security)
	c.registerTiered(s)
}

// registerTiered adds the tiered-storage settings (docs/tiered-storage.md).
// Credentials are not settings: the standard chain (AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, the shared credentials file, an instance role)
// provides them, so they never sit in a config file or a log.
func (c *serveConfig) registerTiered(s *settings) {
	r := &c.remote
	s.Bool(&r.Enabled, "remote-log-storage", false, "tiered storage: closed segments of topics with remote.storage.enable go to an S3-compatible object store and are read back from it (docs/tiered-storage.md)", kafka("remote.log.storage.system.enable"))
	s.String(&r.Bucket, "remote-log-storage-s3-bucket", "", "tiered storage: the bucket", kafka("remote.log.storage.s3.bucket"))
	s.String(&r.Prefix, "remote-log-storage-s3-prefix", "", "tiered storage: the key prefix of every object", kafka("remote.log.storage.s3.prefix"))
	s.String(&r.Endpoint, "remote-log-storage-s3-endpoint", "", "tiered storage: the object store's URL (http://host:port or https://host); empty: AWS S3 in the region", kafka("remote.log.storage.s3.endpoint"))
	s.String(&r.Region, "remote-log-storage-s3-region", "", "tiered storage: the region", kafka("remote.log.storage.s3.region"))
	s.Bool(&r.PathStyle, "remote-log-storage-s3-path-style", false, "tiered storage: path-style requests (http://host/bucket/key), as most S3-compatible servers want", kafka("remote.log.storage.s3.path.style"))
	s.Int64(&r.CacheBytes, "remote-log-storage-cache-bytes", tiered.DefaultCacheBytes, "tiered storage: disk for segments downloaded for reads (in <data-dir>/remote-log-cache)", kafka("remote.log.storage.cache.bytes"))
	s.Duration(&r.TaskInterval, "remote-log-manager-task-interval", tiered.DefaultTaskInterval, "tiered storage: how often a leader uploads closed segments and applies local retention", kafkaDuration("remote.log.manager.task.interval.ms", time.Millisecond))
	s.Duration(&r.IOTimeout, "remote-log-storage-s3-io-timeout", tiered.DefaultIOTimeout, "tiered storage: how long a request to the object store may wait for a connection, for the acknowledgement of data sent (TCP_USER_TIMEOUT) or for its answer before it fails and the upload is retried", kafkaDuration("remote.log.storage.s3.io.timeout.ms", time.Millisecond))
	s.Int64(&r.CopyMaxBytesPerSecond, "remote-log-manager-copy-max-bytes-per-second", 0, "tiered storage: the most bytes a second this node reads for uploads, all partitions together; 0: unlimited", kafka("remote.log.manager.copy.max.bytes.per.second"))
	s.Duration(&r.RetryBackoffMax, "remote-log-manager-task-retry-backoff-max", tiered.DefaultRetryBackoffMax, "tiered storage: the longest wait between retries of a failed upload (from 500ms, doubling)", kafkaDuration("remote.log.manager.task.retry.backoff.max.ms", time.Millisecond))
}

// parsePerIPOverrides parses max.connections.per.ip.overrides, Kafka's
// host:count,host:count (an IPv6 address may be bracketed), resolving host
// names now as Kafka does at start; a name's every address gets its count.
func parsePerIPOverrides(v string) (map[netip.Addr]int, error) {
	out := map[netip.Addr]int{}
	for _, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		i := strings.LastIndex(e, ":")
		if i <= 0 {
			return nil, fmt.Errorf("--max-connections-per-ip-overrides: %q is not host:count", e)
		}
		host := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(e[:i]), "["), "]")
		n, err := strconv.Atoi(strings.TrimSpace(e[i+1:]))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--max-connections-per-ip-overrides: %q: want a count of 0 or more", e)
		}
		addrs := []netip.Addr{}
		if a, err := netip.ParseAddr(host); err == nil {
			addrs = append(addrs, a)
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("--max-connections-per-ip-overrides: %s: %w", host, err)
			}
		}
		for _, a := range addrs {
			out[a.Unmap().WithZone("")] = n
		}
	}
	return out, nil
}

func oneDir(v string) (string, error) {
	if strings.Contains(v, ",") {
		return "", errors.New("Holdfast uses one data directory")
	}
	return v, nil
}

// describedAs are the broker config names DescribeConfigs reports a
// setting under beyond its Kafka names, by flag: where they came from is
// that setting's origin.
var describedAs = map[string][]string{
	"flush":  {"holdfast.flush.policy"},
	"listen": {"advertised.listeners"}, // the default of --advertised (which, set, wins: registered later)
}

// brokerConfig checks the settings and maps them onto the broker's
// config, the connection limits and the listeners with their security.
// The caller closes the security (it may hold a token validator).
func (c *serveConfig) brokerConfig(logger *slog.Logger) (broker.Config, wire.Limits, *serveSecurity, error) {
	cfg, lim := broker.DefaultConfig(), wire.DefaultLimits()
	policy, err := storage.ParseFlushPolicy(c.flush)
	if err != nil {
		return cfg, lim, nil, err
	}
	// In this order, so that the first setting at fault is the one named.
	for _, step := range []func() error{
		c.checkCluster,
		func() error { return c.storageConfig(&cfg, policy) },
		func() error { return c.groupConfig(&cfg) },
		func() error { return c.cleanerConfig(&cfg) },
		func() error { return c.clusterConfig(&cfg, logger) },
		func() error { return c.connectionLimits(&lim) },
	} {
		if err := step(); err != nil {
			return cfg, lim, nil, err
		}
	}
	// Listeners and security last: they load certificates.
	sec, err := c.listenerSecurity(&cfg, logger)
	if err != nil {
		return cfg, lim, nil, err
	}
	return cfg, lim, sec, nil
}

// checkCluster checks the settings of the cluster's control plane and the
// node's background loops.
func (c *serveConfig) checkCluster() error {
	switch {
	case c.imbalancePct < 0 || c.imbalancePct > 100:
		return fmt.Errorf("--leader-imbalance-per-broker-percentage %d: want 0..100", c.imbalancePct)
	case c.rebalance && c.imbalanceIv <= 0:
		return fmt.Errorf("--leader-imbalance-check-interval %v: must be positive", c.imbalanceIv)
	case c.ctrlShutMax < 0:
		return fmt.Errorf("--controlled-shutdown-max-wait %v: must not be negative", c.ctrlShutMax)
	case c.replicaLag <= 0:
		return fmt.Errorf("--replica-lag-time-max %v: must be positive", c.replicaLag)
	case c.hbInterval <= 0 || c.session <= c.hbInterval:
		return fmt.Errorf("--broker-session-timeout (%v) must be longer than --broker-heartbeat-interval (%v), both positive", c.session, c.hbInterval)
	case c.fetchSessionSlots < 0:
		return fmt.Errorf("--fetch-session-slots %d: must be 0 or more (0: no fetch sessions)", c.fetchSessionSlots)
	case c.dioCache < 0:
		return fmt.Errorf("--log-direct-io-cache-bytes %d: must be 0 or more", c.dioCache)
	case c.retentionCheck <= 0:
		return fmt.Errorf("--retention-check-interval %v: must be positive", c.retentionCheck)
	case c.memoryLimit < -1:
		return fmt.Errorf("--memory-limit %d: want bytes, 0 (derived) or -1 (none)", c.memoryLimit)
	}
	return nil
}

// storageConfig maps the node's identity, its storage and the topics'
// defaults onto cfg.
func (c *serveConfig) storageConfig(cfg *broker.Config, policy storage.FlushPolicy) error {
	cfg.NodeID = int32(c.nodeID)
	cfg.DataDir = c.dataDir
	cfg.ConfigOrigins = c.origins
	cfg.DirectIO = c.directIO
	cfg.LogJournal = c.logJournal
	cfg.RaftSoloPath = c.raftSolo
	cfg.DirectIOCacheBytes = c.dioCache
	if c.dioCache == 0 {
		cfg.DirectIOCacheBytes = -1
	}
	cfg.Rack = c.rack
	cfg.ReplicaSelector = c.replicaSelector
	cfg.FetchSessionSlots = c.fetchSessionSlots
	if c.replicaSelector == "rack-aware" {
		cfg.ReplicaSelector = broker.RackAwareReplicaSelector
	}
	cfg.AutoCreateTopics = c.autoCreate
	cfg.NumPartitions = int32(c.numParts)
	cfg.OffsetsTopicPartitions = int32(c.offsetParts)
	cfg.Txn.StatePartitions, cfg.Txn.MaxTimeout = int32(c.txnParts), c.txnMax
	cfg.RetentionCheckInterval = c.retentionCheck
	cfg.MetadataSnapshot = metadata.SnapshotPolicy{MaxBytes: c.metaSnapBytes, MaxInterval: c.metaSnapInterval}
	if c.scrubRate < 0 {
		return fmt.Errorf("--log-scrub-bytes-per-second %d: must be 0 (off) or more", c.scrubRate)
	}
	cfg.LogScrubBytesPerSecond = c.scrubRate
	if c.syncOpens == 0 || c.syncOpens < -1 {
		return fmt.Errorf("--startup-sync-opens %d: must be -1 (always in the background) or 1 or more", c.syncOpens)
	}
	cfg.StartupSyncOpens = c.syncOpens
	cfg.LogNoReadChecks = !c.verifyReads
	cfg.Tiered = c.remote
	if err := c.remote.Validate(); err != nil {
		return err
	}
	cfg.LogDefaults.SegmentBytes = c.segBytes
	cfg.LogDefaults.SegmentMs = c.segmentMs
	cfg.LogDefaults.RetentionMs = c.retention
	cfg.LogDefaults.RetentionBytes = c.retBytes
	cfg.LogDefaults.MaxMessageBytes = c.maxMsg
	cfg.LogDefaults.Flush = policy
	return nil
}

// groupConfig maps the consumer, classic and share groups' settings and
// the offsets' and transactions' expiry onto cfg.
func (c *serveConfig) groupConfig(cfg *broker.Config) error {
	cfg.Groups.InitialRebalanceDelay = c.groupInitialDelay
	cfg.Groups.MinSessionTimeout, cfg.Groups.MaxSessionTimeout = c.groupMinSession, c.groupMaxSession
	cfg.Groups.MaxSize = c.groupMaxSize
	cfg.Groups.ConsumerSessionTimeout, cfg.Groups.ConsumerHeartbeatInterval = c.cgSession, c.cgHeartbeat
	cfg.Groups.ConsumerMaxSize = c.cgMaxSize
	cfg.Groups.ConsumerAssignors = nil
	for _, a := range strings.Split(c.cgAssignors, ",") {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
		case !slices.Contains(group.Assignors, a):
			return fmt.Errorf("--group-consumer-assignors: unknown assignor %q (Holdfast has %s)", a, strings.Join(group.Assignors, ", "))
		default:
			cfg.Groups.ConsumerAssignors = append(cfg.Groups.ConsumerAssignors, a)
		}
	}
	cfg.Groups.ConsumerMigrationPolicy = strings.ToLower(c.cgMigration)
	switch {
	case !slices.Contains(group.MigrationPolicies, cfg.Groups.ConsumerMigrationPolicy):
		return fmt.Errorf("--group-consumer-migration-policy: %q is not one of %s", c.cgMigration, strings.Join(group.MigrationPolicies, ", "))
	case c.cgSession <= 0 || c.cgHeartbeat <= 0 || c.cgMaxSize <= 0:
		return errors.New("--group-consumer-session-timeout, --group-consumer-heartbeat-interval and --group-consumer-max-size must be positive")
	case c.cgHeartbeat >= c.cgSession:
		return fmt.Errorf("--group-consumer-heartbeat-interval %v must be below --group-consumer-session-timeout %v", c.cgHeartbeat, c.cgSession)
	}
	cfg.Share = broker.ShareConfig{RecordLockDuration: c.shareLock, DeliveryCountLimit: int16(c.shareDeliveries),
		PartitionMaxRecordLocks: c.shareLocks, SessionTimeout: c.shareSession, HeartbeatInterval: c.shareHeartbeat,
		MaxSize: c.shareMaxSize, MaxShareSessions: c.shareSessions}
	switch {
	case c.shareLock < time.Second || c.shareLock > time.Hour:
		return fmt.Errorf("--group-share-record-lock-duration %v must be between 1s and 1h", c.shareLock)
	case c.shareDeliveries < 2 || c.shareDeliveries > 10:
		return fmt.Errorf("--group-share-delivery-count-limit %d must be between 2 and 10", c.shareDeliveries)
	case c.shareLocks < 100 || c.shareLocks > 10000:
		return fmt.Errorf("--group-share-partition-max-record-locks %d must be between 100 and 10000", c.shareLocks)
	case c.shareSession <= 0 || c.shareHeartbeat <= 0 || c.shareHeartbeat >= c.shareSession:
		return errors.New("--group-share-heartbeat-interval must be positive and below --group-share-session-timeout")
	case c.shareMaxSize <= 0 || c.shareSessions <= 0:
		return errors.New("--group-share-max-size and --group-share-max-share-sessions must be positive")
	}
	cfg.Groups.OffsetRetention = c.offsRet
	cfg.Groups.RetentionCheckInterval, cfg.Groups.MaxMetadataBytes = c.offsRetCheck, c.offsetMetaMax
	cfg.Txn.AbortInterval, cfg.Txn.IDExpiration = c.txnAbortIv, c.txnIDExpiry
	return nil
}

// cleanerConfig maps the log cleaner's, the quotas' and the internal
// topics' settings onto cfg.
func (c *serveConfig) cleanerConfig(cfg *broker.Config) error {
	cfg.LogDefaults.IndexIntervalBytes = c.indexInterval
	cfg.LogCleaner = broker.CleanerConfig{Enable: c.cleanerOn, Threads: c.cleanerThreads, DedupeBufferSize: c.cleanerMem,
		IOBufferSize: c.cleanerIOBuf, IOMaxBytesPerSecond: c.cleanerRate, Backoff: c.cleanerBackoff}
	if err := cfg.LogCleaner.Validate(); err != nil {
		return err
	}
	if c.quotaWindows < 2 || c.ctrlQuotaWindows < 1 || c.quotaWindowSize < time.Millisecond || c.ctrlQuotaWindowSize < time.Millisecond {
		return errors.New("--quota-window-num must be at least 2, --controller-quota-window-num at least 1, and the window sizes at least 1ms")
	}
	cfg.Quotas = quota.Config{WindowNum: c.quotaWindows, WindowSize: c.quotaWindowSize,
		ControllerWindowNum: c.ctrlQuotaWindows, ControllerWindowSize: c.ctrlQuotaWindowSize}
	switch {
	case c.cleanerRate < 0:
		return fmt.Errorf("--log-cleaner-io-max-bytes-per-second %g: must not be negative", c.cleanerRate)
	case c.cleanableRatio < 0 || c.cleanableRatio > 1:
		return fmt.Errorf("--log-cleaner-min-cleanable-ratio %g: want 0..1", c.cleanableRatio)
	case c.deleteRetention < 0 || c.minLag < 0 || c.maxLag < 0:
		return errors.New("--log-cleaner-delete-retention, --log-cleaner-min-compaction-lag and --log-cleaner-max-compaction-lag must not be negative")
	case c.maxLag > 0 && c.minLag > c.maxLag:
		return fmt.Errorf("--log-cleaner-min-compaction-lag %v exceeds --log-cleaner-max-compaction-lag %v", c.minLag, c.maxLag)
	case c.offsetsSeg < 14 || c.offsetsSeg > 1<<31-1 || c.txnSeg < 14 || c.txnSeg > 1<<31-1:
		return fmt.Errorf("--offsets-segment-bytes %d, --txn-segment-bytes %d: want 14..%d", c.offsetsSeg, c.txnSeg, 1<<31-1)
	}
	cfg.LogDefaults.MinCleanableRatio, cfg.LogDefaults.DeleteRetention = c.cleanableRatio, c.deleteRetention
	cfg.LogDefaults.MinCompactionLag, cfg.LogDefaults.MaxCompactionLag = c.minLag, c.maxLag
	cfg.OffsetsTopicSegmentBytes, cfg.TxnTopicSegmentBytes = c.offsetsSeg, c.txnSeg
	return nil
}

// clusterConfig maps the peers, the join addresses and the control
// plane's settings onto cfg.
func (c *serveConfig) clusterConfig(cfg *broker.Config, logger *slog.Logger) error {
	cfg.Logger = logger
	var err error
	if cfg.Peers, err = parsePeers(c.peers); err != nil {
		return err
	}
	cfg.RaftListen = c.raftListen
	if c.join != "" {
		cfg.Join = strings.Split(c.join, ",")
	}
	cfg.DefaultReplicationFactor = int16(c.defaultRF)
	cfg.AutoLeaderRebalance, cfg.LeaderImbalanceCheckInterval, cfg.LeaderImbalancePerBrokerPct = c.rebalance, c.imbalanceIv, c.imbalancePct
	cfg.ControlledShutdown, cfg.ControlledShutdownMaxWait = c.ctrlShut, c.ctrlShutMax
	cfg.BrokerHeartbeatInterval, cfg.BrokerSessionTimeout = c.hbInterval, c.session
	cfg.ReplicaLagMax = c.replicaLag
	return nil
}

// connectionLimits maps the connection and request limits onto lim.
func (c *serveConfig) connectionLimits(lim *wire.Limits) error {
	var err error
	lim.MaxRequestBytes = int32(c.maxReq)
	lim.MaxConnections = c.maxConns
	if c.maxConnRate <= 0 {
		return fmt.Errorf("--max-connection-creation-rate %d: must be positive (2147483647: no limit)", c.maxConnRate)
	}
	lim.MaxConnectionCreationRate = c.maxConnRate
	if lim.MaxConnectionsPerIPOverrides, err = parsePerIPOverrides(c.maxConnsPerIPOverrides); err != nil {
		return err
	}
	switch {
	case c.maxConnsPerIP < 0:
		return fmt.Errorf("--max-connections-per-ip %d: must not be negative", c.maxConnsPerIP)
	case c.maxConnsPerIP == 0 && len(lim.MaxConnectionsPerIPOverrides) == 0:
		// Kafka's rule: 0 lets nobody in unless overrides name who may.
		return errors.New("--max-connections-per-ip (max.connections.per.ip) can be 0 only with --max-connections-per-ip-overrides (max.connections.per.ip.overrides)")
	case c.maxConnsPerIP == 0:
		lim.MaxConnectionsPerIP = -1 // wire's "none but the overrides"
	default:
		lim.MaxConnectionsPerIP = c.maxConnsPerIP
	}
	lim.MaxQueuedBytes = c.maxQueued
	lim.IdleTimeout = c.idle
	switch {
	case c.saslMaxReceive <= 0 || c.saslMaxReceive > c.maxReq:
		return fmt.Errorf("--sasl-max-receive-size (sasl.server.max.receive.size) %d: want 1..--max-request-bytes (%d)", c.saslMaxReceive, c.maxReq)
	case c.preAuthQueued < int64(c.saslMaxReceive):
		return fmt.Errorf("--preauth-queued-bytes %d: must hold at least one frame of --sasl-max-receive-size (%d)", c.preAuthQueued, c.saslMaxReceive)
	case c.authTimeout <= 0:
		return fmt.Errorf("--sasl-authentication-timeout %v: must be positive", c.authTimeout)
	}
	lim.MaxPreAuthBytes, lim.MaxPreAuthQueuedBytes, lim.AuthTimeout = int32(c.saslMaxReceive), c.preAuthQueued, c.authTimeout
	return nil
}

// listenerSecurity loads the listeners with their security and the admin
// listener's logins and TLS onto cfg, with a warning for each way the
// admin listener is open to anyone who reaches it.
func (c *serveConfig) listenerSecurity(cfg *broker.Config, logger *slog.Logger) (*serveSecurity, error) {
	raftAddr := c.raftListen
	if raftAddr == "" {
		raftAddr = cfg.Peers[cfg.NodeID]
	}
	sec, err := buildSecurity(c.security, c.listen, c.advertised, raftAddr, len(cfg.Peers) > 0, logger)
	if err != nil {
		return nil, err
	}
	sec.broker.BootstrapScram = c.addScram
	cfg.Security = sec.broker
	first := sec.broker.Listeners[0]
	cfg.AdvertisedHost, cfg.AdvertisedPort = first.Host, first.Port
	pages, endpoints, err := c.adminLogins(sec.authenticates)
	if err != nil {
		return nil, err
	}
	if _, err := sec.adminTLS(c.adminTLS); err != nil {
		return nil, err
	}
	if c.console && c.metricsListen != "" && sec.authenticates && !pages {
		sec.warnings = append(sec.warnings, fmt.Sprintf("the web console on %s (--metrics-listen) reads and changes every topic as this node and asks nobody who they are (--admin-auth=none): every local user bypasses the Kafka listeners' authentication and ACLs; drop --admin-auth=none, or turn the console off (--console=false) or its actions (--console-actions=false)", c.metricsListen))
	}
	if c.metricsListen != "" && !endpoints {
		if host, _, err := net.SplitHostPort(c.metricsListen); err != nil || !loopback(host) {
			sec.warnings = append(sec.warnings, fmt.Sprintf("/metrics and /debug/pprof on %s (--metrics-listen) answer anyone who reaches them (--admin-auth=none): keep the admin listener on loopback or drop --admin-auth=none", c.metricsListen))
		}
	}
	if c.console && c.consoleActions && c.metricsListen != "" && !pages {
		if host, _, err := net.SplitHostPort(c.metricsListen); err != nil || !loopback(host) {
			sec.warnings = append(sec.warnings, fmt.Sprintf("the web console on %s (--metrics-listen) lets anyone who reaches it create, alter and delete topics and records, reset offsets and change ACLs and users: keep it on loopback, ask for logins (--admin-auth=required, or clients that authenticate), or --console-actions=false", c.metricsListen))
		}
	}
	if c.console && c.consoleLab && c.metricsListen != "" && !pages {
		if host, _, err := net.SplitHostPort(c.metricsListen); err != nil || !loopback(host) {
			sec.warnings = append(sec.warnings, fmt.Sprintf("the web console on %s (--metrics-listen) lets anyone who reaches it start durability lab runs, which use this machine's CPU and disk (one at a time): keep it on loopback, ask for logins (--admin-auth=required, or clients that authenticate: then only a user allowed to ALTER the CLUSTER may), or --console-lab=false", c.metricsListen))
		}
	}
	return sec, nil
}

func newServeCmd() *cobra.Command {
	sc := &serveConfig{}
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run a broker (no flags: single node, data in ./data, Kafka on localhost:9092)",
		Long: `Run a broker. With no flags: a single node, data in ./data, Kafka on
localhost:9092, the web console and /metrics on http://localhost:9095.

Each setting is a flag, an environment variable HOLDFAST_<FLAG> (--data-dir
is HOLDFAST_DATA_DIR), or a line of the --config file, which may be a Kafka
server.properties: the Kafka names shown below are accepted, and names
Holdfast does not support are reported once at start-up and ignored.
--override key=value sets one such line from the command line.
Precedence: flag or --override, environment, file, default.

Security (TLS, SASL, ACLs) takes Kafka's settings by their Kafka names in
the file or with --override: listeners, advertised.listeners,
listener.security.protocol.map, inter.broker.listener.name, ssl.*, sasl.*,
listener.name.<listener>.*, authorizer.class.name, super.users, ...
(docs/security.md). A security setting Holdfast does not read is an error,
not a warning.`,
		Example: `  holdfast serve
  holdfast serve --config server.properties --log-level debug
  HOLDFAST_DATA_DIR=/var/lib/holdfast holdfast serve --listen 0.0.0.0:9092 --advertised host1:9092
  holdfast serve --config server.properties --override listeners=SASL_SSL://:9093 --add-scram 'SCRAM-SHA-512=[name=admin,password=admin-secret]'`,
		Args: noArgs,
	}
	c.Flags().StringVar(&sc.config, "config", "", "config file: key=value lines with these flag names or Kafka's names (a server.properties) [env HOLDFAST_CONFIG]")
	c.Flags().StringArrayVar(&sc.overrides, "override", nil, "a config line `key=value` (Kafka's name or a flag's), repeatable, as kafka-server-start.sh --override; wins over the file")
	s := newSettings(c.Flags())
	sc.register(s)
	c.RunE = func(*cobra.Command, []string) error {
		if !c.Flags().Changed("config") {
			sc.config = os.Getenv("HOLDFAST_CONFIG")
		}
		unsupported, err := s.load(sc.config, sc.overrides)
		if err != nil {
			return usageError{err}
		}
		sc.origins = s.configOrigins(describedAs)
		sc.unknownEnv = s.unknownEnv(os.Environ())
		return serve(sc, unsupported)
	}
	return c
}

// serve is the broker's start-up sequence: logger, listeners and
// security, broker, admin listener (console, metrics), Kafka listeners,
// then wait for a signal and stop in reverse order.
func serve(sc *serveConfig, unsupported []string) error {
	logger, err := newLogger(sc.logLevel, sc.logFormat)
	if err != nil {
		return usageError{err}
	}
	for _, msg := range sc.unknownEnv {
		logger.Warn(msg)
	}
	cfg, lim, sec, err := sc.brokerConfig(logger)
	if err != nil {
		return usageError{err}
	}
	defer sec.close()
	if ignored := append(unsupported, sec.ignored...); len(ignored) > 0 {
		sort.Strings(ignored)
		logger.Warn("config: ignoring settings Holdfast does not support", "file", sc.config, "names", strings.Join(ignored, ","))
	}

	raiseOpenFileLimit(logger)
	descriptorBudget(&cfg, lim.MaxConnections, sc.maxOpenFiles, sc.maxBrokerParts, logger)
	cfg.MemoryLimit = memoryLimit(sc.memoryLimit, os.Getenv("GOMEMLIMIT"), logger)
	start := time.Now()
	logger.Info("starting", "version", version, "node", cfg.NodeID, "data_dir", cfg.DataDir, "flush", cfg.LogDefaults.Flush.String(), "voters", max(len(cfg.Peers), 1))
	for _, w := range sec.warnings {
		logger.Warn("SECURITY: " + w)
	}
	b, err := broker.New(cfg)
	if err != nil {
		return err
	}
	defer b.Close()
	sec.creds.Set(b) // SASL listeners check SCRAM users in the broker's metadata
	lns, err := sec.listen()
	if err != nil {
		return err
	}
	srv := wire.NewServer(b, lim, logger)
	var hs *http.Server
	var mln net.Listener
	if sc.metricsListen != "" {
		// Before Serve: the metrics install the server's OnReply hook.
		if mln, err = net.Listen("tcp", sc.metricsListen); err != nil {
			closeAll(lns)
			return fmt.Errorf("admin listener (--metrics-listen): %w", err)
		}
		if l, _ := sec.adminTLS(sc.adminTLS); l != nil {
			mln = tls.NewListener(mln, l.TLS)
		}
		handler, closeAdmin, err := adminHandler(b, srv, logger, sec, lns, sc)
		if err != nil {
			mln.Close()
			closeAll(lns)
			return err
		}
		defer closeAdmin()
		hs = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	}
	errc := make(chan error, len(lns)+1)
	var bound, advertised []string
	for i, ln := range lns {
		l := sec.listeners[i].wire
		go func() { errc <- srv.ServeListener(ln, l) }()
		bound = append(bound, l.Name+"://"+ln.Addr().String())
	}
	for _, e := range cfg.Security.Listeners {
		advertised = append(advertised, e.Name+"://"+net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port))))
	}
	if hs != nil {
		go func() { errc <- hs.Serve(mln) }()
	}
	logger.Info("ready", append([]any{"listeners", strings.Join(bound, ","), "advertised", strings.Join(advertised, ","),
		"inter_broker_listener", cfg.Security.InterBrokerListener, "authorizer", cfg.Security.Authorizer != nil,
		"console", consoleURL(sc.metricsListen, sc.adminTLS != ""), "startup", time.Since(start).Round(time.Millisecond)}, b.Summary()...)...)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		logger.Info("shutting down", "signal", s.String())
	case err = <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		logger.Error("listener failed", "err", err)
	}
	fenceForShutdown(b, logger)
	// Leaderships move while the listeners still answer: clients are
	// told where each partition went (KIP-951) instead of losing their
	// connections first.
	b.HandOver()
	if hs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		hs.Shutdown(ctx)
		cancel()
	}
	srv.Close()
	if cerr := b.Close(); cerr != nil && err == nil {
		err = cerr
	}
	logger.Info("stopped")
	return err
}

// fenceForShutdown fences b before it closes, so the controller stops
// naming it to clients now rather than after its session expires. A
// controller that went first (stopping or stopped: the whole cluster
// stops together) is expected, and said at info; any other failure at
// warn.
func fenceForShutdown(b *broker.Broker, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := b.FenceForShutdown(ctx)
	switch {
	case err == nil:
	case errors.Is(err, cluster.ErrControllerGone):
		logger.Info("not fenced before shutdown: the controller stopped first; the next one fences this broker when its session expires", "err", err)
	default:
		logger.Warn("fencing this broker before shutdown", "err", err)
	}
}

// listen binds every Kafka listener, or none.
func (s *serveSecurity) listen() ([]net.Listener, error) {
	var lns []net.Listener
	for _, l := range s.listeners {
		ln, err := net.Listen("tcp", l.bind)
		if err != nil {
			closeAll(lns)
			return nil, fmt.Errorf("listener %s: %w", l.wire.Name, err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

func closeAll(lns []net.Listener) {
	for _, ln := range lns {
		ln.Close()
	}
}

// clientAddr is an address this process can reach its own Kafka listener
// at: the bound address, with a wildcard host replaced by loopback.
func clientAddr(bound, configured string) string {
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return configured
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func consoleURL(addr string, tls bool) string {
	if addr == "" {
		return "off"
	}
	if strings.HasPrefix(addr, ":") {
		addr = "localhost" + addr
	}
	if tls {
		return "https://" + addr + "/"
	}
	return "http://" + addr + "/"
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// descriptorBudget sets the data files' descriptor bound from the
// open-file limit (broker.DescriptorBudget), unless given: 0 derives, -1 is
// none; and the partition replica limit as given (0 or -1: none).
func descriptorBudget(cfg *broker.Config, maxConns, files, parts int, logger *slog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		logger.Warn("reading the open-file limit", "err", err)
		return
	}
	dfiles, covered := broker.DescriptorBudget(lim.Cur, maxConns)
	if !covered && files == 0 {
		logger.Warn("the open-file limit does not cover --max-connections: connections will be bounded by the descriptors left (raise ulimit -n or lower --max-connections)", "open_file_limit", lim.Cur, "max_connections", maxConns, "data_files", dfiles)
	}
	switch {
	case files == 0:
		files = dfiles
	case files < 0:
		files = 0
	}
	cfg.MaxOpenFiles, cfg.MaxBrokerPartitions = files, max(parts, 0)
	logger.Info("descriptor budget", "open_file_limit", lim.Cur, "max_connections", maxConns, "log_max_open_files", files, "max_broker_partitions", parts)
}

// memoryLimit maps --memory-limit onto broker.Config.MemoryLimit: -1 (the
// default) is none, Go's own; 0 derives it; a positive value is bytes. Not
// derived by default: at 1,000 partitions RF=3 under a saturating produce
// load the derived limit cost 1.3-1.4x the CPU per record
// (docs/benchmarks.md, round 16, lead). An
// operator's GOMEMLIMIT (env, the runtime already applied it) wins.
func memoryLimit(setting int64, env string, logger *slog.Logger) int64 {
	switch {
	case env != "":
		logger.Info("memory limit from GOMEMLIMIT (it wins over --memory-limit)", "GOMEMLIMIT", env, "bytes", debug.SetMemoryLimit(-1))
		return 0
	case setting == 0:
		logger.Info("memory limit derived from the replicas held", "base_bytes", broker.MemoryLimitBase, "per_replica_bytes", broker.MemoryLimitPerReplica)
		return broker.MemoryLimitDerived
	case setting < 0:
		logger.Info("memory limit: none (--memory-limit -1, the default)")
		return 0
	}
	logger.Info("memory limit", "bytes", setting)
	return setting
}

// raiseOpenFileLimit raises the soft limit on open files to the hard one,
// as Kafka's guidance asks of its operators and many servers do for
// themselves: a node keeps a descriptor per partition replica (its active
// segment) besides its connections, and the usual soft default of 1024
// would stop it at about a thousand partitions. The hard limit stays the
// operator's (ulimit -Hn, LimitNOFILE=).
func raiseOpenFileLimit(logger *slog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur >= lim.Max {
		return
	}
	was := lim.Cur
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		logger.Warn("could not raise the open-file limit to the hard limit", "soft", was, "hard", lim.Max, "err", err)
		return
	}
	logger.Info("raised the open-file limit to the hard limit", "from", was, "to", lim.Max)
}
