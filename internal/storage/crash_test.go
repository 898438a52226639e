package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"holdfast/internal/records"
)

// model is what the test knows was appended: batches by base offset.
type model struct {
	batches [][]byte // in offset order, contiguous
	ords    []int64  // ordinal of each batch, as Append reported it
}

func (m *model) truncate(off int64) {
	for i, b := range m.batches {
		h, _ := records.ParseHeader(b)
		if h.BaseOffset >= off {
			m.batches = m.batches[:i]
			m.ords = m.ords[:i]
			return
		}
	}
}

// verify checks the recovered log against the model: every batch below
// durable is there byte for byte, and whatever else is there is a prefix of
// what was appended.
func (m *model) verify(t *testing.T, l *Log, durable int64) {
	t.Helper()
	if l.EndOffset() < durable {
		t.Fatalf("end %d below durable %d: acknowledged data lost", l.EndOffset(), durable)
	}
	got := readAll(t, l, l.StartOffset())
	i := 0
	for ; i < len(m.batches); i++ {
		h, _ := records.ParseHeader(m.batches[i])
		if h.LastOffset() >= l.StartOffset() {
			break
		}
	}
	for j, b := range got {
		if _, err := records.Validate(b, 0); err != nil {
			t.Fatalf("recovered a corrupt batch: %v", err)
		}
		if i+j >= len(m.batches) || !bytes.Equal(b, m.batches[i+j]) {
			h, _ := records.ParseHeader(b)
			t.Fatalf("recovered batch %d at offset %d differs from what was appended", j, h.BaseOffset)
		}
	}
	m.batches = m.batches[i : i+len(got)]
	m.ords = m.ords[i : i+len(got)]
	// Ordinals survive the crash and stay dense.
	for j, b := range m.batches {
		h, _ := records.ParseHeader(b)
		if ord, err := l.OrdinalOf(max(h.BaseOffset, l.StartOffset())); err != nil || ord != m.ords[j] {
			t.Fatalf("batch at %d: ordinal %d (%v), appended as %d", h.BaseOffset, ord, err, m.ords[j])
		}
		if off, err := l.OffsetOfOrdinal(m.ords[j]); err != nil || off != h.BaseOffset {
			t.Fatalf("ordinal %d: offset %d (%v), want %d", m.ords[j], off, err, h.BaseOffset)
		}
		if j > 0 && m.ords[j] != m.ords[j-1]+1 {
			t.Fatalf("ordinals not dense: %d after %d", m.ords[j], m.ords[j-1])
		}
	}
	if n := len(m.ords); n > 0 && l.EndOrdinal() != m.ords[n-1]+1 {
		t.Fatalf("end ordinal %d after last %d", l.EndOrdinal(), m.ords[n-1])
	}
	if n := len(m.batches); n > 0 {
		h, _ := records.ParseHeader(m.batches[n-1])
		if h.LastOffset()+1 != l.EndOffset() {
			t.Fatalf("end %d, last batch ends at %d", l.EndOffset(), h.LastOffset()+1)
		}
	}
}

func TestCrashRecovery(t *testing.T) {
	seeds := crashSeeds(300)
	// Past the default range, seeds that once failed: 311 (a Truncate left
	// removed segments in the ordinal checkpoint), 2755 (DeleteBefore moved
	// the start past the durable end; a power cut left data beyond a hole),
	// 3792 (the segment before an unlisted one lost everything and was
	// removed as an empty sealed one, so the data rolled after it stayed).
	for _, seed := range append(seedRange(seeds), 311, 2755, 3792) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { crashSeed(t, seed, false) })
	}
}

