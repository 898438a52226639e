package cluster_test

import (
	"testing"
	"testing/synctest"
	"time"

	"holdfast/internal/cluster"
	"holdfast/internal/clustertest"
	"holdfast/internal/metadata"
)

// TestLivenessOnTheBubblesClock: the controller's liveness loop, in a
// synctest bubble: a registered broker that never heartbeats is fenced
// when its session (the default 9 s) ends on the bubble's clock - not a
// moment before - and a heartbeat unfences it. No real time passes.
func TestLivenessOnTheBubblesClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := clustertest.Start(t, clustertest.DefaultSessions)
		defer n.Stop()
		c := n.Cluster
		start := time.Now()
		if err := c.Propose(t.Context(), metadata.Command{Op: metadata.OpRegister, Broker: &metadata.BrokerInfo{ID: 2, Host: "127.0.0.2", Port: 9092}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(8 * time.Second) // bubble time: within the 9 s session
		synctest.Wait()
		if n.Meta.Fenced(2) {
			t.Fatalf("broker 2 fenced %v after its registration, within its session", time.Since(start))
		}
		for !n.Meta.Fenced(2) {
			time.Sleep(100 * time.Millisecond) // bubble time: the liveness loop's next rounds
		}
		if d := time.Since(start); d < cluster.DefaultSessionTimeout || d > cluster.DefaultSessionTimeout+4*time.Second {
			t.Fatalf("fenced after %v, want the 9 s session (plus a heartbeat interval)", d)
		}
		if fenced, err := c.Heartbeat(t.Context(), 2, false); err != nil || fenced || n.Meta.Fenced(2) {
			t.Fatalf("a heartbeat after the fence: %v %v", fenced, err)
		}
		if n.Meta.Fenced(1) {
			t.Fatal("the controller fenced itself")
		}
	})
}
