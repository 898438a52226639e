package lab

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/storage"
)

// waitKnows waits until the node at addr lists topic with a leader.
func waitKnows(ctx context.Context, t *testing.T, addr, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = &topic
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0 && len(resp.Topics[0].Partitions) > 0 && resp.Topics[0].Partitions[0].Leader > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never listed %s: %v", addr, topic, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// produceN produces n records "v0".."v<n-1>" with acks=all and returns
// once every one is acknowledged.
func produceN(ctx context.Context, t *testing.T, c *cluster, topic string, n int) {
	t.Helper()
	cl, err := producer(c, topic, "all", true)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range n {
		cl.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var bad error
	cl.Produce(ctx, &kgo.Record{Value: []byte("last")}, func(_ *kgo.Record, err error) { bad = err })
	if err := cl.Flush(ctx); err != nil || bad != nil {
		t.Fatalf("produce: %v %v", err, bad)
	}
}

// consumeAll reads topic from the start until it has want distinct
// values (or ctx ends) and returns them.
func consumeAll(ctx context.Context, t *testing.T, c *cluster, topic string, want int) map[string]int {
	t.Helper()
	cl, err := c.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]int{}
	for len(seen) < want && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	}
	return seen
}

// TestLabClusterPowerLoss: the lab's in-process cluster on CrashFS with
// fsync before every acknowledgement keeps every acknowledged record
// through a power loss of all nodes at once - the property the lab's
// Holdfast rows rely on, and what its power-loss fault must not break.
func TestLabClusterPowerLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := startCluster(ctx, t.TempDir(), quietLog(), clusterOptions{nodes: 3, crashFS: true, flush: storage.FlushPolicy{Mode: storage.FlushSync}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if err := c.createTopic(ctx, "p", 2, nil); err != nil {
		t.Fatal(err)
	}
	const n = 300
	produceN(ctx, t, c, "p", n)
	if err := c.powerLoss(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.waitLeaders(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	seen := consumeAll(ctx, t, c, "p", n+1)
	for i := range n {
		if seen[fmt.Sprintf("v%d", i)] == 0 {
			t.Fatalf("v%d lost in the power loss (%d of %d read)", i, len(seen), n+1)
		}
	}
	// Power loss needs CrashFS: a cluster on the OS filesystem refuses.
	c2 := &cluster{nodes: []*node{{id: 1}}}
	if err := c2.powerLoss(ctx); err == nil {
		t.Fatal("power loss on the OS filesystem")
	}
}

// TestLabClusterIsolateAndWipe: isolating a partition's leader moves the
// leadership (leader(except) waits for it); a node whose disk is
// replaced comes back empty and catches up from the others.
func TestLabClusterIsolateAndWipe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := startCluster(ctx, t.TempDir(), quietLog(), clusterOptions{nodes: 3, flush: storage.FlushPolicy{Mode: storage.FlushSync}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if err := c.createTopic(ctx, "w", 1, nil); err != nil {
		t.Fatal(err)
	}
	produceN(ctx, t, c, "w", 50)
	old, err := c.leader(ctx, "w", 0)
	if err != nil {
		t.Fatal(err)
	}
	c.isolate(old)
	next, err := c.leader(ctx, "w", 0, old)
	if err != nil || next == old {
		t.Fatalf("leader after isolating %d: %d %v", old, next, err)
	}
	c.heal()
	if err := c.waitInSync(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if ctrl, err := c.controller(ctx); err != nil || ctrl < 1 || ctrl > 3 {
		t.Fatalf("controller %d %v", ctrl, err)
	}
	// Replace a follower's disk (keeping its identity file off: a new
	// directory), start it again, and read everything from it alone.
	now, err := c.leader(ctx, "w", 0)
	if err != nil {
		t.Fatal(err)
	}
	victim := now%3 + 1
	if err := c.wipe(victim, false); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(c.seeds(), c.node(victim).addr) {
		t.Fatal("a stopped node among the seeds")
	}
	if err := c.startAll(ctx, []*node{c.node(victim)}); err != nil {
		t.Fatal(err)
	}
	if err := c.waitInSync(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if len(c.seeds()) != 3 {
		t.Fatalf("seeds %v", c.seeds())
	}
	// The new disk's node answers Metadata without the topic until it
	// has replayed the metadata log; a client that asks it then drops
	// its records (UNKNOWN_TOPIC_OR_PARTITION after kgo's retries): wait
	// until it knows the topic itself.
	waitKnows(ctx, t, c.node(victim).addr, "w")
	produceN(ctx, t, c, "w", 10)
	seen := consumeAll(ctx, t, c, "w", 51)
	if len(seen) != 51 {
		t.Fatalf("read %d distinct values, want 51", len(seen))
	}
}

// TestEnvClusters: a scenario's clusters get directories of their own
// under the scenario's, and closeAll stops every one (their ports free
// for the next scenario).
func TestEnvClusters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := &env{dir: t.TempDir(), log: quietLog(), scenario: "s"}
	c1, err := e.cluster(ctx, clusterOptions{nodes: 1, flush: storage.FlushPolicy{Mode: storage.FlushSync}})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := e.cluster(ctx, clusterOptions{nodes: 1, flush: storage.FlushPolicy{Mode: storage.FlushSync}})
	if err != nil {
		t.Fatal(err)
	}
	if c1.dir == c2.dir || !c1.node(1).running() || !c2.node(1).running() || len(e.clusters) != 2 {
		t.Fatalf("clusters %q and %q, running %v %v", c1.dir, c2.dir, c1.node(1).running(), c2.node(1).running())
	}
	e.closeAll()
	if c1.node(1).running() || c2.node(1).running() || len(e.clusters) != 0 || c1.node(1).broker() != nil {
		t.Fatal("closeAll left a node running")
	}
	if conn, err := net.DialTimeout("tcp", c1.node(1).addr, time.Second); err == nil {
		conn.Close()
		t.Fatal("a stopped node still accepts connections")
	}
}
