package raft

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/clock"
)

// TestTransportFullQueueIsBackPressure: a peer whose sender is behind
// (here: held on a fault delay of the transport's fake clock) fills its
// queue; what is dropped then is counted by kind, and only a dropped
// append is reported to its group (flow control: its leader probes
// instead of pipelining appends the follower would reject after the gap).
// Every drop was reported before, heartbeats included: at 1,000
// partitions a slow peer's drops were a report (a group lock and a
// RawNode call) each. Appends are bounded by count and by bytes; answers
// and votes have a queue of their own and still go.
func TestTransportFullQueueIsBackPressure(t *testing.T) {
	ra, rb := &recorder{}, &recorder{}
	f := NewFaults()
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	a, err := newTransport(1, NodeIdentity{Cluster: [16]byte{7}}, "127.0.0.1:0", ra, f, testLogger(t), 4, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	a.clk = clk
	a.queueBytes = 1000
	b := plainTransport(t, 2, rb)
	f.Delay(1, 2, time.Hour) // on a's fake clock: its sender holds the first batch until Advance
	a.addPeer(2, b.addr())
	b.addPeer(1, a.addr())
	msg := func(typ pb.MessageType, term uint64, data int) *pb.Message {
		m := &pb.Message{Type: typ.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(term)}
		if data > 0 {
			m.Entries = []*pb.Entry{{Term: new(term), Index: new(term), Data: make([]byte, data)}}
		}
		return m
	}
	a.send(1, msg(pb.MessageType_MsgApp, 1, 100))
	waitFor(t, "the sender holding its first batch", func() bool { return clk.Waiters() >= 2 }) // its heartbeat ticker and the delay
	for term := uint64(2); term <= 4; term++ {
		a.send(1, msg(pb.MessageType_MsgApp, term, 100)) // 3 x 164 bytes queued
	}
	a.send(1, msg(pb.MessageType_MsgApp, 5, 600))     // past 1,000 bytes: dropped
	a.send(1, msg(pb.MessageType_MsgApp, 6, 100))     // the fourth in the queue
	a.send(1, msg(pb.MessageType_MsgApp, 7, 100))     // the queue is full: dropped
	a.send(1, msg(pb.MessageType_MsgHeartbeat, 8, 0)) // dropped
	a.send(1, msg(pb.MessageType_MsgAppResp, 9, 0))   // the control queue
	a.send(1, msg(pb.MessageType_MsgVote, 10, 0))     // the control queue
	a.send(1, &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), To: new(uint64(2)), From: new(uint64(1)),
		Term: new(uint64(11)), Context: quiesceCtx}) // sent once: the control queue

	st := a.stats()
	if st.Dropped != 3 || st.QueueFullBy["append"] != 2 || st.QueueFullBy["heartbeat"] != 1 {
		t.Fatalf("dropped %d, by kind %v: want 2 appends and a heartbeat", st.Dropped, st.QueueFullBy)
	}
	ra.mu.Lock()
	unreach := ra.unreach
	ra.mu.Unlock()
	if unreach != 2 {
		t.Fatalf("%d drops on a full queue reported to their groups, want the 2 appends'", unreach)
	}

	f.HealAll()
	clk.Advance(time.Hour)
	waitFor(t, "what was queued", func() bool { return rb.count() == 8 })
	rb.mu.Lock()
	var terms []uint64
	for _, m := range rb.got {
		terms = append(terms, m.m.GetTerm())
	}
	rb.mu.Unlock()
	slices.Sort(terms)
	if want := []uint64{1, 2, 3, 4, 6, 9, 10, 11}; !slices.Equal(terms, want) {
		t.Fatalf("delivered terms %v, want %v", terms, want)
	}
	a.mu.Lock()
	left := a.peers[2].queued.Load()
	a.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d bytes still counted in an empty queue", left)
	}
}

// withQueueLen gives every node's transport per-peer queues of n messages.
func withQueueLen(n int) func(*cluster) { return func(c *cluster) { c.queueLen = n } }

// TestSlowFollowerStaysInSync: a follower whose link from the leader is
// slow (each frame to it waits 100 ms: its send queue of 8 fills and
// drops messages) still catches up, and stays in the ISR throughout
// (replica.lag.time.max.ms, 30 s). The ISR was etcd raft's RecentActive
// and StateReplicate: every drop on the full queue was reported as
// unreachable, and a rejected append after a dropped one put the
// follower into StateProbe too - each took it out of the ISR until it
// answered a probe.
func TestSlowFollowerStaysInSync(t *testing.T) {
	c := newCluster(t, 3, 1, withQueueLen(8))
	const g = 1
	c.propose(g, "first")
	lead, _ := c.waitLeader(g)
	h := c.nodes[lead].host
	waitFor(t, "every replica in sync", func() bool { return h.InSync(g) == 3 })
	slow := lead%3 + 1
	c.faults.Delay(lead, slow, 100*time.Millisecond)

	var (
		mu               sync.Mutex
		samples, reduced int
		wg               sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for w := range 8 {
		wg.Go(func() {
			for i := range 40 {
				p, err := h.Propose(ctx, g, batch(t, fmt.Sprintf("w%d-%d", w, i)))
				if err != nil {
					return // no longer the leader
				}
				if h.WaitCommitted(ctx, p) != nil {
					return
				}
				// Sampled at each acknowledgement: 0 is a node that no
				// longer leads (an election on a loaded machine).
				n := h.InSync(g)
				mu.Lock()
				if n > 0 {
					samples++
					if n < 3 {
						reduced++
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	st := h.TransportStats()
	full := int64(0)
	for _, n := range st.QueueFullBy {
		full += n
	}
	t.Logf("%d acknowledgements sampled, %d with a reduced ISR; %d messages dropped on the slow peer's full queue %v", samples, reduced, full, st.QueueFullBy)
	if full == 0 {
		t.Fatalf("the slow peer's queue never filled: the test shows nothing")
	}
	if samples == 0 {
		t.Fatalf("no acknowledgement sampled on the leader")
	}
	if reduced > 0 {
		t.Fatalf("the slow follower %d left the ISR at %d of %d acknowledgements", slow, reduced, samples)
	}
	c.faults.HealAll()
	c.waitConverged(g)
}
