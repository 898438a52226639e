package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/admin"
	"holdfast/internal/verify"
)

func init() { addCommand(newVerifyCmd) }

// verifyOpts are `holdfast verify`'s flags.
type verifyOpts struct {
	topic           string
	partitions      int32
	rf              int16
	records         int64
	producers       int
	size            int
	acks            string
	idempotence     bool
	transactionalID string
	txnRecords      int
	keys            int
	rate            int
	group           string
	jsonOut         bool
}

// verifySettings is what the summary says was run.
type verifySettings struct {
	Acks              string `json:"acks"`
	Idempotence       bool   `json:"enable_idempotence"`
	TransactionalID   string `json:"transactional_id,omitempty"`
	TransactionSize   int    `json:"transaction_records,omitempty"`
	Keys              int    `json:"keys"`
	Rate              int    `json:"rate"`
	Size              int    `json:"size"`
	Producers         int    `json:"producers"`
	Read              string `json:"read"` // "direct" or "group <name>"
	ReadCommitted     bool   `json:"read_committed"`
	ExpectsNoDupOrder bool   `json:"expects_no_duplicates"`
}

// verifySummary is the --json output.
type verifySummary struct {
	Run           string         `json:"run"`
	Topic         string         `json:"topic"`
	Settings      verifySettings `json:"settings"`
	Records       int64          `json:"records"`
	Acknowledged  int64          `json:"acknowledged"`
	Failed        int64          `json:"failed"`
	ProduceErrors map[string]int `json:"produce_errors,omitempty"`
	ProduceMs     int64          `json:"produce_ms"`
	ReadMs        int64          `json:"read_ms"`
	Report        verify.Report  `json:"report"`
	OK            bool           `json:"ok"`
	Problems      []string       `json:"problems,omitempty"`
}

func newVerifyCmd() *cobra.Command {
	var o verifyOpts
	c := &cobra.Command{
		Use:   "verify",
		Short: "Produce records any loss would show in, read them back, and report what was lost, duplicated or reordered",
		Long: `Verify that a Kafka-compatible cluster (Holdfast, Apache Kafka, Redpanda, ...)
keeps what it acknowledges. verify produces --records records with the
chosen acks, idempotence, transactions, keys and rate; every value carries
the run id, the producer, its sequence and a CRC-32C checksum. Every
acknowledgement (partition, offset) is kept. Then the records are read back,
directly from each partition (from where the topic ended when the run
started) or, with --group, through a consumer group that commits, and per
partition it reports:

  acked           acknowledged to the producer
  lost            acknowledged, never read back
  duplicated      read back more than once
  reordered       read after a later record of the same producer
  corrupt         the checksum does not match
  unacked_stored  read back but never acknowledged (allowed: the answer
                  was lost or came too late, the write was not)

Exit codes: 0 nothing lost; 1 an acknowledged record was lost or damaged,
or (when the settings promise it: an idempotent or transactional producer)
duplicated, reordered or not where its acknowledgement said; 2 bad command
line; 3 no broker answered.`,
		Example: `  holdfast verify --bootstrap localhost:9092
  holdfast verify --records 100000 --acks 1 --rate 5000
  holdfast verify --transaction-records 100 --group verify-g --json`,
		Args: noArgs,
	}
	conn := clientCommand(c)
	f := c.Flags()
	f.StringVar(&o.topic, "topic", "holdfast-verify", "topic to write to (created if missing)")
	f.Int32Var(&o.partitions, "partitions", 3, "partitions of the topic if verify creates it")
	f.Int16Var(&o.rf, "replication-factor", -1, "replication factor if verify creates the topic (-1: the broker's default)")
	f.Int64Var(&o.records, "records", 10000, "records to produce")
	f.IntVar(&o.producers, "producers", 1, "producer clients, each with its own connections and sequence")
	f.IntVar(&o.size, "size", 100, fmt.Sprintf("value size in bytes (at least the %d-byte header)", verify.MinSize))
	f.StringVar(&o.acks, "acks", "all", "all, 1 or 0")
	f.BoolVar(&o.idempotence, "enable-idempotence", true, "idempotent producer (needs --acks all; off by itself for acks 1 and 0)")
	f.StringVar(&o.transactionalID, "transactional-id", "", "produce in transactions with this transactional.id (default with --transaction-records: holdfast-verify-<run>)")
	f.IntVar(&o.txnRecords, "transaction-records", 0, "records per transaction (0: no transactions)")
	f.IntVar(&o.keys, "keys", 0, "distinct keys, records spread over partitions by key (0: no keys)")
	f.IntVar(&o.rate, "rate", 0, "records per second, all producers together (0: as fast as the cluster takes them)")
	f.StringVar(&o.group, "group", "", "read back through this consumer group, committing as it reads, from the group's committed offsets (earliest for a new group; other runs' records are skipped); default: read each partition directly from where the topic ended when the run started")
	f.BoolVar(&o.jsonOut, "json", false, "print a JSON summary instead of tables")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		return runVerify(cmd, conn, o, f.Changed("enable-idempotence"))
	}
	return c
}

