package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"holdfast/internal/broker"
	"holdfast/internal/metrics"
	"holdfast/internal/storage"
	"holdfast/internal/wire"
)

func serveCommand(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = flagUsage(fs, "serve [flags]")
	def := broker.DefaultConfig()
	lim := wire.DefaultLimits()
	fs.String("config", "", "optional config file of `key = value` lines with these flag names, and Kafka's security settings by their Kafka names (docs/security.md)")
	kafka := props{}
	fs.Var(overrideFlag(kafka), "override", "a Kafka security setting `key=value`, repeatable, e.g. --override listeners=SASL_SSL://:9093 (docs/security.md)")
	var scramUsers scramFlag
	fs.Var(&scramUsers, "add-scram", "create a SCRAM user at start if it does not exist, repeatable, as kafka-storage's --add-scram: `SCRAM-SHA-512=[name=admin,password=...]`")
	var (
		listen      = fs.String("listen", "localhost:9092", "Kafka listener address, PLAINTEXT (the Kafka setting listeners, if set, replaces it)")
		advertised  = fs.String("advertised", "", "address given to clients for --listen; default: the listen address (advertised.listeners, if set, replaces it)")
		dataDir     = fs.String("data-dir", def.DataDir, "where logs and metadata live (log.dirs)")
		nodeID      = fs.Int("node-id", int(def.NodeID), "this node's id (node.id)")
		rack        = fs.String("rack", "", "rack of this node (broker.rack)")
		flush       = fs.String("flush", "sync", "durability: sync (fsync before ack, group commit), interval:<duration>, or os (page cache only, Kafka's default)")
		autoCreate  = fs.Bool("auto-create-topics", def.AutoCreateTopics, "create topics on first metadata request (auto.create.topics.enable)")
		numParts    = fs.Int("num-partitions", int(def.NumPartitions), "partitions of auto-created topics (num.partitions)")
		offsetParts = fs.Int("offsets-partitions", int(def.OffsetsTopicPartitions), "partitions of __consumer_offsets (offsets.topic.num.partitions)")
		txnParts    = fs.Int("txn-partitions", int(def.Txn.StatePartitions), "partitions of __transaction_state (transaction.state.log.num.partitions)")
		txnMax      = fs.Duration("txn-max-timeout", def.Txn.MaxTimeout, "longest transaction timeout a producer may ask for (transaction.max.timeout.ms)")
		segBytes    = fs.Int64("segment-bytes", def.LogDefaults.SegmentBytes, "default segment size (log.segment.bytes)")
		retention   = fs.Duration("retention", def.LogDefaults.RetentionMs, "default retention time, negative for unlimited (log.retention.ms)")
		retBytes    = fs.Int64("retention-bytes", def.LogDefaults.RetentionBytes, "default retention size per partition, -1 unlimited (log.retention.bytes)")
		maxMsg      = fs.Int("max-message-bytes", def.LogDefaults.MaxMessageBytes, "largest record batch accepted (message.max.bytes)")
		maxReq      = fs.Int("max-request-bytes", int(lim.MaxRequestBytes), "largest request frame (socket.request.max.bytes)")
		maxConns    = fs.Int("max-connections", lim.MaxConnections, "connection limit (max.connections)")
		maxQueued   = fs.Int64("max-queued-bytes", lim.MaxQueuedBytes, "request bytes held in memory across all connections (queued.max.request.bytes)")
		idle        = fs.Duration("idle-timeout", lim.IdleTimeout, "close connections idle this long (connections.max.idle.ms)")
		peers       = fs.String("peers", "", "cluster mode: every node's Raft address, id@host:port,... (this node included); empty = single node")
		raftListen  = fs.String("raft-listen", "", "Raft listener address; default: this node's --peers entry (required on a broker-only node)")
		join        = fs.String("join", "", "broker-only node (--node-id not in --peers, which then lists the controller quorum): Kafka addresses of running brokers to register through, host:port,...")
		defaultRF   = fs.Int("default-replication-factor", 0, "replicas of new topics (default.replication.factor); 0 = 1 single-node, min(3, nodes) in a cluster")
		rebalance   = fs.Bool("auto-leader-rebalance", def.AutoLeaderRebalance, "cluster: move leadership back to preferred replicas by itself (auto.leader.rebalance.enable)")
		imbalanceIv = fs.Duration("leader-imbalance-check-interval", def.LeaderImbalanceCheckInterval, "cluster: how often to check leader balance (leader.imbalance.check.interval.seconds)")
		imbalancePc = fs.Int("leader-imbalance-per-broker-percentage", def.LeaderImbalancePerBrokerPct, "cluster: share of a broker's preferred partitions it may not lead before they move back (leader.imbalance.per.broker.percentage)")
		ctrlShut    = fs.Bool("controlled-shutdown", def.ControlledShutdown, "cluster: on stop, hand this node's leaderships to caught-up replicas first (controlled.shutdown.enable)")
		ctrlShutMax = fs.Duration("controlled-shutdown-max-wait", def.ControlledShutdownMaxWait, "cluster: longest wait for those transfers before stopping anyway")
		hbInterval  = fs.Duration("broker-heartbeat-interval", def.BrokerHeartbeatInterval, "cluster mode: how often a broker heartbeats the controller (broker.heartbeat.interval.ms)")
		session     = fs.Duration("broker-session-timeout", def.BrokerSessionTimeout, "cluster mode: the controller fences a broker not heard from this long (broker.session.timeout.ms)")
		metricsAddr = fs.String("metrics-listen", "localhost:9095", "Prometheus /metrics, /healthz and /debug/pprof address; empty to disable")
		logLevel    = fs.String("log-level", "info", "debug, info, warn or error")
		logFormat   = fs.String("log-format", "text", "text or json")
	)
	if err := parseLayered(fs, args, "config", kafka); err != nil {
		return err
	}

	logger, err := newLogger(*logLevel, *logFormat)
	if err != nil {
		return err
	}
	policy, err := storage.ParseFlushPolicy(*flush)
	if err != nil {
		return err
	}
	clusterPeers, err := parsePeers(*peers)
	if err != nil {
		return err
	}
	raftAddr := *raftListen
	if raftAddr == "" {
		raftAddr = clusterPeers[int32(*nodeID)]
	}
	sec, err := buildSecurity(kafka, *listen, *advertised, raftAddr, len(clusterPeers) > 0, logger)
	if err != nil {
		return err
	}
	defer sec.close()
	sec.broker.BootstrapScram = scramUsers
	first := sec.broker.Listeners[0]

	cfg := def
	cfg.NodeID = int32(*nodeID)
	cfg.DataDir = *dataDir
	cfg.Rack = *rack
	cfg.AdvertisedHost, cfg.AdvertisedPort = first.Host, first.Port
	cfg.Security = sec.broker
	cfg.AutoCreateTopics = *autoCreate
	cfg.NumPartitions = int32(*numParts)
	cfg.OffsetsTopicPartitions = int32(*offsetParts)
	cfg.Txn.StatePartitions, cfg.Txn.MaxTimeout = int32(*txnParts), *txnMax
	cfg.LogDefaults.SegmentBytes = *segBytes
	cfg.LogDefaults.RetentionMs = *retention
	cfg.LogDefaults.RetentionBytes = *retBytes
	cfg.LogDefaults.MaxMessageBytes = *maxMsg
	cfg.LogDefaults.Flush = policy
	cfg.Logger = logger
	cfg.Peers = clusterPeers
	cfg.RaftListen = *raftListen
	if *join != "" {
		cfg.Join = strings.Split(*join, ",")
	}
	cfg.DefaultReplicationFactor = int16(*defaultRF)
	if *imbalancePc < 0 || *imbalancePc > 100 {
		return fmt.Errorf("--leader-imbalance-per-broker-percentage %d: want 0..100", *imbalancePc)
	}
	if *rebalance && *imbalanceIv <= 0 {
		return fmt.Errorf("--leader-imbalance-check-interval %v: must be positive", *imbalanceIv)
	}
	if *ctrlShutMax < 0 {
		return fmt.Errorf("--controlled-shutdown-max-wait %v: must not be negative", *ctrlShutMax)
	}
	cfg.AutoLeaderRebalance, cfg.LeaderImbalanceCheckInterval, cfg.LeaderImbalancePerBrokerPct = *rebalance, *imbalanceIv, *imbalancePc
	cfg.ControlledShutdown, cfg.ControlledShutdownMaxWait = *ctrlShut, *ctrlShutMax
	cfg.BrokerHeartbeatInterval, cfg.BrokerSessionTimeout = *hbInterval, *session
	if *hbInterval <= 0 || *session <= *hbInterval {
		return fmt.Errorf("--broker-session-timeout (%v) must be longer than --broker-heartbeat-interval (%v), both positive", *session, *hbInterval)
	}

	lim.MaxRequestBytes = int32(*maxReq)
	lim.MaxConnections = *maxConns
	lim.MaxQueuedBytes = *maxQueued
	lim.IdleTimeout = *idle

	start := time.Now()
	logger.Info("starting", "version", version, "node", cfg.NodeID, "data_dir", cfg.DataDir, "flush", policy.String())
	for _, w := range sec.warnings {
		logger.Warn("SECURITY: " + w)
	}
	b, err := broker.New(cfg)
	if err != nil {
		return err
	}
	defer b.Close()
	sec.creds.Set(b)
	var lns []net.Listener
	for _, l := range sec.listeners {
		ln, err := net.Listen("tcp", l.bind)
		if err != nil {
			for _, o := range lns {
				o.Close()
			}
			return fmt.Errorf("listener %s: %w", l.wire.Name, err)
		}
		lns = append(lns, ln)
	}
	srv := wire.NewServer(b, lim, logger)
	errc := make(chan error, len(lns)+1)
	var bound []string
	for i, ln := range lns {
		l := sec.listeners[i].wire
		go func() { errc <- srv.ServeListener(ln, l) }()
		bound = append(bound, l.Name+"://"+ln.Addr().String())
	}

	var hs *http.Server
	if *metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(metrics.New(b, srv), promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		// Profiles of a live broker; the listener is localhost by default.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		hs = &http.Server{Addr: *metricsAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		mln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			srv.Close()
			return fmt.Errorf("metrics listener: %w", err)
		}
		go func() { errc <- hs.Serve(mln) }()
	}
	var advertisedList []string
	for _, e := range sec.broker.Listeners {
		advertisedList = append(advertisedList, e.Name+"://"+net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port))))
	}
	logger.Info("ready", "listeners", strings.Join(bound, ","), "advertised", strings.Join(advertisedList, ","), "inter_broker_listener", sec.broker.InterBrokerListener,
		"authorizer", sec.broker.Authorizer != nil, "metrics", *metricsAddr, "startup", time.Since(start).Round(time.Millisecond))

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
	// Fenced first, so the controller stops naming this broker to clients
	// now rather than after its session expires.
	fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if ferr := b.FenceForShutdown(fctx); ferr != nil {
		logger.Warn("fencing this broker before shutdown", "err", ferr)
	}
	fcancel()
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
