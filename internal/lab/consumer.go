package lab

// Consumer-side scenarios: a consumer of a group crashes in the middle of
// its work. Where it committed decides what its successor does again or
// never does.

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/verify"
)

// consumers: the input topic holds the run's records, all acknowledged.
// Each row's consumer reads it in its own group and "processes" each record
// (the processing is counted: a Tally of what was processed), crashes in
// its second poll, and a successor in the same group carries on from the
// committed offsets to the end. The crash closes the client without
// committing; it leaves the group at once, which only spares the lab the
// session timeout.
//
//   - commit, then process: the crash comes after the commit and half-way
//     through processing; the successor starts after what was committed,
//     the other half is never processed (at most once).
//   - process, then commit: the crash comes after processing, before the
//     commit; the successor processes the batch again (at least once).
//   - consume-transform-produce in a transaction: the output records and
//     the input offsets are committed together (kgo's GroupTransactSession,
//     KIP-447); the crash leaves a transaction open, the successor's
//     InitProducerId fences and aborts it, and read_committed readers of
//     the output never see its records: every input record in the output
//     exactly once.
func consumers(ctx context.Context, e *env) []Row {
	rows := []Row{
		{Setting: "commit, then process", Expect: ExpectLoss,
			Takeaway: "committing before processing loses what the crash interrupted: the successor starts after it"},
		{Setting: "process, then commit", Expect: ExpectDuplicates,
			Takeaway: "processing before committing loses nothing but does the interrupted batch again: make processing idempotent"},
		{Setting: "transaction (exactly once)", Default: true, Expect: ExpectNothing,
			Takeaway: "consume-transform-produce in a transaction: output and offsets commit together, a crash's half-done work is aborted"},
	}
	c, err := e.cluster(ctx, clusterOptions{})
	if err != nil {
		return failedAll(rows, err)
	}
	const in, out = "orders", "orders-out"
	run := verify.NewRun(in)
	prepare := func() (map[int32]int64, error) {
		if err := c.createTopic(ctx, in, 3, nil); err != nil {
			return nil, err
		}
		if err := c.createTopic(ctx, out, 3, nil); err != nil {
			return nil, err
		}
		cl, err := producer(c, in, "all", true)
		if err != nil {
			return nil, err
		}
		p := run.StartProducer(cl, verify.ProducerConfig{Records: int64(e.n), Keys: 100})
		p.Stop(60 * time.Second)
		if run.Acked() != int64(e.n) {
			return nil, fmt.Errorf("input: %d of %d records acknowledged: %v", run.Acked(), e.n, run.Failures())
		}
		acl, err := c.client()
		if err != nil {
			return nil, err
		}
		defer acl.Close()
		return verify.EndOffsets(ctx, acl, in, false)
	}
	end, err := prepare()
	if err != nil {
		return failedAll(rows, err)
	}
	batch := max(10, e.n/8)
	for i, commitFirst := range []bool{true, false} {
		rows[i] = e.timed(rows[i], func(r *Row) error {
			return e.commitOrderRun(ctx, r, c, run, end, in, batch, commitFirst)
		})
	}
	rows[2] = e.timed(rows[2], func(r *Row) error {
		return e.transformRun(ctx, r, c, run, end, in, out, batch)
	})
	return rows
}

// commitOrderRun is the run of the first two rows: a consumer that
// commits before (commitFirst) or after processing crashes at its second
// poll, and a successor in the same group processes to the end.
func (e *env) commitOrderRun(ctx context.Context, r *Row, c *cluster, run *verify.Run, end map[int32]int64, in string, batch int, commitFirst bool) error {
	group := "lab-process-then-commit"
	if commitFirst {
		group = "lab-commit-then-process"
	}
	processed := run.NewTally()
	opts := []kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(in), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(200 * time.Millisecond)}
	cl, err := c.client(opts...)
	if err != nil {
		return err
	}
	r.Fault = "no crash"
	for polls := 1; ; {
		recs := cl.PollRecords(ctx, batch).Records()
		if ctx.Err() != nil {
			cl.Close()
			return ctx.Err()
		}
		if len(recs) == 0 {
			continue
		}
		crash := polls == 2 && !e.cfg.noFault
		if commitFirst {
			if err := cl.CommitRecords(ctx, recs...); err != nil {
				cl.Close()
				return fmt.Errorf("commit: %w", err)
			}
			if crash {
				half := len(recs) / 2
				for _, rec := range recs[:half] {
					processed.Observe(rec)
				}
				r.Fault = fmt.Sprintf("crashed after committing %d records and processing %d of them", len(recs), half)
				r.mark("consumer crashed after its commit", true)
				r.Injected = half < len(recs)
				break
			}
			for _, rec := range recs {
				processed.Observe(rec)
			}
		} else {
			for _, rec := range recs {
				processed.Observe(rec)
			}
			if crash {
				r.Fault = fmt.Sprintf("crashed after processing %d records, before committing them", len(recs))
				r.mark("consumer crashed before its commit", true)
				r.Injected = true
				break
			}
			if err := cl.CommitRecords(ctx, recs...); err != nil {
				cl.Close()
				return fmt.Errorf("commit: %w", err)
			}
		}
		if polls++; polls > 2 {
			break // no fault: the first consumer reads it all
		}
	}
	cl.Close()
	// The successor: process, then commit, to the end.
	cl, err = c.client(opts...)
	if err != nil {
		return err
	}
	g := run.StartGroupConsumer(cl, true, processed)
	err = g.WaitOffsets(ctx, end, nil)
	g.Stop()
	if err != nil {
		return err
	}
	r.fill(processed.Report(run.Acks()))
	return nil
}

