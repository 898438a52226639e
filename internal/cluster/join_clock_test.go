package cluster_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"holdfast/internal/clock"
	"holdfast/internal/cluster"
	"holdfast/internal/freeport"
	"holdfast/internal/testwait"
)

// TestJoinDeadlineOnTheClock: a new node whose peers never answer gives
// up forming a cluster after JoinTimeout of the node's clock, and not
// before. An hour passes on a fake clock, a minute a step; on the wall
// clock (before the join wait took the node's clock) the test timed out.
func TestJoinDeadlineOnTheClock(t *testing.T) {
	peers := map[int32]string{}
	for id := int32(1); id <= 3; id++ {
		addr, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		peers[id] = addr // nodes 2 and 3 never start
	}
	start := time.Unix(1_000_000, 0)
	clk := clock.NewFake(start)
	type result struct {
		n   *cluster.Node
		err error
	}
	done := make(chan result, 1)
	dir := t.TempDir()
	go func() {
		n, err := cluster.Open(cluster.Config{NodeID: 1, DataDir: dir, Peers: peers, JoinTimeout: time.Hour,
			Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		done <- result{n, err}
	}()
	var r result
	for got := false; !got; {
		// Step the clock only while the join loop waits on it (its one
		// timer): each step is then one round of the loop.
		testwait.Until(t, 30*time.Second, "the join loop waiting on the clock, or Open returned", func() bool {
			select {
			case r = <-done:
				got = true
				return true
			default:
				return clk.Waiters() > 0
			}
		})
		if !got {
			clk.Advance(time.Minute)
		}
	}
	if r.err == nil {
		r.n.Close()
		t.Fatal("a cluster formed with two of three voters absent")
	}
	if !strings.Contains(r.err.Error(), "no cluster to form or join within 1h0m0s") {
		t.Fatalf("err %v", r.err)
	}
	if moved := clk.Now().Sub(start); moved < time.Hour {
		t.Fatalf("gave up after %v of the node's clock, before its JoinTimeout", moved)
	}
}
