package lab

// Producer-side scenarios: acks=0 and a dropped connection; acks=1 and a
// leader that dies alone; a lost acknowledgement and the retry.

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/verify"
)

var scenarios = []Scenario{
	{Name: "acks0-drop", Title: "acks=0 and the connection drops", run: acks0Drop},
	{Name: "acks1-failover", Title: "acks=1 and the leader dies before a follower copies the batch", run: acks1Failover},
	{Name: "lost-ack", Title: "acks=all, the acknowledgement is lost and the producer retries", run: lostAck},
	{Name: "power-loss", Title: "every node loses power at once, with acknowledged records in the page cache", run: powerLoss},
	{Name: "consumer", Title: "a consumer crashes: commit before processing, process then commit, or a transaction", run: consumers},
	{Name: "replaced-disk", Title: "one node's disk is replaced while another replica is behind", run: replacedDisk},
	{Name: "bit-flip", Title: "bytes flip in a sealed segment of one replica of three, which then leads", run: bitFlip},
	{Name: "tiered-restore", Title: "every replica's disk is lost; the topic is restored from the object store", run: tieredRestore},
}

// producer makes a client of c for topic with the given acks ("all", "1",
// "0") and idempotence; extra options come last.
func producer(c *cluster, topic, acks string, idempotent bool, extra ...kgo.Opt) (*kgo.Client, error) {
	opts := []kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.RecordDeliveryTimeout(30 * time.Second),
		kgo.ProduceRequestTimeout(5 * time.Second), kgo.ProducerLinger(0)}
	switch acks {
	case "all":
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()))
	case "0":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()))
	}
	if !idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	return c.client(append(opts, extra...)...)
}

// check reads run's topic back from c and fills the row's counts.
func (r *Row) check(ctx context.Context, c *cluster, run *verify.Run, opts verify.CheckOptions) error {
	opts.Seeds = c.seeds()
	r.mark("reading everything back", false)
	rep, err := run.Check(ctx, opts)
	if err != nil {
		return err
	}
	r.fill(rep)
	return nil
}

func (r *Row) fill(rep verify.Report) {
	r.Acked, r.Lost, r.Dup, r.Report = rep.Acked, rep.Lost, rep.Duplicated, &rep
}

// acks0Drop: a producer writes at a steady rate while, for 300 ms, what it
// sends is lost on the way (the client's kernel took it, the network did
// not deliver it), then its connections drop. With acks=0 the client never
// learns: every record written in that window counted as sent. With
// acks=all nothing is acknowledged until the broker has it; the requests
// the network ate are sent again on a new connection.
func acks0Drop(ctx context.Context, e *env) []Row {
	rows := []Row{
		{Setting: "acks=0", Expect: ExpectLoss,
			Takeaway: "acks=0 counts a record as sent once it is written to a socket: a dropped connection loses it and nobody is told"},
		{Setting: "acks=all, idempotent", Default: true, Expect: ExpectNothing,
			Takeaway: "with acks the producer knows which requests went unanswered and sends them again"},
	}
	c, err := e.cluster(ctx, clusterOptions{})
	if err != nil {
		return failedAll(rows, err)
	}
	for i, acks := range []string{"0", "all"} {
		rows[i] = e.timed(rows[i], func(r *Row) error {
			topic := "acks" + acks + "-drop"
			if err := c.createTopic(ctx, topic, 1, nil); err != nil {
				return err
			}
			ln := newLink()
			cl, err := producer(c, topic, acks, acks == "all", ln.dialer())
			if err != nil {
				return err
			}
			run := verify.NewRun(topic)
			p := run.StartProducer(cl, verify.ProducerConfig{Rate: e.n, Records: int64(e.n), NoOffsets: acks == "0"})
			r.follow(run)
			if err := run.WaitAcked(ctx, int64(e.n/3)); err != nil {
				p.Stop(0)
				return err
			}
			if !e.cfg.noFault {
				ln.blackhole.Store(true)
				r.mark("what the client sends is lost on the way", true)
				time.Sleep(300 * time.Millisecond)
				ln.cut()
				ln.blackhole.Store(false)
				r.mark(fmt.Sprintf("%d connections dropped", ln.connsCut.Load()), true)
			}
			p.Stop(60 * time.Second)
			r.mark("producer done", false)
			r.Fault = fmt.Sprintf("%d bytes the client sent lost in 300 ms, then %d connections dropped", ln.swallowed.Load(), ln.connsCut.Load())
			r.Injected = ln.swallowed.Load() > 0 && ln.connsCut.Load() > 0
			return r.check(ctx, c, run, verify.CheckOptions{})
		})
	}
	return rows
}

