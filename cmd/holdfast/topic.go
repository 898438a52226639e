package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/admin"
)

func init() { addCommand(newTopicCmd) }

func newTopicCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "topic",
		Short: "List, describe, create, delete, configure and grow topics; move partitions",
	}
	conn := clientCommand(c)
	c.AddCommand(topicListCmd(conn), topicDescribeCmd(conn), topicCreateCmd(conn), topicDeleteCmd(conn),
		topicAlterConfigCmd(conn), topicAddPartitionsCmd(conn), topicReassignCmd(conn), topicRestoreCmd(conn))
	return c
}

func tw(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func topicListCmd(conn *connFlags) *cobra.Command {
	var internal bool
	c := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List topics with their partition counts",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				details, err := c.A.ListTopicsWithInternal(ctx)
				if err != nil {
					return err
				}
				w := tw(cmd.OutOrStdout())
				fmt.Fprintln(w, "TOPIC\tPARTITIONS\tREPLICAS")
				for _, t := range details.Sorted() {
					if t.IsInternal && !internal {
						continue
					}
					fmt.Fprintf(w, "%s\t%d\t%d\n", t.Topic, len(t.Partitions), t.Partitions.NumReplicas())
				}
				return w.Flush()
			})
		},
	}
	c.Flags().BoolVar(&internal, "internal", false, "include internal topics (__consumer_offsets, __transaction_state)")
	return c
}

