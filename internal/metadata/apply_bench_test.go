package metadata

import (
	"fmt"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"holdfast/internal/storage"
)

// BenchmarkApply is the cost of applying and persisting one metadata
// command with 0, 10,000 and 100,000 partitions in the state (topics of
// 100 partitions): the command decoded from its log bytes as the apply
// loop does, applied, and its share of the persistence (the snapshot
// writes that fall inside the timed loop, which waits for the last one).
// The cost per command must not grow with the cluster (issue 27: 100k
// within 2x of 0). cpu-ns/op is the process's CPU time (every goroutine:
// the snapshot writer's and the GC's too) per command: on a shared
// machine, ns/op is mostly waiting for a core.
func BenchmarkApply(b *testing.B) {
	for _, parts := range []int{0, 10_000, 100_000} {
		b.Run(fmt.Sprintf("alter_config/partitions=%d", parts), func(b *testing.B) {
			s, end := benchStore(b, parts)
			values := [2][]byte{}
			for i := range values {
				values[i] = mustEncode(b, Command{Op: OpTopicConfigs, Name: "bench",
					Configs: map[string]string{"retention.ms": fmt.Sprint(1000 + i)}})
			}
			b.ReportAllocs()
			runtime.GC() // the setup's garbage is not the loop's
			b.ResetTimer()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				c, err := DecodeCommand(values[i%2])
				if err != nil {
					b.Fatal(err)
				}
				end++
				if _, err := s.Apply(end, c); err != nil {
					b.Fatal(err)
				}
			}
			benchFlush(b, s)
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		})
		b.Run(fmt.Sprintf("create_topic/partitions=%d", parts), func(b *testing.B) {
			s, end := benchStore(b, parts)
			data := make([][]byte, b.N)
			for i := range data {
				data[i] = mustEncode(b, Command{Op: OpCreateTopic, Topic: &Topic{Name: fmt.Sprintf("new-%d", i), ID: NewTopicID(),
					Partitions: 1, Replicas: [][]int32{{1}}}})
			}
			b.ReportAllocs()
			runtime.GC() // the setup's garbage is not the loop's
			b.ResetTimer()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				c, err := DecodeCommand(data[i])
				if err != nil {
					b.Fatal(err)
				}
				end++
				if _, err := s.Apply(end, c); err != nil {
					b.Fatal(err)
				}
			}
			benchFlush(b, s)
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the CPU time the process used so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchStore is a store on the real filesystem holding partitions
// partitions (topics of 100) and a one-partition topic "bench".
func benchStore(b *testing.B, partitions int) (*Store, int64) {
	b.Helper()
	s, err := Open(filepath.Join(b.TempDir(), "meta"), storage.OSFS(), nil, "")
	if err != nil {
		b.Fatal(err)
	}
	end := s.Applied()
	var cmds []Command
	for t := 0; t < partitions/100; t++ {
		reps := make([][]int32, 100)
		for i := range reps {
			reps[i] = []int32{1, 2, 3}
		}
		cmds = append(cmds, Command{Op: OpCreateTopic, Topic: &Topic{Name: fmt.Sprintf("topic-%05d", t), ID: NewTopicID(),
			Partitions: 100, Replicas: reps, Configs: map[string]string{"retention.ms": "86400000"}}})
	}
	cmds = append(cmds, Command{Op: OpCreateTopic, Topic: &Topic{Name: "bench", ID: NewTopicID(), Partitions: 1, Replicas: [][]int32{{1}}}})
	end = benchLoad(b, s, end, cmds)
	return s, end
}

func mustEncode(b *testing.B, c Command) []byte {
	data, err := EncodeCommand(c)
	if err != nil {
		b.Fatal(err)
	}
	return data
}
