package lab

// Broker-side scenarios: a power loss on every node with acknowledged
// records in the page cache; a replaced disk while another replica is
// behind.

import (
	"context"
	"fmt"
	"time"

	"holdfast/internal/storage"
	"holdfast/internal/verify"
)

// powerLoss: records are acknowledged by a 3-node cluster (acks=all:
// a majority has them), then every node loses power at once, as a rack or
// a data centre does. The nodes run on storage.CrashFS, which keeps
// exactly what was fsynced and nothing else, then restart. With flush=os
// (Kafka's default: the page cache, no fsync) the acknowledgement meant
// "in the memory of a majority", and the memory is gone. With flush=sync
// every replica fsyncs before it counts toward the majority.
//
// Why CrashFS and not real processes: killing a process does not empty the
// page cache (the kernel keeps the dirty pages and writes them later), so
// kill -9, even of every node, loses nothing and would prove nothing.
// Dropping the page cache of a real disk takes a real power cut or a
// device-mapper target, neither of which a test machine has. CrashFS is the
// storage layer's own seam for it, strict: a real machine might still have
// written back some dirty pages before dying (Linux does after about 30
// s), so the flush=os figure is the loss of a power cut within that window.
func powerLoss(ctx context.Context, e *env) []Row {
	rows := []Row{
		{Setting: "flush=os (page cache)", Expect: ExpectLoss,
			Takeaway: "without fsync an acknowledgement means 'in the memory of a majority': a power loss on every node at once loses it, replicas or not"},
		{Setting: "flush=sync", Default: true, Expect: ExpectNothing,
			Takeaway: "with fsync before the acknowledgement (group commit) a correlated power loss loses nothing acknowledged"},
	}
	for i, mode := range []storage.FlushMode{storage.FlushOS, storage.FlushSync} {
		rows[i] = e.timed(rows[i], func(r *Row) error {
			c, err := e.cluster(ctx, clusterOptions{crashFS: true, flush: storage.FlushPolicy{Mode: mode}})
			if err != nil {
				return err
			}
			topic := "power-loss"
			if err := c.createTopic(ctx, topic, 3, nil); err != nil {
				return err
			}
			cl, err := producer(c, topic, "all", true)
			if err != nil {
				return err
			}
			run := verify.NewRun(topic)
			p := run.StartProducer(cl, verify.ProducerConfig{Records: int64(e.n)})
			r.follow(run)
			p.Stop(60 * time.Second)
			r.mark("producer done", false)
			if run.Acked() == 0 {
				return fmt.Errorf("nothing acknowledged before the power loss: %v", run.Failures())
			}
			if !e.cfg.noFault {
				r.mark("power lost on all 3 nodes at once", true)
				if err := c.powerLoss(ctx); err != nil {
					return err
				}
				r.mark("all 3 nodes restarted", false)
				r.Injected = true
			}
			r.Fault = fmt.Sprintf("power lost on all 3 nodes at once after %d acknowledgements (CrashFS: only fsynced data survives)", run.Acked())
			if err := c.waitLeaders(ctx, topic); err != nil {
				return err
			}
			return r.check(ctx, c, run, verify.CheckOptions{})
		})
		e.closeAll()
	}
	return rows
}

