package raft

import (
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
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
	time.Sleep(50 * time.Millisecond)
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

// TestTransportMutualTLS: nodes with certificates from the cluster's CA
// exchange messages; a node whose certificate another CA signed (or that
// has none) cannot deliver a single one.
func TestTransportMutualTLS(t *testing.T) {
	ca, err := auth.NewCA("cluster CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := auth.NewCA("intruder CA", time.Hour)
	dir := t.TempDir()
	material := func(name string, signer auth.Cert) *TransportTLS {
		c, err := signer.Issue(auth.CertOptions{CommonName: name, Hosts: []string{"127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		ks, ts := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-ca.pem")
		os.WriteFile(ks, c.Keystore(), 0o600)
		os.WriteFile(ts, ca.CertPEM, 0o600)
		m, err := auth.LoadTLS(auth.TLSConfig{KeystoreLocation: ks, TruststoreLocation: ts}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return &TransportTLS{Server: m.MutualServerConfig(), Client: m.ClientConfig}
	}
	ra, rb, rc := &recorder{}, &recorder{}, &recorder{}
	a, err := newTransport(1, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", ra, nil, testLogger(t), 1024, time.Hour, material("node-1", ca))
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := newTransport(2, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", rb, nil, testLogger(t), 1024, time.Hour, material("node-2", ca))
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	intruder, err := newTransport(3, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", rc, nil, testLogger(t), 1024, time.Hour, material("node-3", other))
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.close()
	plain := plainTransport(t, 4, rc)

	a.addPeer(2, b.addr())
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
		return b.stats().Refused >= 2
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
	stalled := make([]net.Conn, 8)
	for i := range stalled {
		c, err := net.Dial("tcp", b.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(binary.BigEndian.AppendUint32(nil, maxFrame)) // announce 64 MiB, send nothing
		stalled[i] = c
	}
	waitFor(t, "the stalled frames to take their chunk", func() bool { return len(b.budget) == len(stalled) })
	if held := len(b.budget) * frameChunk; held > len(stalled)*frameChunk {
		t.Fatalf("stalled peers hold %d bytes", held)
	}
	// A real peer still gets through.
	ra := &recorder{}
	a := plainTransport(t, 1, ra)
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
