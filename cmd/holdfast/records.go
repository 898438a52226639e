package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"holdfast/internal/admin"
)

func init() { addCommand(newRecordsCmd) }

func newRecordsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "records",
		Short: "Delete records from the start of partitions",
	}
	conn := clientCommand(c)
	var (
		partitions []int32
		before     int64
	)
	del := &cobra.Command{
		Use:   "delete TOPIC --before OFFSET [--partition P]...",
		Short: "Delete every record below an offset (DeleteRecords: moves the log start)",
		Long: `Delete every record below --before in the partitions given (all if none),
as kafka-delete-records.sh does: the log start offset moves up and the
space is freed segment by segment. --before -1 deletes up to the high
watermark (everything written so far).`,
		Example: "  holdfast records delete orders --partition 0 --before 1000",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			topic := args[0]
			if before < -1 {
				return usagef("--before %d: want an offset, or -1 for the high watermark", before)
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				offs, err := c.TopicOffsets(ctx, topic)
				if err != nil {
					return err
				}
				if len(offs[topic]) == 0 {
					return fmt.Errorf("topic %s: UNKNOWN_TOPIC_OR_PARTITION", topic)
				}
				req := kadm.Offsets{}
				for p := range offs[topic] {
					if len(partitions) == 0 || containsInt32(partitions, p) {
						req.Add(kadm.Offset{Topic: topic, Partition: p, At: before, LeaderEpoch: -1})
					}
				}
				for _, p := range partitions {
					if _, ok := offs[topic][p]; !ok {
						return usagef("--partition %d: topic %s has %d partitions", p, topic, len(offs[topic]))
					}
				}
				resp, err := c.A.DeleteRecords(ctx, req)
				if err != nil {
					return err
				}
				w := tw(cmd.OutOrStdout())
				fmt.Fprintln(w, "TOPIC\tPARTITION\tLOG-START")
				var failed error
				for _, r := range resp.Sorted() {
					if r.Err != nil {
						fmt.Fprintf(w, "%s\t%d\t%v\n", r.Topic, r.Partition, r.Err)
						if failed == nil {
							failed = fmt.Errorf("%s-%d: %w", r.Topic, r.Partition, r.Err)
						}
						continue
					}
					fmt.Fprintf(w, "%s\t%d\t%d\n", r.Topic, r.Partition, r.LowWatermark)
				}
				if err := w.Flush(); err != nil {
					return err
				}
				return failed
			})
		},
	}
	del.Flags().Int32SliceVarP(&partitions, "partition", "p", nil, "partitions, e.g. 0,2 (default: all)")
	del.Flags().Int64Var(&before, "before", 0, "delete the records below this offset (-1: the high watermark)")
	del.MarkFlagRequired("before")
	del.ValidArgsFunction = completeNames(conn, false)
	c.AddCommand(del)
	return c
}
