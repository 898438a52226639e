package wire

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/testwait"
)

// dialFrom connects to addr from the local address from (any 127/8
// address is the loopback device's on Linux), closed when the test ends.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// served asserts c gets an answer to ApiVersions.
func served(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := c.Write(frame(kmsg.NewPtrApiVersionsRequest(), 3, 7)); err != nil {
		t.Fatalf("write: %v", err)
	}
	readFrame(t, c)
}

// refused asserts the server closes c without answering: a read ends
// with EOF or a reset, never with data. (The deadline only guards
// against a hang.)
func refused(t *testing.T, c net.Conn) {
	t.Helper()
	c.Write(frame(kmsg.NewPtrApiVersionsRequest(), 3, 7))
	c.SetReadDeadline(time.Now().Add(time.Minute))
	n, err := c.Read(make([]byte, 1))
	if n > 0 || err == nil {
		t.Fatalf("connection answered (read %d bytes, err %v)", n, err)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("server neither answered nor closed the connection")
	}
}

// awaitPerIP waits until the server counts n connections from ip (a
// closed connection is uncounted when its goroutines end).
func awaitPerIP(t *testing.T, s *Server, ip string, n int) {
	t.Helper()
	a := netip.MustParseAddr(ip)
	if !testwait.Poll(time.Minute, func() bool { return s.PerIP(a) == n }) {
		t.Fatalf("%s holds %d connections, want %d", ip, s.PerIP(a), n)
	}
}

// TestMaxConnectionsPerIP: max.connections.per.ip refuses an address's
// connections past its limit at accept and serves the other addresses;
// an override gives one address its own limit; a connection closed makes
// room again.
func TestMaxConnectionsPerIP(t *testing.T) {
	s, addr := startServer(t, Limits{MaxConnectionsPerIP: 2, MaxConnectionsPerIPOverrides: map[netip.Addr]int{netip.MustParseAddr("127.0.0.3"): 4}})
	var first []net.Conn
	for range 2 {
		c := dialFrom(t, "127.0.0.2", addr)
		served(t, c)
		first = append(first, c)
	}
	refused(t, dialFrom(t, "127.0.0.2", addr))
	for range 4 {
		served(t, dialFrom(t, "127.0.0.3", addr))
	}
	refused(t, dialFrom(t, "127.0.0.3", addr))
	served(t, dialFrom(t, "127.0.0.1", addr))
	served(t, dialFrom(t, "127.0.0.1", addr))
	if got := s.Stats.RejectedPerIP.Load(); got != 2 {
		t.Fatalf("rejected per ip: %d, want 2", got)
	}
	first[0].Close()
	awaitPerIP(t, s, "127.0.0.2", 1)
	served(t, dialFrom(t, "127.0.0.2", addr))
	refused(t, dialFrom(t, "127.0.0.2", addr))
}

// TestMaxConnectionsPerIPZero: Kafka's max.connections.per.ip=0 with
// overrides lets only the overridden addresses in.
func TestMaxConnectionsPerIPZero(t *testing.T) {
	_, addr := startServer(t, Limits{MaxConnectionsPerIP: -1, MaxConnectionsPerIPOverrides: map[netip.Addr]int{netip.MustParseAddr("127.0.0.1"): 5}})
	refused(t, dialFrom(t, "127.0.0.2", addr))
	served(t, dialFrom(t, "127.0.0.1", addr))
}

// gateHandler is testHandler with a ConnectionGate: nodes are cluster
// addresses; throttled addresses are always over their connection rate.
type gateHandler struct {
	testHandler
	nodes, throttled map[netip.Addr]bool
	mu               sync.Mutex
	recorded         map[netip.Addr]int
}

func (g *gateHandler) NodeAddress(ip netip.Addr) bool { return g.nodes[ip] }

func (g *gateHandler) ConnectionThrottle(ip netip.Addr) time.Duration {
	g.mu.Lock()
	g.recorded[ip]++
	g.mu.Unlock()
	if g.throttled[ip] {
		return 20 * time.Millisecond
	}
	return 0
}

// TestConnectionGate: a node's address is exempt from the per-IP limit
// and from the connection rate on the inter-broker listener only; an
// address over its connection rate is held unanswered, then closed.
func TestConnectionGate(t *testing.T) {
	node, client, hammer := netip.MustParseAddr("127.0.0.4"), netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.5")
	g := &gateHandler{nodes: map[netip.Addr]bool{node: true}, throttled: map[netip.Addr]bool{hammer: true}, recorded: map[netip.Addr]int{}}
	s := NewServer(g, Limits{MaxConnectionsPerIP: 1}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	internal := serve(t, s) // the default listener: PLAINTEXT and inter-broker
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeListener(ln, &Listener{Name: "CLIENT", Protocol: Plaintext})
	external := ln.Addr().String()

	for range 3 {
		served(t, dialFrom(t, node.String(), internal))
	}
	g.mu.Lock()
	recorded := g.recorded[node]
	g.mu.Unlock()
	if recorded != 0 {
		t.Fatal("a node's connection was recorded against a connection rate")
	}
	// On a listener that is not the inter-broker one, the node's address
	// is a client's like any other.
	refused(t, dialFrom(t, node.String(), external))
	served(t, dialFrom(t, client.String(), internal))
	refused(t, dialFrom(t, client.String(), internal))
	refused(t, dialFrom(t, hammer.String(), internal))
	refused(t, dialFrom(t, hammer.String(), external))
	if got, perIP := s.Stats.Throttled.Load(), s.Stats.RejectedPerIP.Load(); got != 2 || perIP != 2 {
		t.Fatalf("throttled %d connections, refused %d by the per-IP limit; want 2 and 2", got, perIP)
	}
	awaitPerIP(t, s, hammer.String(), 0)
}

// TestMaxConnectionCreationRate: past max.connection.creation.rate new
// connections wait to be taken, none is refused; a node's connection on
// the inter-broker listener does not wait.
func TestMaxConnectionCreationRate(t *testing.T) {
	node := netip.MustParseAddr("127.0.0.4")
	g := &gateHandler{nodes: map[netip.Addr]bool{node: true}, recorded: map[netip.Addr]int{}}
	s := NewServer(g, Limits{MaxConnectionCreationRate: 4}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	addr := serve(t, s)
	// 4 a second, 4 at once: 40 opened together cannot all be taken
	// without a wait unless taking them took the broker 9 s.
	const k = 40
	conns := make([]net.Conn, k)
	for i := range conns {
		conns[i] = dialFrom(t, "127.0.0.2", addr)
	}
	for _, c := range conns {
		served(t, c)
	}
	delayed := s.Stats.AcceptDelayed.Load()
	if delayed == 0 || s.Stats.Rejected.Load()+s.Stats.RejectedPerIP.Load()+s.Stats.Throttled.Load() != 0 {
		t.Fatalf("%d connections waited, some refused: %+v", delayed, &s.Stats)
	}
	// Nodes' connections take no tokens: 40 of them leave the count alone.
	for range k {
		served(t, dialFrom(t, node.String(), addr))
	}
	if got := s.Stats.AcceptDelayed.Load(); got != delayed {
		t.Fatalf("node connections waited: %d delayed, was %d", got, delayed)
	}
}
