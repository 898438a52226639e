package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/brokertest"
	"holdfast/internal/metrics"
	"holdfast/internal/wire"
)

// TestPartitionAndGroupMetrics: after 10 records and a group commit at
// offset 4, the partition shows its offsets and the group its lag of 6.
func TestPartitionAndGroupMetrics(t *testing.T) {
	n := brokertest.Start(t)
	n.CreateTopic("m", 1, nil)
	cl := n.Client(kgo.DefaultProduceTopic("m"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 10; i++ {
		if err := cl.ProduceSync(ctx, kgo.StringRecord("x")).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: "m", Partition: 0, At: 4, LeaderEpoch: -1})
	if resp, err := adm.CommitOffsets(ctx, "g", offs); err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}

	reg := metrics.New(n.B, wire.NewServer(n.B, wire.Limits{}, nil))
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
		metrics:
			for _, m := range f.GetMetric() {
				for _, lp := range m.GetLabel() {
					if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
						continue metrics
					}
				}
				return m.GetGauge().GetValue()
			}
		}
		t.Fatalf("no %s%v", name, labels)
		return 0
	}
	tp := map[string]string{"topic": "m", "partition": "0"}
	if got := value("holdfast_partition_high_watermark", tp); got != 10 {
		t.Errorf("high watermark %v, want 10", got)
	}
	if got := value("holdfast_partition_durable_offset", tp); got != 10 {
		t.Errorf("durable offset %v, want 10", got)
	}
	if got := value("holdfast_group_committed_offset", map[string]string{"group": "g", "topic": "m", "partition": "0"}); got != 4 {
		t.Errorf("committed offset %v, want 4", got)
	}
	if got := value("holdfast_group_lag", map[string]string{"group": "g", "topic": "m", "partition": "0"}); got != 6 {
		t.Errorf("lag %v, want 6", got)
	}
}
