package broker_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClusterCreateTopicBrokerDown: with one broker of three down and
// fenced (its session over), a topic of replication factor 3 is still
// created, and grows by CreatePartitions, as with Kafka's KRaft placer
// (fenced brokers take replicas, never the leader). franz-go's own suite
// (TestTxnEtl) failed against Holdfast with INVALID_REPLICATION_FACTOR
// when a node restarted during it. Its partitions are led by the live
// brokers, take acks=all writes, and the fenced broker joins every ISR
// once it is back.
func TestClusterCreateTopicBrokerDown(t *testing.T) {
	nodes := startCluster(t, 3, fastLiveness)
	all := []int32{1, 2, 3}
	const topic = "onedown"
	ctrl := controllerNode(t, nodes)
	var victim = without(nodes, ctrl)[0]
	id := victim.Cfg.NodeID
	live := without(nodes, victim)
	victim.Stop()
	awaitBrokers(t, live, slices.DeleteFunc(slices.Clone(all), func(x int32) bool { return x == id }))

	adm := kadmClient(t, addrs(live))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if resp, err := adm.ValidateCreateTopics(ctx, 4, 3, nil, topic); err != nil || resp.Error() != nil {
		t.Fatalf("validate-only create, RF 3, broker %d fenced: %v %v", id, err, resp.Error())
	}
	if resp, err := adm.CreateTopics(ctx, 4, 3, nil, topic); err != nil || resp.Error() != nil {
		t.Fatalf("create, RF 3, broker %d fenced: %v %v", id, err, resp.Error())
	}
	if resp, err := adm.CreatePartitions(ctx, 2, topic); err != nil || resp.Error() != nil {
		t.Fatalf("create partitions, broker %d fenced: %v %v", id, err, resp.Error())
	}
	if resp, err := adm.CreateTopics(ctx, 1, 4, nil, topic+"-rf4"); err == nil && resp.Error() == nil {
		t.Fatalf("create RF 4 on 3 registered brokers succeeded")
	}

	// Every partition: 3 replicas, the fenced one among them, led by a
	// live broker.
	partitions := func(on []int32, wantISR int) func() error {
		return func() error {
			for _, n := range nodes {
				if !slices.Contains(on, n.Cfg.NodeID) {
					continue
				}
				md, err := metadata(n, []string{topic})
				if err != nil {
					return err
				}
				if len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 6 {
					return fmt.Errorf("node %d: %d topics", n.Cfg.NodeID, len(md.Topics))
				}
				for _, p := range md.Topics[0].Partitions {
					if len(p.Replicas) != 3 || !slices.Contains(p.Replicas, id) || p.Leader <= 0 || (wantISR < 3 && p.Leader == id) || len(p.ISR) != wantISR {
						return fmt.Errorf("node %d partition %d: replicas %v leader %d isr %v", n.Cfg.NodeID, p.Partition, p.Replicas, p.Leader, p.ISR)
					}
				}
			}
			return nil
		}
	}
	liveIDs := []int32{live[0].Cfg.NodeID, live[1].Cfg.NodeID}
	awaitCluster(t, "partitions led by live brokers, the fenced one a replica", partitions(liveIDs, 2))

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs(live)...), kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const records = 120
	for i := range records {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}

	victim.Restart()
	awaitBrokers(t, nodes, all)
	awaitCluster(t, "the restarted broker in every ISR", partitions(all, 3))

	// Every record, once, read through the restarted broker too.
	cons, err := kgo.NewClient(kgo.SeedBrokers(victim.Addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]int{}
	for n := 0; n < records; {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("%d of %d records read: %v", n, records, err)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++; n++ })
	}
	for i := range records {
		if seen[strconv.Itoa(i)] != 1 {
			t.Errorf("record %d read %d times", i, seen[strconv.Itoa(i)])
		}
	}
}
