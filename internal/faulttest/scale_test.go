package faulttest

// The crash stories at the partition counts people run (issue 27): one
// node, and three nodes RF=3, each holding a thousand replicas that all
// take writes when the node is killed. What a thousand groups add to one
// partition's story: the shared journal holds entries of many groups at
// once, recovery replays them all before any group opens, and a restarted
// follower catches up a thousand groups together.

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

const scalePartitions = 1000

// scaleProducer spreads records over every partition in turn, so each
// crash finds writes in flight to all of them (the default sticky
// partitioner would fill one partition at a time).
func scaleProducer(t testing.TB, c *Cluster, topic string) *kgo.Client {
	return clusterProducer(t, c, topic, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
}

// TestSingleNodeKill9ThousandPartitions kills a single node three times
// with SIGKILL while a producer writes round-robin to 1,000 partitions:
// nothing acknowledged may be lost or doubled in any of them.
func TestSingleNodeKill9ThousandPartitions(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000-partition crash test skipped in -short mode")
	}
	c := Start(t, Options{Nodes: 1})
	const topic = "kill9-1000"
	createTopic(t, c, topic, scalePartitions, 1)
	ch := NewChecker(t, topic)
	p := ch.StartProducer(scaleProducer(t, c, topic), 4000)
	start := time.Now()
	for round := 1; round <= 3; round++ {
		// Two records per partition between crashes, so every partition
		// has taken writes since the last recovery.
		ch.WaitAcked(2*scalePartitions, 120*time.Second, "before kill")
		c.Kill(1)
		t.Logf("round %d: SIGKILL after %d acknowledgements (%v)", round, ch.Acked(), time.Since(start))
		c.Restart(1)
		t.Logf("restarted (%v)", time.Since(start))
	}
	ch.WaitAcked(2*scalePartitions, 120*time.Second, "after the last restart")
	p.Stop(60 * time.Second)
	res, err := ch.Check(c.Bootstrap(), 120*time.Second)
	RequireOK(t, res, err)
}

// TestClusterKill9ThousandPartitions kills two nodes of a three-node
// cluster in turn with SIGKILL while a producer writes round-robin to a
// 1,000-partition RF=3 topic; every node leads about a third of the
// partitions, so each kill moves ~333 leaderships at once and the
// restarted node catches up 1,000 groups and rejoins their ISRs before
// the next kill. Nothing acknowledged may be lost or doubled. (Two kills,
// not three: the third adds a minute and no new path.)
func TestClusterKill9ThousandPartitions(t *testing.T) {
	c := startCluster(t)
	const topic = "kill9-1000-rf3"
	createTopic(t, c, topic, scalePartitions, 3)
	waitReplicasInSync(t, c, topic, 120*time.Second)
	ch := NewChecker(t, topic)
	p := ch.StartProducer(scaleProducer(t, c, topic), 4000)
	start := time.Now()
	ch.WaitAcked(2*scalePartitions, 120*time.Second, "before the first kill")
	for n := 1; n <= 2; n++ {
		c.Kill(n)
		t.Logf("SIGKILL node %d after %d acknowledgements (%v)", n, ch.Acked(), time.Since(start))
		ch.WaitAcked(2*scalePartitions, 120*time.Second, "with a node down")
		c.Restart(n)
		t.Logf("restarted (%v)", time.Since(start))
		waitReplicasInSync(t, c, topic, 120*time.Second)
		t.Logf("in sync (%v)", time.Since(start))
		ch.WaitAcked(2*scalePartitions, 120*time.Second, "after the restart")
	}
	p.Stop(60 * time.Second)
	t.Logf("stopped (%v)", time.Since(start))
	res, err := ch.Check(c.Bootstrap(), 180*time.Second)
	RequireOK(t, res, err)
}
