package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The client subcommands talk to any Kafka-compatible broker with franz-go.

func bootstrapFlag(fs *flag.FlagSet) *string {
	def, usage := commandConfigFlag()
	fs.StringVar(&commandConfig, "command-config", def, usage)
	return fs.String("bootstrap", "localhost:9092", "comma-separated broker addresses")
}

func newClient(bootstrap string, opts ...kgo.Opt) (*kgo.Client, error) {
	sec, err := securityOpts(commandConfig)
	if err != nil {
		return nil, err
	}
	base := append([]kgo.Opt{kgo.SeedBrokers(strings.Split(bootstrap, ",")...)}, sec...)
	return kgo.NewClient(append(base, opts...)...)
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

func topicCommand(args []string) error {
	const synopsis = "topic create|list|describe|delete|reassign [flags] [TOPIC...]"
	if len(args) == 0 {
		return fmt.Errorf("usage: holdfast %s", synopsis)
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("topic "+sub, flag.ContinueOnError)
	fs.Usage = flagUsage(fs, synopsis)
	bootstrap := bootstrapFlag(fs)
	partitions := fs.Int("partitions", 1, "partitions (create)")
	rf := fs.Int("replication-factor", -1, "replicas per partition, -1 for the broker default (create)")
	var configs kvFlag
	fs.Var(&configs, "config", "topic config key=value, repeatable (create), e.g. retention.ms=3600000")
	partition := fs.Int("partition", 0, "partition to move (reassign)")
	replicas := fs.String("replicas", "", "reassign: the partition's new replica broker ids, e.g. 2,3,4 (the partition leader adds each new one as a Raft learner, promotes it once caught up, then removes the old ones)")
	cancelMove := fs.Bool("cancel", false, "reassign: cancel the partition's move (back to its original replicas)")
	list := fs.Bool("list", false, "reassign: list the moves in progress of the named topics (all topics if none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cl, err := newClient(*bootstrap)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics := fs.Args()
	switch sub {
	case "create":
		if len(topics) == 0 {
			return errors.New("name at least one topic")
		}
		resp, err := adm.CreateTopics(ctx, int32(*partitions), int16(*rf), configs.m, topics...)
		if err != nil {
			return err
		}
		for _, r := range resp.Sorted() {
			if r.Err != nil {
				return fmt.Errorf("%s: %w %s", r.Topic, r.Err, r.ErrMessage)
			}
			fmt.Printf("created %s (%d partitions)\n", r.Topic, r.NumPartitions)
		}
	case "delete":
		if len(topics) == 0 {
			return errors.New("name at least one topic")
		}
		resp, err := adm.DeleteTopics(ctx, topics...)
		if err != nil {
			return err
		}
		for _, r := range resp.Sorted() {
			if r.Err != nil {
				return fmt.Errorf("%s: %w", r.Topic, r.Err)
			}
			fmt.Printf("deleted %s\n", r.Topic)
		}
	case "list", "describe":
		details, err := adm.ListTopicsWithInternal(ctx, topics...)
		if err != nil {
			return err
		}
		if sub == "list" {
			for _, t := range details.Sorted() {
				fmt.Printf("%s\t%d partitions\n", t.Topic, len(t.Partitions))
			}
			return nil
		}
		start, _ := adm.ListStartOffsets(ctx, topics...)
		end, _ := adm.ListEndOffsets(ctx, topics...)
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "TOPIC\tPARTITION\tLEADER\tEPOCH\tSTART\tHIGH-WATERMARK\tERROR")
		for _, t := range details.Sorted() {
			for _, p := range t.Partitions.Sorted() {
				s, _ := start.Lookup(t.Topic, p.Partition)
				e, _ := end.Lookup(t.Topic, p.Partition)
				errs := ""
				if p.Err != nil {
					errs = p.Err.Error()
				}
				fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", t.Topic, p.Partition, p.Leader, p.LeaderEpoch, s.Offset, e.Offset, errs)
			}
		}
		return w.Flush()
	case "reassign":
		return reassign(ctx, adm, topics, int32(*partition), *replicas, *cancelMove, *list)
	default:
		return fmt.Errorf("unknown topic command %q; usage: holdfast %s", sub, synopsis)
	}
	return nil
}

// reassign is `topic reassign`: start (--replicas) or cancel (--cancel)
// moving one partition, or --list the moves in progress.
func reassign(ctx context.Context, adm *kadm.Client, topics []string, partition int32, replicas string, cancelMove, list bool) error {
	if list {
		set := kadm.TopicsSet{}
		details, err := adm.ListTopicsWithInternal(ctx, topics...) // none: every topic
		if err != nil {
			return err
		}
		for _, t := range details {
			for p := range t.Partitions {
				set.Add(t.Topic, p)
			}
		}
		resp, err := adm.ListPartitionReassignments(ctx, set)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "TOPIC\tPARTITION\tREPLICAS\tADDING\tREMOVING")
		for _, r := range resp.Sorted() {
			fmt.Fprintf(w, "%s\t%d\t%v\t%v\t%v\n", r.Topic, r.Partition, r.Replicas, r.AddingReplicas, r.RemovingReplicas)
		}
		return w.Flush()
	}
	if len(topics) != 1 || (replicas == "") == !cancelMove {
		return errors.New("reassign: name one topic and give either --replicas ids or --cancel (or use --list)")
	}
	var req kadm.AlterPartitionAssignmentsReq
	if cancelMove {
		req.CancelAssign(topics[0], partition)
	} else {
		var ids []int32
		for _, f := range strings.Split(replicas, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
			if err != nil {
				return fmt.Errorf("--replicas: %q is not a broker id", f)
			}
			ids = append(ids, int32(id))
		}
		req.Assign(topics[0], partition, ids)
	}
	resp, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		return err
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil {
			return fmt.Errorf("%s-%d: %w %s", r.Topic, r.Partition, r.Err, r.ErrMessage)
		}
		if cancelMove {
			fmt.Printf("cancelling the move of %s-%d\n", r.Topic, r.Partition)
		} else {
			fmt.Printf("moving %s-%d to %s (see: holdfast topic reassign --list %s)\n", r.Topic, r.Partition, replicas, r.Topic)
		}
	}
	return nil
}