// TestCrashRecoveryDirect is TestCrashRecovery with direct I/O
// (log.direct.io): write-outs of a few KiB already go O_DIRECT, segments
// and batches are larger, and a torn crash may also leave a block of the
// unsynced tail as zeros.
func TestCrashRecoveryDirect(t *testing.T) {
	defer directMin.Store(directMin.Load())
	directMin.Store(directBlock)
	seeds := crashSeeds(200)
	var directs int64
	hits := defaultReadCache.Stats().Hits
	for _, seed := range append(seedRange(seeds), 365, 494, 1943) { // as in TestCrashRecovery
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { directs += crashSeed(t, seed, true) })
	}
	if directs == 0 {
		t.Fatal("no direct write happened")
	}
	hits = defaultReadCache.Stats().Hits - hits
	if hits == 0 {
		t.Fatal("no fetch was served from the read cache")
	}
	t.Logf("%d direct writes, %d fetches from the read cache", directs, hits)
}

// crashSeeds is the number of seeds a crash test runs: def, 10 with
// -short, STORAGE_CRASH_SEEDS=n to run more.
func crashSeeds(def int) int {
	if n, err := strconv.Atoi(os.Getenv("STORAGE_CRASH_SEEDS")); err == nil && n > 0 {
		return n
	}
	if testing.Short() {
		return 10
	}
	return def
}

func seedRange(n int) []int64 {
	seeds := make([]int64, n)
	for i := range seeds {
		seeds[i] = int64(i + 1)
	}
	return seeds
}

// debugOrd logs every operation of a seed: STORAGE_CRASH_SEED=n go test -run CrashSeed -v
var debugOrd bool

func TestCrashSeed(t *testing.T) {
	seed, _ := strconv.Atoi(os.Getenv("STORAGE_CRASH_SEED"))
	if seed == 0 {
		t.Skip("set STORAGE_CRASH_SEED to replay one crash-test seed verbosely")
	}
	debugOrd = true
	if os.Getenv("STORAGE_CRASH_DIRECT") != "" {
		defer directMin.Store(directMin.Load())
		directMin.Store(directBlock)
	}
	crashSeed(t, int64(seed), os.Getenv("STORAGE_CRASH_DIRECT") != "") // with TestCrashRecoveryDirect's settings
}

