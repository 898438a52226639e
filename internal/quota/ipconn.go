package quota

import (
	"net/netip"
	"time"
)

// KIP-612 connection rate quotas: connection_creation_rate of an ip entity
// (a named address, or the default ip entity for every address without
// one) bounds how many connections per second one client address opens.
// The rate is Kafka's sampled rate over the quota windows, one per address
// (the default quota is each address's, not shared); a connection that
// takes the address over its quota is recorded all the same, as Kafka's
// ConnectionQuotas does, so an address that keeps reconnecting stays
// throttled until it slows down.

// IPQuotaActive reports whether any connection_creation_rate is set.
func (m *Manager) IPQuotaActive() bool {
	t := m.quotas.Load()
	return t.ipDefault > 0 || len(t.ipRate) > 0
}

// ConnectionQuota is the connection_creation_rate that applies to ip: its
// own, else the default ip entity's; false if none.
func (m *Manager) ConnectionQuota(ip netip.Addr) (float64, bool) {
	t := m.quotas.Load()
	if v, ok := t.ipRate[ip.Unmap().WithZone("")]; ok {
		return v, true
	}
	return t.ipDefault, t.ipDefault > 0
}

// RecordConnection counts a new connection from ip against its
// connection_creation_rate and returns how long the address is over it: 0
// admits the connection; otherwise Kafka holds the connection that long
// and closes it (a client that reconnects at once would only be refused
// again). The time is bounded by the quota windows (quota.window.num *
// quota.window.size.seconds).
func (m *Manager) RecordConnection(ip netip.Addr) time.Duration {
	bound, ok := m.ConnectionQuota(ip)
	if !ok {
		return 0
	}
	ip = ip.Unmap().WithZone("")
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	s := m.ipSensors[ip]
	if s == nil {
		m.sweepIP(now)
		if len(m.ipSensors) >= MaxSensors {
			ip = netip.IPv6Unspecified() // the shared overflow rate
			s = m.ipSensors[ip]
		}
		if s == nil {
			s = &sensor{}
			m.ipSensors[ip] = s
		}
	}
	s.bound, s.used = bound, now
	s.rate.record(1, now, m.cfg)
	value := s.rate.measure(now, m.cfg)
	if value <= bound {
		return 0
	}
	d := time.Duration((value - bound) / bound * float64(s.rate.windowSize(now, m.cfg)))
	d = min(d, time.Duration(m.cfg.WindowNum)*m.cfg.WindowSize).Round(time.Millisecond)
	if d <= 0 {
		return 0
	}
	s.throttled++
	s.throttleTime += d
	return d
}

// sweepIP forgets connection rates unused for an hour, at most once a
// minute (or when the table is full). Called with mu held.
func (m *Manager) sweepIP(now time.Duration) { sweepIdle(now, &m.ipLastSweep, m.ipSensors) }

// IPStat is one address's connection rate, for metrics.
type IPStat struct {
	IP           netip.Addr // :: for the overflow rate shared past MaxSensors
	Quota        float64    // connection_creation_rate
	Value        float64    // connections per second
	Throttled    int64      // connections held and closed
	ThrottleTime time.Duration
}

// IPStats lists the tracked connection rates.
func (m *Manager) IPStats() []IPStat {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := make([]IPStat, 0, len(m.ipSensors))
	for ip, s := range m.ipSensors {
		out = append(out, IPStat{IP: ip, Quota: s.bound, Value: s.rate.measure(now, m.cfg), Throttled: s.throttled, ThrottleTime: s.throttleTime})
	}
	return out
}
