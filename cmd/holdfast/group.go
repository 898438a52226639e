package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"holdfast/internal/admin"
)

func init() { addCommand(newGroupCmd) }

func newGroupCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "group",
		Short: "List, describe (lag), reset and delete consumer groups",
	}
	conn := clientCommand(c)
	c.AddCommand(groupListCmd(conn), groupDescribeCmd(conn), groupResetCmd(conn), groupDeleteCmd(conn))
	return c
}

func groupListCmd(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List consumer groups with their state",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				gs, err := c.ListGroups(ctx)
				if err != nil {
					return err
				}
				w := tw(cmd.OutOrStdout())
				fmt.Fprintln(w, "GROUP\tSTATE\tPROTOCOL TYPE\tCOORDINATOR")
				for _, g := range gs {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\n", g.Group, g.State, g.ProtocolType, g.Coordinator)
				}
				return w.Flush()
			})
		},
	}
}

func groupDescribeCmd(conn *connFlags) *cobra.Command {
	var noTimeLag bool
	c := &cobra.Command{
		Use:               "describe GROUP...",
		ValidArgsFunction: completeNames(conn, true),
		Short:             "Show members, and lag per partition and per member, in records and in time",
		Long: `Show a group's members with their assignment and lag, and per partition the
committed offset, the log end (high watermark), the lag in records and the
time lag: how old the next record the group will read is (read with one
fetch per lagging partition; --no-time-lag skips it).`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, groups []string) error {
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				// Share groups (KIP-932) are described with their own APIs.
				var rest []string
				shared, _ := c.A.DescribeShareGroups(ctx, groups...)
				for _, g := range groups {
					if sg, ok := shared[g]; ok && sg.Err == nil {
						if err := printShareGroup(ctx, cmd.OutOrStdout(), c, sg); err != nil {
							return err
						}
						continue
					}
					rest = append(rest, g)
				}
				if len(rest) == 0 {
					return nil
				}
				gs, err := c.Groups(ctx, !noTimeLag, rest...)
				if err != nil {
					return err
				}
				return printGroups(cmd.OutOrStdout(), gs)
			})
		},
	}
	c.Flags().BoolVar(&noTimeLag, "no-time-lag", false, "do not read records for the time lag")
	return c
}

