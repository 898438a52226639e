package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/admin"
)

func init() { addCommand(newConsumeCmd) }

type consumeOpts struct {
	partitions    []int32
	offset, at    string
	group         string
	count         int
	exitAtEnd     bool
	readCommitted bool
	format        string
	verbose       bool
	reset         string // auto.offset.reset for an --offset N outside the log
}

func newConsumeCmd() *cobra.Command {
	o := &consumeOpts{}
	c := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Print a topic's records",
		Long: `Print a topic's records, one per line, until interrupted, -n records, or
(-e) the end of the log as it was at start.

Without --group it reads the partitions given (all if none) from --offset or
--timestamp. With --group it joins the consumer group and commits the offset
after each record it printed: on exit, and every 5 s while it runs (a group
with no commit starts at --offset earliest or latest).`,
		Example: `  holdfast consume greetings -n 1
  holdfast consume orders --partition 0 --offset 100 -n 10 --format json
  holdfast consume orders --timestamp 2026-01-02T15:04:05Z -e
  holdfast consume orders --group billing -v`,
		Args: exactArgs(1),
	}
	conn := clientCommand(c)
	c.ValidArgsFunction = completeNames(conn, false)
	c.RunE = func(cmd *cobra.Command, args []string) error { return consume(cmd, conn, o, args[0]) }
	f := c.Flags()
	f.Int32SliceVarP(&o.partitions, "partition", "p", nil, "partitions to read, e.g. 0,2 (default: all; not with --group)")
	f.StringVarP(&o.offset, "offset", "o", "earliest", "where to start: earliest, latest, an offset N, or -N (N before the end); with --group only where the group has no commit")
	f.StringVar(&o.offset, "from", "earliest", "")
	f.MarkDeprecated("from", "use --offset earliest|latest")
	f.StringVar(&o.at, "timestamp", "", "start at the first record at or after this time (RFC 3339, or Unix milliseconds)")
	f.StringVarP(&o.group, "group", "g", "", "consume as a member of this consumer group, committing offsets")
	f.IntVarP(&o.count, "count", "n", 0, "stop after this many records (0: no limit)")
	f.BoolVarP(&o.exitAtEnd, "exit-at-end", "e", false, "stop at the end of the log as it was at start")
	f.BoolVar(&o.readCommitted, "read-committed", false, "read only committed transactional records")
	f.StringVarP(&o.format, "format", "F", "text", "text (the value), json (one object per record, all fields), or hex (the value in hex)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "text and hex: print partition, offset, timestamp, key and headers before each value")
	f.StringVar(&o.reset, "auto-offset-reset", "none", "an --offset N outside a partition's log: none (refuse, OFFSET_OUT_OF_RANGE), earliest or latest (start there, and say so)")
	return c
}

func consume(cmd *cobra.Command, conn *connFlags, o *consumeOpts, topic string) error {
	if err := o.check(); err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	c, err := conn.connect(ctx)
	if err != nil {
		return err
	}
	// What is there to read: the topic's partitions and their ends.
	mctx, cancel := context.WithTimeout(ctx, conn.timeout)
	offs, err := c.TopicOffsets(mctx, topic)
	cancel()
	c.Close()
	if err != nil {
		return err
	}
	ends := offs[topic]
	if len(ends) == 0 {
		return fmt.Errorf("topic %s: UNKNOWN_TOPIC_OR_PARTITION: no such topic", topic)
	}
	start, err := o.startOffset(ends)
	if err != nil {
		return err
	}
	var assigned atomic.Bool
	opts, err := o.clientOpts(cmd.ErrOrStderr(), topic, ends, start, &assigned)
	if err != nil {
		return err
	}
	base, err := conn.opts()
	if err != nil {
		return err
	}
	cl, err := admin.NewClient(conn.seeds(), append(base, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if o.group != "" {
		defer func() {
			// Commit what was printed before leaving the group.
			cctx, cancel := context.WithTimeout(context.Background(), conn.timeout)
			defer cancel()
			if err := cl.K.CommitMarkedOffsets(cctx); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "committing group %s offsets: %v\n", o.group, err)
			}
		}()
	}
	return o.printUntilDone(ctx, cmd, cl.K, ends, &assigned)
}

// check checks the options that need no answer from the cluster.
func (o *consumeOpts) check() error {
	if o.format != "text" && o.format != "json" && o.format != "hex" {
		return usagef("--format %q: want text, json or hex", o.format)
	}
	if o.reset != "none" && o.reset != "earliest" && o.reset != "latest" {
		return usagef("--auto-offset-reset %q: want none, earliest or latest", o.reset)
	}
	if o.group != "" && len(o.partitions) > 0 {
		return usagef("--partition and --group: a group's partitions are assigned by the group")
	}
	return nil
}

