package raft

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/auth"
)

type recorder struct {
	mu       sync.Mutex
	got      []outMsg
	unreach  int
	snapshot map[bool]int
}

func (r *recorder) receive(from uint64, msgs []outMsg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		// It keeps the messages: a holder of their buffers, as a group
		// (never released: the garbage collector takes them).
		for _, ref := range m.refs {
			ref.Retain()
		}
		m.refs = nil
		r.got = append(r.got, m)
	}
}

func (r *recorder) unreachable(peer uint64, groups []uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unreach++
}

func (r *recorder) snapshotSent(peer, group uint64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.snapshot == nil {
		r.snapshot = map[bool]int{}
	}
	r.snapshot[ok]++
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func heartbeat(to uint64, term uint64) *pb.Message {
	return &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), To: new(to), From: new(uint64(1)), Term: new(term)}
}

func TestTransportDeliversInOrder(t *testing.T) {
	ra, rb := &recorder{}, &recorder{}
	f := NewFaults()
	// No node heartbeats (they are frames too), and a delay on the link so
	// that messages queue up behind the first frame and must share frames.
	a, err := newTransport(1, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", ra, f, testLogger(t), 1024, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := newTransport(2, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", rb, f, testLogger(t), 1024, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	f.Delay(1, 2, 100*time.Millisecond)
	a.addPeer(2, b.addr())
	b.addPeer(1, a.addr())
	for i := range 500 {
		a.send(uint64(i%7+1), heartbeat(2, uint64(i+1)))
	}
	a.send(3, &pb.Message{Type: pb.MessageType_MsgSnap.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(1))})
	waitFor(t, "501 messages", func() bool { return rb.count() == 501 })
	rb.mu.Lock()
	for i, m := range rb.got[:500] {
		if m.m.GetTerm() != uint64(i+1) || m.group != uint64(i%7+1) {
			t.Fatalf("message %d: group %d term %d", i, m.group, m.m.GetTerm())
		}
	}
	rb.mu.Unlock()
	if st := a.stats(); st.FramesSent*2 > st.MessagesSent {
		t.Fatalf("messages to one peer not batched: %d frames for %d messages", st.FramesSent, st.MessagesSent)
	}
	waitFor(t, "snapshot reported sent", func() bool {
		ra.mu.Lock()
		defer ra.mu.Unlock()
		return ra.snapshot[true] == 1
	})
}

