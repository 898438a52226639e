package storage

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"holdfast/internal/records"
)

// Run on the real disk, e.g.:
//   go test ./internal/storage -run '^$' -bench . -benchtime 3s
// Benchmarks measure; nothing here asserts a speed.

func reportLatencies(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkRawDisk: what the device gives without the log: a sequential
// write of b.N chunks with one fdatasync at the end, and the latency of a
// small write + fdatasync in a loop.
func BenchmarkRawDisk(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("seqwrite+fdatasync/chunk=%dKiB", size>>10), func(b *testing.B) {
			f, err := os.OpenFile(filepath.Join(b.TempDir(), "raw"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := f.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := syscall.Fdatasync(int(f.Fd())); err != nil {
				b.Fatal(err)
			}
		})
	}
	b.Run("write4KiB+fdatasync-loop", func(b *testing.B) {
		f, err := os.OpenFile(filepath.Join(b.TempDir(), "raw"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, 4096)
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if _, err := f.Write(buf); err != nil {
				b.Fatal(err)
			}
			if err := syscall.Fdatasync(int(f.Fd())); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		reportLatencies(b, lat)
	})
}

// BenchmarkAppendSync: append + WaitDurable (flush=sync) from N concurrent
// appenders spread over 8 logs sharing one Syncer.
func BenchmarkAppendSync(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		for _, appenders := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("batch=%dKiB/appenders=%d", size>>10, appenders), func(b *testing.B) {
				benchAppend(b, OSFS(), size, appenders, 8, false)
			})
		}
		// The same with one fdatasync per log per cycle instead of syncfs.
		b.Run(fmt.Sprintf("batch=%dKiB/appenders=64/fdatasync-only", size>>10), func(b *testing.B) {
			benchAppend(b, OSFS(), size, 64, 8, true)
		})
	}
}

