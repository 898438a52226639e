package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func init() { addCommand(newProduceCmd) }

func newProduceCmd() *cobra.Command {
	var (
		acks, keySep, key, file, compression string
		headers                              []string
		partition                            int32
	)
	c := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Produce one record per line of stdin (or --file) to a topic",
		Long: `Produce one record per input line. A topic that does not exist is created
if the broker auto-creates topics (auto.create.topics.enable); otherwise the
command fails with UNKNOWN_TOPIC_OR_PARTITION.`,
		Example: `  echo hello | holdfast produce greetings
  holdfast produce orders --file orders.txt --key-separator : --header source=import
  holdfast produce orders --partition 2 --acks 1 < lines.txt`,
		Args: exactArgs(1),
	}
	conn := clientCommand(c)
	c.ValidArgsFunction = completeNames(conn, false)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		topic := args[0]
		if _, err := kvList("header", headers); err != nil {
			return err
		}
		// Headers are an ordered list in Kafka: kept in the order given.
		var hdrs []kgo.RecordHeader
		for _, h := range headers {
			k, v, _ := strings.Cut(h, "=")
			hdrs = append(hdrs, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		opts := []kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation()}
		switch acks {
		case "all", "-1":
			opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
		case "1":
			opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
		case "0":
			opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
		default:
			return usagef("--acks %q: want all, 1 or 0", acks)
		}
		codec, err := parseCompression(compression)
		if err != nil {
			return err
		}
		opts = append(opts, kgo.ProducerBatchCompression(codec))
		if partition >= 0 {
			opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		}
		var in io.Reader = cmd.InOrStdin()
		if file != "" && file != "-" {
			f, err := os.Open(file)
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
		}
		ctx, stop := signalContext()
		defer stop()
		c, err := conn.connect(ctx, opts...)
		if err != nil {
			return err
		}
		defer c.Close()
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		var (
			n     int
			mu    sync.Mutex
			first error
		)
		for sc.Scan() && ctx.Err() == nil {
			line := sc.Text()
			r := &kgo.Record{Value: []byte(line), Partition: partition}
			if key != "" {
				r.Key = []byte(key)
			}
			if keySep != "" {
				if k, v, ok := strings.Cut(line, keySep); ok {
					r.Key, r.Value = []byte(k), []byte(v)
				}
			}
			r.Headers = append(r.Headers, hdrs...)
			c.K.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			})
			n++
		}
		if err := sc.Err(); err != nil {
			return err
		}
		if err := c.K.Flush(ctx); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if first != nil {
			return produceError(topic, first, conn)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "produced %d records to %s (acks=%s)\n", n, topic, acks)
		return nil
	}
	f := c.Flags()
	f.StringVar(&acks, "acks", "all", "all, 1 or 0")
	f.StringVarP(&keySep, "key-separator", "K", "", "split each line into key and value at the first occurrence of this string")
	f.StringVarP(&key, "key", "k", "", "key of every record (without --key-separator)")
	f.StringArrayVarP(&headers, "header", "H", nil, "header key=value added to every record, repeatable")
	f.Int32VarP(&partition, "partition", "p", -1, "write to this partition (default: by key hash, or spread)")
	f.StringVarP(&file, "file", "f", "", "read lines from this file instead of stdin")
	f.StringVarP(&compression, "compression", "z", "none", "none, gzip, snappy, lz4 or zstd")
	return c
}

func parseCompression(s string) (kgo.CompressionCodec, error) {
	switch s {
	case "none", "":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.NoCompression(), usagef("--compression %q: want none, gzip, snappy, lz4 or zstd", s)
}

// produceError says what a failed delivery means for the user.
func produceError(topic string, err error, conn *connFlags) error {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("%s: %w: the topic does not exist and the broker does not create topics on first use (auto.create.topics.enable=false); create it with 'holdfast topic create %s'", topic, err, topic)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrRecordTimeout):
		return fmt.Errorf("%w: records to %s not acknowledged within --timeout %v: %v", errNoAnswer, topic, conn.timeout, err)
	}
	return fmt.Errorf("%s: %w", topic, err)
}