// kvFlag collects repeated key=value flags.
type kvFlag struct{ m map[string]*string }

func (f *kvFlag) String() string { return "" }
func (f *kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	if f.m == nil {
		f.m = map[string]*string{}
	}
	f.m[k] = &v
	return nil
}

func produceCommand(args []string) error {
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	fs.Usage = flagUsage(fs, "produce [flags] TOPIC < lines")
	bootstrap := bootstrapFlag(fs)
	acks := fs.String("acks", "all", "all, 1 or 0")
	keySep := fs.String("key-separator", "", "split each line into key and value at the first occurrence of this string")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("name one topic")
	}
	topic := fs.Arg(0)
	opts := []kgo.Opt{kgo.DefaultProduceTopic(topic)}
	switch *acks {
	case "all", "-1":
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	case "0":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	default:
		return fmt.Errorf("acks %q: want all, 1 or 0", *acks)
	}
	cl, err := newClient(*bootstrap, opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := signalContext()
	defer cancel()
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var n int
	errc := make(chan error, 1)
	for sc.Scan() {
		line := sc.Text()
		r := &kgo.Record{Value: []byte(line)}
		if *keySep != "" {
			if k, v, ok := strings.Cut(line, *keySep); ok {
				r.Key, r.Value = []byte(k), []byte(v)
			}
		}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
		n++
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return err
	default:
	}
	fmt.Fprintf(os.Stderr, "produced %d records to %s (acks=%s)\n", n, topic, *acks)
	return sc.Err()
}

func consumeCommand(args []string) error {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	fs.Usage = flagUsage(fs, "consume [flags] TOPIC")
	bootstrap := bootstrapFlag(fs)
	from := fs.String("from", "earliest", "earliest or latest (without --group, or for a group with no commit)")
	group := fs.String("group", "", "consume in this consumer group, committing offsets")
	count := fs.Int("n", 0, "stop after this many records (0: run until interrupted)")
	committed := fs.Bool("read-committed", false, "read only committed transactional records")
	verbose := fs.Bool("v", false, "print partition, offset, timestamp and key before each value")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("name one topic")
	}
	reset := kgo.NewOffset().AtStart()
	if *from == "latest" {
		reset = kgo.NewOffset().AtEnd()
	} else if *from != "earliest" {
		return fmt.Errorf("--from %q: want earliest or latest", *from)
	}
	opts := []kgo.Opt{kgo.ConsumeTopics(fs.Arg(0)), kgo.ConsumeResetOffset(reset)}
	if *group != "" {
		opts = append(opts, kgo.ConsumerGroup(*group))
	}
	if *committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := newClient(*bootstrap, opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := signalContext()
	defer cancel()
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	seen := 0
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var errs []string
		fetches.EachError(func(t string, p int32, err error) { errs = append(errs, fmt.Sprintf("%s[%d]: %v", t, p, err)) })
		sort.Strings(errs)
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, e)
		}
		for it := fetches.RecordIter(); !it.Done(); {
			r := it.Next()
			if *verbose {
				fmt.Fprintf(out, "%d\t%d\t%s\t%s\t", r.Partition, r.Offset, r.Timestamp.UTC().Format(time.RFC3339Nano), r.Key)
			}
			out.Write(r.Value)
			out.WriteByte('\n')
			seen++
			if *count > 0 && seen >= *count {
				return nil
			}
		}
		out.Flush()
	}
}
