package faulttest

// A node's identity lives in its data directory; a replaced disk never
// votes in a group it belonged to before it has caught up.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClusterReplacedDiskWhileUpToDateDown: RF=3, one partition. A
// follower is cut off and falls behind while the other two commit; then
// the leader and the up-to-date follower die, the up-to-date follower comes
// back with an empty data directory, and the cut-off follower reconnects.
// The lagging node and the new directory are two of three voters, but the
// new directory has lost what its node acknowledged: they must not elect a
// leader (which would roll the partition back), and nothing may be
// acknowledged. When the up-to-date node returns, the partition is
// available again and every acknowledged record is there.
func TestClusterReplacedDiskWhileUpToDateDown(t *testing.T) {
	c := startCluster(t)
	c.needNet("TestClusterReplacedDiskWhileUpToDateDown")
	const topic = "replaced"
	createTopic(t, c, topic, 1, 3)
	waitReplicasInSync(t, c, topic, 30*time.Second)
	ch := NewChecker(t, topic)
	p := ch.StartProducer(clusterProducer(t, c, topic), 2000)
	ch.WaitAcked(1000, 60*time.Second, "before the fault")

	l := leaderOf(t, c, topic, 0)
	lag, wiped := 1+l%3, 1+(l+1)%3
	t.Logf("[%d acked] leader %d; cutting off node %d", ch.Acked(), l, lag)
	c.Isolate(lag)
	ch.WaitAcked(2000, 60*time.Second, "with one follower cut off")
	t.Logf("[%d acked] SIGKILL leader %d and the up-to-date follower %d", ch.Acked(), l, wiped)
	c.Kill(l)
	c.Kill(wiped)
	p.Pause()
	c.WipeAndStart(wiped)
	c.Heal(lag)
	t.Logf("node %d restarted on an empty data directory; node %d reconnected", wiped, lag)

	// Nothing may be acknowledged by the lagging node and the new directory.
	probe := producerClient(t, c, topic, kgo.SeedBrokers(c.Node(lag).Addr, c.Node(wiped).Addr),
		kgo.RecordDeliveryTimeout(2*time.Second), kgo.ProduceRequestTimeout(time.Second), kgo.MetadataMinAge(100*time.Millisecond))
	defer probe.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		r, err := probe.ProduceSync(ctx, kgo.StringRecord("must-not-be-acknowledged")).First()
		cancel()
		if err == nil {
			t.Fatalf("a record was acknowledged at offset %d with only the lagging replica and a new data directory up", r.Offset)
		}
	}
	if logs := c.Logs(wiped); !strings.Contains(logs, "joined the cluster with a new data directory") {
		t.Fatalf("node %d did not report joining with a new data directory:\n%s", wiped, c.Node(wiped).logs.tail(4000))
	}

	t.Logf("restarting the up-to-date node %d", l)
	c.Restart(l)
	c.WaitReady(wiped)
	p2 := ch.StartProducer(clusterProducer(t, c, topic), 2000)
	ch.WaitAcked(1000, 90*time.Second, "after the up-to-date node returned")
	p.Stop(30 * time.Second)
	p2.Stop(30 * time.Second)
	waitReplicasInSync(t, c, topic, 60*time.Second)
	res, err := ch.Check(c.Bootstrap(), 120*time.Second)
	RequireOK(t, res, err)
	for _, n := range c.Nodes {
		if logs := c.Logs(n.ID); strings.Contains(logs, "panic") {
			t.Errorf("node %d logged a panic:\n%s", n.ID, n.logs.tail(4000))
		}
	}
}
