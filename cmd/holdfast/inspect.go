package main

// Read-only views of what the Kafka APIs already answer, under the names
// of Kafka's own scripts: kafka-log-dirs.sh --describe,
// kafka-metadata-quorum.sh describe, kafka-transactions.sh list / describe
// / describe-producers.

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/admin"
)

func init() {
	addCommand(newLogDirsCmd)
	addCommand(newQuorumCmd)
	addCommand(newTransactionsCmd)
}

func newLogDirsCmd() *cobra.Command {
	var topics []string
	c := &cobra.Command{
		Use:   "log-dirs [--topic T]...",
		Short: "Each broker's log directories: volume size and free space, and the partitions in them with their size and lag (DescribeLogDirs, as kafka-log-dirs.sh --describe)",
		Args:  noArgs,
	}
	conn := clientCommand(c)
	c.Flags().StringArrayVar(&topics, "topic", nil, "only these topics' partitions (repeatable; default all)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		return conn.call(func(ctx context.Context, c *admin.Client) error {
			var set kadm.TopicsSet
			if len(topics) > 0 {
				md, err := c.A.ListTopics(ctx, topics...)
				if err != nil {
					return err
				}
				if err := md.Error(); err != nil {
					return err
				}
				set = md.TopicsSet()
			}
			dirs, err := c.A.DescribeAllLogDirs(ctx, set)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for i, d := range dirs.Sorted() {
				if i > 0 {
					fmt.Fprintln(out)
				}
				if d.Err != nil {
					fmt.Fprintf(out, "broker %d  dir %s  %v\n", d.Broker, d.Dir, d.Err)
					continue
				}
				fmt.Fprintf(out, "broker %d  dir %s  size %s  volume %s  usable %s\n", d.Broker, d.Dir,
					humanBytes(d.Size()), humanBytes(d.TotalBytes), humanBytes(d.UsableBytes))
				w := tw(out)
				fmt.Fprintln(w, "TOPIC\tPARTITION\tSIZE\tOFFSET-LAG")
				for _, p := range d.Topics.Sorted() {
					fmt.Fprintf(w, "%s\t%d\t%d\t%d\n", p.Topic, p.Partition, p.Size, p.OffsetLag)
				}
				if err := w.Flush(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return c
}

// humanBytes prints a byte count for people; -1 (unreported) as "-".
func humanBytes(n int64) string {
	if n < 0 {
		return "-"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func newQuorumCmd() *cobra.Command {
	var replication bool
	c := &cobra.Command{
		Use:   "metadata-quorum",
		Short: "The metadata (controller) quorum: leader, epoch, high watermark, and each voter's and observer's log end (DescribeQuorum, as kafka-metadata-quorum.sh describe --status / --replication)",
		Args:  noArgs,
	}
	conn := clientCommand(c)
	c.Flags().BoolVar(&replication, "replication", false, "one row per voter and observer (default: the status summary)")
	// kafka-metadata-quorum.sh's spelling: describe --status | --replication.
	var status bool
	describe := &cobra.Command{
		Use:   "describe (--status | --replication)",
		Short: "The same as metadata-quorum itself, as kafka-metadata-quorum.sh describe spells it",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if status == replication {
				return usagef("describe: give --status or --replication")
			}
			return c.RunE(cmd, args)
		},
	}
	describe.Flags().BoolVar(&status, "status", false, "the status summary")
	describe.Flags().BoolVar(&replication, "replication", false, "one row per voter and observer")
	c.AddCommand(describe, addControllerCmd(conn), removeControllerCmd(conn))
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		return conn.call(func(ctx context.Context, c *admin.Client) error {
			req := kmsg.NewPtrDescribeQuorumRequest()
			rt := kmsg.NewDescribeQuorumRequestTopic()
			rt.Topic = "__cluster_metadata"
			rp := kmsg.NewDescribeQuorumRequestTopicPartition()
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			// The quorum's leader answers; the others say who it is.
			resp, err := req.RequestWith(ctx, c.K)
			if err != nil {
				return err
			}
			if resp.ErrorCode != 0 {
				return fmt.Errorf("DescribeQuorum: %w %s", kerr.ErrorForCode(resp.ErrorCode), deref(resp.ErrorMessage))
			}
			if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
				return fmt.Errorf("DescribeQuorum: answer names no metadata partition")
			}
			p := resp.Topics[0].Partitions[0]
			if p.ErrorCode != 0 {
				return fmt.Errorf("DescribeQuorum: %w %s", kerr.ErrorForCode(p.ErrorCode), deref(p.ErrorMessage))
			}
			out := cmd.OutOrStdout()
			if !replication {
				maxLag := int64(0)
				var voters, observers []string
				for _, v := range p.CurrentVoters {
					maxLag = max(maxLag, p.HighWatermark-v.LogEndOffset)
					voters = append(voters, fmt.Sprint(v.ReplicaID))
				}
				for _, o := range p.Observers {
					observers = append(observers, fmt.Sprint(o.ReplicaID))
				}
				w := tw(out)
				fmt.Fprintf(w, "LeaderId:\t%d\n", p.LeaderID)
				fmt.Fprintf(w, "LeaderEpoch:\t%d\n", p.LeaderEpoch)
				fmt.Fprintf(w, "HighWatermark:\t%d\n", p.HighWatermark)
				fmt.Fprintf(w, "MaxFollowerLag:\t%d\n", maxLag)
				fmt.Fprintf(w, "CurrentVoters:\t[%s]\n", strings.Join(voters, ","))
				fmt.Fprintf(w, "CurrentObservers:\t[%s]\n", strings.Join(observers, ","))
				// KIP-853: who each voter is (its directory) and where
				// its node listens.
				endpoints := map[int32][]string{}
				for _, nd := range resp.Nodes {
					for _, l := range nd.Listeners {
						endpoints[nd.NodeID] = append(endpoints[nd.NodeID], fmt.Sprintf("%s://%s", l.Name, net.JoinHostPort(l.Host, strconv.Itoa(int(l.Port)))))
					}
				}
				for _, v := range p.CurrentVoters {
					fmt.Fprintf(w, "Voter %d:\tdirectory %s\tendpoints [%s]\n", v.ReplicaID, dirID(v.ReplicaDirectoryID), strings.Join(endpoints[v.ReplicaID], ","))
				}
				return w.Flush()
			}
			w := tw(out)
			fmt.Fprintln(w, "NodeId\tDirectoryId\tLogEndOffset\tLag\tLastFetchTimestamp\tStatus")
			row := func(v kmsg.DescribeQuorumResponseTopicPartitionReplicaState, status string) {
				if v.ReplicaID == p.LeaderID {
					status = "Leader"
				}
				fetched := "-"
				if v.LastFetchTimestamp >= 0 {
					fetched = time.UnixMilli(v.LastFetchTimestamp).UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%s\t%s\n", v.ReplicaID, dirID(v.ReplicaDirectoryID), v.LogEndOffset, max(p.HighWatermark-v.LogEndOffset, 0), fetched, status)
			}
			for _, v := range p.CurrentVoters {
				row(v, "Follower")
			}
			for _, o := range p.Observers {
				row(o, "Observer")
			}
			return w.Flush()
		})
	}
	return c
}

func newTransactionsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "transactions",
		Short: "List and describe transactions and the producers writing to a partition (as kafka-transactions.sh)",
	}
	conn := clientCommand(c)
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "Transactional ids with their coordinator, producer id and state (ListTransactions)",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				ls, err := c.A.ListTransactions(ctx, nil, nil)
				if err != nil {
					return err
				}
				w := tw(cmd.OutOrStdout())
				fmt.Fprintln(w, "TRANSACTIONAL-ID\tCOORDINATOR\tPRODUCER-ID\tSTATE")
				for _, t := range ls.Sorted() {
					fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", t.TxnID, t.Coordinator, t.ProducerID, t.State)
				}
				return w.Flush()
			})
		},
	}
	describe := &cobra.Command{
		Use:   "describe TRANSACTIONAL-ID...",
		Short: "A transaction's state, producer id and epoch, timeout, start and partitions (DescribeTransactions)",
		Args:  minArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				ds, err := c.A.DescribeTransactions(ctx, ids...)
				if err != nil {
					return err
				}
				w := tw(cmd.OutOrStdout())
				fmt.Fprintln(w, "TRANSACTIONAL-ID\tCOORDINATOR\tPRODUCER-ID\tEPOCH\tSTATE\tTIMEOUT-MS\tSTARTED\tPARTITIONS")
				for _, d := range ds.Sorted() {
					if d.Err != nil {
						return fmt.Errorf("%s: %w", d.TxnID, d.Err)
					}
					started := "-"
					if d.StartTimestamp > 0 {
						started = time.UnixMilli(d.StartTimestamp).UTC().Format(time.RFC3339)
					}
					var parts []string
					for _, t := range d.Topics.Sorted() {
						parts = append(parts, fmt.Sprintf("%s%v", t.Topic, t.Partitions))
					}
					fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%d\t%s\t%s\n", d.TxnID, d.Coordinator, d.ProducerID, d.ProducerEpoch,
						d.State, d.TimeoutMillis, started, strings.Join(parts, " "))
				}
				return w.Flush()
			})
		},
	}
	var topic string
	var partitions []int32
	producers := &cobra.Command{
		Use:   "describe-producers --topic T [--partition P]...",
		Short: "The producers with state on a partition: id, epoch, last sequence and timestamp, open transaction's first offset (DescribeProducers)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if topic == "" {
				return usagef("describe-producers: --topic is required")
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				set := kadm.TopicsSet{}
				if len(partitions) > 0 {
					set.Add(topic, partitions...)
				} else {
					md, err := c.A.ListTopics(ctx, topic)
					if err != nil {
						return err
					}
					if err := md.Error(); err != nil {
						return err
					}
					set = md.TopicsSet()
				}
				ds, err := c.A.DescribeProducers(ctx, set)
				if err != nil {
					return err
				}
				w := tw(cmd.OutOrStdout())
				fmt.Fprintln(w, "PARTITION\tLEADER\tPRODUCER-ID\tEPOCH\tLAST-SEQUENCE\tLAST-TIMESTAMP\tCOORDINATOR-EPOCH\tTXN-START-OFFSET")
				for _, p := range ds.SortedPartitions() {
					if p.Err != nil {
						return fmt.Errorf("%s-%d: %w%s", p.Topic, p.Partition, p.Err, detail(p.ErrMessage))
					}
					for _, pr := range p.ActiveProducers.Sorted() {
						txn := "-"
						if pr.CurrentTxnStartOffset >= 0 {
							txn = fmt.Sprint(pr.CurrentTxnStartOffset)
						}
						fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t%s\t%d\t%s\n", p.Partition, p.Leader, pr.ProducerID, pr.ProducerEpoch, pr.LastSequence,
							time.UnixMilli(pr.LastTimestamp).UTC().Format(time.RFC3339Nano), pr.CoordinatorEpoch, txn)
					}
				}
				return w.Flush()
			})
		},
	}
	producers.Flags().StringVar(&topic, "topic", "", "the topic")
	producers.Flags().Int32SliceVar(&partitions, "partition", nil, "partitions (default: all of the topic's)")
	c.AddCommand(list, describe, producers)
	return c
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