func topicDescribeCmd(conn *connFlags) *cobra.Command {
	var noConfigs bool
	c := &cobra.Command{
		Use:               "describe TOPIC...",
		ValidArgsFunction: completeNames(conn, false),
		Short:             "Show partitions (leader, epoch, replicas, ISR, log start, high watermark) and configs",
		Args:              minArgs(1),
		RunE: func(cmd *cobra.Command, topics []string) error {
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				cl, err := c.ClusterStatus(ctx, topics...)
				if err != nil {
					return err
				}
				// A partition's own error (LEADER_NOT_AVAILABLE right after
				// create or add-partitions, while its group elects) leaves
				// its offsets out: shown as "-", not a failed describe.
				offs, err := c.TopicOffsets(ctx, topics...)
				if err != nil && offs == nil {
					return err
				}
				out := cmd.OutOrStdout()
				for i, t := range cl.Topics {
					if i > 0 {
						fmt.Fprintln(out)
					}
					fmt.Fprintf(out, "topic %s  partitions %d\n", t.Name, len(t.Partitions))
					w := tw(out)
					fmt.Fprintln(w, "PARTITION\tLEADER\tEPOCH\tREPLICAS\tISR\tLOG-START\tHIGH-WATERMARK\tERROR")
					for _, p := range t.Partitions {
						start, end := "-", "-"
						if o, ok := offs[t.Name][p.Partition]; ok {
							start, end = strconv.FormatInt(o.Start, 10), strconv.FormatInt(o.End, 10)
						}
						fmt.Fprintf(w, "%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Partition, p.Leader, p.Epoch, ids(p.Replicas), ids(p.ISR), start, end, p.Err)
					}
					if err := w.Flush(); err != nil {
						return err
					}
					if noConfigs {
						continue
					}
					cfgs, err := c.TopicConfigs(ctx, t.Name)
					if err != nil {
						return err
					}
					w = tw(out)
					fmt.Fprintln(w, "CONFIG\tVALUE\tSOURCE")
					for _, cf := range cfgs {
						fmt.Fprintf(w, "%s\t%s\t%s\n", cf.Name, cf.Value, cf.Source)
					}
					if err := w.Flush(); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	c.Flags().BoolVar(&noConfigs, "no-configs", false, "leave the configs out")
	return c
}

func ids(v []int32) string {
	s := make([]string, len(v))
	for i, id := range v {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}

func topicCreateCmd(conn *connFlags) *cobra.Command {
	var (
		partitions int32
		rf         int16
		configs    []string
		ifNotExist bool
		assignment string
	)
	c := &cobra.Command{
		Use:   "create TOPIC...",
		Short: "Create topics",
		Example: `  holdfast topic create orders --partitions 6 --replication-factor 3
  holdfast topic create t --config retention.ms=3600000 --config cleanup.policy=delete
  holdfast topic create pinned --replica-assignment 1:2,2:3,3:1`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, topics []string) error {
			cfg, err := kvList("config", configs)
			if err != nil {
				return err
			}
			m := map[string]*string{}
			for k, v := range cfg {
				m[k] = &v
			}
			var assign [][]int32
			if assignment != "" {
				if cmd.Flags().Changed("partitions") || cmd.Flags().Changed("replication-factor") {
					return usagef("topic create: --replica-assignment gives the partitions and their replicas; leave out --partitions and --replication-factor")
				}
				if assign, err = parseAssignment(assignment); err != nil {
					return err
				}
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				var resp kadm.CreateTopicResponses
				var err error
				if assign != nil {
					resp, err = createAssigned(ctx, c, assign, m, topics)
				} else {
					resp, err = c.A.CreateTopics(ctx, partitions, rf, m, topics...)
				}
				if err != nil {
					return err
				}
				for _, r := range resp.Sorted() {
					if r.Err != nil {
						if ifNotExist && strings.Contains(r.Err.Error(), "TOPIC_ALREADY_EXISTS") {
							fmt.Fprintf(cmd.OutOrStdout(), "%s exists\n", r.Topic)
							continue
						}
						return fmt.Errorf("%s: %w %s", r.Topic, r.Err, r.ErrMessage)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "created %s (%d partitions, replication factor %d)\n", r.Topic, r.NumPartitions, r.ReplicationFactor)
				}
				return nil
			})
		},
	}
	c.Flags().Int32VarP(&partitions, "partitions", "p", -1, "partitions; -1 (the default) for the broker's num.partitions, as kafka-topics.sh")
	c.Flags().Int16VarP(&rf, "replication-factor", "r", -1, "replicas per partition, -1 for the broker's default.replication.factor")
	c.Flags().StringArrayVarP(&configs, "config", "c", nil, "topic config key=value, repeatable (retention.ms=3600000)")
	c.Flags().BoolVar(&ifNotExist, "if-not-exists", false, "a topic that exists is not an error")
	c.Flags().StringVar(&assignment, "replica-assignment", "", "each partition's replicas, Kafka's syntax: partitions separated by commas, the broker ids of one by colons, the first its preferred leader (1:2,2:3,3:1)")
	return c
}

// topicRestoreCmd creates a topic from the objects tiered storage left in
// the brokers' bucket (docs/tiered-storage.md, Restore): CreateTopics with
// remote.storage.enable=true and remote.storage.restore.from; the broker
// takes the partition count and the offsets from the objects.
func topicRestoreCmd(conn *connFlags) *cobra.Command {
	var (
		from       string
		rf         int16
		partitions int32
		configs    []string
	)
	c := &cobra.Command{
		Use:   "restore TOPIC",
		Short: "Create a topic from what its objects in the tiered-storage bucket hold (a cluster that lost every disk)",
		Example: `  holdfast topic restore orders
  holdfast topic restore orders --from orders-Qx3vX0RkTXuLr1Zc9kq3Ag --replication-factor 3`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := kvList("config", configs)
			if err != nil {
				return err
			}
			if from == "" {
				from = args[0]
			}
			cfg["remote.storage.enable"] = "true"
			cfg["remote.storage.restore.from"] = from
			m := map[string]*string{}
			for k, v := range cfg {
				m[k] = &v
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				resp, err := c.A.CreateTopics(ctx, partitions, rf, m, args[0])
				if err != nil {
					return err
				}
				r := resp[args[0]]
				if r.Err != nil {
					return fmt.Errorf("%s: %w %s", r.Topic, r.Err, r.ErrMessage)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "restored %s from the object store (%d partitions, replication factor %d)\n", r.Topic, r.NumPartitions, r.ReplicationFactor)
				return nil
			})
		},
	}
	c.Flags().StringVar(&from, "from", "", "the old topic's <topic>-<topic id> directory in the bucket; needed only when the bucket holds several topics of that name")
	c.Flags().Int16VarP(&rf, "replication-factor", "r", -1, "replicas per partition, -1 for the broker's default.replication.factor")
	c.Flags().Int32VarP(&partitions, "partitions", "p", -1, "the old topic's partition count; -1: as many as its uploads recorded (objects uploaded before that was recorded: up to the highest partition that uploaded a segment)")
	c.Flags().StringArrayVarP(&configs, "config", "c", nil, "other topic configs key=value, repeatable (local.retention.ms=3600000)")
	return c
}

// parseAssignment reads kafka-topics.sh's --replica-assignment: one
// colon-separated list of broker ids per partition, the partitions
// separated by commas.
func parseAssignment(s string) ([][]int32, error) {
	var out [][]int32
	for i, part := range strings.Split(s, ",") {
		var reps []int32
		for _, id := range strings.Split(part, ":") {
			n, err := strconv.ParseInt(strings.TrimSpace(id), 10, 32)
			if err != nil || n < 0 {
				return nil, usagef("--replica-assignment: partition %d: %q is not a broker id (want e.g. 1:2,2:3)", i, id)
			}
			reps = append(reps, int32(n))
		}
		out = append(out, reps)
	}
	return out, nil
}

// createAssigned is CreateTopics with a manual replica assignment (kadm
// has no call for it): the partition count and replication factor are -1,
// as Kafka requires with one.
func createAssigned(ctx context.Context, c *admin.Client, assign [][]int32, configs map[string]*string, topics []string) (kadm.CreateTopicResponses, error) {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	for _, name := range topics {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, -1, -1
		for p, reps := range assign {
			a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
			a.Partition, a.Replicas = int32(p), reps
			rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
		}
		for k, v := range configs {
			cfg := kmsg.NewCreateTopicsRequestTopicConfig()
			cfg.Name, cfg.Value = k, v
			rt.Configs = append(rt.Configs, cfg)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, c.K)
	if err != nil {
		return nil, err
	}
	out := kadm.CreateTopicResponses{}
	for _, t := range resp.Topics {
		r := kadm.CreateTopicResponse{
			Topic: t.Topic, ID: kadm.TopicID(t.TopicID), Err: kerr.ErrorForCode(t.ErrorCode),
			NumPartitions: int32(len(assign)), ReplicationFactor: int16(len(assign[0])),
		}
		if t.ErrorMessage != nil {
			r.ErrMessage = *t.ErrorMessage
		}
		out[t.Topic] = r
	}
	return out, nil
}

func topicDeleteCmd(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:               "delete TOPIC...",
		ValidArgsFunction: completeNames(conn, false),
		Short:             "Delete topics and their data",
		Args:              minArgs(1),
		RunE: func(cmd *cobra.Command, topics []string) error {
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				resp, err := c.A.DeleteTopics(ctx, topics...)
				if err != nil {
					return err
				}
				for _, r := range resp.Sorted() {
					if r.Err != nil {
						return fmt.Errorf("%s: %w", r.Topic, r.Err)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "deleted %s\n", r.Topic)
				}
				return nil
			})
		},
	}
}

