package broker_test

import (
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/storage"
	"holdfast/internal/testwait"
)

// TestMetadataReplayAfterPowerCut: the metadata Raft log is the record
// between metadata snapshots. Topics created, reconfigured, deleted and
// recreated after the last snapshot survive a power cut (nothing the old
// process does after the cut reaches the disk): the restart replays them
// from the log before the replicas open, and the recreated topic's
// records are not taken for the deleted one's leftovers.
func TestMetadataReplayAfterPowerCut(t *testing.T) {
	cb := startCrashBroker(t, 7)
	adm := kadm.NewClient(cb.client())
	ctx := testCtx(t)
	mustCreate := func(name string, parts int32) {
		t.Helper()
		if r, err := adm.CreateTopic(ctx, parts, 1, nil, name); err != nil || r.Err != nil {
			t.Fatalf("create %s: %v %v", name, err, r.Err)
		}
	}
	mustCreate("a", 3)
	if r, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kadm.StringPtr("123456")}}, "a"); err != nil || r[0].Err != nil {
		t.Fatalf("alter a: %v %+v", err, r)
	}
	mustCreate("b", 2)
	produce := func(topic, value string) {
		t.Helper()
		cl := cb.client(kgo.DefaultProduceTopic(topic))
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", topic, err)
		}
	}
	produce("b", "old b")
	if r, err := adm.DeleteTopics(ctx, "b"); err != nil || r["b"].Err != nil {
		t.Fatalf("delete b: %v %+v", err, r)
	}
	mustCreate("b", 1)
	produce("b", "new b")
	produce("a", "in a")

	// The power cut: the next filesystem operation loses everything not
	// fsynced, and every later one fails (so the old broker's Close
	// writes no snapshot).
	cb.fs.CrashAfter(1)
	cb.srv.Close()
	cb.b.Close()
	cb.fs.Reboot()
	data, err := storage.ReadFile(cb.fs, "/data/meta/cluster.json", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		Topics []struct{ Name string } `json:"topics"`
	}
	if err := json.Unmarshal(data[:len(data)-16], &snap); err != nil {
		t.Fatal(err)
	}
	for _, tp := range snap.Topics {
		if tp.Name == "a" {
			t.Fatal("the snapshot on disk already holds topic a: the test needs it only in the log")
		}
	}
	var ln net.Listener
	testwait.Poll(5*time.Second, func() bool { ln, err = net.Listen("tcp", cb.addr); return err == nil })
	if err != nil {
		t.Fatal(err)
	}
	cb.serve(ln)

	adm = kadm.NewClient(cb.client())
	td, err := adm.ListTopics(ctx, "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if len(td["a"].Partitions) != 3 || len(td["b"].Partitions) != 1 {
		t.Fatalf("after the power cut: a has %d partitions (want 3), b %d (want 1)", len(td["a"].Partitions), len(td["b"].Partitions))
	}
	rc, err := adm.DescribeTopicConfigs(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := rc.On("a", nil); err != nil || !hasConfig(v, "retention.ms", "123456") {
		t.Fatalf("a's retention.ms lost: %+v %v", v, err)
	}
	if got := cb.values("b", false, 1); len(got) != 1 || got[0] != "new b" {
		t.Fatalf("b after the power cut: %q, want the new topic's one record", got)
	}
	if got := cb.values("a", false, 1); len(got) != 1 || got[0] != "in a" {
		t.Fatalf("a after the power cut: %q", got)
	}
}

func hasConfig(rc kadm.ResourceConfig, name, value string) bool {
	for _, c := range rc.Configs {
		if c.Key == name && c.Value != nil && *c.Value == value {
			return true
		}
	}
	return false
}