// acks1Failover: the leader of a partition is cut from both followers
// (the Raft links; clients still reach it) while a producer writes; after
// 700 ms, before check-quorum makes it step down, it dies. (The loss check
// is the judge; the count of acknowledgements from 200 ms after the cut on
// shows the window: acks=1 fills it, acks=all leaves it empty.) The followers
// elect one of themselves, which never had those records, and when the old
// leader comes back it drops them to follow the new one. With acks=1 the
// leader alone acknowledged them: they are lost. With acks=all nothing is
// acknowledged without a majority: the producer retries them to the new
// leader.
func acks1Failover(ctx context.Context, e *env) []Row {
	rows := []Row{
		{Setting: "acks=1", Expect: ExpectLoss,
			Takeaway: "acks=1 acknowledges what only the leader has: when it dies before a follower copied it, a follower without it leads and it is gone"},
		{Setting: "acks=all, idempotent", Default: true, Expect: ExpectNothing,
			Takeaway: "acks=all waits for a majority: the lone leader acknowledges nothing, the producer retries to the new leader"},
	}
	c, err := e.cluster(ctx, clusterOptions{})
	if err != nil {
		return failedAll(rows, err)
	}
	for i, acks := range []string{"1", "all"} {
		rows[i] = e.timed(rows[i], func(r *Row) error {
			topic := "acks" + acks + "-failover"
			if err := c.createTopic(ctx, topic, 1, nil); err != nil {
				return err
			}
			cl, err := producer(c, topic, acks, acks == "all")
			if err != nil {
				return err
			}
			run := verify.NewRun(topic)
			// A third of the records before the fault, the rest at the
			// same pace through it and after.
			rate := max(1, e.n/2)
			p := run.StartProducer(cl, verify.ProducerConfig{Rate: rate, Records: int64(e.n)})
			defer p.Stop(0)
			r.follow(run)
			if err := run.WaitAcked(ctx, int64(e.n/3)); err != nil {
				return err
			}
			l, err := c.leader(ctx, topic, 0)
			if err != nil {
				return err
			}
			var alone int64
			if !e.cfg.noFault {
				c.isolate(l)
				r.mark(fmt.Sprintf("leader %d cut from its followers", l), true)
				// Answers to requests committed before the cut may
				// still arrive in the first moments; count from 200 ms.
				time.Sleep(200 * time.Millisecond)
				before := run.Acked()
				time.Sleep(500 * time.Millisecond)
				c.node(l).stop()
				r.mark(fmt.Sprintf("leader %d killed", l), true)
				alone = run.Acked() - before
				c.heal()
			}
			nl := l
			if !e.cfg.noFault {
				if nl, err = c.leader(ctx, topic, 0, l); err != nil {
					return err
				}
				r.mark(fmt.Sprintf("node %d leads", nl), false)
				if err := c.node(l).start(ctx); err != nil {
					return err
				}
				r.mark(fmt.Sprintf("node %d back, a follower", l), false)
			}
			p.Stop(60 * time.Second)
			if err := c.waitInSync(ctx, topic); err != nil {
				return err
			}
			r.Fault = fmt.Sprintf("leader %d cut from its followers for 700 ms, then killed; %d records acknowledged from 200 to 700 ms after the cut; node %d took over", l, alone, nl)
			r.Injected = nl != l && (acks == "all" || alone > 0)
			return r.check(ctx, c, run, verify.CheckOptions{})
		})
	}
	return rows
}

// lostAck: the connection between producer and broker breaks right after
// the broker appended a batch, before its answer arrived (the first
// Produce response and every fourth after it are lost). The producer
// cannot tell a lost request from a lost answer and sends the batch
// again. Without idempotence the broker appends it twice; an idempotent
// producer's retry carries the same producer id and sequence, and the
// broker answers with the first append.
func lostAck(ctx context.Context, e *env) []Row {
	rows := []Row{
		{Setting: "acks=all, not idempotent", Expect: ExpectDuplicates,
			Takeaway: "a retry after a lost acknowledgement writes the batch again: duplicates (and reordering with several requests in flight)"},
		{Setting: "acks=all, idempotent", Default: true, Expect: ExpectNothing,
			Takeaway: "the idempotent producer's retry is recognised by its sequence number and written once"},
	}
	c, err := e.cluster(ctx, clusterOptions{})
	if err != nil {
		return failedAll(rows, err)
	}
	for i, idem := range []bool{false, true} {
		rows[i] = e.timed(rows[i], func(r *Row) error {
			topic := fmt.Sprintf("lost-ack-idempotent-%v", idem)
			if err := c.createTopic(ctx, topic, 1, nil); err != nil {
				return err
			}
			ln := newLink()
			if !e.cfg.noFault {
				ln.dropEvery.Store(4)
				r.mark("the 1st produce response and every 4th after it lost with its connection", true)
			}
			cl, err := producer(c, topic, "all", idem, ln.dialer())
			if err != nil {
				return err
			}
			run := verify.NewRun(topic)
			p := run.StartProducer(cl, verify.ProducerConfig{Rate: e.n, Records: int64(e.n)})
			r.follow(run)
			p.Stop(60 * time.Second)
			r.mark(fmt.Sprintf("producer done: %d responses lost", ln.dropped.Load()), false)
			r.Fault = fmt.Sprintf("%d of %d produce responses lost with their connection", ln.dropped.Load(), ln.responses.Load())
			r.Injected = ln.dropped.Load() > 0
			return r.check(ctx, c, run, verify.CheckOptions{})
		})
	}
	return rows
}

// timed runs fn for row r, recording its duration and error.
func (e *env) timed(r Row, fn func(*Row) error) Row {
	start := time.Now()
	e.progress("%s / %s", e.scenario, r.Setting)
	r.tl = newTimeline()
	err := fn(&r)
	r.tl.end(&r)
	r.tl = nil
	if err != nil {
		r = failed(r, err)
	}
	r.Seconds = time.Since(start).Seconds()
	return r
}

func failedAll(rows []Row, err error) []Row {
	for i := range rows {
		rows[i] = failed(rows[i], err)
	}
	return rows
}