func benchAppend(b *testing.B, fsys FS, size, appenders, nlogs int, noSyncfs bool) {
	dir := b.TempDir()
	sy := NewSyncer(quiet)
	if noSyncfs {
		sy.DisableSyncfs()
	}
	defer sy.Close()
	logs := make([]*Log, nlogs)
	for i := range logs {
		l, err := Open(filepath.Join(dir, fmt.Sprint(i)), DefaultConfig(), Options{FS: fsys, Syncer: sy, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		logs[i] = l
	}
	// One record whose value makes the batch about size bytes.
	proto := batch(b, 1, size-61-10, time.Now().UnixMilli())
	var next atomic.Int64
	lats := make([][]time.Duration, appenders)
	before := sy.Stats()
	b.SetBytes(int64(len(proto)))
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := 0; w < appenders; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := logs[w%nlogs]
			buf := make([]byte, len(proto))
			for next.Add(1) <= int64(b.N) {
				copy(buf, proto)
				t0 := time.Now()
				info, err := l.Append(buf, 0)
				if err == nil {
					err = l.WaitDurable(context.Background(), info.LastOffset+1)
				}
				if err != nil {
					b.Error(err)
					return
				}
				lats[w] = append(lats[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N)/float64(len(proto)), "cpu-ns/B")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
	st := sy.Stats()
	if c := st.Cycles - before.Cycles; c > 0 {
		b.ReportMetric(float64(b.N)/float64(c), "acks/cycle")
	}
	reportLatencies(b, slices.Concat(lats...))
}

// BenchmarkRead: reads of 1 MiB from the page cache, copied out (Bytes) or
// only located (the sendfile path).
func BenchmarkRead(b *testing.B) {
	dir := b.TempDir()
	cfg := DefaultConfig()
	cfg.Flush = FlushPolicy{Mode: FlushOS}
	l, err := Open(dir, cfg, Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	proto := batch(b, 1, 16<<10, 1)
	const total = 128 << 20
	for n := 0; n < total; n += len(proto) {
		buf := append([]byte(nil), proto...)
		if _, err := l.Append(buf, 0); err != nil {
			b.Fatal(err)
		}
	}
	end := l.EndOffset()
	for _, copyOut := range []bool{true, false} {
		name := "locate"
		if copyOut {
			name = "bytes"
		}
		b.Run(name+"/max=1MiB", func(b *testing.B) {
			var read int64
			off := int64(0)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s, err := l.Read(off, end, 1<<20)
				if err != nil {
					b.Fatal(err)
				}
				if copyOut {
					if _, err := s.Bytes(); err != nil {
						b.Fatal(err)
					}
				}
				s.Release()
				read += int64(s.Size)
				off = s.LastOffset + 1
				if off >= end {
					off = 0
				}
			}
			b.ReportMetric(float64(read)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

// BenchmarkCleaner: one cleaning pass over a 64 MiB dirty log on the real
// disk (page cache warm): 100-record batches of 100-byte values over 100k
// keys, every key written ~6 times, 5% tombstones. MB/s is the bytes of
// the segments rewritten over the pass's time; every batch is kept
// (emptied where nothing survives: batch i of a Raft log is entry i). Each iteration cleans a
// fresh copy of the log.
//
//	go test ./internal/storage -run '^$' -bench Cleaner -benchtime 5x
func BenchmarkCleaner(b *testing.B) {
	for _, codec := range []records.Codec{records.CodecNone, records.CodecLZ4} {
		b.Run(fmt.Sprintf("raft/%v", codec), func(b *testing.B) {
			var before, after, took int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dir := b.TempDir()
				cfg := DefaultConfig()
				cfg.Flush = FlushPolicy{Mode: FlushOS}
				cfg.SegmentBytes = 16 << 20
				cfg.Compact, cfg.DeleteRetention = true, time.Hour
				l, err := Open(dir, cfg, Options{Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				rng := rand.New(rand.NewSource(1))
				val := make([]byte, 100)
				for l.Size() < 64<<20 {
					recs := make([]records.Record, 100)
					for j := range recs {
						recs[j] = records.Record{Timestamp: 1, Key: fmt.Appendf(nil, "key-%06d", rng.Intn(100_000))}
						if rng.Intn(20) > 0 {
							rng.Read(val[:50])
							recs[j].Value = slices.Clone(val)
						}
					}
					bt, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Codec: codec}, recs)
					if err != nil {
						b.Fatal(err)
					}
					records.SetBaseOffset(bt, l.EndOffset())
					records.SetLeaderEpoch(bt, 1)
					if _, err = l.AppendReplicated(bt); err != nil {
						b.Fatal(err)
					}
				}
				// Seal the last segment so the whole log is cleanable.
				l.Append(batch(b, 1, 10, 1), 0)
				if err := l.Sync(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				res, err := l.Clean(CleanOptions{Committed: l.EndOffset(), RemoveBelow: math.MaxInt64, Map: NewOffsetMap(64 << 20)})
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				before += res.BytesBefore
				after += res.BytesAfter
				took += int64(res.Took)
				l.Close()
			}
			b.ReportMetric(float64(before)/time.Duration(took).Seconds()/1e6, "MB/s")
			b.ReportMetric(float64(after)/float64(before), "kept")
		})
	}
}

// BenchmarkGroupCommit: the Raft Ready loop's cycle on a node with many
// partitions: every log gets `per` small batches (what arrives for it
// while the previous cycle's fsync runs), then one Syncer.SyncNow cycle
// over all of them. One op = one batch.
func BenchmarkGroupCommit(b *testing.B) {
	for _, c := range []struct{ logs, per, size int }{
		{1000, 1, 1 << 10}, {1000, 4, 1 << 10}, {6, 16, 16 << 10}, {1, 64, 1 << 10},
	} {
		b.Run(fmt.Sprintf("logs=%d/batches=%d/batch=%dKiB", c.logs, c.per, c.size>>10), func(b *testing.B) {
			benchGroupCommit(b, c.logs, c.per, c.size)
		})
	}
}

func benchGroupCommit(b *testing.B, nlogs, per, size int) {
	dir := b.TempDir()
	sy := NewSyncer(quiet)
	defer sy.Close()
	logs := make([]*Log, nlogs)
	for i := range logs {
		l, err := Open(filepath.Join(dir, fmt.Sprint(i)), DefaultConfig(), Options{Syncer: sy, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		logs[i] = l
	}
	proto := batch(b, 1, size-61-10, time.Now().UnixMilli())
	buf := make([]byte, len(proto))
	n := max(b.N, nlogs*per) // at least one whole round: one cycle
	round := func(n int) {
		for done := 0; done < n; {
			for _, l := range logs {
				for k := 0; k < per && done < n; k++ {
					copy(buf, proto)
					if _, err := l.Append(buf, 0); err != nil {
						b.Fatal(err)
					}
					done++
				}
			}
			for _, err := range sy.SyncNow(logs) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	// Warm up: the first writes to new files allocate their blocks and
	// inodes, which a running node did long ago.
	round(2 * nlogs * per)
	b.SetBytes(int64(len(proto)))
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	round(n)
	b.StopTimer() // not the deferred Closes
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/1000/float64(n), "cpu-µs/batch")
}

// BenchmarkDurableWrite: the device's durable sequential write bandwidth
// through the page cache (write + fdatasync every 4 MiB) and with O_DIRECT
// (aligned buffers, the same fdatasync): what a log could reach with
// either, and the CPU each costs (cpu-ns/B: user+system time of the
// process per byte).
//
// The log=... cases are the same through storage.Log (Append +
// WaitDurable from 64 appenders, group commit): the page cache against
// log.direct.io (OSFSDirectIO), with its read cache and without, over one
// log and over eight.
func BenchmarkDurableWrite(b *testing.B) {
	for _, c := range []struct{ logs, size int }{{1, 64 << 10}, {8, 64 << 10}, {1, 16 << 10}} {
		for _, name := range []string{"pagecache", "direct", "direct-nocache"} {
			fsys := OSFS()
			if name != "pagecache" {
				fsys = OSFSDirectIO()
			}
			b.Run(fmt.Sprintf("log=%s/logs=%d/batch=%dKiB", name, c.logs, c.size>>10), func(b *testing.B) {
				if name == "direct-nocache" { // log.direct.io.cache.bytes=0
					defer defaultReadCache.SetLimit(defaultReadCache.budget())
					defaultReadCache.SetLimit(0)
				}
				benchAppend(b, fsys, c.size, 64, c.logs, false)
			})
		}
	}
	for _, direct := range []bool{false, true} {
		for _, chunk := range []int{64 << 10, 1 << 20} {
			name := "pagecache"
			if direct {
				name = "odirect"
			}
			b.Run(fmt.Sprintf("%s/chunk=%dKiB", name, chunk>>10), func(b *testing.B) {
				benchDurableWrite(b, chunk, direct)
			})
		}
	}
}

func benchDurableWrite(b *testing.B, chunk int, direct bool) {
	flag := os.O_CREATE | os.O_WRONLY
	if direct {
		flag |= syscall.O_DIRECT
	}
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "raw"), flag, 0o644)
	if err != nil {
		b.Skip("open:", err)
	}
	defer f.Close()
	// An aligned buffer (O_DIRECT needs the memory, offset and length
	// aligned to the logical block size; 4 KiB covers every device).
	raw := make([]byte, chunk+4096)
	off := 4096 - int(uintptr(unsafe.Pointer(&raw[0]))&4095)
	buf := raw[off : off+chunk]
	for i := range buf {
		buf[i] = byte(i)
	}
	const syncEvery = 4 << 20
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.SetBytes(int64(chunk))
	b.ResetTimer()
	written := 0
	for i := 0; i < b.N; i++ {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if written += chunk; written%syncEvery < chunk {
			if err := syscall.Fdatasync(int(f.Fd())); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := syscall.Fdatasync(int(f.Fd())); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(written), "cpu-ns/B")
}

// BenchmarkIndexDue: 1,000 new logs, each sync cycle one batch per log of
// one index interval (an index entry each), SyncNow over all of them as
// the Raft store round does, for 48 cycles: around cycle 32 every log's
// first index entries are due at once (indexDueLocked), which is when the
// index files of the active segments are first needed. One op is the whole
// run; reported: the slowest of the cycles around the one where the entries
// come due (due-cycle-ms), the slowest of all (the first writes to new
// files are slow too) and the median one (wall ms: what every
// acknowledgement of the node waits for), and the process's CPU over the
// cycles and the Closes (every index file created and fsynced by then).
func BenchmarkIndexDue(b *testing.B) {
	const nlogs, cycles = 1000, 48
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := b.TempDir()
		sy := NewSyncer(quiet)
		cfg := DefaultConfig()
		logs := make([]*Log, nlogs)
		for i := range logs {
			l, err := Open(filepath.Join(dir, fmt.Sprint(i)), cfg, Options{Syncer: sy, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			logs[i] = l
		}
		proto := batch(b, 1, cfg.IndexIntervalBytes, time.Now().UnixMilli())
		buf := make([]byte, len(proto))
		var ru0, ru1 syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
		b.StartTimer()
		took := make([]time.Duration, 0, cycles)
		for c := 0; c < cycles; c++ {
			start := time.Now()
			for _, l := range logs {
				copy(buf, proto)
				if _, err := l.Append(buf, 0); err != nil {
					b.Fatal(err)
				}
			}
			for _, err := range sy.SyncNow(logs) {
				if err != nil {
					b.Fatal(err)
				}
			}
			took = append(took, time.Since(start))
		}
		// Close writes and fsyncs every index (creating the files the
		// creator has not made yet): the CPU of the files is all counted.
		for _, l := range logs {
			l.Close()
		}
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		b.StopTimer()
		sy.Close()
		cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
		if testing.Verbose() {
			b.Logf("cycles (ms): %v", fmt.Sprint(slices.Collect(func(yield func(int64) bool) {
				for _, d := range took {
					if !yield(d.Milliseconds()) {
						return
					}
				}
			})))
		}
		b.ReportMetric(float64(slices.Max(took[indexPersistEntries-2:indexPersistEntries+2]).Microseconds())/1000, "due-cycle-ms")
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-cycle-ms")
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-cycle-ms")
		b.ReportMetric(float64(cpu)/1e6, "cpu-ms")
		b.StartTimer()
	}
}

// BenchmarkSegmentWrite: what a segment file's write(2) costs the process
// when a busy broker issues it: writers (one file each, as a produce
// handler per partition) append 1 MiB batches through OSFS with an
// fdatasync every 4 MiB, while as many goroutines again keep the Ps busy
// with other work, as the rest of a broker does. cpu-ns/B is the process's
// user + system time per byte written, scheduler work included (a write
// that the runtime hands its P away from costs wake-ups and context
// switches besides the copy).
func BenchmarkSegmentWrite(b *testing.B) {
	for _, writers := range []int{2, 6} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			const chunk, syncEvery = 1 << 20, 4 << 20
			dir := b.TempDir()
			buf := make([]byte, chunk)
			for i := range buf {
				buf[i] = byte(i)
			}
			files := make([]File, writers)
			for i := range files {
				f, err := OSFS().OpenFile(filepath.Join(dir, fmt.Sprint(i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				files[i] = f
			}
			stop := make(chan struct{})
			var busy sync.WaitGroup
			for range writers {
				busy.Add(1)
				go func() { // other work: small allocations and hashing
					defer busy.Done()
					x := uint64(1)
					for {
						select {
						case <-stop:
							return
						default:
						}
						for range 1000 {
							x = x*6364136223846793005 + 1442695040888963407
						}
						runtime_keep(x)
						time.Sleep(20 * time.Microsecond) // a benchmark's bursty neighbour: work, then idle
					}
				}()
			}
			var ru0, ru1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.SetBytes(chunk)
			b.ResetTimer()
			var next atomic.Int64
			var wg sync.WaitGroup
			for _, f := range files {
				wg.Add(1)
				go func() {
					defer wg.Done()
					written := 0
					for next.Add(1) <= int64(b.N) {
						if _, err := f.Write(buf); err != nil {
							b.Error(err)
							return
						}
						if written += chunk; written%syncEvery == 0 {
							if err := f.Sync(); err != nil {
								b.Error(err)
								return
							}
						}
					}
					f.Sync()
				}()
			}
			wg.Wait()
			b.StopTimer()
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			close(stop)
			busy.Wait()
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(cpu)/float64(b.N*chunk), "cpu-ns/B")
		})
	}
}

var keepSink atomic.Uint64

func runtime_keep(x uint64) { keepSink.Store(x) }
