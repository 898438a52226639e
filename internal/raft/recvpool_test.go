package raft

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"holdfast/internal/records"
	"holdfast/internal/testwait"
)

// Every test of this package runs with poisoned receive buffers: a buffer
// given back while something still reads it shows up as a batch that
// fails its CRC, a log that differs between nodes, or a failed group.
func init() { SetPoisonBuffers(true) }

// TestReceivedBuffersOutliveRaft: a follower reads each MsgApp into a
// pooled buffer that its entries point into, and the buffer goes back to
// the pool (poisoned here) only when the last holder let go: Raft's
// unstable log and the log write, the store's recent entries, the apply
// (OnCommit), and - once the follower leads - its own MsgApps to a
// lagging peer, built from those entries. The test reads every holder's
// bytes after later messages arrived: the followers' recent entries while
// proposals go on, each committed batch in OnCommit, the logs at the end;
// then it makes the follower that holds everything the leader while the
// third node, cut off meanwhile, still lacks most of it, so that the new
// leader's messages to it come from received buffers, over a slow link.
func TestReceivedBuffersOutliveRaft(t *testing.T) {
	var (
		mu  sync.Mutex
		bad []string
	)
	report := func(format string, args ...any) {
		mu.Lock()
		if len(bad) < 20 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}
	// 100 ms ticks (a 1 s election timeout): the roles this test sets up
	// must not change under a loaded machine's pauses (with 20 ms ticks
	// the cut-off leader lost its leadership mid-test at load 20).
	c := newClusterOpts(t, 3, 1, 100*time.Millisecond, false, func(c *cluster) {
		c.onCommit = func(node, g uint64, ents []Committed) {
			for _, e := range ents {
				if e.Data == nil {
					continue
				}
				if _, err := records.Validate(e.Data, 0); err != nil {
					report("node %d: committed entry %d: %v", node, e.Index, err)
				}
			}
		}
	})
	const g = 1
	c.propose(g, "first")
	lead, _ := c.waitLeader(g)
	mid, lag := lead%3+1, (lead+1)%3+1
	// The lagging node misses most of what follows; the other follower's
	// link is slow, so that its MsgApps queue up behind one another.
	c.faults.Cut(lead, lag)
	c.faults.Delay(lead, mid, 20*time.Millisecond)
	recycled := RecvBuffersRecycled()
	checkRecent := func(id uint64) {
		st := c.nodes[id].host.group(g).st
		st.mu.RLock()
		defer st.mu.RUnlock()
		for _, e := range st.recent {
			if isDataEntry(e) {
				if _, err := records.Validate(e.Data, 0); err != nil {
					report("node %d: recent entry %d: %v", id, e.GetIndex(), err)
				}
			}
		}
	}
	const n = 200
	var want []string
	for i := range n {
		// About 6 KiB a message: the pool's 8 KiB class.
		value := fmt.Sprintf("v%03d-%s", i, strings.Repeat("x", 6000))
		proposeOn(t, c.nodes[lead].host, g, value)
		want = append(want, value)
		checkRecent(mid)
	}
	if r := RecvBuffersRecycled() - recycled; r < n/4 {
		t.Errorf("%d received buffers went back to the pool for %d proposals: the test needs them reused", r, n)
	}
	// The middle follower leads; the lagging one catches up from it, its
	// link slow, while the new leader's commits let go of what it
	// received.
	c.stop(lead)
	c.faults.HealAll()
	c.faults.Delay(mid, lag, 20*time.Millisecond)
	newLead, _ := c.waitLeader(g, mid, lag)
	if newLead != mid {
		t.Fatalf("node %d leads, want %d (the one holding every entry)", newLead, mid)
	}
	for i := range 20 {
		value := fmt.Sprintf("after-%02d-%s", i, strings.Repeat("x", 6000))
		proposeOn(t, c.nodes[mid].host, g, value)
		want = append(want, value)
		checkRecent(lag)
	}
	c.faults.HealAll()
	c.start(lead)
	c.waitConverged(g)
	nodes := c.running()
	for _, nd := range nodes {
		got := values(t, nd.logs[g])
		if len(got) != len(want)+1 {
			t.Fatalf("node %d's log holds %d values, want %d", nd.id, len(got), len(want)+1)
		}
		for i, v := range want {
			if got[i+1] != v {
				t.Fatalf("node %d: value %d differs", nd.id, i)
			}
		}
		if f := nd.host.Failures(); f != 0 {
			t.Errorf("node %d: %d Raft group failures", nd.id, f)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
}

// proposeOn proposes value on h and waits for its commit (a failure names
// the value's first bytes only).
func proposeOn(t *testing.T, h *Host, g uint64, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := h.Propose(ctx, g, batch(t, value))
	// A node just elected refuses proposals until its first Ready of the
	// term (readyTerm): nothing was proposed, so asking again is safe.
	testwait.PollContext(ctx, 10*time.Second, func() bool {
		var nl *NotLeaderError
		if !errors.As(err, &nl) || nl.Leader != h.ID() {
			return true
		}
		p, err = h.Propose(ctx, g, batch(t, value))
		return false
	})
	if err == nil {
		err = h.WaitCommitted(ctx, p)
	}
	if err != nil {
		t.Fatalf("proposal %.8q on node %d: %v", value, h.ID(), err)
	}
}