func printGroups(out io.Writer, gs []admin.Group) error {
	for i, g := range gs {
		if g.Err != "" {
			return fmt.Errorf("group %s: %s", g.Name, g.Err)
		}
		if g.State == "Dead" && len(g.Partitions) == 0 && len(g.Members) == 0 {
			return fmt.Errorf("group %s does not exist (GROUP_ID_NOT_FOUND)", g.Name)
		}
		if i > 0 {
			fmt.Fprintln(out)
		}
		// An Empty group has a protocol type but no chosen assignor yet.
		proto := g.ProtocolType + "/" + g.Protocol
		if g.Protocol == "" {
			proto = cmp.Or(g.ProtocolType, "-")
		}
		fmt.Fprintf(out, "group %s  state %s  protocol %s  coordinator %d  lag %d  time lag %s\n",
			g.Name, g.State, proto, g.Coordinator, g.TotalLag, admin.FormatAge(g.MaxTimeLag))
		w := tw(out)
		fmt.Fprintln(w, "MEMBER\tINSTANCE\tCLIENT\tHOST\tLAG\tASSIGNED")
		for _, m := range g.Members {
			inst := m.InstanceID
			if inst == "" {
				inst = "-"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\n", m.ID, inst, m.ClientID, m.Host, m.Lag, strings.Join(m.Assigned, " "))
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "TOPIC\tPARTITION\tCOMMITTED\tLOG-END\tLAG\tTIME-LAG\tMEMBER")
		for _, p := range g.Partitions {
			committed, lag := "-", "-"
			if p.Committed >= 0 {
				committed = strconv.FormatInt(p.Committed, 10)
			}
			if p.Lag >= 0 {
				lag = strconv.FormatInt(p.Lag, 10)
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\t%s\t%s\n", p.Topic, p.Partition, committed, p.End, lag, admin.FormatAge(p.TimeLag), p.Member)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// printShareGroup shows a share group: its members and assignments, and
// per partition the share-partition start offset (SPSO: everything below
// it is acknowledged or archived), the log end, and the records from the
// one to the other (acquired, available or not yet delivered).
func printShareGroup(ctx context.Context, out io.Writer, c *admin.Client, g kadm.DescribedShareGroup) error {
	fmt.Fprintf(out, "share group %s  state %s  epoch %d  coordinator %d\n", g.GroupID, g.GroupState, g.GroupEpoch, g.Coordinator.NodeID)
	w := tw(out)
	fmt.Fprintln(w, "MEMBER\tCLIENT\tHOST\tEPOCH\tASSIGNED")
	for _, m := range g.Members {
		var assigned []string
		for _, tp := range m.Assignment.Sorted() {
			for _, p := range tp.Partitions {
				assigned = append(assigned, fmt.Sprintf("%s/%d", tp.Topic, p))
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", m.MemberID, m.ClientID, m.ClientHost, m.MemberEpoch, strings.Join(assigned, " "))
	}
	offs, err := c.A.DescribeShareGroupOffsets(ctx, g.GroupID)
	if err != nil {
		return err
	}
	so := offs[g.GroupID]
	if so.Err != nil {
		return fmt.Errorf("share group %s offsets: %w", g.GroupID, so.Err)
	}
	sorted := so.Offsets.Sorted()
	var topics []string
	for _, o := range sorted {
		topics = append(topics, o.Topic)
	}
	ends, _ := c.A.ListEndOffsets(ctx, topics...)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "TOPIC\tPARTITION\tSTART-OFFSET\tLOG-END\tIN-FLIGHT-OR-PENDING")
	for _, o := range sorted {
		end, pending := "-", "-"
		if lo, ok := ends.Lookup(o.Topic, o.Partition); ok && lo.Err == nil {
			end = strconv.FormatInt(lo.Offset, 10)
			pending = strconv.FormatInt(max(0, lo.Offset-o.StartOffset), 10)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\n", o.Topic, o.Partition, o.StartOffset, end, pending)
	}
	return w.Flush()
}

func groupDeleteCmd(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:               "delete GROUP...",
		ValidArgsFunction: completeNames(conn, true),
		Short:             "Delete empty groups and their committed offsets (DeleteGroups)",
		Args:              minArgs(1),
		RunE: func(cmd *cobra.Command, groups []string) error {
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				resp, err := c.A.DeleteGroups(ctx, groups...)
				if err != nil {
					return err
				}
				for _, g := range groups {
					r, ok := resp[g]
					if !ok {
						return fmt.Errorf("group %s: no answer", g)
					}
					if r.Err != nil {
						return fmt.Errorf("group %s: %w", g, r.Err)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "deleted group %s\n", g)
				}
				return nil
			})
		},
	}
}

// parseResetTopics reads kafka-consumer-groups.sh's --topic values: a
// topic, or topic:p,q,... for some of its partitions (nil: all).
func parseResetTopics(vals []string) ([]string, map[string]map[int32]bool, error) {
	var topics []string
	parts := map[string]map[int32]bool{}
	for _, v := range vals {
		name, list, has := strings.Cut(v, ":")
		if name == "" {
			return nil, nil, usagef("--topic %q: want TOPIC or TOPIC:P,Q", v)
		}
		if _, seen := parts[name]; !seen {
			topics = append(topics, name)
			parts[name] = nil
		}
		if !has {
			continue
		}
		if parts[name] == nil {
			parts[name] = map[int32]bool{}
		}
		for _, f := range strings.Split(list, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
			if err != nil || n < 0 {
				return nil, nil, usagef("--topic %q: partition %q is not a number", v, f)
			}
			parts[name][int32(n)] = true
		}
	}
	return topics, parts, nil
}

// parseResetTime reads --to-datetime: RFC 3339, or Kafka's
// yyyy-MM-ddTHH:mm:ss.SSS (local time, as kafka-consumer-groups.sh).
func parseResetTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05.000", "2006-01-02T15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, usagef("--to-datetime %q: want RFC 3339 (2026-01-02T15:04:05Z) or yyyy-MM-ddTHH:mm:ss.SSS", s)
}

var isoDuration = regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$`)

// parseISODuration reads --by-duration: Kafka's ISO-8601 PnDTnHnMnS, or a
// Go duration (90m).
func parseISODuration(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return d, nil
	}
	m := isoDuration.FindStringSubmatch(strings.ToUpper(s))
	if m == nil || s == "P" || strings.HasSuffix(strings.ToUpper(s), "T") {
		return 0, usagef("--by-duration %q: want PnDTnHnMnS (P1DT2H) or a duration (90m)", s)
	}
	var d time.Duration
	for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute} {
		if m[i+1] != "" {
			n, _ := strconv.ParseInt(m[i+1], 10, 64)
			d += time.Duration(n) * unit
		}
	}
	if m[4] != "" {
		f, _ := strconv.ParseFloat(m[4], 64)
		d += time.Duration(f * float64(time.Second))
	}
	return d, nil
}

func groupResetCmd(conn *connFlags) *cobra.Command {
	var (
		topics                    []string
		earliest, latest, current bool
		datetime, duration        string
		toOffset, shiftBy         int64
		execute, dryRun           bool
	)
	c := &cobra.Command{
		Use:               "reset-offsets GROUP (--to-earliest | --to-latest | --to-current | --to-datetime TIME | --by-duration D | --to-offset N | --shift-by N) [--topic T[:P,Q]]... [--dry-run | --execute]",
		Short:             "Move a group's committed offsets (a dry run unless --execute)",
		ValidArgsFunction: completeNames(conn, true),
		Long: `Compute new committed offsets for a group and, with --execute, commit them.
Like Kafka's tool it refuses a group with live members: their next commit
would overwrite the reset.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			shifting := cmd.Flags().Changed("shift-by")
			n := 0
			for _, set := range []bool{earliest, latest, current, datetime != "", duration != "", toOffset >= 0, shifting} {
				if set {
					n++
				}
			}
			if n != 1 {
				return usagef("group reset-offsets: choose one of --to-earliest, --to-latest, --to-current, --to-datetime, --by-duration, --to-offset, --shift-by")
			}
			if execute && dryRun {
				return usagef("group reset-offsets: --dry-run or --execute, not both")
			}
			spec := admin.ResetSpec{Earliest: earliest, Latest: latest, Current: current, Offset: toOffset, Shift: shiftBy, Shifting: shifting}
			switch {
			case datetime != "":
				ts, err := parseResetTime(datetime)
				if err != nil {
					return err
				}
				spec.At = ts
			case duration != "":
				d, err := parseISODuration(duration)
				if err != nil {
					return err
				}
				spec.At = time.Now().Add(-d)
			}
			names, parts, err := parseResetTopics(topics)
			if err != nil {
				return err
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				return resetOffsets(ctx, cmd.OutOrStdout(), c, args[0], names, parts, spec, execute)
			})
		},
	}
	f := c.Flags()
	f.StringArrayVar(&topics, "topic", nil, "topic to reset, or TOPIC:P,Q for some partitions (kafka-consumer-groups.sh's syntax), repeatable; all the group's committed topics if none")
	f.BoolVar(&earliest, "to-earliest", false, "reset to the log start offset")
	f.BoolVar(&latest, "to-latest", false, "reset to the log end offset")
	f.BoolVar(&current, "to-current", false, "reset to the committed offset (a partition with none: an error)")
	f.StringVar(&datetime, "to-datetime", "", "reset to the first offset at or after this time (RFC 3339, or yyyy-MM-ddTHH:mm:ss.SSS local)")
	f.StringVar(&duration, "by-duration", "", "reset to the first offset at or after this long ago (PnDTnHnMnS, or 90m)")
	f.Int64Var(&toOffset, "to-offset", -1, "reset to this offset, clamped to the log")
	f.Int64Var(&shiftBy, "shift-by", 0, "move the committed offset by N (negative: back), clamped to the log")
	f.BoolVar(&dryRun, "dry-run", false, "only show the new offsets (the default without --execute)")
	f.BoolVar(&execute, "execute", false, "commit the new offsets; without it only show them (dry run)")
	return c
}

// resetOffsets prints admin.ResetOffsets' rows and what was done.
func resetOffsets(ctx context.Context, out io.Writer, c *admin.Client, group string, topics []string, parts map[string]map[int32]bool, spec admin.ResetSpec, execute bool) error {
	rows, err := c.ResetOffsets(ctx, group, topics, parts, spec, execute)
	if err != nil && len(rows) == 0 {
		return err
	}
	w := tw(out)
	fmt.Fprintln(w, "TOPIC\tPARTITION\tCURRENT\tNEW")
	for _, r := range rows {
		cur := "-"
		if r.Current >= 0 {
			cur = fmt.Sprint(r.Current)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\n", r.Topic, r.Partition, cur, r.New)
	}
	if ferr := w.Flush(); ferr != nil {
		return ferr
	}
	if err != nil {
		return err
	}
	if !execute {
		fmt.Fprintln(out, "dry run: nothing committed; add --execute to commit these offsets")
		return nil
	}
	fmt.Fprintf(out, "committed %d offsets for group %s\n", len(rows), group)
	return nil
}