// clientOpts are the consumer's options for topic, whose partitions end
// at ends: a member of the group o.group, or a reader of the partitions
// o.partitions (all if none) from start; assigned is set once the client
// has its partitions (at once without a group).
func (o *consumeOpts) clientOpts(stderr io.Writer, topic string, ends map[int32]admin.Offsets, start func(int32) kgo.Offset, assigned *atomic.Bool) ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.FetchMaxWait(500 * time.Millisecond)}
	if o.group != "" {
		reset := kgo.NewOffset().AtStart()
		if o.offset == "latest" {
			reset = kgo.NewOffset().AtEnd()
		} else if o.offset != "earliest" {
			return nil, usagef("--offset %q with --group: want earliest or latest (use 'group reset-offsets' to move a group)", o.offset)
		}
		opts = append(opts, kgo.ConsumeTopics(topic), kgo.ConsumerGroup(o.group), kgo.ConsumeResetOffset(reset),
			kgo.AutoCommitMarks(),
			kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { assigned.Store(true) }))
	} else {
		parts := map[int32]kgo.Offset{}
		for p := range ends {
			if len(o.partitions) == 0 || containsInt32(o.partitions, p) {
				parts[p] = start(p)
			}
		}
		for _, p := range o.partitions {
			if _, ok := ends[p]; !ok {
				return nil, usagef("--partition %d: topic %s has %d partitions", p, topic, len(ends))
			}
		}
		if err := o.outOfRange(stderr, topic, ends, parts); err != nil {
			return nil, err
		}
		reset := kgo.NoResetOffset() // the log moved under us: an error, not a silent jump
		switch o.reset {
		case "earliest":
			reset = kgo.NewOffset().AtStart()
		case "latest":
			reset = kgo.NewOffset().AtEnd()
		}
		opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
			kgo.ConsumeResetOffset(reset))
		assigned.Store(true)
	}
	if o.readCommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	return opts, nil
}

// printUntilDone prints the records cl reads, until ctx ends, o.count
// records are printed, or (-e, o.exitAtEnd) every partition is read up to
// its end in ends or two polls after the assignment found nothing.
func (o *consumeOpts) printUntilDone(ctx context.Context, cmd *cobra.Command, cl *kgo.Client, ends map[int32]admin.Offsets, assigned *atomic.Bool) error {
	// -e: the partitions with something left to read, and their ends.
	remaining := map[int32]int64{}
	for p, e := range ends {
		if (len(o.partitions) == 0 || containsInt32(o.partitions, p)) && e.End > o.firstOffset(e) {
			remaining[p] = e.End
		}
	}
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	seen, empty := 0, 0
	for {
		if o.exitAtEnd && len(remaining) == 0 && assigned.Load() {
			return nil // nothing (more) to read
		}
		pctx, pcancel := ctx, context.CancelFunc(func() {})
		if o.exitAtEnd {
			pctx, pcancel = context.WithTimeout(ctx, 2*time.Second)
		}
		fetches := cl.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			return nil
		}
		var errs []string
		fetches.EachError(func(t string, p int32, err error) {
			if err != context.DeadlineExceeded {
				errs = append(errs, fmt.Sprintf("%s[%d]: %v", t, p, err))
			}
		})
		sort.Strings(errs)
		for _, e := range errs {
			fmt.Fprintln(cmd.ErrOrStderr(), e)
		}
		n := 0
		for it := fetches.RecordIter(); !it.Done(); {
			r := it.Next()
			n++
			if err := printRecord(out, o, r); err != nil {
				return err
			}
			if o.group != "" {
				cl.MarkCommitRecords(r)
			}
			if end, ok := remaining[r.Partition]; ok && r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
			seen++
			if o.count > 0 && seen >= o.count {
				return nil
			}
		}
		out.Flush()
		if !o.exitAtEnd {
			continue
		}
		if len(remaining) == 0 && assigned.Load() {
			return nil
		}
		// Nothing more comes from partitions whose remaining offsets are
		// only transaction markers or were deleted: two empty polls after
		// assignment are the end too.
		if n == 0 && assigned.Load() {
			if empty++; empty >= 2 {
				return nil
			}
		} else {
			empty = 0
		}
	}
}

// startOffset turns --offset / --timestamp into each partition's start.
func (o *consumeOpts) startOffset(ends map[int32]admin.Offsets) (func(int32) kgo.Offset, error) {
	if o.at != "" {
		var ms int64
		if t, err := time.Parse(time.RFC3339Nano, o.at); err == nil {
			ms = t.UnixMilli()
		} else if n, err := strconv.ParseInt(o.at, 10, 64); err == nil {
			ms = n
		} else {
			return nil, usagef("--timestamp %q: want RFC 3339 (2026-01-02T15:04:05Z) or Unix milliseconds", o.at)
		}
		if o.group != "" {
			return nil, usagef("--timestamp and --group: use 'group reset-offsets --to-datetime' to move a group")
		}
		return func(int32) kgo.Offset { return kgo.NewOffset().AfterMilli(ms) }, nil
	}
	switch o.offset {
	case "earliest", "beginning":
		return func(int32) kgo.Offset { return kgo.NewOffset().AtStart() }, nil
	case "latest", "end":
		return func(int32) kgo.Offset { return kgo.NewOffset().AtEnd() }, nil
	}
	n, err := strconv.ParseInt(o.offset, 10, 64)
	if err != nil {
		return nil, usagef("--offset %q: want earliest, latest, N or -N", o.offset)
	}
	if o.group != "" {
		return nil, nil // checked by the caller
	}
	return func(p int32) kgo.Offset {
		if n < 0 {
			return kgo.NewOffset().At(max(ends[p].End+n, ends[p].Start))
		}
		return kgo.NewOffset().At(n)
	}, nil
}