// crashSeed runs one seed and returns the number of direct writes.
func crashSeed(t *testing.T, seed int64, direct bool) int64 {
	{
		rng := rand.New(rand.NewSource(seed))
		fs := NewCrashFS(seed)
		fs.SetDirectIO(direct)
		fs.SetDirPrefix(true)
		if direct {
			// The read cache (readcache.go) is on with direct I/O; a
			// budget from none to ample, from its own source so the
			// seeds' operations stay what they were.
			budgets := []int64{0, 20 << 10, 1 << 20, 3 << 20, DefaultReadCacheBytes}
			withReadCache(t, budgets[rand.New(rand.NewSource(seed*7919)).Intn(len(budgets))])
		}
		sy := newSyncer(t)
		cfg := testConfig()
		cfg.SegmentBytes = int64(1024 + rng.Intn(4096))
		maxValue := 300
		if direct {
			cfg.SegmentBytes *= 16
			maxValue = 3000
		}
		cfg.IndexIntervalBytes = 64 + rng.Intn(512)
		if rng.Intn(3) == 0 {
			cfg.Flush = FlushPolicy{Mode: FlushOS}
		}
		l := openLog(t, fs, "/d", cfg, sy, nil)
		m := &model{}
		epoch := int32(0)
		for round := 0; round < 6; round++ {
			ops := rng.Intn(80)
			for op := 0; op < ops; op++ {
				switch r := rng.Intn(20); {
				case r < 14:
					b := batch(t, 1+rng.Intn(4), rng.Intn(maxValue), int64(op))
					info, err := l.Append(b, epoch)
					if err != nil {
						t.Fatalf("seed %d: append: %v", seed, err)
					}
					m.batches = append(m.batches, b)
					m.ords = append(m.ords, info.Ordinal)
				case r < 18:
					if err := l.WaitDurable(context.Background(), l.EndOffset()); err != nil {
						t.Fatalf("seed %d: wait: %v", seed, err)
					}
				case r < 19 && len(m.batches) > 0:
					// A follower dropping its tail after a leader change.
					k := rng.Intn(len(m.batches))
					h, _ := records.ParseHeader(m.batches[k])
					if h.BaseOffset <= l.StartOffset() {
						continue
					}
					if debugOrd {
						t.Logf("truncate %d (end %d, endord %d)", h.BaseOffset, l.EndOffset(), l.EndOrdinal())
					}
					if err := l.Truncate(h.BaseOffset); err != nil {
						t.Fatalf("seed %d: truncate: %v", seed, err)
					}
					m.truncate(h.BaseOffset)
					epoch++
				default:
					if end := l.EndOffset(); end > 0 && rng.Intn(3) == 0 {
						d := rng.Int63n(end)
						if debugOrd {
							t.Logf("delete before %d", d)
						}
						if err := l.DeleteBefore(d); err != nil {
							t.Fatalf("seed %d: delete before: %v", seed, err)
						}
					}
				}
			}
			if direct {
				// What the cache holds is what the files hold, and
				// fetches of every batch, cached or not, are the model's.
				checkReadCache(t, l)
				m.checkFetches(t, l)
			}
			durable := l.DurableOffset()
			if debugOrd {
				t.Logf("crash: end %d endord %d durable %d segs %d sizes %v", l.EndOffset(), l.EndOrdinal(), durable, l.Segments(), fs.Sizes())
				b, _ := fs.ReadFileForTest("/d/" + ordinalCheckpoint)
				t.Logf("ckpt %q", b)
			}
			if rng.Intn(2) == 0 {
				fs.Crash()
			} else {
				fs.CrashTorn()
			}
			var err error
			l, err = Open("/d", cfg, Options{FS: fs, Syncer: sy, Logger: quiet})
			if err != nil {
				t.Fatalf("seed %d round %d: reopen: %v", seed, round, err)
			}
			if debugOrd {
				b, _ := fs.ReadFileForTest("/d/" + ordinalCheckpoint)
				t.Logf("reopened: end %d endord %d start %d segs %d ckpt %q", l.EndOffset(), l.EndOrdinal(), l.StartOffset(), l.Segments(), b)
			}
			m.verify(t, l, durable)
			// Writable again.
			b := batch(t, 1, 10, 1)
			info, err := l.Append(b, epoch)
			if err != nil {
				t.Fatalf("seed %d: append after crash: %v", seed, err)
			}
			m.batches = append(m.batches, b)
			m.ords = append(m.ords, info.Ordinal)
		}
		l.Close()
		return fs.DirectWrites()
	}
}

// TestENOSPC, batches written at once (at least appendDirect bytes): a
// partial write then failure fails only that append; everything else
// stays readable and survives a reopen.
func TestENOSPC(t *testing.T) {
	fs := NewCrashFS(1)
	sy := newSyncer(t)
	cfg := testConfig()
	cfg.SegmentBytes = 16 << 20
	l := openLog(t, fs, "/d", cfg, sy, nil)
	var want [][]byte
	for i := 0; i < 5; i++ {
		b := batch(t, 1, appendDirect, 1)
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
		want = append(want, b)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	used := int64(0)
	for _, n := range fs.Sizes() {
		used += int64(n)
	}
	fs.SetCapacity(used + appendDirect*2 + appendDirect/2)
	var sawENOSPC bool
	for i := 0; i < 4; i++ {
		b := batch(t, 1, appendDirect, 1)
		_, err := l.Append(b, 0)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("want ENOSPC, got %v", err)
			}
			sawENOSPC = true
			continue
		}
		want = append(want, b)
	}
	if !sawENOSPC {
		t.Fatal("no ENOSPC")
	}
	got := readAll(t, l, 0)
	if len(got) != len(want) {
		t.Fatalf("%d batches readable, want %d", len(got), len(want))
	}
	fs.ClearErrors()
	b := batch(t, 1, appendDirect, 1)
	if _, err := l.Append(b, 0); err != nil {
		t.Fatalf("append after space freed: %v", err)
	}
	want = append(want, b)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = openLog(t, fs, "/d", cfg, sy, nil)
	defer l.Close()
	got = readAll(t, l, 0)
	for i := range want {
		if i >= len(got) || !bytes.Equal(got[i], want[i]) {
			t.Fatalf("batch %d lost or different after ENOSPC", i)
		}
	}
}

