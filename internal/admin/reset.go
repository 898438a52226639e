package admin

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// ResetSpec says where ResetOffsets moves a group: exactly one of
// Earliest, Latest, Current, At (the first offset at or after it),
// Shifting (the committed offset plus Shift) or else Offset, each clamped
// to the log.
type ResetSpec struct {
	Earliest, Latest, Current bool
	At                        time.Time
	Offset                    int64
	Shift                     int64
	Shifting                  bool
}

// ResetRow is one partition's committed offset (-1: none) and the new one.
type ResetRow struct {
	Topic     string
	Partition int32
	Current   int64
	New       int64
}

// ErrGroupActive: a reset refused because the group has live members
// (their next commit would overwrite it).
type ErrGroupActive struct {
	Group, State string
	Members      int
}

func (e *ErrGroupActive) Error() string {
	return fmt.Sprintf("group %s is %s with %d members: stop its consumers before resetting", e.Group, e.State, e.Members)
}

// ResetOffsets computes new committed offsets for a group in topics (none:
// every topic it has committed offsets in), in the partitions parts names
// for a topic (nil: all of them), and with execute commits them. Like
// kafka-consumer-groups.sh it refuses to commit for a group with live
// members. The rows are sorted by topic and partition. The CLI's `group
// reset-offsets` and the console's reset form both call it.
func (c *Client) ResetOffsets(ctx context.Context, group string, topics []string, parts map[string]map[int32]bool, spec ResetSpec, execute bool) ([]ResetRow, error) {
	adm := c.A
	dg, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return nil, err
	}
	if g := dg[group]; g.Err != nil {
		return nil, fmt.Errorf("%s: %w", group, g.Err)
	} else if g.State != "Empty" && g.State != "Dead" && execute {
		return nil, &ErrGroupActive{Group: group, State: g.State, Members: len(g.Members)}
	}
	current, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	if len(topics) == 0 {
		for t := range current {
			topics = append(topics, t)
		}
		sort.Strings(topics)
		if len(topics) == 0 {
			return nil, fmt.Errorf("group %s has no committed offsets: name a topic", group)
		}
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	var target kadm.ListedOffsets
	switch {
	case spec.Earliest:
		target = starts
	case spec.Latest:
		target = ends
	case !spec.At.IsZero():
		if target, err = adm.ListOffsetsAfterMilli(ctx, spec.At.UnixMilli(), topics...); err != nil {
			return nil, err
		}
	}
	var ends1 []kadm.ListedOffset
	ends.Each(func(o kadm.ListedOffset) {
		if want := parts[o.Topic]; want == nil || want[o.Partition] {
			ends1 = append(ends1, o)
		}
	})
	for _, t := range topics {
		for p := range parts[t] {
			if _, ok := ends.Lookup(t, p); !ok {
				return nil, fmt.Errorf("%s-%d: UNKNOWN_TOPIC_OR_PARTITION: the topic has no partition %d", t, p, p)
			}
		}
	}
	sort.Slice(ends1, func(i, j int) bool {
		if ends1[i].Topic != ends1[j].Topic {
			return ends1[i].Topic < ends1[j].Topic
		}
		return ends1[i].Partition < ends1[j].Partition
	})
	next := kadm.Offsets{}
	var rows []ResetRow
	for _, end := range ends1 {
		if end.Err != nil {
			return nil, fmt.Errorf("%s-%d: %w", end.Topic, end.Partition, end.Err)
		}
		start, _ := starts.Lookup(end.Topic, end.Partition)
		committed, hasCommit := current.Lookup(end.Topic, end.Partition)
		hasCommit = hasCommit && committed.Err == nil && committed.At >= 0
		var at int64
		switch {
		case spec.Current || spec.Shifting:
			if !hasCommit {
				return nil, fmt.Errorf("%s-%d: the group has no committed offset to %s", end.Topic, end.Partition, map[bool]string{true: "shift", false: "keep"}[spec.Shifting])
			}
			at = min(max(committed.At+spec.Shift, start.Offset), end.Offset)
		case target != nil:
			o, ok := target.Lookup(end.Topic, end.Partition)
			if !ok || o.Err != nil {
				return nil, fmt.Errorf("%s-%d: no offset for the target", end.Topic, end.Partition)
			}
			at = o.Offset
			if at < 0 { // no record at or after the time: the end
				at = end.Offset
			}
		default:
			at = min(max(spec.Offset, start.Offset), end.Offset)
		}
		row := ResetRow{Topic: end.Topic, Partition: end.Partition, Current: -1, New: at}
		if hasCommit {
			row.Current = committed.At
		}
		rows = append(rows, row)
		next.Add(kadm.Offset{Topic: end.Topic, Partition: end.Partition, At: at, LeaderEpoch: -1})
	}
	if !execute {
		return rows, nil
	}
	resp, err := adm.CommitOffsets(ctx, group, next)
	if err != nil {
		return rows, err
	}
	return rows, resp.Error()
}
