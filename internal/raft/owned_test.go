package raft

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"holdfast/internal/bufref"
	"holdfast/internal/records"
)

// TestOwnedProposalBuffersOutliveRaft: a batch proposed with ProposeOwned
// lies in a counted buffer (a produce frame) that goes back to its pool
// when the last holder lets go. Here the pool's put poisons the buffer at
// once, and checks that the leader's store no longer holds an entry in
// it: a buffer given back while the store's recent entries (which serve
// Raft's apply and its later messages) or a MsgApp to the slow follower
// (the link is delayed) still read it shows up as an error or as a log
// that differs between the nodes.
func TestOwnedProposalBuffersOutliveRaft(t *testing.T) {
	c := newCluster(t, 3, 1)
	const g = 1
	c.propose(g, "first")
	lead, _ := c.waitLeader(g)
	slow := lead%3 + 1
	c.faults.Delay(lead, slow, 30*time.Millisecond)
	st := c.nodes[lead].host.group(g).st
	var (
		mu      sync.Mutex
		bad     []string
		putBack atomic.Int64
	)
	put := func(buf []byte) {
		st.mu.RLock()
		for _, e := range st.recent {
			if len(e.Data) > 0 && &buf[:1][0] == &e.Data[0] {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("buffer of entry %d given back while the store's recent entries hold it", e.GetIndex()))
				mu.Unlock()
			}
		}
		st.mu.RUnlock()
		clear(buf[:cap(buf)])
		putBack.Add(1)
	}
	const n = 200
	h := c.nodes[lead].host
	var want []string
	for i := range n {
		value := fmt.Sprintf("v%03d-%s", i, bytes.Repeat([]byte{'x'}, 4000))
		b := batch(t, value)
		buf := make([]byte, len(b), 8<<10)
		copy(buf, b)
		v, err := records.Check(buf, 0)
		if err != nil {
			t.Fatal(err)
		}
		ref := bufref.New(buf, put)
		p, err := h.ProposeOwned(context.Background(), g, &v, ref)
		if err != nil {
			t.Fatalf("propose %d: %v", i, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = h.WaitCommitted(ctx, p)
		cancel()
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		ref.Release() // the proposer's own, as a produce handler's after its reply
		want = append(want, value)
	}
	c.faults.HealAll()
	c.waitConverged(g)
	nodes := c.running()
	c.checkSameBytes(g, nodes)
	got := values(t, nodes[0].logs[g])
	if len(got) != n+1 || got[0] != "first" {
		t.Fatalf("log holds %d values, want %d", len(got), n+1)
	}
	for i, v := range want {
		if got[i+1] != v {
			t.Fatalf("value %d differs", i)
		}
	}
	for _, nd := range nodes {
		if f := nd.host.Failures(); f != 0 {
			t.Errorf("node %d: %d Raft group failures", nd.id, f)
		}
	}
	mu.Lock()
	for _, b := range bad {
		t.Error(b)
	}
	mu.Unlock()
	// Most buffers must have come back, or this tests nothing (the last
	// ones stay until the group's next Ready or idle tick).
	waitFor(t, "buffers given back", func() bool { return putBack.Load() >= n-5 })
}