// transformRun is the third row's run: consume-transform-produce in
// transactions, a crash inside one, and a successor with the same
// transactional id that fences it.
func (e *env) transformRun(ctx context.Context, r *Row, c *cluster, run *verify.Run, end map[int32]int64, in, out string, batch int) error {
	opts := []kgo.Opt{kgo.ConsumerGroup("lab-transform"), kgo.ConsumeTopics(in), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.TransactionalID("lab-transform"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DefaultProduceTopic(out), kgo.FetchMaxWait(200 * time.Millisecond), kgo.TransactionTimeout(20 * time.Second),
		kgo.SeedBrokers(c.seeds()...), kgo.MetadataMinAge(100 * time.Millisecond)}
	// transform copies a record to the output: same key and value,
	// so the output says which input record it came from.
	transform := func(s *kgo.GroupTransactSession, recs []*kgo.Record) {
		for _, rec := range recs {
			s.Produce(ctx, &kgo.Record{Key: rec.Key, Value: rec.Value}, nil)
		}
	}
	s, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return err
	}
	r.Fault = "no crash"
	for polls := 1; polls <= 2; {
		recs := s.PollRecords(ctx, batch).Records()
		if ctx.Err() != nil {
			s.Close()
			return ctx.Err()
		}
		if len(recs) == 0 {
			continue
		}
		if err := s.Begin(); err != nil {
			s.Close()
			return err
		}
		transform(s, recs)
		if polls == 2 && !e.cfg.noFault {
			// Crash: the records are written, the transaction is
			// neither committed nor aborted.
			if err := s.Client().Flush(ctx); err != nil {
				s.Close()
				return err
			}
			r.Fault = fmt.Sprintf("crashed in a transaction with %d records written to %s", len(recs), out)
			r.mark("consumer crashed in its transaction", true)
			break
		}
		if _, err := s.End(ctx, kgo.TryCommit); err != nil {
			s.Close()
			return fmt.Errorf("end transaction: %w", err)
		}
		polls++
	}
	s.Close()
	// The successor, with the same transactional.id: its
	// InitProducerId fences the crashed one and aborts its
	// transaction.
	if s, err = kgo.NewGroupTransactSession(opts...); err != nil {
		return err
	}
	defer s.Close()
	pos := map[int32]int64{}
	for done := false; !done; {
		recs := s.PollRecords(ctx, batch).Records()
		if ctx.Err() != nil {
			return fmt.Errorf("transform: %w (at %v, end %v)", ctx.Err(), pos, end)
		}
		if len(recs) > 0 {
			if err := s.Begin(); err != nil {
				return err
			}
			transform(s, recs)
			committed, err := s.End(ctx, kgo.TryCommit)
			if err != nil {
				return fmt.Errorf("end transaction: %w", err)
			}
			if committed {
				for _, rec := range recs {
					pos[rec.Partition] = max(pos[rec.Partition], rec.Offset+1)
				}
			}
		}
		done = true
		for p, o := range end {
			done = done && pos[p] >= o
		}
	}
	// What a read_committed reader of the output sees, against the
	// input's acknowledgements; and, as evidence that the crash left
	// records behind, what a read_uncommitted reader sees.
	t := run.NewTally()
	t.NoOffsets = true
	if err := r.check(ctx, c, run, verify.CheckOptions{Topic: out, ReadCommitted: true, Tally: t}); err != nil {
		return err
	}
	u := run.NewTally()
	u.NoOffsets = true
	raw, err := run.Check(ctx, verify.CheckOptions{Seeds: c.seeds(), Topic: out, Tally: u})
	if err != nil {
		return err
	}
	r.Injected = raw.Duplicated > 0
	r.Fault += fmt.Sprintf("; read_uncommitted sees %d of them twice in %s, read_committed %d", raw.Duplicated, out, r.Dup)
	return nil
}