func runVerify(cmd *cobra.Command, conn *connFlags, o verifyOpts, idemSet bool) error {
	ackOpt, err := checkVerifyOpts(&o, idemSet)
	if err != nil {
		return err
	}

	ctx, stop := signalContext()
	defer stop()
	ac, err := conn.connect(ctx)
	if err != nil {
		return err
	}
	defer ac.Close()
	if err := ensureTopic(ctx, conn, ac, o); err != nil {
		return err
	}
	run := verify.NewRun(o.topic)
	run.Size = o.size
	if o.txnRecords > 0 && o.transactionalID == "" {
		o.transactionalID = "holdfast-verify-" + run.ID
	}
	readCommitted := o.txnRecords > 0
	// Where the topic ends now: the run's records are all after it.
	lctx, lcancel := context.WithTimeout(ctx, conn.timeout)
	from, err := verify.EndOffsets(lctx, ac.K, o.topic, readCommitted)
	lcancel()
	if err != nil {
		return fmt.Errorf("%w: %v", errNoAnswer, err)
	}
	settings := verifySettings{
		Acks: o.acks, Idempotence: o.idempotence, TransactionalID: o.transactionalID, TransactionSize: o.txnRecords,
		Keys: o.keys, Rate: o.rate, Size: max(o.size, len(run.Value(verify.ID{}, nil))), Producers: o.producers, Read: "direct",
		ReadCommitted: readCommitted, ExpectsNoDupOrder: o.idempotence,
	}
	if o.group != "" {
		settings.Read = "group " + o.group
	}
	errw := cmd.ErrOrStderr()
	bar := newProgress(errw)
	if !o.jsonOut {
		fmt.Fprintf(cmd.OutOrStdout(), "verify: run %s on %s: %d records, acks=%s idempotence=%v transactions=%d keys=%d rate=%d\n",
			run.ID, o.topic, o.records, o.acks, o.idempotence, o.txnRecords, o.keys, o.rate)
	}

	base, err := conn.opts()
	if err != nil {
		return err
	}

	start := time.Now()
	txnErrs, err := verifyProduce(ctx, conn, o, run, base, ackOpt, bar)
	if err != nil {
		return err
	}
	produced := time.Since(start)

	// Read back.
	start = time.Now()
	rctx, rcancel := context.WithTimeout(ctx, max(conn.timeout, 2*time.Minute))
	defer rcancel()
	var rep verify.Report
	progress := func(read, total int64) { bar.set("read", read, total, "") }
	if o.group == "" {
		rep, err = run.Check(rctx, verify.CheckOptions{Seeds: conn.seeds(), Opts: base, From: from, ReadCommitted: readCommitted, Progress: progress})
	} else {
		rep, err = groupRead(rctx, conn, run, o, readCommitted, progress)
	}
	bar.done()
	if err != nil {
		return err
	}
	sum := verifySummary{
		Run: run.ID, Topic: o.topic, Settings: settings, Records: o.records, Acknowledged: run.Acked(), Failed: run.Failed(),
		ProduceErrors: run.Failures(), ProduceMs: produced.Milliseconds(), ReadMs: time.Since(start).Milliseconds(), Report: rep,
	}
	sum.Problems = append(sum.Problems, txnErrs...)
	sum.Problems = append(sum.Problems, verifyProblems(rep, o.idempotence)...)
	sum.OK = len(sum.Problems) == 0
	return reportVerify(cmd.OutOrStdout(), sum, o.jsonOut)
}

