package wire

import (
	"net"
	"net/netip"
	"time"
)

// Connection limits per client address, checked at accept (Kafka's
// ConnectionQuotas):
//
//   - max.connections.per.ip (Limits.MaxConnectionsPerIP) and its
//     overrides: a connection past its address's count is closed at once;
//   - KIP-612's connection_creation_rate of ip quota entities (the
//     handler's ConnectionGate): a connection past its address's rate is
//     held, unread, for the throttle time and then closed, as Kafka does,
//     so that a client reconnecting in a loop is slowed down rather than
//     refused a thousand times a second.
//
// Node-to-node connections must never be refused by either: a cluster
// whose nodes cannot reach each other's Kafka listener cannot register,
// heartbeat or forward. A connection on the inter-broker (Internal)
// listener from an address the gate names as a cluster node's is exempt
// from both (it is still counted, and max.connections still applies).

// ConnectionGate is what a Handler may also implement to take part in
// admitting connections.
type ConnectionGate interface {
	// NodeAddress reports whether ip is one of the cluster's nodes.
	NodeAddress(ip netip.Addr) bool
	// ConnectionThrottle records a new connection from ip against its
	// connection rate quota and returns how long the address is over it;
	// 0 admits the connection.
	ConnectionThrottle(ip netip.Addr) time.Duration
}

// UnlimitedPerIP is Kafka's default max.connections.per.ip (Int.MaxValue):
// no limit per address.
const UnlimitedPerIP = 1<<31 - 1

// maxHeld bounds the throttled connections held open until their close:
// past it they are closed at once (each holds a file descriptor).
const maxHeld = 1000

// refusalLogEvery is how often a refusal is logged per address (and limit
// kind); the ones in between are counted in the next line.
const refusalLogEvery = time.Minute

// connIP is a connection's client address, IPv4-mapped addresses unmapped.
func connIP(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}

// perIPLimit is how many connections ip may hold.
func (s *Server) perIPLimit(ip netip.Addr) int {
	if n, ok := s.limits.MaxConnectionsPerIPOverrides[ip]; ok {
		return n
	}
	if s.limits.MaxConnectionsPerIP < 0 {
		return 0
	}
	return s.limits.MaxConnectionsPerIP
}

// exempt reports whether a connection from ip on l is a node's.
func (s *Server) exempt(ip netip.Addr, l *Listener) bool {
	g, ok := s.h.(ConnectionGate)
	return ok && l.Internal && ip.IsValid() && g.NodeAddress(ip)
}

// throttle asks the gate how long ip is over its connection rate.
func (s *Server) throttle(ip netip.Addr) time.Duration {
	g, ok := s.h.(ConnectionGate)
	if !ok || !ip.IsValid() {
		return 0
	}
	return g.ConnectionThrottle(ip)
}

type refusalKey struct {
	ip   netip.Addr
	kind string
}

type refusalLog struct {
	last   time.Time
	missed int64 // refusals not logged since last
}

// logRefusal logs a refusal of ip's connection, at most once per address
// and kind per refusalLogEvery. Called with s.mu held.
func (s *Server) logRefusal(ip netip.Addr, kind string, args ...any) {
	s.logLimited(ip, "connection refused: "+kind, args...)
}

// logLimited logs msg about ip's connection at most once per address and
// msg per refusalLogEvery, with the count of the ones not logged since.
// Called with s.mu held.
func (s *Server) logLimited(ip netip.Addr, msg string, args ...any) {
	now := time.Now()
	k := refusalKey{ip, msg}
	r, ok := s.refusals[k]
	if ok && now.Sub(r.last) < refusalLogEvery {
		r.missed++
		s.refusals[k] = r
		return
	}
	if len(s.refusals) >= 10000 {
		for k, r := range s.refusals {
			if now.Sub(r.last) >= refusalLogEvery {
				delete(s.refusals, k)
			}
		}
	}
	if len(s.refusals) < 10000 {
		s.refusals[k] = refusalLog{last: now}
	}
	s.log.Warn(msg, append([]any{"ip", ip.String(), "refused_since_last_logged", r.missed}, args...)...)
}

// hold keeps a throttled connection open, unread, for d, then closes it;
// Close closes it sooner.
func (s *Server) hold(nc net.Conn, d time.Duration) {
	s.mu.Lock()
	if s.closed || len(s.held) >= maxHeld {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.held[nc] = time.AfterFunc(d, func() {
		s.mu.Lock()
		delete(s.held, nc)
		s.mu.Unlock()
		nc.Close()
	})
	s.mu.Unlock()
}

// PerIP is the number of open connections from ip (tests, metrics).
func (s *Server) PerIP(ip netip.Addr) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perIP[ip]
}