// replacedDisk: one partition, three replicas. A follower is cut off and
// falls behind while the leader and the other follower commit more; then
// the leader and the up-to-date follower die, the up-to-date follower
// comes back on a new, empty disk, and the cut-off follower reconnects.
// The lagging node and the empty one are two of three voters. If the empty
// one does not know its disk is new, it votes as if it had never voted and
// holds nothing, and the two elect the lagging node: what only the lost
// disk and the dead leader had is gone, and the old leader drops it when it
// returns. Holdfast keeps a directory id in meta.properties: a new disk
// gets a new id, and the node does not vote (nor count toward a commit)
// until it has caught up, so the partition waits for the leader instead.
//
// Holdfast's Raft has a second line of defence: a leader that remembers
// what a replica acknowledged notices when the replica comes back without
// it. The lab takes the worst case, in which no node that stays up led the
// replaced disk's groups (the cut-off node is neither the partition's
// leader nor the controller), so the directory id is all there is.
//
// The Kafka-settings row gives the new disk the old disk's meta.properties
// (a restored or copied config), which is how a node whose identity is
// only its configured node.id looks: Kafka brokers before KIP-853/KIP-966.
func replacedDisk(ctx context.Context, e *env) []Row {
	rows := []Row{
		{Setting: "identity = node.id only", Expect: ExpectLoss,
			Takeaway: "a replica that lost its disk but still votes lets a lagging replica become leader: acknowledged records vanish"},
		{Setting: "new disk, new directory.id", Default: true, Expect: ExpectNothing,
			Takeaway: "a new disk is known as new and does not vote until caught up: the partition waits for the replica that has the data"},
	}
	for i, keep := range []bool{true, false} {
		rows[i] = e.timed(rows[i], func(r *Row) error {
			c, err := e.cluster(ctx, clusterOptions{})
			if err != nil {
				return err
			}
			const topic = "replaced-disk"
			if err := c.createTopic(ctx, topic, 1, nil); err != nil {
				return err
			}
			cl, err := producer(c, topic, "all", true)
			if err != nil {
				return err
			}
			run := verify.NewRun(topic)
			p := run.StartProducer(cl, verify.ProducerConfig{Rate: e.n, Records: int64(e.n / 2)})
			r.follow(run)
			p.Stop(60 * time.Second)
			l, err := c.leader(ctx, topic, 0)
			if err != nil {
				return err
			}
			// The worst case: no node that stays up leads a group in
			// which the replaced disk had acknowledged entries (a leader
			// that remembers what a replica acknowledged notices that it
			// lost its log, whatever the disk says). So the cut-off node
			// is neither the partition's leader nor the controller.
			ctl, err := c.controller(ctx)
			if err != nil {
				return err
			}
			var lag, wiped int32
			for id := int32(1); id <= 3; id++ {
				if id != l && id != ctl {
					lag = id
				}
			}
			for id := int32(1); id <= 3; id++ {
				if id != l && id != lag {
					wiped = id
				}
			}
			if !e.cfg.noFault {
				c.isolate(lag)
				r.mark(fmt.Sprintf("node %d cut off", lag), true)
			}
			// The second half, acknowledged by the leader and the
			// up-to-date follower only.
			cl, err = producer(c, topic, "all", true)
			if err != nil {
				return err
			}
			before := run.Acked()
			p = run.StartProducer(cl, verify.ProducerConfig{Rate: e.n, Records: int64(e.n - e.n/2)})
			p.Stop(60 * time.Second)
			behind := run.Acked() - before
			if e.cfg.noFault {
				r.Fault = "no fault"
				return r.check(ctx, c, run, verify.CheckOptions{})
			}
			c.node(l).stop()
			r.mark(fmt.Sprintf("leader %d killed", l), true)
			if err := c.wipe(wiped, keep); err != nil {
				return err
			}
			r.mark(fmt.Sprintf("node %d's disk replaced", wiped), true)
			c.heal()
			r.mark(fmt.Sprintf("node %d reconnected", lag), false)
			if err := c.node(wiped).start(ctx); err != nil {
				return err
			}
			r.mark(fmt.Sprintf("node %d restarted on the new disk", wiped), false)
			// Does a leader appear without the node that has the data?
			// (Where one can, it takes the metadata group and then the
			// partition an election or two; where none can, 5 s of
			// waiting shows it.)
			wait := 5 * time.Second
			if keep {
				wait = 30 * time.Second
			}
			start := time.Now()
			wctx, cancel := context.WithTimeout(ctx, wait)
			nl, lerr := c.leader(wctx, topic, 0, l)
			cancel()
			elected := fmt.Sprintf("no leader for %v: the partition waited for the node with the data", wait)
			if lerr == nil {
				elected = fmt.Sprintf("node %d elected leader without it after %.1f s", nl, time.Since(start).Seconds())
				r.mark(fmt.Sprintf("node %d leads without the data", nl), false)
			}
			r.Fault = fmt.Sprintf("node %d cut off while %d records were acknowledged; leader %d killed; node %d's disk replaced (identity kept: %v); %s",
				lag, behind, l, wiped, keep, elected)
			r.Injected = behind > 0
			if err := c.node(l).start(ctx); err != nil {
				return err
			}
			r.mark(fmt.Sprintf("node %d back", l), false)
			if err := c.waitLeaders(ctx, topic); err != nil {
				return err
			}
			return r.check(ctx, c, run, verify.CheckOptions{})
		})
		e.closeAll()
	}
	return rows
}
