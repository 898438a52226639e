package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"holdfast/internal/broker"
	"holdfast/internal/console"
	"holdfast/internal/metrics"
	"holdfast/internal/wire"
)

// adminHandler is the admin listener (--metrics-listen, loopback by
// default): the web console at /, Prometheus /metrics, /healthz and
// /debug/pprof. The console's Kafka client reaches this node on its
// inter-broker listener (lns are the bound Kafka listeners, in sec's
// order), logged in as this node. The returned func stops the console.
func adminHandler(b *broker.Broker, srv *wire.Server, logger *slog.Logger, sec *serveSecurity, lns []net.Listener, sc *serveConfig) (http.Handler, func()) {
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
		i := slices.IndexFunc(sec.listeners, func(l serveListener) bool { return l.wire.Internal })
		seed, opts, err := sec.consoleClient(clientAddr(lns[i].Addr().String(), sec.listeners[i].bind))
		var c *console.Console
		if err == nil {
			cc := console.Config{Broker: b, Seeds: []string{seed}, ClientOpts: opts, Logger: logger.With("component", "console"),
				LagSampleInterval: sc.consoleSample}
			consoleLab(&cc, sc, sec, cc.Logger)
			c, err = console.New(cc)
		}
		if err != nil {
			logger.Error("console disabled", "err", err)
		} else {
			mux.Handle("/", c)
			stop = c.Close
		}
	}
	return mux, stop
}