// checkVerifyOpts checks verify's options, settles the ones that follow
// from others (acks other than all turn idempotence off, a transactional
// id asks for transactions) and returns the producers' acks.
func checkVerifyOpts(o *verifyOpts, idemSet bool) (kgo.Acks, error) {
	if o.records <= 0 || o.records > 10_000_000 {
		return kgo.Acks{}, usagef("--records %d: want 1..10000000", o.records)
	}
	if o.producers < 1 || o.producers > 100 || int64(o.producers) > o.records {
		return kgo.Acks{}, usagef("--producers %d: want 1..100, at most --records", o.producers)
	}
	if o.size < 0 || o.size > 1<<20 {
		return kgo.Acks{}, usagef("--size %d: want 0..1048576", o.size)
	}
	if o.keys < 0 || o.rate < 0 || o.txnRecords < 0 {
		return kgo.Acks{}, usagef("--keys, --rate and --transaction-records take no negative values")
	}
	if o.transactionalID != "" && o.txnRecords == 0 {
		o.txnRecords = 100
	}
	var ackOpt kgo.Acks
	switch o.acks {
	case "all", "-1":
		o.acks, ackOpt = "all", kgo.AllISRAcks()
	case "1":
		ackOpt = kgo.LeaderAck()
	case "0":
		ackOpt = kgo.NoAck()
	default:
		return ackOpt, usagef("--acks %q: want all, 1 or 0", o.acks)
	}
	if o.acks != "all" {
		if idemSet && o.idempotence {
			return ackOpt, usagef("--enable-idempotence needs --acks all (Kafka's rule)")
		}
		if o.txnRecords > 0 {
			return ackOpt, usagef("transactions need --acks all")
		}
		o.idempotence = false
	}
	if o.txnRecords > 0 && !o.idempotence {
		return ackOpt, usagef("transactions need --enable-idempotence")
	}
	return ackOpt, nil
}

// verifyProduce produces run's records with o.producers producers (their
// client options base plus the run's), showing progress on bar, until
// all are answered or ctx ends; it returns the producers' transaction
// errors.
func verifyProduce(ctx context.Context, conn *connFlags, o verifyOpts, run *verify.Run, base []kgo.Opt, ackOpt kgo.Acks, bar *progress) ([]string, error) {
	var ps []*verify.Producer
	for i := range o.producers {
		n := o.records / int64(o.producers)
		if int64(i) < o.records%int64(o.producers) {
			n++
		}
		opts := append(slices.Clone(base), kgo.SeedBrokers(conn.seeds()...), kgo.DefaultProduceTopic(o.topic),
			kgo.RequiredAcks(ackOpt), kgo.ProducerBatchCompression(kgo.NoCompression()))
		if !o.idempotence {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		if o.txnRecords > 0 {
			opts = append(opts, kgo.TransactionalID(fmt.Sprintf("%s-%d", o.transactionalID, i)))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return nil, usageError{err}
		}
		rate := 0
		if o.rate > 0 {
			rate = max(1, o.rate/o.producers)
		}
		ps = append(ps, run.StartProducer(cl, verify.ProducerConfig{Rate: rate, Records: n, Keys: o.keys, NoOffsets: o.acks == "0", TxnRecords: o.txnRecords}))
	}
	for _, p := range ps {
		for done := false; !done; {
			select {
			case <-p.Done():
				done = true
			case <-ctx.Done():
				done = true
			case <-time.After(100 * time.Millisecond):
			}
			bar.set("produce", run.Acked()+run.Failed(), o.records, fmt.Sprintf("acked %d failed %d", run.Acked(), run.Failed()))
		}
	}
	for _, p := range ps {
		p.Stop(conn.timeout) // waits for the answers of what was sent
	}
	var txnErrs []string
	for _, p := range ps {
		if err := p.Err(); err != nil {
			txnErrs = append(txnErrs, err.Error())
		}
	}
	bar.done()
	return txnErrs, ctx.Err()
}

// reportVerify writes sum to out, as JSON or for people, and fails unless
// the run found no problem.
func reportVerify(out io.Writer, sum verifySummary, jsonOut bool) error {
	if jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sum); err != nil {
			return err
		}
	} else if err := printVerify(out, sum); err != nil {
		return err
	}
	if !sum.OK {
		return fmt.Errorf("verify failed: %s", strings.Join(sum.Problems, "; "))
	}
	return nil
}

