package broker_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

// testdata/single-node-pre-raft.tgz is the data directory of a single node
// written by Holdfast b33ae3b, before a single node ran as a one-voter
// Raft cluster: its partition logs hold batches with leader epoch 0 and no
// Raft state. Written by a franz-go program against that binary: topic
// "legacy" (3 partitions) with r0..r29 round-robin, keys k<i>; group "g"
// committed 5/6/7; topic "legacy-txn" with three transactions of t<n>-0..2,
// the middle one aborted; 50 partitions of each internal topic.
func TestSingleNodeFromBeforeOnePath(t *testing.T) {
	dir := t.TempDir()
	untar(t, "testdata/single-node-pre-raft.tgz", dir)
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
		c.DataDir = filepath.Join(dir, "data")
		c.OffsetsTopicPartitions = 50
	})
	check := func() {
		t.Helper()
		ctx := context.Background()
		want := map[int32][]string{}
		for i := range 30 {
			want[int32(i%3)] = append(want[int32(i%3)], fmt.Sprint("r", i))
		}
		got, pids := readAll(t, n, "legacy", 3, 10)
		for p := range int32(3) {
			if !slices.Equal(got[p][:10], want[p]) {
				t.Fatalf("legacy-%d: %v, want %v first", p, got[p], want[p])
			}
		}
		committed, err := n.Admin().FetchOffsets(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		for p, at := range map[int32]int64{0: 5, 1: 6, 2: 7} {
			if o, _ := committed.Lookup("legacy", p); o.At != at {
				t.Fatalf("group g partition %d committed %d, want %d", p, o.At, at)
			}
		}
		txn, _ := readAll(t, n, "legacy-txn", 1, 6, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		if w := []string{"t0-0", "t0-1", "t0-2", "t2-0", "t2-1", "t2-2"}; !slices.Equal(txn[0][:6], w) {
			t.Fatalf("legacy-txn read_committed: %v, want %v", txn[0], w)
		}
		// New records continue at the next Kafka offset under a producer
		// id the old node never handed out.
		cl := n.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
		defer cl.Close()
		r := &kgo.Record{Topic: "legacy", Partition: 0, Value: []byte("new")}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if r.Offset < 10 {
			t.Fatalf("a new record took offset %d of the old log", r.Offset)
		}
		for _, old := range pids {
			if r.ProducerID == old {
				t.Fatalf("producer id %d handed out again", old)
			}
		}
		// The same transactional id continues its epochs.
		tx := n.Client(kgo.TransactionalID("legacy-tx"))
		defer tx.Close()
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := tx.ProduceSync(ctx, &kgo.Record{Topic: "legacy-txn", Value: []byte("after")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	check()
	n.Restart()
	check()
}

// readAll reads at least min records of each of topic's partitions from
// the start; it returns the values by partition and the producer ids seen.
func readAll(t *testing.T, n *brokertest.Node, topic string, parts int32, min int, opts ...kgo.Opt) (map[int32][]string, []int64) {
	t.Helper()
	cl := n.Client(append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	defer cl.Close()
	got := map[int32][]string{}
	var pids []int64
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		done := true
		for p := range parts {
			done = done && len(got[p]) >= min
		}
		if done {
			return got, pids
		}
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: got %v: %v", topic, got, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if int64(len(got[r.Partition])) != r.Offset && topic != "legacy-txn" {
				t.Fatalf("%s-%d: record %q at offset %d after %d records", topic, r.Partition, r.Value, r.Offset, len(got[r.Partition]))
			}
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			pids = append(pids, r.ProducerID)
		})
	}
}

func untar(t *testing.T, archive, dst string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dst, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(path, data, 0o644)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
