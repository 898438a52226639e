package replica_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/brokertest"
	"holdfast/internal/replica"
)

func deleteRecords(t *testing.T, adm *kadm.Client, topic string, to int64) error {
	t.Helper()
	resp, err := adm.DeleteRecords(ctxFor(t, 5*time.Second), kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: to}}})
	if err != nil {
		return err
	}
	return resp.Error()
}

// DeleteRecords moves the log start through the replicated log start
// (logstart.go): at once for readers, then the segments below it go; the
// start survives a clean restart, which leaves and then takes the clean
// shutdown marker. An offset past the high watermark is refused.
func TestLogStartDeleteRecordsAndRestart(t *testing.T) {
	n := brokertest.Start(t)
	adm := n.Admin()
	n.CreateTopic("t", 1, map[string]*string{"segment.bytes": kadm.StringPtr("14")})
	produceEach(t, n.Client(), "t", times(6, time.Now()), "a", "b", "c", "d", "e", "f")
	one := n.B.PartitionLog("t", 0).Size() / 6

	if err := deleteRecords(t, adm, "t", 7); !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Fatalf("DeleteRecords past the high watermark: %v, want OFFSET_OUT_OF_RANGE", err)
	}
	if err := deleteRecords(t, adm, "t", 4); err != nil {
		t.Fatal(err)
	}
	if got := startOffset(t, adm, "t"); got != 4 {
		t.Fatalf("log start %d after DeleteRecords to 4", got)
	}
	waitUntil(t, "the segments below 4 deleted", func() bool { return n.B.PartitionLog("t", 0).Size() == 2*one })
	// Moving it back is a no-op, not an error (Kafka's DeleteRecords).
	if err := deleteRecords(t, adm, "t", 2); err != nil {
		t.Fatalf("DeleteRecords below the log start: %v", err)
	}
	if got := startOffset(t, adm, "t"); got != 4 {
		t.Fatalf("log start %d after DeleteRecords to 2, want 4", got)
	}

	marker := filepath.Join(n.Cfg.DataDir, replica.CleanShutdownFile)
	n.Stop()
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("no clean shutdown marker after a clean stop: %v", err)
	}
	n.Restart()
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("clean shutdown marker left after the start: %v", err)
	}
	adm = n.Admin()
	if got := startOffset(t, adm, "t"); got != 4 {
		t.Fatalf("log start %d after a restart, want 4", got)
	}
	rc := n.Client(kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var offs []int64
	for len(offs) < 2 {
		fs := rc.PollFetches(ctxFor(t, 5*time.Second))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { offs = append(offs, r.Offset) })
	}
	if !slices.Equal(offs, []int64{4, 5}) {
		t.Fatalf("read %v from the start, want [4 5]", offs)
	}
}

// State of a partition this node leads (its one-voter group): itself as
// leader with the Raft term as epoch, in sync, nothing offline.
func TestStateOfLocalLeader(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("t", 2, nil)
	md, err := n.Admin().Metadata(ctxFor(t, 5*time.Second), "t")
	if err != nil {
		t.Fatal(err)
	}
	me := n.Cfg.NodeID
	for p, d := range md.Topics["t"].Partitions {
		if d.Err != nil || d.Leader != me || d.LeaderEpoch < 1 || !slices.Equal(d.Replicas, []int32{me}) ||
			!slices.Equal(d.ISR, []int32{me}) || len(d.OfflineReplicas) != 0 {
			t.Fatalf("partition %d: %+v", p, d)
		}
	}
}