func topicAlterConfigCmd(conn *connFlags) *cobra.Command {
	var set, del []string
	c := &cobra.Command{
		Use:               "alter-config TOPIC...",
		ValidArgsFunction: completeNames(conn, false),
		Short:             "Set or remove topic configs (IncrementalAlterConfigs)",
		Example:           "  holdfast topic alter-config orders --set retention.ms=86400000 --delete segment.bytes",
		Args:              minArgs(1),
		RunE: func(cmd *cobra.Command, topics []string) error {
			kv, err := kvList("set", set)
			if err != nil {
				return err
			}
			if len(kv)+len(del) == 0 {
				return usagef("topic alter-config: give --set key=value or --delete key")
			}
			var alter []kadm.AlterConfig
			keys := make([]string, 0, len(kv))
			for k := range kv {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				v := kv[k]
				alter = append(alter, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: &v})
			}
			for _, k := range del {
				alter = append(alter, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				resp, err := c.A.AlterTopicConfigs(ctx, alter, topics...)
				if err != nil {
					return err
				}
				for _, r := range resp {
					if r.Err != nil {
						return fmt.Errorf("%s: %w %s", r.Name, r.Err, r.ErrMessage)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "altered %s\n", r.Name)
				}
				return nil
			})
		},
	}
	c.Flags().StringArrayVar(&set, "set", nil, "config key=value to set, repeatable")
	c.Flags().StringArrayVar(&del, "delete", nil, "config to remove (back to the broker default), repeatable")
	return c
}

func topicAddPartitionsCmd(conn *connFlags) *cobra.Command {
	var (
		total      int
		assignment string
	)
	c := &cobra.Command{
		Use:               "add-partitions TOPIC... --partitions N",
		ValidArgsFunction: completeNames(conn, false),
		Short:             "Grow topics to N partitions (CreatePartitions)",
		Example: `  holdfast topic add-partitions orders --partitions 12
  holdfast topic add-partitions pinned --partitions 4 --replica-assignment 1:2,2:3,3:1,1:3`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, topics []string) error {
			if total <= 0 {
				return usagef("topic add-partitions: --partitions N (the new total) is required")
			}
			var assign [][]int32
			if assignment != "" {
				if len(topics) != 1 {
					return usagef("topic add-partitions: --replica-assignment is for one topic")
				}
				var err error
				if assign, err = parseAssignment(assignment); err != nil {
					return err
				}
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				var resp kadm.CreatePartitionsResponses
				var err error
				if assign != nil {
					resp, err = addAssigned(ctx, c, topics[0], total, assign)
				} else {
					resp, err = c.A.UpdatePartitions(ctx, total, topics...)
				}
				if err != nil {
					return err
				}
				for _, r := range resp.Sorted() {
					if r.Err != nil {
						return fmt.Errorf("%s: %w %s", r.Topic, r.Err, r.ErrMessage)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s now has %d partitions\n", r.Topic, total)
				}
				return nil
			})
		},
	}
	c.Flags().IntVarP(&total, "partitions", "p", 0, "the new total number of partitions")
	c.Flags().StringVar(&assignment, "replica-assignment", "", "replicas of every partition (as kafka-topics.sh: the existing ones first, which stay as they are) or of the new ones only; syntax as topic create's")
	return c
}

