package wire

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"holdfast/internal/auth"
)

// principalHandler is testHandler that records who sent each Metadata.
type principalHandler struct {
	testHandler
	mu   sync.Mutex
	seen []auth.Principal
}

func (h *principalHandler) Handle(ctx context.Context, r *Request) Reply {
	if r.Key == kmsg.Metadata.Int16() {
		h.mu.Lock()
		h.seen = append(h.seen, r.Principal)
		h.mu.Unlock()
	}
	return h.testHandler.Handle(ctx, r)
}

func (h *principalHandler) last() auth.Principal {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seen) == 0 {
		return auth.Principal{}
	}
	return h.seen[len(h.seen)-1]
}

type creds map[string]auth.ScramCredential

func (c creds) ScramCredential(user, mech string) (auth.ScramCredential, bool) {
	v, ok := c[user+"/"+mech]
	return v, ok
}

func saslServer(t *testing.T) *auth.SASLServer {
	t.Helper()
	c := creds{}
	cred, err := auth.NewScramCredential("alice", auth.MechScramSHA512, "alice-secret", 4096)
	if err != nil {
		t.Fatal(err)
	}
	c["alice/"+auth.MechScramSHA512] = cred
	s, err := auth.NewSASLServer(auth.SASLConfig{
		Mechanisms: []string{auth.MechScramSHA512, auth.MechPlain},
		Scram:      c, PlainUsers: map[string]string{"bob": "bob-secret"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func serveListener(t *testing.T, h Handler, l *Listener) (*Server, string) {
	t.Helper()
	s := NewServer(h, Limits{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeListener(ln, l)
	t.Cleanup(func() { s.Close() })
	return s, ln.Addr().String()
}

func metadataAs(ctx context.Context, cl *kgo.Client) error {
	_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	return err
}

func TestSASLListener(t *testing.T) {
	h := &principalHandler{}
	s, addr := serveListener(t, h, &Listener{Name: "SASL", Protocol: SASLPlaintext, SASL: saslServer(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := metadataAs(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if got := h.last(); got != auth.User("alice") {
		t.Fatalf("principal %v, want User:alice", got)
	}

	pl, _ := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(plain.Auth{User: "bob", Pass: "bob-secret"}.AsMechanism()))
	defer pl.Close()
	if err := metadataAs(ctx, pl); err != nil || h.last() != auth.User("bob") {
		t.Fatalf("PLAIN: %v, principal %v", err, h.last())
	}

	bad, _ := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(scram.Auth{User: "alice", Pass: "wrong"}.AsSha512Mechanism()))
	defer bad.Close()
	if err := metadataAs(ctx, bad); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("bad password: %v", err)
	}
	if s.Stats.AuthFailures.Load() == 0 {
		t.Error("the failure was not counted")
	}

	// A client that skips SASL is disconnected at its first request.
	anon, _ := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestRetries(0))
	defer anon.Close()
	if err := metadataAs(ctx, anon); err == nil {
		t.Fatal("an unauthenticated Metadata was answered")
	}
}

// TestSASLHandshakeV0 runs the legacy framing (SaslHandshake v0, then bare
// tokens) that older clients and sarama's default use.
func TestSASLHandshakeV0(t *testing.T) {
	h := &principalHandler{}
	_, addr := serveListener(t, h, &Listener{Name: "SASL", Protocol: SASLPlaintext, SASL: saslServer(t)})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = auth.MechPlain
	c.Write(frame(hs, 0, 1))
	if resp := readResponse(t, c, hs.ResponseKind()).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 {
		t.Fatalf("handshake: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	tok := []byte("\x00bob\x00bob-secret")
	c.Write(binary.BigEndian.AppendUint32(nil, uint32(len(tok))))
	c.Write(tok)
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil || binary.BigEndian.Uint32(n[:]) != 0 {
		t.Fatalf("raw PLAIN answer: %v %x", err, n)
	}
	c.Write(frame(kmsg.NewPtrMetadataRequest(), 1, 2))
	readResponse(t, c, kmsg.NewPtrMetadataResponse())
	if h.last() != auth.User("bob") {
		t.Fatalf("principal %v", h.last())
	}
}

func readResponse(t *testing.T, c net.Conn, resp kmsg.Response) kmsg.Response {
	t.Helper()
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	body := buf[4:] // correlation id
	if resp.IsFlexible() && resp.Key() != kmsg.ApiVersions.Int16() {
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestReauthentication: the session lifetime is announced, a client past
// it that does not re-authenticate is disconnected, and franz-go, which
// re-authenticates (KIP-368), keeps working across several lifetimes.
//
// The lifetime is 1 s, not 300 ms: franz-go re-authenticates before every
// request once the lifetime is below its 1 s pessimism, so the margin the
// server allows between a re-authentication and the request after it is
// the whole lifetime, and 300 ms of scheduling delay on a loaded machine
// expired a session and opened a third connection.
func TestReauthentication(t *testing.T) {
	h := &principalHandler{}
	s, addr := serveListener(t, h, &Listener{Name: "SASL", Protocol: SASLPlaintext, SASL: saslServer(t), ReauthAfter: time.Second})

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = auth.MechPlain
	hs.Version = 1
	c.Write(frame(hs, 1, 1))
	readResponse(t, c, hs.ResponseKind())
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.SASLAuthBytes = []byte("\x00bob\x00bob-secret")
	c.Write(frame(au, 1, 2))
	ar := au.ResponseKind()
	ar.SetVersion(1)
	resp := readResponse(t, c, ar).(*kmsg.SASLAuthenticateResponse)
	if resp.ErrorCode != 0 || resp.SessionLifetimeMillis <= 0 || resp.SessionLifetimeMillis > 1000 {
		t.Fatalf("authenticate: code %d lifetime %d", resp.ErrorCode, resp.SessionLifetimeMillis)
	}
	time.Sleep(1100 * time.Millisecond) // past the session lifetime (1 s): the server's clock must pass it
	c.Write(frame(kmsg.NewPtrMetadataRequest(), 1, 3))
	if _, err := io.ReadFull(c, make([]byte, 4)); err == nil {
		t.Fatal("an expired session was served")
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before := s.Stats.Accepted.Load()
	// Requests spread over 3.5 s, past several 1 s session lifetimes, so
	// the client has to re-authenticate on its connection.
	for end := time.Now().Add(3500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if err := metadataAs(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	if h.last() != auth.User("alice") {
		t.Fatalf("principal %v", h.last())
	}
	// Re-authentication happens on the connection franz-go already has
	// (one for the seed, one for the broker it discovered at most).
	if opened := s.Stats.Accepted.Load() - before; opened > 2 {
		t.Errorf("%d connections for one client: it reconnected instead of re-authenticating", opened)
	}
}

func TestTLSListener(t *testing.T) {
	ca, err := auth.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	node, _ := ca.Issue(auth.CertOptions{CommonName: "node", Hosts: []string{"127.0.0.1"}})
	client, _ := ca.Issue(auth.CertOptions{CommonName: "alice"})
	otherCA, _ := auth.NewCA("other CA", time.Hour)
	stranger, _ := otherCA.Issue(auth.CertOptions{CommonName: "mallory"})

	dir := t.TempDir()
	writeFile(t, dir+"/node.pem", node.Keystore())
	writeFile(t, dir+"/ca.pem", ca.CertPEM)
	mat, err := auth.LoadTLS(auth.TLSConfig{KeystoreLocation: dir + "/node.pem", TruststoreLocation: dir + "/ca.pem", ClientAuth: auth.ClientAuthRequired}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mapper, _ := auth.ParseMappingRules("RULE:^CN=(.*)$/$1/,DEFAULT")
	h := &principalHandler{}
	_, addr := serveListener(t, h, &Listener{Name: "SSL", Protocol: SSL, TLS: mat.ServerConfig(), CertPrincipal: mapper.CertPrincipal})

	clientTLS := func(c auth.Cert) *tls.Config {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca.CertPEM)
		cfg := &tls.Config{RootCAs: pool}
		if c.CertPEM != nil {
			kp, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{kp}
		}
		return cfg
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, _ := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(clientTLS(client)))
	defer cl.Close()
	if err := metadataAs(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if h.last() != auth.User("alice") {
		t.Fatalf("principal %v, want User:alice (mapped from CN=alice)", h.last())
	}
	for name, c := range map[string]auth.Cert{"no certificate": {}, "another CA's certificate": stranger} {
		bad, _ := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(clientTLS(c)), kgo.RequestRetries(0))
		if err := metadataAs(ctx, bad); err == nil {
			t.Errorf("%s: served", name)
		}
		bad.Close()
	}

	// A renewed node certificate is served without a restart.
	renewed, _ := ca.Issue(auth.CertOptions{CommonName: "node-renewed", Hosts: []string{"127.0.0.1"}})
	writeFile(t, dir+"/node.pem", renewed.Keystore())
	if err := mat.Reload(); err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", addr, clientTLS(client))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if cn := conn.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "node-renewed" {
		t.Errorf("served certificate %q after reload", cn)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSASLOnPlaintext: a SaslHandshake on a listener without SASL is
// answered ILLEGAL_SASL_STATE (Kafka's answer), and ApiVersions does not
// list the SASL APIs there.
func TestSASLOnPlaintext(t *testing.T) {
	_, addr := serveListener(t, testHandler{}, DefaultListener())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(frame(kmsg.NewPtrApiVersionsRequest(), 3, 1))
	vr := kmsg.NewPtrApiVersionsResponse()
	vr.Version = 3
	vers := readResponse(t, c, vr).(*kmsg.ApiVersionsResponse)
	for _, k := range vers.ApiKeys {
		if k.ApiKey == kmsg.SASLHandshake.Int16() || k.ApiKey == kmsg.SASLAuthenticate.Int16() {
			t.Errorf("a PLAINTEXT listener advertises %s", kmsg.NameForKey(k.ApiKey))
		}
	}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = "PLAIN"
	c.Write(frame(hs, 1, 2))
	if resp := readResponse(t, c, hs.ResponseKind()).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != kerr.IllegalSaslState.Code {
		t.Fatalf("handshake on PLAINTEXT: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
}

// pipeListener hands out one prepared connection.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *pipeListener) Close() error {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	return nil
}
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// FuzzSASLConn feeds arbitrary frames to a SASL listener's connection: no
// input may panic the server, no request may reach the handler from an
// unauthenticated client (the only credentials are bob's PLAIN password),
// an unauthenticated client's frames never take from the shared request
// budget nor more than their own, and every byte of either budget is
// given back when the connection ends. The limits are small (4 KiB frames
// before authentication) so short inputs reach them; more seeds are in
// testdata/fuzz/FuzzSASLConn.
//
//	go test ./internal/wire -run X -fuzz FuzzSASLConn
func FuzzSASLConn(f *testing.F) {
	hs := func(mech string, v int16) []byte {
		r := kmsg.NewPtrSASLHandshakeRequest()
		r.Mechanism = mech
		return frame(r, v, 1)
	}
	au := func(tok string, v int16) []byte {
		r := kmsg.NewPtrSASLAuthenticateRequest()
		r.SASLAuthBytes = []byte(tok)
		return frame(r, v, 2)
	}
	raw := func(tok string) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(tok))), tok...) }
	md := frame(kmsg.NewPtrMetadataRequest(), 1, 3)
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	f.Add(cat(hs("PLAIN", 1), au("\x00bob\x00bob-secret", 1), md))
	f.Add(cat(hs("PLAIN", 1), au("\x00bob\x00wrong", 1), md))
	f.Add(cat(hs("PLAIN", 0), raw("\x00bob\x00bob-secret"), md))
	f.Add(cat(hs("SCRAM-SHA-512", 1), au("n,,n=alice,r=abc", 1), au("c=biws,r=abc,p=AAAA", 2), md))
	f.Add(cat(md))
	f.Add(cat(frame(kmsg.NewPtrApiVersionsRequest(), 3, 0), hs("PLAIN", 1), hs("PLAIN", 1), md))
	f.Fuzz(func(t *testing.T, in []byte) {
		h := &principalHandler{}
		lim := Limits{ReadTimeout: time.Second, IdleTimeout: time.Second, MaxPreAuthBytes: 4096, MaxPreAuthQueuedBytes: 8192}
		s := NewServer(h, lim, slog.New(slog.NewTextHandler(io.Discard, nil)))
		ss, err := auth.NewSASLServer(auth.SASLConfig{Mechanisms: []string{auth.MechPlain, auth.MechScramSHA512}, Scram: creds{}, PlainUsers: map[string]string{"bob": "bob-secret"}})
		if err != nil {
			t.Fatal(err)
		}
		ln := &pipeListener{conns: make(chan net.Conn, 1), done: make(chan struct{})}
		client, server := net.Pipe()
		ln.conns <- server
		go s.ServeListener(ln, &Listener{Name: "SASL", Protocol: SASLPlaintext, SASL: ss})
		go io.Copy(io.Discard, client)
		client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		client.Write(in)
		client.Close()
		s.Close()
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, p := range h.seen {
			if p != auth.User("bob") {
				t.Fatalf("a request reached the handler as %v", p)
			}
		}
		if len(h.seen) > 0 && !bytes.Contains(in, []byte("bob-secret")) {
			t.Fatal("served without the password")
		}
		m := s.MemoryPool()
		if m.Used != 0 || m.PreAuthUsed != 0 {
			t.Fatalf("budget not given back: %+v", m)
		}
		if m.PreAuthPeak > m.PreAuthSize || m.UsedPeak > 0 && !bytes.Contains(in, []byte("bob-secret")) {
			t.Fatalf("an unauthenticated client's frames took from the shared budget, or more than their own: %+v", m)
		}
	})
}
