package wire

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"holdfast/internal/auth"
	"holdfast/internal/testwait"
)

// serveSASL runs a SASL_PLAINTEXT listener (alice/alice-secret with
// SCRAM-SHA-512, bob with PLAIN) with lim until the test ends.
func serveSASL(t *testing.T, lim Limits) (*Server, string) {
	t.Helper()
	s := NewServer(testHandler{}, lim, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeListener(ln, &Listener{Name: "SASL", Protocol: SASLPlaintext, SASL: saslServer(t)})
	t.Cleanup(func() { s.Close() })
	return s, ln.Addr().String()
}

func aliceClient(t *testing.T, addr string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// bigMetadata is a Metadata request of more than n bytes (topic names).
func bigMetadata(n int) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	name := strings.Repeat("t", 200)
	for size := 0; size <= n; size += len(name) + 2 {
		tp := kmsg.NewMetadataRequestTopic()
		tp.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, tp)
	}
	return req
}

// streamFrame announces a frame of size bytes on c and streams its body
// until the server closes the connection or all was sent; it returns how
// many body bytes went out.
func streamFrame(c net.Conn, size int) (int, error) {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(size))
	if _, err := c.Write(hdr[:]); err != nil {
		return 0, err
	}
	chunk := make([]byte, 64<<10)
	sent := 0
	c.SetWriteDeadline(time.Now().Add(time.Minute))
	for sent < size {
		n, err := c.Write(chunk[:min(len(chunk), size-sent)])
		sent += n
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// TestPreAuthFrameLimit: on a SASL listener a frame above
// sasl.server.max.receive.size before authentication closes the
// connection from its size alone (the 100 MiB body is never read), is
// counted and takes nothing from either budget; after authentication
// the same client may send frames up to socket.request.max.bytes. (On
// the code before the limit the 100 MiB frame was read whole.)
func TestPreAuthFrameLimit(t *testing.T) {
	s, addr := serveSASL(t, Limits{})
	c := dial(t, addr)
	const announced = 100 << 20
	sent, err := streamFrame(c, announced)
	if err == nil || sent >= announced {
		t.Fatalf("a %d-byte unauthenticated frame was read whole (sent %d, err %v)", announced, sent, err)
	}
	expectClosed(t, c)
	if got := s.Stats.PreAuthRefused.Load(); got != 1 {
		t.Fatalf("refused pre-authentication frames: %d, want 1", got)
	}
	if m := s.MemoryPool(); m.UsedPeak != 0 || m.PreAuthPeak != 0 {
		t.Fatalf("the refused frame took memory: %+v", m)
	}

	// One byte above the limit is refused too; at the limit the frame is
	// read (and here closes the connection as an undecodable request).
	over := dial(t, addr)
	over.Write(binary.BigEndian.AppendUint32(nil, 512<<10+1))
	expectClosed(t, over)
	if got := s.Stats.PreAuthRefused.Load(); got != 2 {
		t.Fatalf("refused pre-authentication frames: %d, want 2", got)
	}

	// Authenticated, a frame above the pre-authentication limit is served.
	cl := aliceClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := bigMetadata(600<<10).RequestWith(ctx, cl); err != nil {
		t.Fatalf("a 600 KiB request after authentication: %v", err)
	}
	if got := s.Stats.PreAuthRefused.Load(); got != 2 {
		t.Fatalf("an authenticated frame was refused: %d", got)
	}
}

// TestPreAuthLimitOnlyOnSASL: a PLAINTEXT listener's clients are not
// held to sasl.server.max.receive.size.
func TestPreAuthLimitOnlyOnSASL(t *testing.T) {
	s, addr := startServer(t, Limits{})
	c := dial(t, addr)
	c.Write(frame(bigMetadata(600<<10), 12, 5))
	if corr := int32(binary.BigEndian.Uint32(readFrame(t, c))); corr != 5 {
		t.Fatalf("correlation id %d", corr)
	}
	if got := s.Stats.PreAuthRefused.Load(); got != 0 {
		t.Fatalf("a PLAINTEXT frame was refused: %d", got)
	}
}

// TestPreAuthBudget: unauthenticated connections that announce frames and
// stall fill only their own budget: an authenticated client is served
// meanwhile from the shared one, and closing them gives all back.
func TestPreAuthBudget(t *testing.T) {
	s, addr := serveSASL(t, Limits{MaxPreAuthQueuedBytes: 512 << 10})
	cl := aliceClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := metadataAs(ctx, cl); err != nil {
		t.Fatal(err)
	}
	// Four stalled connections, each half-way through a 512 KiB frame:
	// more than the 512 KiB budget, so some wait for it.
	var stalled []net.Conn
	for range 4 {
		c := dial(t, addr)
		c.Write(binary.BigEndian.AppendUint32(nil, 512<<10))
		c.Write(make([]byte, 256<<10))
		stalled = append(stalled, c)
	}
	awaitPool(t, s, "the stalled connections fill the pre-authentication budget", func(m MemoryPool) bool { return m.PreAuthUsed == m.PreAuthSize })
	if _, err := bigMetadata(600<<10).RequestWith(ctx, cl); err != nil {
		t.Fatalf("an authenticated client while the pre-authentication budget is full: %v", err)
	}
	if m := s.MemoryPool(); m.PreAuthPeak > m.PreAuthSize || m.UsedPeak > 1<<20 {
		t.Fatalf("budgets: %+v", m)
	}
	for _, c := range stalled {
		c.Close()
	}
	awaitPool(t, s, "closed connections give their budget back", func(m MemoryPool) bool { return m.PreAuthUsed == 0 && m.Used == 0 })
}

// awaitPool waits until ok holds for the server's memory pools.
func awaitPool(t *testing.T, s *Server, what string, ok func(MemoryPool) bool) {
	t.Helper()
	if !testwait.Poll(time.Minute, func() bool { return ok(s.MemoryPool()) }) {
		t.Fatalf("%s: %+v", what, s.MemoryPool())
	}
}

// TestAuthTimeout: a SASL connection that does not authenticate within
// AuthTimeout is closed and counted; an authenticated one stays.
func TestAuthTimeout(t *testing.T) {
	s, addr := serveSASL(t, Limits{AuthTimeout: 300 * time.Millisecond})
	cl := aliceClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := metadataAs(ctx, cl); err != nil {
		t.Fatal(err)
	}
	accepted := s.Stats.Accepted.Load()
	idle := dial(t, addr)
	expectClosed(t, idle) // within expectClosed's 5 s: the timeout is 300 ms
	if got := s.Stats.AuthTimeouts.Load(); got != 1 {
		t.Fatalf("auth timeouts: %d, want 1", got)
	}
	// The authenticated client's connection outlived the timeout: served
	// on it, no new connection.
	if err := metadataAs(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats.Accepted.Load(); got != accepted+1 {
		t.Fatalf("accepted %d connections since, want 1 (the idle one): the authenticated client was cut off", got-accepted)
	}
	if got := s.Stats.AuthTimeouts.Load(); got != 1 {
		t.Fatalf("auth timeouts: %d, want 1", got)
	}
}

// TestPerIPLimitBeforeAuth: max.connections.per.ip counts a SASL
// listener's connections from accept, before they authenticate.
func TestPerIPLimitBeforeAuth(t *testing.T) {
	s, addr := serveSASL(t, Limits{MaxConnectionsPerIP: 2})
	a, b := dial(t, addr), dial(t, addr)
	awaitPerIP(t, s, "127.0.0.1", 2)
	c := dial(t, addr)
	expectClosed(t, c)
	if got := s.Stats.RejectedPerIP.Load(); got != 1 {
		t.Fatalf("rejected per ip: %d, want 1", got)
	}
	a.Close()
	b.Close()
	awaitPerIP(t, s, "127.0.0.1", 0)
	cl := aliceClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := metadataAs(ctx, cl); err != nil {
		t.Fatal(err)
	}
}

// TestPreAuthFrameLimitSASLSSL: the same on SASL_SSL, where the frame
// arrives inside TLS records: the connection is closed after the
// handshake, from the announced size; an authenticated TLS client is
// served.
func TestPreAuthFrameLimitSASLSSL(t *testing.T) {
	ca, err := auth.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	node, _ := ca.Issue(auth.CertOptions{CommonName: "node", Hosts: []string{"127.0.0.1"}})
	dir := t.TempDir()
	writeFile(t, dir+"/node.pem", node.Keystore())
	writeFile(t, dir+"/ca.pem", ca.CertPEM)
	mat, err := auth.LoadTLS(auth.TLSConfig{KeystoreLocation: dir + "/node.pem", TruststoreLocation: dir + "/ca.pem"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, addr := serveListener(t, testHandler{}, &Listener{Name: "SASL_SSL", Protocol: SASLSSL, TLS: mat.ServerConfig(), SASL: saslServer(t)})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const announced = 100 << 20
	if sent, err := streamFrame(c, announced); err == nil || sent >= announced {
		t.Fatalf("a %d-byte unauthenticated frame was read whole over TLS (sent %d, err %v)", announced, sent, err)
	}
	if got := s.Stats.PreAuthRefused.Load(); got != 1 {
		t.Fatalf("refused pre-authentication frames: %d, want 1", got)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(&tls.Config{RootCAs: pool}),
		kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := bigMetadata(600<<10).RequestWith(ctx, cl); err != nil {
		t.Fatalf("a 600 KiB request after authentication over TLS: %v", err)
	}
}