// addAssigned is CreatePartitions with a manual assignment of the new
// partitions. Like kafka-topics.sh --alter, it takes the whole topic's
// assignment and sends the new partitions' part; a list of only the new
// partitions is taken as it is.
func addAssigned(ctx context.Context, c *admin.Client, topic string, total int, assign [][]int32) (kadm.CreatePartitionsResponses, error) {
	td, err := c.A.ListTopics(ctx, topic)
	if err != nil {
		return nil, err
	}
	d, ok := td[topic]
	switch {
	case !ok:
		return nil, fmt.Errorf("%s: %w", topic, kerr.UnknownTopicOrPartition)
	case d.Err != nil:
		return nil, fmt.Errorf("%s: %w", topic, d.Err)
	}
	existing := len(d.Partitions)
	switch len(assign) {
	case total:
		assign = assign[existing:]
	case total - existing:
	default:
		return nil, usagef("--replica-assignment names %d partitions: give all %d, or the %d new ones", len(assign), total, total-existing)
	}
	req := kmsg.NewPtrCreatePartitionsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, int32(total)
	for _, reps := range assign {
		a := kmsg.NewCreatePartitionsRequestTopicAssignment()
		a.Replicas = reps
		rt.Assignment = append(rt.Assignment, a)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.K)
	if err != nil {
		return nil, err
	}
	out := kadm.CreatePartitionsResponses{}
	for _, t := range resp.Topics {
		r := kadm.CreatePartitionsResponse{Topic: t.Topic, Err: kerr.ErrorForCode(t.ErrorCode)}
		if t.ErrorMessage != nil {
			r.ErrMessage = *t.ErrorMessage
		}
		out[t.Topic] = r
	}
	return out, nil
}

func topicReassignCmd(conn *connFlags) *cobra.Command {
	var (
		partition  int32
		replicas   string
		cancelMove bool
		list       bool
	)
	c := &cobra.Command{
		Use:   "reassign TOPIC --partition P (--replicas IDS | --cancel) | reassign --list [TOPIC...]",
		Short: "Move a partition to other brokers, cancel a move, or list moves in progress",
		Long: `Move a partition to other brokers (AlterPartitionReassignments): the partition
leader adds each new replica as a Raft learner, promotes it once caught up,
then removes the old ones. --cancel goes back to the original replicas;
--list shows the moves in progress.`,
		RunE: func(cmd *cobra.Command, topics []string) error {
			if !list && (len(topics) != 1 || (replicas == "") == !cancelMove) {
				return usagef("topic reassign: name one topic and give either --replicas ids or --cancel (or use --list)")
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				return reassign(ctx, cmd.OutOrStdout(), c.A, topics, partition, replicas, cancelMove, list)
			})
		},
	}
	c.Flags().Int32Var(&partition, "partition", 0, "partition to move")
	c.Flags().StringVar(&replicas, "replicas", "", "the partition's new replica broker ids, e.g. 2,3,4")
	c.Flags().BoolVar(&cancelMove, "cancel", false, "cancel the partition's move (back to its original replicas)")
	c.Flags().BoolVar(&list, "list", false, "list the moves in progress of the named topics (all topics if none)")
	return c
}

// reassign is `topic reassign`: start (--replicas) or cancel (--cancel)
// moving one partition, or --list the moves in progress.
func reassign(ctx context.Context, out io.Writer, adm *kadm.Client, topics []string, partition int32, replicas string, cancelMove, list bool) error {
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
		w := tw(out)
		fmt.Fprintln(w, "TOPIC\tPARTITION\tREPLICAS\tADDING\tREMOVING")
		for _, r := range resp.Sorted() {
			fmt.Fprintf(w, "%s\t%d\t%v\t%v\t%v\n", r.Topic, r.Partition, r.Replicas, r.AddingReplicas, r.RemovingReplicas)
		}
		return w.Flush()
	}
	var req kadm.AlterPartitionAssignmentsReq
	if cancelMove {
		req.CancelAssign(topics[0], partition)
	} else {
		var ids []int32
		for _, f := range strings.Split(replicas, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
			if err != nil {
				return usagef("--replicas: %q is not a broker id", f)
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
			fmt.Fprintf(out, "cancelling the move of %s-%d\n", r.Topic, r.Partition)
		} else {
			fmt.Fprintf(out, "moving %s-%d to %s (see: holdfast topic reassign --list %s)\n", r.Topic, r.Partition, replicas, r.Topic)
		}
	}
	return nil
}
