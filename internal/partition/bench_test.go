package partition

import (
	"fmt"
	"testing"
	"time"

	"holdfast/internal/raft"
	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// Benchmarks of the produce path below the broker: a producer's batch
// validated and appended to a single node's partition (a one-voter Raft
// group) until it is committed. Nothing here asserts a speed; see
// docs/benchmarks.md for the numbers and the command.
//
//	go test ./internal/partition -run '^$' -bench . -benchtime 2s -count 6

// benchBatches builds n idempotent batches of recs 100-byte records each,
// sequence numbers following on from one another.
func benchBatches(b *testing.B, n, recs int) [][]byte {
	return benchBatchesOf(b, n, recs, 100)
}

// benchBatchesOf is benchBatches with records of size bytes.
func benchBatchesOf(b *testing.B, n, recs, size int) [][]byte {
	b.Helper()
	out := make([][]byte, n)
	value := make([]byte, size)
	rs := make([]records.Record, recs)
	for i := range rs {
		rs[i] = records.Record{Timestamp: time.Now().UnixMilli(), Value: value}
	}
	for i := range out {
		bt, err := records.Build(records.Batch{ProducerID: 7, ProducerEpoch: 0, BaseSequence: int32(i * recs)}, rs)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = bt
	}
	return out
}

// benchPartition opens one partition of a single node under b.TempDir().
func benchPartition(b *testing.B, mode storage.FlushMode) *Partition {
	b.Helper()
	dir := b.TempDir()
	s := storage.NewSyncer(nil)
	h, err := raft.NewHost(raft.Config{ID: 1, Dir: dir, SoloPath: testSolo})
	if err != nil {
		b.Fatal(err)
	}
	m := NewManager(dir, storage.Options{Syncer: s})
	b.Cleanup(func() {
		h.Close()
		m.Close()
		s.Close()
	})
	cfg := storage.DefaultConfig()
	cfg.Flush.Mode = mode
	p, err := m.Open("bench", [16]byte{1}, 0, cfg, Replication{Host: h, Group: 1, Voters: []uint64{1}})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkProduceValidate: what Append checks of a batch before it takes
// the partition's lock (CRC, framing, every record decoded).
func BenchmarkProduceValidate(b *testing.B) {
	for _, recs := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("records=%d", recs), func(b *testing.B) {
			bt := benchBatches(b, 1, recs)[0]
			b.SetBytes(int64(len(bt)))
			b.ResetTimer()
			for b.Loop() {
				h, err := records.Validate(bt, 0)
				if err != nil || !records.Dense(h) {
					b.Fatal(err)
				}
				if err := records.ValidateRecords(bt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppend: Append of an idempotent batch and the wait until it is
// committed. serial waits for each batch before the next (ns/op is the
// ack latency); pipelined keeps 64 batches in flight, as a broker with a
// few producers does (ns/op is the cost per batch when the Raft cycle and
// the fsync are shared).
// flush=os leaves the fsync out: the path's own cost.
func BenchmarkAppend(b *testing.B) {
	for _, mode := range []storage.FlushMode{storage.FlushSync, storage.FlushOS} {
		for _, recs := range []int{1, 100} {
			for _, serial := range []bool{true, false} {
				name := "pipelined"
				if serial {
					name = "serial"
				}
				b.Run(fmt.Sprintf("flush=%s/records=%d/%s", storage.FlushPolicy{Mode: mode}, recs, name), func(b *testing.B) {
					benchAppendPath(b, mode, recs, serial)
				})
			}
		}
	}
}

// BenchmarkAppendLarge: Append of 256 KiB batches (256 records of 1 KiB,
// what a saturated producer of 1 KiB records sends per partition), 64 in
// flight, flush=os: the propose path's cost per byte. etcd raft v3.7
// cloned every proposed batch there (third_party/etcd-raft/PATCHES.md).
// Each op has a batch of its own: a proposed batch's bytes are Raft's and
// are never reused.
//
//	go test ./internal/partition -run '^$' -bench AppendLarge -benchtime 300x -count 6
func BenchmarkAppendLarge(b *testing.B) {
	benchAppendBatches(b, benchPartition(b, storage.FlushOS), benchBatchesOf(b, b.N, 256, 1024), false)
}

func benchAppendPath(b *testing.B, mode storage.FlushMode, recs int, serial bool) {
	benchAppendBatches(b, benchPartition(b, mode), benchBatches(b, b.N, recs), serial)
}

func benchAppendBatches(b *testing.B, p *Partition, bts [][]byte, serial bool) {
	b.SetBytes(int64(len(bts[0])))
	ctx := b.Context()
	b.ResetTimer()
	const inflight = 64
	ends := make([]int64, b.N)
	for i := range b.N {
		res, err := p.Append(bts[i])
		if err != nil {
			b.Fatal(err)
		}
		ends[i] = res.LastOffset + 1
		wait := i - inflight
		if serial {
			wait = i
		}
		if wait >= 0 {
			if err := p.WaitCommitted(ctx, ends[wait]); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := p.WaitCommitted(ctx, ends[b.N-1]); err != nil {
		b.Fatal(err)
	}
}
