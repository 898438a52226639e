package brokertest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/broker"
	"holdfast/internal/replica"
	"holdfast/internal/wire"
)

// TestRestartOpensInBackground: a node that opens its replicas after it
// listens (broker.Config.StartupSyncOpens, here always) serves every
// partition after a clean restart: a franz-go producer with default
// settings gets each record acknowledged (a partition not yet open answers
// NOT_LEADER_OR_FOLLOWER, retried, and is opened first), every record
// written before and after reads back in order, and the stop after such a
// start, once every replica is open, leaves the clean shutdown marker.
func TestRestartOpensInBackground(t *testing.T) {
	const parts = 40
	n := Start(t, func(cfg *broker.Config, _ *wire.Limits) { cfg.StartupSyncOpens = -1 })
	n.CreateTopic("bg", parts, nil)
	produce := func(round string) {
		t.Helper()
		cl := n.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()))
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var recs []*kgo.Record
		for p := range int32(parts) {
			recs = append(recs, &kgo.Record{Topic: "bg", Partition: p, Value: []byte(round + strconv.Itoa(int(p)))})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", round, err)
		}
	}
	produce("a")
	marker := filepath.Join(n.Cfg.DataDir, replica.CleanShutdownFile)
	for _, round := range []string{"b", "c"} {
		n.Restart() // a clean stop, then a start with the opens queued
		produce(round)
	}
	n.Stop()
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("no clean shutdown marker after a stop with every replica open: %v", err)
	}
	n.Start()

	cl := n.Client(kgo.ConsumeTopics("bg"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got := map[int32][]string{}
	for total := 0; total < 3*parts; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", total, 3*parts, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			total++
		})
	}
	for p := range int32(parts) {
		s := strconv.Itoa(int(p))
		want := []string{"a" + s, "b" + s, "c" + s}
		if len(got[p]) != 3 || got[p][0] != want[0] || got[p][1] != want[1] || got[p][2] != want[2] {
			t.Fatalf("partition %d read %q, want %q", p, got[p], want)
		}
	}
}