// TestENOSPCBuffered: small batches wait in the segment's buffer
// (appendbuf.go), so the disk being full shows when the sync cycle writes
// them: the cycle fails like a failed fsync (every waiter gets the error,
// the log refuses appends), nothing durable is lost, and truncating to
// the durable offset once there is space again recovers.
func TestENOSPCBuffered(t *testing.T) {
	fs := NewCrashFS(1)
	sy := newSyncer(t)
	cfg := testConfig()
	cfg.SegmentBytes = 16 << 20 // no roll (a roll writes and syncs too)
	l := openLog(t, fs, "/d", cfg, sy, nil)
	var want [][]byte
	for i := 0; i < 20; i++ {
		b := batch(t, 1, 100, 1)
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
		want = append(want, b)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	durable := l.DurableOffset()
	used := int64(0)
	for _, n := range fs.Sizes() {
		used += int64(n)
	}
	fs.SetCapacity(used + 300)
	for i := 0; i < 10; i++ {
		if _, err := l.Append(batch(t, 1, 100, 1), 0); err != nil {
			t.Fatalf("buffered append %d: %v", i, err)
		}
	}
	if err := l.Sync(); !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrFailed) {
		t.Fatalf("sync with a full disk: %v", err)
	}
	if l.DurableOffset() != durable {
		t.Fatalf("durable offset %d, was %d", l.DurableOffset(), durable)
	}
	if _, err := l.Append(batch(t, 1, 100, 1), 0); !errors.Is(err, ErrFailed) {
		t.Fatalf("append on a failed log: %v", err)
	}
	// What is durable stays readable.
	sl, err := l.Read(0, durable, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if sl.LastOffset != durable-1 {
		t.Fatalf("read up to %d, durable %d", sl.LastOffset, durable)
	}
	sl.Release()
	fs.ClearErrors()
	if err := l.Truncate(durable); err != nil {
		t.Fatal(err)
	}
	b := batch(t, 1, 100, 1)
	if _, err := l.Append(b, 0); err != nil {
		t.Fatalf("append after space freed: %v", err)
	}
	want = append(want, b)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = openLog(t, fs, "/d", cfg, sy, nil)
	defer l.Close()
	got := readAll(t, l, 0)
	if len(got) != len(want) {
		t.Fatalf("%d batches after reopen, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("batch %d lost or different after ENOSPC", i)
		}
	}
}

func TestFsyncErrorFailsWaitersAndBlocksAppends(t *testing.T) {
	fs := NewCrashFS(1)
	fs.SetSyncDelay(time.Millisecond)
	sy := newSyncer(t)
	l := openLog(t, fs, "/d", testConfig(), sy, nil)
	defer l.Close()
	if _, err := l.Append(batch(t, 1, 10, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	durable := l.DurableOffset()
	fs.InjectError(OpSync, ".log", syscall.EIO)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		info, err := l.Append(batch(t, 1, 10, 1), 0)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.WaitDurable(context.Background(), info.LastOffset+1)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrFailed) {
			t.Fatalf("waiter %d: %v", i, err)
		}
	}
	if l.DurableOffset() != durable {
		t.Fatal("durable offset advanced over a failed fsync")
	}
	if _, err := l.Append(batch(t, 1, 10, 1), 0); !errors.Is(err, ErrFailed) {
		t.Fatalf("append on failed log: %v", err)
	}
	// Still readable.
	if got := len(readAll(t, l, 0)); got != 9 {
		t.Fatalf("%d batches readable", got)
	}
	fs.ClearErrors()
	if err := l.Truncate(durable); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(batch(t, 1, 10, 1), 0); err != nil {
		t.Fatalf("append after truncating the failed tail: %v", err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestWriteErrorFailsOnlyThatAppend: a batch written at once (large) that
// fails is not appended; the log goes on.
func TestWriteErrorFailsOnlyThatAppend(t *testing.T) {
	fs := NewCrashFS(1)
	cfg := testConfig()
	cfg.SegmentBytes = 16 << 20 // no roll (a roll writes and syncs too)
	l := openLog(t, fs, "/d", cfg, newSyncer(t), nil)
	defer l.Close()
	if _, err := l.Append(batch(t, 1, 10, 1), 0); err != nil {
		t.Fatal(err)
	}
	fs.InjectError(OpWrite, ".log", syscall.EIO)
	if _, err := l.Append(batch(t, 1, appendDirect, 1), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("want EIO: %v", err)
	}
	fs.ClearErrors()
	if info, err := l.Append(batch(t, 1, 10, 1), 0); err != nil || info.BaseOffset != 1 {
		t.Fatalf("append after write error: %v %+v", err, info)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := len(readAll(t, l, 0)); got != 2 {
		t.Fatalf("%d batches, want 2", got)
	}
}

// TestBufferedWriteErrorFailsTheCycle: buffered appends whose write fails
// when the sync cycle writes them fail that cycle's waiters and the log
// (as a failed fsync does); the durable prefix is intact.
func TestBufferedWriteErrorFailsTheCycle(t *testing.T) {
	fs := NewCrashFS(1)
	sy := newSyncer(t)
	l := openLog(t, fs, "/d", testConfig(), sy, nil)
	first := batch(t, 1, 10, 1)
	if _, err := l.Append(first, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	fs.InjectError(OpWrite, ".log", syscall.EIO)
	info, err := l.Append(batch(t, 1, 10, 1), 0)
	if err != nil {
		t.Fatalf("a buffered append does not write: %v", err)
	}
	if err := l.WaitDurable(context.Background(), info.LastOffset+1); !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrFailed) {
		t.Fatalf("waiter: %v", err)
	}
	fs.ClearErrors()
	if err := l.Truncate(l.DurableOffset()); err != nil {
		t.Fatal(err)
	}
	second := batch(t, 1, 10, 2)
	if _, err := l.Append(second, 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = openLog(t, fs, "/d", testConfig(), sy, nil)
	defer l.Close()
	got := readAll(t, l, 0)
	if len(got) != 2 || !bytes.Equal(got[0], first) || !bytes.Equal(got[1][records.HeaderSize:], second[records.HeaderSize:]) {
		t.Fatalf("after reopen: %d batches", len(got))
	}
}

// FuzzRecovery: arbitrary bytes as the only segment, no index. Recovery
// must not panic, must keep only batches that pass their CRC with
// increasing offsets, and leave the log writable.
func FuzzRecovery(f *testing.F) {
	var seg []byte
	for i := 0; i < 5; i++ {
		b := batch(f, 1+i, 20, int64(i))
		records.SetBaseOffset(b, int64(i*(i+1)/2))
		seg = append(seg, b...)
	}
	f.Add(seg)
	f.Add(seg[:len(seg)-7])
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<20 {
			return
		}
		fs := NewCrashFS(1)
		fs.MkdirAll("/d", 0o755)
		fs.WriteFileForTest("/d/"+segmentName(0, logSuffix), data)
		checkRecovered(t, fs, nil)
	})
}

// FuzzRecoveryTail follows the crash model: a durable prefix (a real log
// and its real index) followed by arbitrary bytes in the segment and in the
// index (torn or garbage writes). Every durable batch must survive.
func FuzzRecoveryTail(f *testing.F) {
	fs := NewCrashFS(1)
	sy := NewSyncer(quiet)
	cfg := testConfig()
	cfg.IndexIntervalBytes = 64
	l, err := Open("/d", cfg, Options{FS: fs, Syncer: sy, Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	for i := 0; i < 12; i++ {
		l.Append(batch(f, 1+i%3, 20, int64(i)), 0)
	}
	l.Close()
	sy.Close()
	prefix, _ := fs.ReadFileForTest("/d/" + segmentName(0, logSuffix))
	index, _ := fs.ReadFileForTest("/d/" + segmentName(0, indexSuffix))
	tindex, _ := fs.ReadFileForTest("/d/" + segmentName(0, timeIndexSuffix))
	var want [][]byte
	for rest := prefix; len(rest) > 0; {
		var b []byte
		b, rest, _ = records.Next(rest)
		want = append(want, b)
	}
	f.Add([]byte{}, []byte{})
	f.Add(prefix[:70], index[:10])
	f.Add(append([]byte(nil), prefix[len(prefix)-90:]...), append([]byte(nil), index[len(index)-16:]...))
	f.Fuzz(func(t *testing.T, tail, idxTail []byte) {
		if len(tail) > 1<<20 || len(idxTail) > 1<<16 {
			return
		}
		fs := NewCrashFS(1)
		fs.MkdirAll("/d", 0o755)
		fs.WriteFileForTest("/d/"+segmentName(0, logSuffix), append(append([]byte(nil), prefix...), tail...))
		fs.WriteFileForTest("/d/"+segmentName(0, indexSuffix), append(append([]byte(nil), index...), idxTail...))
		fs.WriteFileForTest("/d/"+segmentName(0, timeIndexSuffix), tindex)
		checkRecovered(t, fs, want)
	})
}

func checkRecovered(t *testing.T, fs *CrashFS, want [][]byte) {
	sy := NewSyncer(quiet)
	defer sy.Close()
	l, err := Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet})
	if err != nil {
		if want != nil {
			t.Fatalf("open with a durable prefix: %v", err)
		}
		return
	}
	defer l.Close()
	var prev int64 = -1
	n := 0
	err = l.Scan(0, func(h records.Header, b []byte) error {
		if _, err := records.Validate(b, 0); err != nil {
			t.Fatalf("recovery kept a corrupt batch: %v", err)
		}
		if h.BaseOffset <= prev {
			t.Fatalf("offsets not increasing: %d after %d", h.BaseOffset, prev)
		}
		if n < len(want) && !bytes.Equal(b, want[n]) {
			t.Fatalf("durable batch %d changed", n)
		}
		n++
		prev = h.LastOffset()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < len(want) {
		t.Fatalf("%d of %d durable batches recovered", n, len(want))
	}
	if l.EndOffset() != prev+1 {
		t.Fatalf("end %d after last batch %d", l.EndOffset(), prev)
	}
	epoch := int32(0)
	if e := l.Epochs(); len(e) > 0 {
		epoch = int32(e[len(e)-1][0])
	}
	info, err := l.Append(batch(t, 1, 1, 1), epoch)
	if err != nil {
		t.Fatalf("append after recovery: %v", err)
	}
	if info.BaseOffset != prev+1 {
		t.Fatalf("append at %d after last %d", info.BaseOffset, prev)
	}
	if _, err := l.OffsetOfOrdinal(info.Ordinal); err != nil {
		t.Fatalf("ordinal of the new batch: %v", err)
	}
}

// A new log's creation is durable once Open returns - its segment's name,
// by one directory fsync; it writes no ordinal checkpoint (its first roll
// does) - and a power cut at any step of it leaves a directory that opens
// as an empty log.
func TestCreateLogCrashAtEveryStep(t *testing.T) {
	sy := NewSyncer(quiet)
	defer sy.Close()
	probe := NewCrashFS(1)
	l, err := Open("/d", testConfig(), Options{FS: probe, Syncer: sy, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	steps := probe.Ops()
	for n := int64(1); n <= steps+1; n++ {
		fs := NewCrashFS(n)
		fs.CrashAfter(n)
		// The log opened here is abandoned at the power cut.
		_, err := Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet})
		created := err == nil
		if created {
			fs.Crash() // the power goes right after Open returned
		}
		fs.Reboot()
		if created {
			names, _ := fs.ReadDir("/d")
			if want := segmentName(0, logSuffix); !slices.Contains(names, want) {
				t.Fatalf("crash after step %d: Open had returned, but %s is lost (%v)", n, want, names)
			}
		}
		l, err := Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet})
		if err != nil {
			t.Fatalf("crash after step %d of %d: reopen: %v", n, steps, err)
		}
		if l.StartOffset() != 0 || l.EndOffset() != 0 {
			t.Fatalf("crash after step %d: log [%d, %d), want empty", n, l.StartOffset(), l.EndOffset())
		}
		l.Close()
	}
}

// TestFirstRollCrashAtEveryStep: a new log has no ordinal checkpoint until
// its first roll writes one. A power cut (clean or torn) at every step of
// that roll and of the appends around it, some unsynced, loses nothing
// that was durable, and the ordinals stay those Append reported. (The log
// without a checkpoint is read as if it listed its first segment at 0;
// without that, TestCrashRecovery's seed 3792 - an empty first segment
// before an unlisted second - recovers ordinals wrong.)
func TestFirstRollCrashAtEveryStep(t *testing.T) {
	sy := NewSyncer(quiet)
	defer sy.Close()
	run := func(fs *CrashFS, crashAt int64, torn bool) (m model, durable int64) {
		l, err := Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		switch {
		case crashAt > 0 && torn:
			fs.CrashTornAfter(crashAt)
		case crashAt > 0:
			fs.CrashAfter(crashAt)
		}
		// 4 KiB segments: the fourth 1.2 KiB batch rolls.
		for i := range 6 {
			b := batch(t, 1, 1200, int64(i))
			info, err := l.Append(b, 0)
			if err != nil {
				break
			}
			m.batches = append(m.batches, b)
			m.ords = append(m.ords, info.Ordinal)
			if i%3 != 2 {
				continue // unsynced batches before and across the roll
			}
			if l.SyncNow() != nil {
				break
			}
			durable = l.DurableOffset()
		}
		return m, durable
	}
	probe := NewCrashFS(1)
	if m, _ := run(probe, 0, false); len(m.batches) != 6 {
		t.Fatalf("%d batches appended without a crash", len(m.batches))
	}
	if names, _ := probe.ReadDir("/d"); !slices.Contains(names, ordinalCheckpoint) || len(slices.DeleteFunc(names, func(n string) bool { return !strings.HasSuffix(n, logSuffix) })) < 2 {
		t.Fatalf("no roll, or no checkpoint after it: %v", names)
	}
	steps := probe.Ops()
	for k := int64(1); k <= 2*steps; k++ {
		n, torn := (k+1)/2, k%2 == 0 // each step, then with a torn tail
		fs := NewCrashFS(k)
		m, durable := run(fs, n, torn)
		if torn {
			fs.CrashTorn()
		} else {
			fs.Crash()
		}
		fs.Reboot()
		l, err := Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet})
		if err != nil {
			t.Fatalf("crash after step %d of %d: reopen: %v", n, steps, err)
		}
		m.verify(t, l, durable)
		info, err := l.Append(batch(t, 1, 10, 9), 0)
		if err != nil {
			t.Fatalf("crash after step %d: append after recovery: %v", n, err)
		}
		if want := int64(len(m.ords)); info.Ordinal != want {
			t.Fatalf("crash after step %d: the next batch's ordinal %d, want %d", n, info.Ordinal, want)
		}
		l.Close()
	}
}