// ensureTopic creates the topic unless it exists.
func ensureTopic(ctx context.Context, conn *connFlags, ac *admin.Client, o verifyOpts) error {
	ctx, cancel := context.WithTimeout(ctx, conn.timeout)
	defer cancel()
	resp, err := ac.A.CreateTopic(ctx, o.partitions, o.rf, nil, o.topic)
	if err == nil {
		err = resp.Err
	}
	if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
		return nil
	}
	return fmt.Errorf("create topic %s: %w", o.topic, err)
}

// groupRead reads the run back through a consumer group that commits what
// it has read, up to where the topic ends now.
func groupRead(ctx context.Context, conn *connFlags, run *verify.Run, o verifyOpts, readCommitted bool, progress func(read, total int64)) (verify.Report, error) {
	iso := kgo.ReadUncommitted()
	if readCommitted {
		iso = kgo.ReadCommitted()
	}
	base, err := conn.opts()
	if err != nil {
		return verify.Report{}, err
	}
	cl, err := kgo.NewClient(append(base, kgo.SeedBrokers(conn.seeds()...), kgo.ConsumerGroup(o.group), kgo.ConsumeTopics(o.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords())...)
	if err != nil {
		return verify.Report{}, usageError{err}
	}
	end, err := verify.EndOffsets(ctx, cl, o.topic, readCommitted)
	if err != nil {
		cl.Close()
		return verify.Report{}, err
	}
	g := run.StartGroupConsumer(cl, true, nil)
	defer g.Stop()
	if err := g.WaitOffsets(ctx, end, progress); err != nil {
		return verify.Report{}, err
	}
	return g.Tally().Report(run.Acks()), nil
}

// verifyProblems says what fails the run: loss and damage always;
// duplicates, reordering and misplaced records when the producer promised
// none (idempotent or transactional).
func verifyProblems(r verify.Report, strict bool) []string {
	var p []string
	add := func(n int, what string) {
		if n > 0 {
			p = append(p, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(r.Lost, "acknowledged records lost")
	add(r.Corrupt, "records corrupt")
	add(r.BadAck, "successes without an offset")
	add(r.OffsetConflict, "offsets acknowledged twice")
	if strict {
		add(r.Duplicated, "records duplicated (idempotent producer)")
		add(r.Reordered, "records reordered (idempotent producer)")
		add(r.OffsetMismatch, "records read at another offset than acknowledged")
	}
	if r.Acked == 0 {
		p = append(p, "nothing was acknowledged")
	}
	return p
}

func printVerify(out io.Writer, s verifySummary) error {
	w := tw(out)
	fmt.Fprintln(w, "PARTITION\tACKED\tLOST\tDUPLICATED\tREORDERED\tCORRUPT\tUNACKED_STORED")
	for _, p := range s.Report.Partitions {
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t%d\t%d\n", p.Partition, p.Acked, p.Lost, p.Duplicated, p.Reordered, p.Corrupt, p.Unacked)
	}
	r := s.Report
	fmt.Fprintf(w, "total\t%d\t%d\t%d\t%d\t%d\t%d\n", r.Acked, r.Lost, r.Duplicated, r.Reordered, r.Corrupt, r.Unacked)
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nproduced %d records in %v: %d acknowledged, %d failed; read back (%s) in %v\n",
		s.Records, time.Duration(s.ProduceMs)*time.Millisecond, s.Acknowledged, s.Failed, s.Settings.Read, time.Duration(s.ReadMs)*time.Millisecond)
	if len(s.ProduceErrors) > 0 {
		var msgs []string
		for m, n := range s.ProduceErrors {
			msgs = append(msgs, fmt.Sprintf("%dx %s", n, m))
		}
		sort.Strings(msgs)
		fmt.Fprintf(out, "produce errors: %s\n", strings.Join(msgs, "; "))
	}
	if len(r.LostSample) > 0 {
		fmt.Fprintf(out, "lost (producer/sequence@partition/offset acknowledged): %s\n", strings.Join(r.LostSample, " "))
	}
	if s.OK {
		fmt.Fprintf(out, "OK: every acknowledged record was read back")
		if s.Settings.ExpectsNoDupOrder {
			fmt.Fprintf(out, " once, in order")
		}
		fmt.Fprintln(out)
	} else {
		fmt.Fprintf(out, "FAILED: %s\n", strings.Join(s.Problems, "; "))
	}
	return nil
}
