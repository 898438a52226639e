package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"holdfast/internal/auth"
	"holdfast/internal/broker"
	"holdfast/internal/console"
	"holdfast/internal/metrics"
	"holdfast/internal/wire"
)

// adminHandler is the admin listener (--metrics-listen, loopback by
// default): the web console at /, Prometheus /metrics, /healthz and
// /debug/pprof, with logins as --admin-auth says (the console's gate).
// The console's Kafka client reaches this node on its inter-broker
// listener (lns are the bound Kafka listeners, in sec's order), logged in
// as this node; with logins, each page shows what the user logged in may
// see. The returned func stops the console.
func adminHandler(b *broker.Broker, srv *wire.Server, logger *slog.Logger, sec *serveSecurity, lns []net.Listener, sc *serveConfig) (http.Handler, func(), error) {
	pages, endpoints, err := sc.adminLogins(sec.authenticates)
	if err != nil {
		return nil, nil, err
	}
	gc := console.GateConfig{Pages: pages, Endpoints: endpoints, MetricsOpen: sc.adminAuthMetrics == "open",
		Password: sec.checkPassword, Authorized: b.Authorized, Logger: logger.With("component", "console")}
	if l, _ := sec.adminTLS(sc.adminTLS); l != nil {
		gc.Certificate = l.CertPrincipal
	}
	gate, err := console.NewGate(gc)
	if err != nil {
		return nil, nil, err
	}
	var cc *console.Config
	if sc.console {
		i := slices.IndexFunc(sec.listeners, func(l serveListener) bool { return l.wire.Internal })
		seed, opts, err := sec.consoleClient(clientAddr(lns[i].Addr().String(), sec.listeners[i].bind))
		if err != nil {
			logger.Error("console disabled", "err", err)
		} else {
			cc = &console.Config{Broker: b, Seeds: []string{seed}, ClientOpts: opts, Logger: logger.With("component", "console"),
				LagSampleInterval: sc.consoleSample, Gate: gate, ReadOnly: !sc.consoleActions}
			consoleLab(cc, sc, cc.Logger)
		}
	}
	mux, stop := adminMux(b, srv, gate, metrics.Options{InternalPartitions: sc.metricsInternal, PartitionSeriesMax: sc.metricsPartitionMax}, cc, logger)
	return mux, stop, nil
}

// adminMux serves the admin listener's paths: /metrics, /healthz and
// /debug/pprof behind gate (nil: open), and the console made from cc (nil:
// none) at /. serve and each dev-cluster node use it. The returned func
// stops the console.
func adminMux(b *broker.Broker, srv *wire.Server, gate *console.Gate, mo metrics.Options, cc *console.Config, logger *slog.Logger) (http.Handler, func()) {
	mux := http.NewServeMux()
	if gate != nil {
		gate.Routes(mux)
	}
	reg := metrics.New(b, srv, mo)
	mux.Handle("/metrics", gate.Endpoint(auth.OpDescribe, true, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	// Profiles of a live broker: its administrators'.
	mux.Handle("/debug/pprof/", gate.Endpoint(auth.OpAlter, false, http.HandlerFunc(pprof.Index)))
	mux.Handle("/debug/pprof/profile", gate.Endpoint(auth.OpAlter, false, http.HandlerFunc(pprof.Profile)))
	mux.Handle("/debug/pprof/trace", gate.Endpoint(auth.OpAlter, false, http.HandlerFunc(pprof.Trace)))
	stop := func() {}
	if cc != nil {
		if c, err := console.New(*cc); err != nil {
			logger.Error("console disabled", "err", err)
		} else {
			mux.Handle("/", c)
			stop = c.Close
		}
	}
	return mux, stop
}

// adminLogins resolves --admin-auth: whether the console's pages, and
// whether /metrics and /debug/pprof, need a login. auto: the pages when
// any Kafka listener authenticates (the console must not show more than
// the Kafka listeners would); the endpoints then too, and whenever the
// admin listener is reachable from beyond this machine (they show the
// broker's insides, which no Kafka API does).
func (c *serveConfig) adminLogins(kafkaAuth bool) (pages, endpoints bool, err error) {
	switch c.adminAuthMetrics {
	case "login", "open":
	default:
		return false, false, fmt.Errorf("--admin-auth-metrics %q: want login or open", c.adminAuthMetrics)
	}
	switch c.adminAuth {
	case "required":
		return true, true, nil
	case "none":
		return false, false, nil
	case "auto", "":
		host, _, err := net.SplitHostPort(c.metricsListen)
		beyond := c.metricsListen != "" && (err != nil || !loopback(host))
		return kafkaAuth, kafkaAuth || beyond, nil
	}
	return false, false, fmt.Errorf("--admin-auth %q: want auto, required or none", c.adminAuth)
}

// adminTLS is the Kafka listener whose TLS settings the admin listener
// uses (--admin-tls-listener): nil for plain HTTP.
func (sec *serveSecurity) adminTLS(name string) (*wire.Listener, error) {
	if name == "" {
		return nil, nil
	}
	var names []string
	for _, l := range sec.listeners {
		if strings.EqualFold(l.wire.Name, name) {
			if l.wire.TLS == nil {
				return nil, fmt.Errorf("--admin-tls-listener %s: listener %s is %s, without TLS", name, l.wire.Name, l.wire.Protocol)
			}
			return l.wire, nil
		}
		names = append(names, l.wire.Name)
	}
	return nil, fmt.Errorf("--admin-tls-listener %s: not a listener of this node (%s)", name, strings.Join(names, ", "))
}
