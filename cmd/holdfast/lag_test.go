package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestLagIsOneNumber: a group's lag is the same in `group describe`, on
// the console and in holdfast_group_lag_sum, with a partition the group
// is assigned but never committed (Kafka's "-": not counted). Before, the
// CLI and the console counted such a partition as all its records behind
// and the metric did not: three totals for one group.
func TestLagIsOneNumber(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	web := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	startProc(t, t.TempDir(), addr, "--listen", addr, "--metrics-listen", web)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	pcl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	if resp, err := kadm.NewClient(pcl).CreateTopics(ctx, 2, 1, nil, "lagt"); err != nil || resp.Error() != nil {
		t.Fatalf("create: %v %v", err, resp.Error())
	}
	for p, n := range []int{5, 3} {
		for i := 0; i < n; i++ {
			if err := pcl.ProduceSync(ctx, &kgo.Record{Topic: "lagt", Partition: int32(p), Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// A member holding both partitions that commits partition 0 only.
	assigned := make(chan struct{}, 1)
	ccl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("lagg"), kgo.ConsumeTopics("lagt"),
		kgo.DisableAutoCommit(), kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			if len(a["lagt"]) == 2 {
				select {
				case assigned <- struct{}{}:
				default:
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer ccl.Close()
	for done := false; !done; {
		ccl.PollRecords(ctx, 100)
		select {
		case <-assigned:
			done = true
		default:
		}
		if ctx.Err() != nil {
			t.Fatal("the member was never assigned both partitions")
		}
	}
	var commitErr error
	ccl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{"lagt": {0: {Epoch: -1, Offset: 2}}},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			commitErr = err
		})
	if commitErr != nil {
		t.Fatal(commitErr)
	}

	const want = "3" // partition 0: 5 - 2; partition 1: no commit, "-"
	desc := ok(t, "", "group", "describe", "lagg", "--bootstrap="+addr)
	if m := regexp.MustCompile(`  lag (\d+)  `).FindStringSubmatch(desc); m == nil || m[1] != want {
		t.Errorf("group describe total lag %v, want %s:\n%s", m, want, desc)
	}
	row(t, desc, "lagt", "0", "2", "5", "3")
	row(t, desc, "lagt", "1", "-", "3", "-", "-")

	page := get(t, "http://"+web+"/groups/lagg")
	if m := regexp.MustCompile(`<b id="total-lag">(\d+)</b>`).FindStringSubmatch(page); m == nil || m[1] != want {
		t.Errorf("console total lag %v, want %s", m, want)
	}

	metric := regexp.MustCompile(`(?m)^holdfast_group_lag_sum\{group="lagg"\} (\d+)$`)
	if m := metric.FindStringSubmatch(get(t, "http://"+web+"/metrics")); m == nil || m[1] != want {
		t.Errorf("holdfast_group_lag_sum %v, want %s", m, want)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, strings.TrimSpace(string(b)))
	}
	return string(b)
}
