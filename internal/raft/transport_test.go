package raft

import (
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
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
	r.got = append(r.got, msgs...)
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
	a, err := newTransport(1, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", ra, f, testLogger(t), 1024, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := newTransport(2, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", rb, f, testLogger(t), 1024, time.Hour)
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
	a, err := newTransport(1, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", ra, nil, testLogger(t), 1024, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := newTransport(2, NodeIdentity{Cluster: [16]byte{8}}, "127.0.0.1:0", rb, nil, testLogger(t), 1024, time.Hour)
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
	a, err := newTransport(1, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", ra, f, testLogger(t), 1024, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := newTransport(2, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", rb, f, testLogger(t), 1024, time.Hour)
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
	a, err := newTransport(1, formed, "127.0.0.1:0", ra, nil, testLogger(t), 1024, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	fresh := NodeIdentity{Directory: [16]byte{9}}
	b, err := newTransport(2, fresh, "127.0.0.1:0", rb, nil, testLogger(t), 1024, 10*time.Millisecond)
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