// outOfRange checks an --offset N against each partition's log, as a
// Kafka consumer's fetch would (OFFSET_OUT_OF_RANGE), and applies
// --auto-offset-reset: none refuses, earliest and latest move the start
// there and say so on stderr. kafka-console-consumer jumps silently; a
// user who asked for offset 100 is told instead.
func (o *consumeOpts) outOfRange(stderr io.Writer, topic string, ends map[int32]admin.Offsets, parts map[int32]kgo.Offset) error {
	n, err := strconv.ParseInt(o.offset, 10, 64)
	if err != nil || n < 0 || o.at != "" {
		return nil // earliest, latest, -N (clamped to the log) or a time
	}
	for _, p := range slices.Sorted(maps.Keys(parts)) {
		e := ends[p]
		if n >= e.Start && n <= e.End {
			continue
		}
		switch o.reset {
		case "earliest":
			parts[p] = kgo.NewOffset().At(e.Start)
			fmt.Fprintf(stderr, "%s[%d]: offset %d is outside the log (%d to %d); starting at the earliest, %d (--auto-offset-reset earliest)\n", topic, p, n, e.Start, e.End, e.Start)
		case "latest":
			parts[p] = kgo.NewOffset().At(e.End)
			fmt.Fprintf(stderr, "%s[%d]: offset %d is outside the log (%d to %d); starting at the latest, %d (--auto-offset-reset latest)\n", topic, p, n, e.Start, e.End, e.End)
		default:
			return usagef("--offset %d: %s[%d] holds offsets %d to %d (OFFSET_OUT_OF_RANGE); --auto-offset-reset earliest or latest starts there instead", n, topic, p, e.Start, e.End)
		}
	}
	return nil
}

// firstOffset is where reading a partition starts, as far as it is known
// before reading (a group's commit and a timestamp are not: the start).
func (o *consumeOpts) firstOffset(e admin.Offsets) int64 {
	if o.group != "" || o.at != "" {
		return e.Start
	}
	switch o.offset {
	case "latest", "end":
		return e.End
	case "earliest", "beginning":
		return e.Start
	}
	n, _ := strconv.ParseInt(o.offset, 10, 64)
	switch {
	case n < 0:
		return max(e.End+n, e.Start)
	case n >= e.Start && n <= e.End:
		return n
	case o.reset == "latest":
		return e.End
	}
	return e.Start // earliest; none was refused before reading
}

func containsInt32(v []int32, x int32) bool {
	for _, y := range v {
		if y == x {
			return true
		}
	}
	return false
}

// jsonRecord is --format json: one object per line.
type jsonRecord struct {
	Topic       string            `json:"topic"`
	Partition   int32             `json:"partition"`
	Offset      int64             `json:"offset"`
	Timestamp   string            `json:"timestamp"`
	Key         *string           `json:"key"`
	KeyBase64   string            `json:"key_base64,omitempty"`
	Value       *string           `json:"value"`
	ValueBase64 string            `json:"value_base64,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
}

func printRecord(out io.Writer, o *consumeOpts, r *kgo.Record) error {
	switch o.format {
	case "json":
		jr := jsonRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC().Format(time.RFC3339Nano)}
		jr.Key, jr.KeyBase64 = textOrBase64(r.Key)
		jr.Value, jr.ValueBase64 = textOrBase64(r.Value)
		if len(r.Headers) > 0 {
			jr.Headers = map[string]string{}
			for _, h := range r.Headers {
				jr.Headers[h.Key] = string(h.Value)
			}
		}
		b, err := json.Marshal(jr)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	}
	if o.verbose {
		var hs []string
		for _, h := range r.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		fmt.Fprintf(out, "%d\t%d\t%s\t%s\t%s\t", r.Partition, r.Offset, r.Timestamp.UTC().Format(time.RFC3339Nano), r.Key, strings.Join(hs, ","))
	}
	if o.format == "hex" {
		_, err := fmt.Fprintf(out, "%s\n", hex.EncodeToString(r.Value))
		return err
	}
	_, err := fmt.Fprintf(out, "%s\n", r.Value)
	return err
}

// textOrBase64 gives b as a string if it is UTF-8 text, else base64; nil
// stays null.
func textOrBase64(b []byte) (*string, string) {
	if b == nil {
		return nil, ""
	}
	if utf8.Valid(b) {
		s := string(b)
		return &s, ""
	}
	return nil, base64.StdEncoding.EncodeToString(b)
}
