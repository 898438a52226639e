package tiered_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/console"
	"holdfast/internal/metrics"
	"holdfast/internal/wire"
)

// TestTieredPartitionLagShown: a tiered partition whose closed segments
// cannot be uploaded (the object store is down) shows an upload lag in
// its per-partition metrics and on the console's topic page; once the
// store is back and everything is uploaded the lag is 0 and the remote
// size is what the manifest holds.
func TestTieredPartitionLagShown(t *testing.T) {
	s := startObjectStore(t)
	n := brokertest.Start(t, withTiered(s))
	const topic = "tiered-lag"
	n.CreateTopic(topic, 1, tieredTopic())
	s.kill()
	produce(t, n.Client(), topic, 0, 1500) // 4096-byte segments (compressed batches): several close

	reg := metrics.New(n.B, wire.NewServer(n.B, wire.Limits{}, nil))
	gauges := func() map[string]float64 {
		fam, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range fam {
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["topic"] == topic && labels["partition"] == "0" && m.GetGauge() != nil {
					got[f.GetName()] = m.GetGauge().GetValue()
				}
			}
		}
		return got
	}
	c, err := console.New(console.Config{Broker: n.B, Seeds: []string{n.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := httptest.NewServer(c)
	defer srv.Close()
	page := func() (lagSegments int, size string) {
		resp, err := http.Get(srv.URL + "/topics/" + topic)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`class="n remote-size">([^<]*)</td>.*class="n lag-segments">(\d+)</td>`).FindSubmatch(body)
		if m == nil {
			t.Fatalf("no remote log row on the topic page:\n%s", body)
		}
		lag, _ := strconv.Atoi(string(m[2]))
		return lag, string(m[1])
	}
	remote := func() *broker.PartitionStats {
		for _, p := range n.B.PartitionStats() {
			if p.Topic == topic && p.Partition == 0 {
				return &p
			}
		}
		t.Fatal("no partition stats")
		return nil
	}

	brokertest.Await(t, "closed segments counted as not uploaded", func() error {
		ps := remote()
		if r := ps.Remote; r == nil || r.LagSegments < 2 || r.LagBytes == 0 || r.Segments != 0 {
			return fmt.Errorf("remote figures %+v; local log: %d segments, %d bytes, durable %d, end %d", r, ps.Segments, ps.SizeBytes, ps.Durable, ps.LogEnd)
		}
		return nil
	})
	if g := gauges(); g["holdfast_partition_remote_copy_lag_segments"] < 2 || g["holdfast_partition_remote_copy_lag_bytes"] == 0 {
		t.Fatalf("metrics with the store down: %v", g)
	}
	if lag, _ := page(); lag < 2 {
		t.Fatalf("the topic page shows %d segments not uploaded with the store down", lag)
	}

	s.start()
	brokertest.Await(t, "every closed segment uploaded", func() error {
		r := remote().Remote
		if r == nil || r.LagSegments != 0 || r.LagBytes != 0 || r.Segments < 2 || r.SizeBytes == 0 {
			return fmt.Errorf("remote figures %+v", r)
		}
		return nil
	})
	r := remote().Remote
	g := gauges()
	if g["holdfast_partition_remote_copy_lag_segments"] != 0 || g["holdfast_partition_remote_copy_lag_bytes"] != 0 ||
		g["holdfast_partition_remote_log_size_bytes"] != float64(r.SizeBytes) || g["holdfast_partition_remote_log_segments"] != float64(r.Segments) {
		t.Fatalf("metrics after the uploads: %v, partition %+v", g, r)
	}
	if lag, size := page(); lag != 0 || size == "0 B" {
		t.Fatalf("the topic page after the uploads: %d segments not uploaded, remote size %s", lag, size)
	}
}
