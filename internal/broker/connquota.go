package broker

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"holdfast/internal/wire"
)

// The broker is the wire server's ConnectionGate: it names the cluster's
// other nodes, whose connections on the inter-broker listener no per-IP
// limit may refuse (registration, heartbeats, forwarding and transaction
// markers all travel over the Kafka listener), and it measures each new
// connection against the KIP-612 connection_creation_rate of its address.
var _ wire.ConnectionGate = (*Broker)(nil)

// nodeAddrRefresh is how often the other nodes' addresses are gathered
// again (host names resolved anew, newly registered brokers added).
const nodeAddrRefresh = 10 * time.Second

type nodeAddrs struct {
	set atomic.Pointer[map[netip.Addr]bool]
	// resolved is each host name's last resolution; only the refresh
	// (start-up, then its goroutine) touches it.
	resolved map[string][]netip.Addr
}

// ConnectionThrottle is the time ip is over its connection_creation_rate
// quota after this connection (0: admitted).
func (b *Broker) ConnectionThrottle(ip netip.Addr) time.Duration {
	return b.quotas.RecordConnection(ip)
}

// NodeAddress reports whether ip is an address of another node of the
// cluster: a voter's (--peers), a running broker it joined through
// (--join), or a registered broker's (its advertised listeners and Raft
// address). A single node has none.
func (b *Broker) NodeAddress(ip netip.Addr) bool {
	set := b.nodeAddrs.set.Load()
	return set != nil && (*set)[ip.Unmap().WithZone("")]
}

// startConnectionGate gathers the other nodes' addresses now and every
// nodeAddrRefresh until Close.
func (b *Broker) startConnectionGate() error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.refreshNodeAddrs(ctx, false) // addresses now; names resolved off the start-up path
	go func() {
		defer close(done)
		t := b.clk().NewTicker(nodeAddrRefresh)
		defer t.Stop()
		b.refreshNodeAddrs(ctx, true)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				b.refreshNodeAddrs(ctx, true)
			}
		}
	}()
	b.closers = append(b.closers, func() error { cancel(); <-done; return nil })
	return nil
}

// otherNodeHosts lists the hosts of the cluster's other nodes.
func (b *Broker) otherNodeHosts() []string {
	var hosts []string
	addHostPort := func(hp string) {
		if host, _, err := net.SplitHostPort(hp); err == nil && host != "" {
			hosts = append(hosts, host)
		}
	}
	for id, addr := range b.cfg.Peers {
		if id != b.cfg.NodeID {
			addHostPort(addr)
		}
	}
	for _, addr := range b.cfg.Join {
		addHostPort(addr)
	}
	if b.meta != nil {
		for _, br := range b.meta.Brokers() {
			if br.ID == b.cfg.NodeID {
				continue
			}
			hosts = append(hosts, br.Host)
			for _, l := range br.Listeners {
				hosts = append(hosts, l.Host)
			}
			if br.RaftAddr != "" {
				addHostPort(br.RaftAddr)
			}
		}
	}
	return hosts
}

// refreshNodeAddrs rebuilds the set: addresses as they are, host names
// resolved if resolve (one that does not resolve now keeps the addresses
// it had).
func (b *Broker) refreshNodeAddrs(ctx context.Context, resolve bool) {
	if b.nodeAddrs.resolved == nil {
		b.nodeAddrs.resolved = map[string][]netip.Addr{}
	}
	set := map[netip.Addr]bool{}
	seen := map[string]bool{}
	for _, h := range b.otherNodeHosts() {
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		if a, err := netip.ParseAddr(h); err == nil {
			set[a.Unmap().WithZone("")] = true
			continue
		}
		if resolve {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			addrs, err := net.DefaultResolver.LookupNetIP(rctx, "ip", h)
			cancel()
			if err == nil {
				b.nodeAddrs.resolved[h] = addrs
			}
		}
		for _, a := range b.nodeAddrs.resolved[h] {
			set[a.Unmap().WithZone("")] = true
		}
	}
	b.nodeAddrs.set.Store(&set)
}
