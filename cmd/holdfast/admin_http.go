package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"holdfast/internal/broker"
	"holdfast/internal/console"
	"holdfast/internal/metrics"
	"holdfast/internal/wire"
)

// adminHandler is the admin listener (--metrics-listen, loopback by
// default): the web console at /, Prometheus /metrics, /healthz and
// /debug/pprof. kafkaAddr is where the console's Kafka client reaches this
// node. The returned func stops the console.
func adminHandler(b *broker.Broker, srv *wire.Server, logger *slog.Logger, kafkaAddr string, sc *serveConfig) (http.Handler, func()) {
	mux := http.NewServeMux()
	reg := metrics.New(b, srv, metrics.Options{InternalPartitions: sc.metricsInternal})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	// Profiles of a live broker.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	stop := func() {}
	if sc.console {
		c, err := console.New(console.Config{Broker: b, Seeds: []string{kafkaAddr}, Logger: logger.With("component", "console"),
			LagSampleInterval: sc.consoleSample})
		if err != nil {
			logger.Error("console disabled", "err", err)
		} else {
			mux.Handle("/", c)
			stop = c.Close
		}
	}
	return mux, stop
}
