package metrics

import (
	"io"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// manyPartitions emits what partitionCollector does for n partitions
// (the nine per-partition families), without a broker behind it.
type manyPartitions struct{ n int }

func (c manyPartitions) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLogStart, descLogEnd, descHW, descDurable, descSize, descSegments, descLeader, descISR, descReplicas} {
		ch <- d
	}
}

func (c manyPartitions) Collect(ch chan<- prometheus.Metric) {
	for i := 0; i < c.n; i++ {
		l := []string{"topic-" + strconv.Itoa(i/1000), strconv.Itoa(i % 1000)}
		for _, d := range []*prometheus.Desc{descLogStart, descLogEnd, descHW, descDurable, descSize, descSegments, descLeader, descISR, descReplicas} {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(i), l...)
		}
	}
}

// BenchmarkScrape: one scrape (gather, the Kafka-named copies, the text
// encoding) of a node with this many partitions' series.
func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run("partitions="+strconv.Itoa(n), func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(manyPartitions{n})
			g := withKafkaNames{reg}
			b.ResetTimer()
			for b.Loop() {
				fams, err := g.Gather()
				if err != nil {
					b.Fatal(err)
				}
				enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
				for _, f := range fams {
					if err := enc.Encode(f); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