func TestTransportRefusesOtherCluster(t *testing.T) {
	ra, rb := &recorder{}, &recorder{}
	a := plainTransport(t, 1, ra)
	b, err := newTransport(2, NodeIdentity{Cluster: [16]byte{8}}, "127.0.0.1:0", rb, nil, testLogger(t), 1024, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	a.addPeer(2, b.addr())
	b.addPeer(1, a.addr())
	// b closes the connection on the first frame; a's later sends fail
	// and are reported as unreachable.
	waitFor(t, "sends to the foreign node to fail", func() bool {
		a.send(1, heartbeat(2, 1))
		ra.mu.Lock()
		defer ra.mu.Unlock()
		return ra.unreach > 0
	})
	if n := rb.count(); n != 0 {
		t.Fatalf("node of cluster 8 accepted %d messages from cluster 7", n)
	}
}

func TestTransportFaultsDrop(t *testing.T) {
	ra, rb := &recorder{}, &recorder{}
	f := NewFaults()
	a, err := newTransport(1, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", ra, f, testLogger(t), 1024, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := newTransport(2, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", rb, f, testLogger(t), 1024, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	a.addPeer(2, b.addr())
	b.addPeer(1, a.addr())
	f.Cut(1, 2)
	a.send(1, heartbeat(2, 1))
	waitFor(t, "the cut message to be dropped", func() bool { return a.stats().Dropped > 0 })
	f.HealAll()
	a.send(1, heartbeat(2, 2))
	waitFor(t, "delivery after healing", func() bool { return rb.count() > 0 })
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.got[0].m.GetTerm() != 2 {
		t.Fatalf("got the message sent over the cut link: %+v", rb.got[0].m)
	}
}

// TestTransportIdentities: node heartbeats carry each node's cluster,
// directory and bootstrap voters, also between a node of a cluster and one
// with no cluster yet; Raft messages cross only between nodes of the same
// cluster.
func TestTransportIdentities(t *testing.T) {
	ra, rb := &recorder{}, &recorder{}
	formed := NodeIdentity{Cluster: [16]byte{7}, Directory: [16]byte{1}, Bootstrap: map[uint64][16]byte{1: {1}, 2: {2}}}
	a, err := newTransport(1, formed, "127.0.0.1:0", ra, nil, testLogger(t), 1024, 10*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	fresh := NodeIdentity{Directory: [16]byte{9}}
	b, err := newTransport(2, fresh, "127.0.0.1:0", rb, nil, testLogger(t), 1024, 10*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	a.addPeer(2, b.addr())
	b.addPeer(1, a.addr())
	waitFor(t, "both identities exchanged", func() bool {
		ia, ib := b.identities()[1], a.identities()[2]
		return ia.Cluster == formed.Cluster && ia.Directory == formed.Directory && len(ia.Bootstrap) == 2 && ia.Bootstrap[2] == [16]byte{2} &&
			ib.Directory == fresh.Directory && ib.Cluster == [16]byte{}
	})
	a.send(1, heartbeat(2, 1))
	time.Sleep(50 * time.Millisecond) // a negative check: a message would arrive within this on loopback
	if n := rb.count(); n != 0 {
		t.Fatalf("a node with no cluster got %d Raft messages", n)
	}
	// Once it has joined the cluster, messages flow.
	b.setIdentity(NodeIdentity{Cluster: formed.Cluster, Directory: fresh.Directory})
	waitFor(t, "a message after joining", func() bool {
		a.send(1, heartbeat(2, 2))
		return rb.count() > 0
	})
}

// testPKI issues certificates for transport tests: material returns a
// node's (or, without hosts, a client's) keystore signed by signer with
// the cluster CA as its truststore.
type testPKI struct {
	t   *testing.T
	ca  auth.Cert
	dir string
}

func newTestPKI(t *testing.T) *testPKI {
	ca, err := auth.NewCA("cluster CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{t: t, ca: ca, dir: t.TempDir()}
}

func (p *testPKI) material(name string, signer auth.Cert, hosts ...string) *auth.TLSMaterial {
	c, err := signer.Issue(auth.CertOptions{CommonName: name, Hosts: hosts})
	if err != nil {
		p.t.Fatal(err)
	}
	ks, ts := filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+"-ca.pem")
	os.WriteFile(ks, c.Keystore(), 0o600)
	os.WriteFile(ts, p.ca.CertPEM, 0o600)
	m, err := auth.LoadTLS(auth.TLSConfig{KeystoreLocation: ks, TruststoreLocation: ts}, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	return m
}

// transportTLS is a node's transport TLS with material: nodes are named
// by their certificates' CN (DEFAULT mapping rules).
func transportTLS(m *auth.TLSMaterial) *TransportTLS {
	var rules *auth.PrincipalMapper
	return &TransportTLS{Server: m.MutualServerConfig(), Client: m.ClientConfig, NodeOf: rules.CertNode}
}

// TestTransportMutualTLS: nodes with certificates from the cluster's CA
// exchange messages; a node whose certificate another CA signed (or that
// has none) cannot deliver a single one.
func TestTransportMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	other, _ := auth.NewCA("intruder CA", time.Hour)
	ra, rb, rc := &recorder{}, &recorder{}, &recorder{}
	a, err := newTransport(1, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", ra, nil, testLogger(t), 1024, time.Hour, transportTLS(pki.material("node-1", pki.ca, "127.0.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := newTransport(2, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", rb, nil, testLogger(t), 1024, time.Hour, transportTLS(pki.material("node-2", pki.ca, "127.0.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	intruder, err := newTransport(3, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", rc, nil, testLogger(t), 1024, time.Hour, transportTLS(pki.material("node-3", other, "127.0.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.close()
	plain := plainTransport(t, 4, rc)

	a.addPeer(2, b.addr())
	b.addPeer(1, a.addr())
	a.send(1, heartbeat(2, 1))
	waitFor(t, "delivery between cluster nodes over mTLS", func() bool { return rb.count() > 0 })
	// Entries, large ones included, arrive byte for byte over TLS too (no
	// writev there: the pieces go through the buffered writer).
	sendAppend(t, a, rb, 3, "an append over mTLS")

	intruder.addPeer(2, b.addr())
	plain.addPeer(2, b.addr())
	before := rb.count()
	waitFor(t, "the intruders' connections to be refused", func() bool {
		intruder.send(1, heartbeat(2, 9))
		plain.send(1, heartbeat(2, 9))
		return b.stats().RefusedBy["tls_handshake"] >= 2
	})
	if rb.count() != before {
		t.Fatalf("node 2 accepted %d messages from nodes without the cluster's certificate", rb.count()-before)
	}
	// Node 2 refuses to talk to the intruder too (its certificate does not verify).
	b.addPeer(3, intruder.addr())
	waitFor(t, "sends to the intruder to fail", func() bool {
		b.send(1, heartbeat(3, 1))
		return b.stats().Dropped > 0
	})
	if rc.count() != 0 {
		t.Fatalf("the intruder received %d messages", rc.count())
	}
}

// rawFrame is the wire form of a frame that says it is from node from,
// of cluster 7.
func rawFrame(t testing.TB, from uint64, msgs ...outMsg) []byte {
	tr := &tcpTransport{id: from}
	tr.setIdentity(NodeIdentity{Cluster: [16]byte{7}})
	var fe frameEncoder
	if err := tr.encode(&fe, msgs); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	vec := fe.buffers()
	vec.WriteTo(&out)
	return out.Bytes()
}

// forged is a heartbeat at a high term that says it is from node from.
func forged(from, to uint64) outMsg {
	return outMsg{group: 1, m: &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), To: new(to), From: new(from), Term: new(uint64(1000))}}
}

// sendRefused writes frame on c and waits until the other side closes the
// connection.
func sendRefused(t *testing.T, what string, c net.Conn, frame []byte) {
	t.Helper()
	defer c.Close()
	c.Write(frame)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("%s: connection not closed (%v)", what, err)
	}
}

// TestTransportNodeIdentity: a Raft session belongs to the node its
// certificate names. A client certificate of the cluster's CA gets no
// session; node 1's certificate cannot speak for node 3, nor carry a
// message of another node's or to another node; a certificate of a node
// that is no peer gets no session; a node we dial must be the node we
// meant. Each is refused, counted by reason, and delivers nothing; node
// 1's own frames still arrive.
func TestTransportNodeIdentity(t *testing.T) {
	pki := newTestPKI(t)
	rb := &recorder{}
	var logs lockedBuffer
	b, err := newTransport(2, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", rb, nil, slog.New(slog.NewTextHandler(&logs, nil)), 1024, time.Hour, transportTLS(pki.material("node-2", pki.ca, "127.0.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	ra := &recorder{}
	a, err := newTransport(1, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", ra, nil, testLogger(t), 1024, time.Hour, transportTLS(pki.material("node-1", pki.ca, "127.0.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b.addPeer(1, a.addr())
	b.addPeer(3, "127.0.0.1:1") // a peer, never reached
	dial := func(m *auth.TLSMaterial) net.Conn {
		c, err := tls.Dial("tcp", b.addr(), m.ClientConfig(b.addr()))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	node1, alice, node9 := pki.material("node-1", pki.ca, "127.0.0.1"), pki.material("alice", pki.ca), pki.material("node-9", pki.ca, "127.0.0.1")
	cases := []struct {
		what, reason string
		conn         *auth.TLSMaterial
		frame        []byte
	}{
		{"a client certificate of the cluster's CA, as node 1", "not_a_node", alice, rawFrame(t, 1, forged(1, 2))},
		{"node 1's certificate, as node 3", "impersonation", node1, rawFrame(t, 3, forged(3, 2))},
		{"node 1's certificate, a heartbeat frame as node 3", "impersonation", node1, rawFrame(t, 3)},
		{"node 1's frame with node 3's message", "wrong_address", node1, rawFrame(t, 1, forged(3, 2))},
		{"node 1's frame with a message to node 3", "wrong_address", node1, rawFrame(t, 1, forged(1, 3))},
		{"a node that is not a peer", "unknown_node", node9, rawFrame(t, 9, forged(9, 2))},
	}
	for _, c := range cases {
		before := b.stats().RefusedBy[c.reason]
		sendRefused(t, c.what, dial(c.conn), c.frame)
		waitFor(t, c.what+": refused as "+c.reason, func() bool { return b.stats().RefusedBy[c.reason] == before+1 })
	}
	if n := rb.count(); n != 0 {
		t.Fatalf("node 2 took %d forged messages", n)
	}
	// Logged, once a minute per remote host and reason.
	for _, reason := range []string{"not_a_node", "impersonation", "wrong_address", "unknown_node"} {
		if n := strings.Count(logs.String(), "reason="+reason); n != 1 {
			t.Errorf("%d warnings of %s, want 1:\n%s", n, reason, logs.String())
		}
	}
	// Node 1's own frame on its own session arrives.
	c := dial(node1)
	defer c.Close()
	c.Write(rawFrame(t, 1, forged(1, 2)))
	waitFor(t, "node 1's own message", func() bool { return rb.count() == 1 })

	// Node 2 dials "node 3" at node 1's address: node 1's certificate
	// there is not node 3's, and nothing is sent.
	b.addPeer(3, a.addr())
	waitFor(t, "the dial to be refused", func() bool {
		b.send(1, &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), To: new(uint64(3)), From: new(uint64(2))})
		return b.stats().RefusedBy["wrong_server"] > 0
	})
	if n := ra.count(); n != 0 {
		t.Fatalf("node 1 received %d messages meant for node 3", n)
	}
}

// lockedBuffer is a log destination for several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTransportPlaintextPeers: without TLS there is no identity, but a
// frame must come from a peer and stay that peer's on its connection,
// and its messages must be from it and to this node.
func TestTransportPlaintextPeers(t *testing.T) {
	rb := &recorder{}
	b := plainTransport(t, 2, rb)
	b.addPeer(1, "127.0.0.1:1")
	b.addPeer(3, "127.0.0.1:1")
	dial := func() net.Conn {
		c, err := net.Dial("tcp", b.addr())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cases := []struct {
		what, reason string
		frame        []byte
	}{
		{"a node that is not a peer", "unknown_node", rawFrame(t, 9, forged(9, 2))},
		{"this node itself", "unknown_node", rawFrame(t, 2, forged(2, 2))},
		{"a message to node 3", "wrong_address", rawFrame(t, 1, forged(1, 3))},
		{"node 3's message in node 1's frame", "wrong_address", rawFrame(t, 1, forged(3, 2))},
		{"node 1, then node 3 on one connection", "impersonation", append(rawFrame(t, 1), rawFrame(t, 3, forged(3, 2))...)},
	}
	for _, c := range cases {
		before := b.stats().RefusedBy[c.reason]
		sendRefused(t, c.what, dial(), c.frame)
		waitFor(t, c.what+": refused as "+c.reason, func() bool { return b.stats().RefusedBy[c.reason] == before+1 })
	}
	if n := rb.count(); n != 0 {
		t.Fatalf("node 2 took %d forged messages", n)
	}
	// A connection that never identifies itself is closed after
	// handshakeTimeout; from one host at most maxUnidentifiedPerHost wait.
	for range maxUnidentifiedPerHost {
		c := dial()
		defer c.Close() // open, silent, until the test ends
	}
	waitFor(t, "the unidentified connections to be counted", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.unidentified == maxUnidentifiedPerHost
	})
	sendRefused(t, "one connection too many before identification", dial(), nil)
	if b.stats().RefusedBy["connection_limit"] != 1 {
		t.Fatalf("refused %v", b.stats().RefusedBy)
	}
}

// TestTransportFrameLimits: an oversized frame length closes the
// connection, and a peer that starts a frame and stalls holds at most a
// chunk of the shared budget.
func TestTransportFrameLimits(t *testing.T) {
	rb := &recorder{}
	b := plainTransport(t, 2, rb)
	big, err := net.Dial("tcp", b.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	big.Write(binary.BigEndian.AppendUint32(nil, maxFrame+1))
	big.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := big.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection announcing an oversized frame stayed open")
	}
	// Peers that start a large frame and stall hold one chunk each;
	// connections that announce one but never say who they are hold none.
	ra := &recorder{}
	a := plainTransport(t, 1, ra)
	b.addPeer(1, a.addr())
	start := binary.BigEndian.AppendUint32(nil, maxFrame)
	start = append(start, frameVersion, 7)
	start = append(start, make([]byte, 15)...)                            // cluster 7
	start = binary.BigEndian.AppendUint64(start, 1)                       // from node 1
	start = binary.BigEndian.AppendUint32(start, 1)                       // one message
	start = binary.BigEndian.AppendUint64(start, 1)                       // group 1
	start = binary.BigEndian.AppendUint32(start, maxFrame-frameHeader-12) // its size; none of it sent
	stalled := make([]net.Conn, 8)
	for i := range stalled {
		c, err := net.Dial("tcp", b.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(start)
		stalled[i] = c
	}
	for range 8 {
		c, err := net.Dial("tcp", b.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(binary.BigEndian.AppendUint32(nil, maxFrame)) // announce 64 MiB, send nothing
	}
	waitFor(t, "the stalled frames to take their chunk", func() bool { return len(b.budget) == len(stalled) })
	waitFor(t, "the silent connections to wait for identification", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.unidentified == 8
	})
	if held := len(b.budget) * frameChunk; held > len(stalled)*frameChunk {
		t.Fatalf("stalled peers hold %d bytes", held)
	}
	// A real peer still gets through.
	a.addPeer(2, b.addr())
	a.send(1, heartbeat(2, 1))
	waitFor(t, "delivery beside stalled peers", func() bool { return rb.count() > 0 })
}

// sendAppend sends node 2 the first of codecMessages (entries, large ones
// included) from a for group and waits until rb received it, byte for byte.
func sendAppend(t *testing.T, a *tcpTransport, rb *recorder, group uint64, what string) {
	t.Helper()
	before := rb.count()
	want := codecMessages()[0]
	want.To = new(uint64(2))
	a.send(group, want)
	waitFor(t, what, func() bool { return rb.count() > before })
	rb.mu.Lock()
	got := rb.got[before]
	rb.mu.Unlock()
	if got.group != group || !proto.Equal(got.m, want) {
		t.Fatalf("%s: received group %d %v", what, got.group, got.m)
	}
}

// plainTransport is node id's transport on a free local port, without TLS
// or faults, delivering to ev; closed when the test ends.
func plainTransport(t *testing.T, id uint64, ev transportEvents) *tcpTransport {
	t.Helper()
	tr, err := newTransport(id, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", ev, nil, testLogger(t), 1024, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.close)
	return tr
}

// TestTransportRefusesUnknownFrameVersion: every frame starts with the
// protocol version; a frame of a version this binary does not speak (a
// newer release's) closes the connection, counted as a bad frame, and
// nothing of it is delivered.
func TestTransportRefusesUnknownFrameVersion(t *testing.T) {
	rb := &recorder{}
	b := plainTransport(t, 2, rb)
	c, err := net.Dial("tcp", b.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f := binary.BigEndian.AppendUint32(nil, frameHeader)
	f = append(f, frameVersion+1, 7)
	f = append(f, make([]byte, 15)...)      // cluster 7
	f = binary.BigEndian.AppendUint64(f, 1) // from node 1
	f = binary.BigEndian.AppendUint32(f, 0) // a heartbeat
	c.Write(f)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a frame of an unknown version left the connection open")
	}
	if got := b.stats().RefusedBy["bad_frame"]; got != 1 {
		t.Fatalf("refused %v, want one bad_frame", b.stats().RefusedBy)
	}
	if rb.count() != 0 {
		t.Fatalf("%d messages delivered from a frame of an unknown version", rb.count())
	}
}
