package faulttest

// Share groups (KIP-932) under SIGKILL: two franz-go share consumers on a
// 3-partition RF=3 topic of three real node processes; the leader of
// partition 0 and then the group's coordinator are killed (kill -9) while
// records are acquired and acknowledged, and restarted. Every record is
// accepted in the end (none lost with its acknowledgement state), a
// rejected record is never handed out again as acceptable, and the ones
// released come back with a higher delivery count.

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/testwait"
)

type shareReader struct {
	cl     *kgo.Client
	mu     sync.Mutex
	accept map[int]int
	reject map[int]bool
	dc     map[int]int32
	cancel context.CancelFunc
	done   chan struct{}
}

// startShareReader accepts every record except values divisible by
// rejectEvery (rejected) and, on their first delivery, values divisible by
// releaseEvery (released).
func startShareReader(t *testing.T, c *Cluster, group, topic string, releaseEvery, rejectEvery int) *shareReader {
	t.Helper()
	r := &shareReader{accept: map[int]int{}, reject: map[int]bool{}, dc: map[int]int32{}, done: make(chan struct{})}
	r.cl = c.Client(kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(500*time.Millisecond),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryTimeout(120*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		for ctx.Err() == nil {
			fs := r.cl.PollFetches(ctx)
			for _, rec := range fs.Records() {
				v, _ := strconv.Atoi(string(rec.Value))
				r.mu.Lock()
				r.dc[v] = max(r.dc[v], rec.DeliveryCount())
				switch {
				case v%rejectEvery == 0:
					rec.Ack(kgo.AckReject)
					r.reject[v] = true
				case v%releaseEvery == 0 && rec.DeliveryCount() == 1:
					rec.Ack(kgo.AckRelease)
				default:
					rec.Ack(kgo.AckAccept)
					r.accept[v]++
				}
				r.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
		r.cl.Close()
	})
	return r
}

func TestClusterShareGroupKill(t *testing.T) {
	c := startCluster(t)
	const topic, group = "share-kill", "share-kill-app"
	const total, releaseEvery, rejectEvery = 1200, 10, 13
	createTopic(t, c, topic, 3, 3)
	waitReplicasInSync(t, c, topic, 30*time.Second)

	// Read from the beginning (the default is latest, as in Kafka).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for name, value := range map[string]string{"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "5000"} {
		cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		cfg.Name, cfg.Value = name, kmsg.StringPtr(value)
		res.Configs = append(res.Configs, cfg)
	}
	req.Resources = append(req.Resources, res)
	admCl := c.Client()
	defer admCl.Close()
	if resp, err := req.RequestWith(ctx, admCl); err != nil || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("group configs: %v %+v", err, resp)
	}

	produce := func(from, n int) {
		t.Helper()
		cl := clusterProducer(t, c, topic, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
		defer cl.Close()
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, &kgo.Record{Value: []byte(strconv.Itoa(i))})
		}
		pctx, pcancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer pcancel()
		if err := cl.ProduceSync(pctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	produce(0, total/2)
	a := startShareReader(t, c, group, topic, releaseEvery, rejectEvery)
	b := startShareReader(t, c, group, topic, releaseEvery, rejectEvery)

	accepted := func() (map[int]int, map[int]int32) {
		acc, dc := map[int]int{}, map[int]int32{}
		for _, r := range []*shareReader{a, b} {
			r.mu.Lock()
			for v, k := range r.accept {
				acc[v] += k
			}
			for v, d := range r.dc {
				dc[v] = max(dc[v], d)
			}
			r.mu.Unlock()
		}
		return acc, dc
	}
	waitAccepted := func(upTo, atLeast int, what string) {
		t.Helper()
		n := 0
		if !testwait.Poll(3*time.Minute, func() bool {
			acc, _ := accepted()
			n = 0
			for v := 0; v < upTo; v++ {
				if v%rejectEvery != 0 && acc[v] > 0 {
					n++
				}
			}
			return n >= atLeast
		}) {
			t.Fatalf("%s: %d of %d accepted", what, n, atLeast)
		}
	}
	acceptable := func(upTo int) int {
		n := 0
		for v := 0; v < upTo; v++ {
			if v%rejectEvery != 0 {
				n++
			}
		}
		return n
	}

	// Kill the leader of partition 0 with records in flight.
	waitAccepted(total/2, acceptable(total/2)/4, "before the first kill")
	leader := leaderOf(t, c, topic, 0)
	t.Logf("kill -9 node %d, the leader of %s/0", leader, topic)
	c.Kill(leader)
	produce(total/2, total/4)
	c.Restart(leader)

	// Then the coordinator of the group.
	waitAccepted(total/2, acceptable(total/2)*3/4, "before the second kill")
	// COORDINATOR_NOT_AVAILABLE while the restarted node's partitions
	// elect leaders is retriable: ask again.
	coord := -1
	var fc kadm.FindCoordinatorResponses
	if !testwait.Poll(60*time.Second, func() bool {
		fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
		fc = kadm.NewClient(admCl).FindGroupCoordinators(fctx, group)
		fcancel()
		for _, r := range fc {
			if r.Err == nil && c.Node(int(r.NodeID)).Running() {
				coord = int(r.NodeID)
			}
		}
		return coord >= 1
	}) {
		t.Fatalf("no coordinator for %s: %v", group, fc.Error())
	}
	t.Logf("kill -9 node %d, the coordinator of %s", coord, group)
	c.Kill(coord)
	produce(total*3/4, total/4)
	c.Restart(coord)

	waitAccepted(total, acceptable(total), "after the kills")
	acc, dc := accepted()
	again := 0
	for v := 0; v < total; v++ {
		switch {
		case v%rejectEvery == 0:
			if acc[v] > 0 {
				t.Errorf("value %d was rejected and later accepted", v)
			}
		case v%releaseEvery == 0 && dc[v] < 2:
			t.Errorf("value %d was released on its first delivery, its delivery count reached only %d", v, dc[v])
		case acc[v] > 1:
			again++ // an acceptance in flight when a node died, delivered again
		}
	}
	t.Logf("%d records, %d accepted more than once (acknowledgements in flight at a kill)", total, again)
}
