package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"holdfast/internal/storage"
	"holdfast/internal/verify"
)

// bitFlip: one partition, three replicas. The preferred replica stops, 64
// bytes flip inside a batch in the middle of its first (sealed) segment —
// a bad sector, a firmware bug, bit rot — and it starts again and leads
// (a preferred election, as after any rolling restart). The other two
// copies are good. Kafka sends the bytes as they are: every client's CRC
// check refuses the batch, and the consumer asks for the same offset again
// forever; the records from there on cannot be read while that replica
// leads (counted as lost after 10 s without progress). Holdfast checks
// cold bytes before it sends them: the leader finds the bad batch, steps
// down, a good replica leads, and the corrupt one is copied again.
func bitFlip(ctx context.Context, e *env) []Row {
	rows := []Row{
		{Setting: "reads unchecked (Kafka)", Expect: ExpectLoss,
			Takeaway: "a replica serving corrupt bytes keeps leading: the client refuses the batch and everything after it is unreadable, though two good copies exist"},
		{Setting: "CRC checked on read, scrubber", Default: true, Expect: ExpectNothing,
			Takeaway: "the leader checks cold bytes before it sends them: it steps down, a good copy serves, and the bad one is rebuilt from the others"},
	}
	for i, unchecked := range []bool{true, false} {
		rows[i] = e.timed(rows[i], func(r *Row) error {
			c, err := e.cluster(ctx, clusterOptions{noReadChecks: unchecked})
			if err != nil {
				return err
			}
			const topic = "bit-flip"
			seg := strconv.Itoa(max(4096, min(e.n*10, 8<<20))) // a few sealed segments
			if err := c.createTopic(ctx, topic, 1, map[string]*string{"segment.bytes": &seg}); err != nil {
				return err
			}
			cl, err := producer(c, topic, "all", true)
			if err != nil {
				return err
			}
			run := verify.NewRun(topic)
			p := run.StartProducer(cl, verify.ProducerConfig{Rate: e.n, Records: int64(e.n)})
			r.follow(run)
			p.Stop(60 * time.Second)
			r.mark("producer done", false)
			if err := c.waitInSync(ctx, topic); err != nil {
				return err
			}
			adm, err := c.client()
			if err != nil {
				return err
			}
			defer adm.Close()
			md, err := kadm.NewClient(adm).Metadata(ctx, topic)
			if err != nil {
				return err
			}
			pd, ok := md.Topics[topic].Partitions[0]
			if !ok || len(pd.Replicas) == 0 {
				return fmt.Errorf("no replicas of %s/0 in the metadata", topic)
			}
			v := pd.Replicas[0] // the preferred replica
			r.Fault = "no fault"
			if e.cfg.noFault {
				return r.check(ctx, c, run, verify.CheckOptions{StallTimeout: 10 * time.Second})
			}
			// Kafka's row shows the loss only while the corrupt copy serves
			// the bad batch. In about 1 full lab run in 15 it did not bite
			// (nothing lost, under the unchecked setting too); why is not
			// settled - a suspect is the copy being found and rebuilt before
			// it served (Holdfast also checks some bytes at open). The flip
			// is then injected again, at most three times in all, and the
			// row says so: the lab shows a fault that happened, not a
			// setting that lost nothing by luck.
			for attempt := 1; ; attempt++ {
				c.node(v).stop()
				path, _, err := storage.FlipSealedBatch(filepath.Join(c.node(v).cfg.DataDir, topic+"-0"))
				if err != nil {
					return err
				}
				r.mark(fmt.Sprintf("node %d stopped, 64 bytes flipped in %s", v, path), true)
				if err := c.node(v).start(ctx); err != nil {
					return err
				}
				if err := electPreferred(ctx, c, topic, v); err != nil {
					return err
				}
				r.mark(fmt.Sprintf("node %d restarted and leads", v), true)
				r.Fault = fmt.Sprintf("64 bytes flipped in a sealed segment of node %d, which then led", v)
				if attempt > 1 {
					r.Fault += fmt.Sprintf(" (flipped %d times: the earlier flips did not bite)", attempt)
				}
				r.Injected = true
				if err := r.check(ctx, c, run, verify.CheckOptions{StallTimeout: 10 * time.Second}); err != nil {
					return err
				}
				if !unchecked || r.Lost > 0 || attempt == 3 {
					return nil
				}
				var found int64
				if b := c.node(v).broker(); b != nil {
					found = b.ReplicationStats().Corruptions
				}
				r.mark(fmt.Sprintf("the flip did not bite (node %d found %d corruptions); flipping again", v, found), true)
				if err := c.waitInSync(ctx, topic); err != nil {
					return err
				}
			}
		})
		e.closeAll()
	}
	return rows
}

// electPreferred makes node v lead topic/0 (a preferred election, retried
// until it has caught up), or finds that it cannot: with read checks the
// corrupt replica may have found its corruption first.
func electPreferred(ctx context.Context, c *cluster, topic string, v int32) error {
	acl, err := c.client()
	if err != nil {
		return err
	}
	defer acl.Close()
	adm := kadm.NewClient(acl)
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Every node must name it: one node's Metadata may come from a
		// leader cut off from the others that has not heard of the next.
		if l, err := c.leaderViews(ctx, topic, 0); err == nil && l == v {
			return nil
		}
		if b := c.node(v).broker(); b != nil && b.ReplicationStats().Corruptions > 0 {
			return nil // found before it led: the fault still bit
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %d never led %s/0 after the flip", v, topic)
		}
		ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, _ = adm.ElectLeaders(ectx, kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {0: {}}})
		cancel()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
