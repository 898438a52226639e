package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// groupCommand is `holdfast group list|describe|reset-offsets`.
func groupCommand(args []string) error {
	const synopsis = "group list | describe GROUP... | reset-offsets GROUP --topic T (--to-earliest|--to-latest|--to-datetime TIME|--to-offset N) [--execute] [flags]"
	if len(args) == 0 {
		return fmt.Errorf("usage: holdfast %s", synopsis)
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("group "+sub, flag.ContinueOnError)
	fs.Usage = flagUsage(fs, synopsis)
	bootstrap := bootstrapFlag(fs)
	var topics listFlag
	fs.Var(&topics, "topic", "topic to reset, repeatable (reset-offsets); all the group's committed topics if none")
	earliest := fs.Bool("to-earliest", false, "reset to the log start offset (reset-offsets)")
	latest := fs.Bool("to-latest", false, "reset to the log end offset (reset-offsets)")
	datetime := fs.String("to-datetime", "", "reset to the first offset at or after this RFC 3339 time (reset-offsets)")
	toOffset := fs.Int64("to-offset", -1, "reset to this offset, clamped to the log (reset-offsets)")
	execute := fs.Bool("execute", false, "commit the new offsets; without it reset-offsets only shows them (dry run)")
	if err := fs.Parse(reorder(args)); err != nil {
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
	switch sub {
	case "list":
		return listGroups(ctx, adm)
	case "describe":
		if fs.NArg() == 0 {
			return errors.New("name at least one group")
		}
		return describeGroups(ctx, adm, fs.Args())
	case "reset-offsets":
		if fs.NArg() != 1 {
			return errors.New("name exactly one group")
		}
		n := 0
		for _, set := range []bool{*earliest, *latest, *datetime != "", *toOffset >= 0} {
			if set {
				n++
			}
		}
		if n != 1 {
			return errors.New("choose one of --to-earliest, --to-latest, --to-datetime, --to-offset")
		}
		spec := resetSpec{earliest: *earliest, latest: *latest, offset: *toOffset}
		if *datetime != "" {
			ts, err := time.Parse(time.RFC3339, *datetime)
			if err != nil {
				return fmt.Errorf("--to-datetime: %w", err)
			}
			spec.at = ts
		}
		return resetOffsets(ctx, adm, fs.Arg(0), topics, spec, *execute)
	default:
		return fmt.Errorf("unknown group subcommand %q; usage: holdfast %s", sub, synopsis)
	}
}

// reorder moves flags before positional arguments so `describe G --bootstrap
// X` works as well as `describe --bootstrap X G`.
func reorder(args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		boolean := name == "execute" || name == "to-earliest" || name == "to-latest"
		if !strings.Contains(a, "=") && !boolean && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return append(flags, pos...)
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func listGroups(ctx context.Context, adm *kadm.Client) error {
	gs, err := adm.ListGroups(ctx)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "GROUP\tSTATE\tPROTOCOL TYPE")
	for _, g := range gs.Sorted() {
		fmt.Fprintf(w, "%s\t%s\t%s\n", g.Group, g.State, g.ProtocolType)
	}
	return w.Flush()
}

func describeGroups(ctx context.Context, adm *kadm.Client, groups []string) error {
	lags, err := adm.Lag(ctx, groups...)
	if err != nil {
		return err
	}
	for i, name := range groups {
		l, ok := lags[name]
		if !ok {
			return fmt.Errorf("%s: no answer", name)
		}
		if err := l.Error(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if i > 0 {
			fmt.Println()
		}
		fmt.Printf("group %s  state %s  protocol %s/%s  coordinator %d\n", name, l.State, l.ProtocolType, l.Protocol, l.Coordinator.NodeID)
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "MEMBER\tINSTANCE\tCLIENT\tHOST\tASSIGNED")
		for _, m := range l.Members {
			inst := "-"
			if m.InstanceID != nil {
				inst = *m.InstanceID
			}
			var parts []string
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range a.Topics {
					parts = append(parts, fmt.Sprintf("%s%v", t.Topic, t.Partitions))
				}
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.MemberID, inst, m.ClientID, m.ClientHost, strings.Join(parts, " "))
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "TOPIC\tPARTITION\tCOMMITTED\tLOG END\tLAG\tMEMBER")
		var total int64
		for _, pl := range l.Lag.Sorted() {
			member := "-"
			if pl.Member != nil {
				member = pl.Member.MemberID
			}
			committed, lag := "-", "-"
			if pl.Commit.At >= 0 {
				committed = fmt.Sprint(pl.Commit.At)
			}
			if pl.Err == nil && pl.Lag >= 0 {
				lag = fmt.Sprint(pl.Lag)
				total += pl.Lag
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\t%s\n", pl.Topic, pl.Partition, committed, pl.End.Offset, lag, member)
		}
		fmt.Fprintf(w, "TOTAL\t\t\t\t%d\t\n", total)
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return nil
}

type resetSpec struct {
	earliest, latest bool
	at               time.Time
	offset           int64
}

// resetOffsets computes new committed offsets for a group and, with
// execute, commits them. Like Kafka's tool it refuses a group with live
// members: their next commit would overwrite the reset.
func resetOffsets(ctx context.Context, adm *kadm.Client, group string, topics []string, spec resetSpec, execute bool) error {
	dg, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return err
	}
	if g := dg[group]; g.Err != nil {
		return fmt.Errorf("%s: %w", group, g.Err)
	} else if g.State != "Empty" && g.State != "Dead" && execute {
		return fmt.Errorf("group %s is %s with %d members: stop its consumers before resetting", group, g.State, len(g.Members))
	}
	current, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return err
	}
	if len(topics) == 0 {
		for t := range current {
			topics = append(topics, t)
		}
		sort.Strings(topics)
		if len(topics) == 0 {
			return fmt.Errorf("group %s has no committed offsets: name --topic", group)
		}
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return err
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return err
	}
	var target kadm.ListedOffsets
	switch {
	case spec.earliest:
		target = starts
	case spec.latest:
		target = ends
	case !spec.at.IsZero():
		if target, err = adm.ListOffsetsAfterMilli(ctx, spec.at.UnixMilli(), topics...); err != nil {
			return err
		}
	}
	next := kadm.Offsets{}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TOPIC\tPARTITION\tCURRENT\tNEW")
	var rows []kadm.ListedOffset
	ends.Each(func(o kadm.ListedOffset) { rows = append(rows, o) })
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Topic != rows[j].Topic {
			return rows[i].Topic < rows[j].Topic
		}
		return rows[i].Partition < rows[j].Partition
	})
	for _, end := range rows {
		if end.Err != nil {
			return fmt.Errorf("%s-%d: %w", end.Topic, end.Partition, end.Err)
		}
		start, _ := starts.Lookup(end.Topic, end.Partition)
		var at int64
		if target != nil {
			o, ok := target.Lookup(end.Topic, end.Partition)
			if !ok || o.Err != nil {
				return fmt.Errorf("%s-%d: no offset for the target", end.Topic, end.Partition)
			}
			at = o.Offset
			if at < 0 { // no record at or after the time: the end
				at = end.Offset
			}
		} else {
			at = min(max(spec.offset, start.Offset), end.Offset)
		}
		cur := "-"
		if c, ok := current.Lookup(end.Topic, end.Partition); ok && c.Err == nil && c.At >= 0 {
			cur = fmt.Sprint(c.At)
		}
		next.Add(kadm.Offset{Topic: end.Topic, Partition: end.Partition, At: at, LeaderEpoch: -1})
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\n", end.Topic, end.Partition, cur, at)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if !execute {
		fmt.Println("dry run: nothing committed; add --execute to commit these offsets")
		return nil
	}
	resp, err := adm.CommitOffsets(ctx, group, next)
	if err != nil {
		return err
	}
	if err := resp.Error(); err != nil {
		return err
	}
	fmt.Printf("committed %d offsets for group %s\n", len(rows), group)
	return nil
}
