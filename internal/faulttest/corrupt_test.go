package faulttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/storage"
	"holdfast/internal/testwait"
)

// TestClusterCorruptReplicaHeals is issue 26's first fault on real
// processes: under idempotent acks=all load on a one-partition RF=3 topic
// with small segments, the preferred replica is stopped, 64 bytes flip
// inside a batch in the middle of its first (sealed) segment, and it
// starts again and is made leader by a preferred election (until it leads
// or has found the corruption). Stopped by SIGKILL, the replica finds the
// bad batch at open (recovery rebuilds the producer state from the log);
// stopped by SIGTERM (a clean shutdown, nothing rescanned), it opens
// fine, leads, and finds it when the cold range is read for a consumer or
// a follower, or by the scrubber. What must hold either way: an ERROR in
// its log, every acknowledged record read back once and intact (the
// checker), and the corrupt copy discarded and copied again from the good
// ones, so that every node's Metadata lists all three in sync.
//
// HOLDFAST_CORRUPT_UNCHECKED=1 runs the nodes with Kafka's behaviour
// (--log-verify-reads=false, no scrubber), to see the test fail.
func TestClusterCorruptReplicaHeals(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster fault tests are skipped in -short mode")
	}
	if ok, why := ClusterModeAvailable(t); !ok {
		t.Skip("cluster mode not available yet: " + why)
	}
	var args []string
	if os.Getenv("HOLDFAST_CORRUPT_UNCHECKED") != "" {
		args = []string{"--log-verify-reads=false", "--log-scrub-bytes-per-second=0"}
	}
	c := Start(t, Options{Nodes: 3, Cluster: true, Args: args})
	t.Run("kill9", func(t *testing.T) { corruptReplica(t, c, "corrupt-kill9", c.Kill) })
	t.Run("sigterm", func(t *testing.T) { corruptReplica(t, c, "corrupt-sigterm", c.Stop) })
}

func corruptReplica(t *testing.T, c *Cluster, topic string, stop func(int)) {
	adm := c.Admin()
	seg := "16384"
	testwait.For(t, 60*time.Second, "topic "+topic+" created", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := adm.CreateTopic(ctx, 1, 3, map[string]*string{"segment.bytes": &seg}, topic)
		if err == nil {
			err = resp.Err
		}
		return err
	})
	requireInSync(t, c, topic, 30*time.Second)
	ch := NewChecker(t, topic)
	ch.Size = 256 // batches large enough for the flip past their header
	p := ch.StartProducer(clusterProducer(t, c, topic), 2000)
	ch.WaitAcked(3000, 60*time.Second, "before the fault") // several 16 KiB segments

	md, err := adm.Metadata(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	pd, ok := md.Topics[topic].Partitions[0]
	if !ok || len(pd.Replicas) != 3 {
		t.Fatalf("%s/0: replicas %v", topic, pd.Replicas)
	}
	v := int(pd.Replicas[0]) // the preferred replica: an election can make it lead
	t.Logf("[%d acked] stopping node %d (preferred replica, leader %d)", ch.Acked(), v, pd.Leader)
	stop(v)
	path, at, err := storage.FlipSealedBatch(filepath.Join(c.Node(v).DataDir, topic+"-0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("64 bytes flipped in %s at byte %d; restarting node %d", path, at, v)
	c.Restart(v)
	found := func() bool { return logHas(c, v, topic, "storage: corrupt data") }

	// Make the corrupt replica lead, as an ordinary failover or a
	// preferred election after a rolling restart would.
	testwait.Until(t, 30*time.Second, fmt.Sprintf("node %d to lead %s/0 or find the corruption", v, topic), func() bool {
		if found() {
			t.Logf("node %d found the corruption before it led", v)
			return true
		}
		if l, err := leaderNow(adm, topic); err == nil && l == v {
			t.Logf("node %d leads %s/0 with the flipped batch", v, topic)
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _ = adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {0: {}}})
		return false
	})
	ch.WaitAcked(1000, 60*time.Second, "after the corrupt replica restarted")
	p.Stop(60 * time.Second)

	// The checker reads the cold range, from whichever replica leads.
	res, err := ch.Check(c.Bootstrap(), 60*time.Second)
	RequireOK(t, res, err)
	testwait.Until(t, 30*time.Second, fmt.Sprintf("node %d to report the flipped batch", v), found)
	// The corrupt copy is discarded and copied again from the good ones
	// (repair.go retries every 2 s), then all three are in sync again.
	testwait.Until(t, 30*time.Second, fmt.Sprintf("node %d to rebuild its corrupt replica", v), func() bool {
		return logHas(c, v, topic, "replica reopened empty: catching up before it votes")
	})
	requireInSync(t, c, topic, 30*time.Second)
}

// logHas reports whether node v logged a line with msg about topic
// (partition 0).
func logHas(c *Cluster, v int, topic, msg string) bool {
	for _, line := range strings.Split(c.Logs(v), "\n") {
		if strings.Contains(line, msg) && (strings.Contains(line, "topic="+topic+" ") || strings.Contains(line, "/"+topic+"-0")) {
			return true
		}
	}
	return false
}

// leaderNow is the leader of topic/0 as the cluster's metadata says now.
func leaderNow(adm *kadm.Client, topic string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return 0, err
	}
	pd, ok := md.Topics[topic].Partitions[0]
	if !ok {
		return 0, errors.New("no partition 0")
	}
	if pd.Err != nil {
		return 0, pd.Err
	}
	return int(pd.Leader), nil
}

// requireInSync fails the test unless, within timeout, every partition of
// topic has a leader and all of c's nodes in its ISR as every node's own
// Metadata answer says (one node's answer alone is not enough: a follower
// used to list every live replica whatever the leader saw).
func requireInSync(t testing.TB, c *Cluster, topic string, timeout time.Duration) {
	t.Helper()
	cl := c.Client()
	var last string
	if !testwait.Poll(timeout, func() bool {
		ok := true
		last = ""
		for _, n := range c.Nodes {
			views, err := partitionViews(cl, int32(n.ID), topic)
			if err != nil {
				ok = false
				last += fmt.Sprintf(" node %d: %v;", n.ID, err)
				continue
			}
			for p, v := range views {
				if v.err != nil || len(v.isr) < len(c.Nodes) || v.leader < 0 {
					ok = false
					last += fmt.Sprintf(" node %d: p%d leader=%d isr=%v err=%v;", n.ID, p, v.leader, v.isr, v.err)
				}
			}
		}
		return ok
	}) {
		t.Fatalf("replicas of %s not all in sync after %v:%s", topic, timeout, last)
	}
}

// partitionView is one partition as one node's Metadata describes it.
type partitionView struct {
	leader int32
	isr    []int32
	err    error
}

// partitionViews asks node id itself (not whichever node the client
// picks) for topic's metadata.
func partitionViews(cl *kgo.Client, id int32, topic string) (map[int32]partitionView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	kr, err := cl.Broker(int(id)).Request(ctx, req)
	if err != nil {
		return nil, err
	}
	resp := kr.(*kmsg.MetadataResponse)
	if len(resp.Topics) != 1 {
		return nil, fmt.Errorf("%d topics in the answer", len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return nil, err
	}
	out := map[int32]partitionView{}
	for _, p := range resp.Topics[0].Partitions {
		isr := slices.Clone(p.ISR)
		slices.Sort(isr)
		out[p.Partition] = partitionView{leader: p.Leader, isr: isr, err: kerr.ErrorForCode(p.ErrorCode)}
	}
	if len(out) == 0 {
		return nil, errors.New("no partitions in the answer")
	}
	return out, nil
}
