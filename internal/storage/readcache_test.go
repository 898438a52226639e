package storage

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"holdfast/internal/records"
)

// checkReadCache asserts the read cache's promise on a live log: every
// chunk a segment file holds in memory is byte for byte what the file
// holds at its position, the chunks are contiguous, and the budget's
// accounting matches what the files hold.
func checkReadCache(t *testing.T, l *Log) {
	t.Helper()
	if st := defaultReadCache.Stats(); st.Bytes < 0 || st.Bytes > st.Limit {
		t.Fatalf("read cache counts %d bytes, budget %d", st.Bytes, st.Limit)
	}
	l.mu.RLock()
	segs := append([]*segment(nil), l.segs...)
	l.mu.RUnlock()
	for _, s := range segs {
		a, ok := s.f.(*appendFile)
		if !ok {
			continue
		}
		a.wmu.Lock() // no write-out moves the file's end meanwhile
		a.mu.Lock()
		var prev *cacheChunk
		for _, c := range a.cached {
			if prev != nil && prev.pos+int64(len(prev.data)) != c.pos {
				t.Fatalf("%s: cached chunks not contiguous: %d+%d then %d", a.Name(), prev.pos, len(prev.data), c.pos)
			}
			if end := c.pos + int64(len(c.data)); end > a.written.Load() {
				t.Fatalf("%s: cached bytes up to %d past the file's written end %d", a.Name(), end, a.written.Load())
			}
			got := make([]byte, len(c.data))
			if n, err := a.File.ReadAt(got, c.pos); n != len(got) {
				t.Fatalf("%s: cached chunk at %d (%d bytes) not in the file: read %d: %v", a.Name(), c.pos, len(c.data), n, err)
			}
			if !bytes.Equal(got, c.data) {
				t.Fatalf("%s: cached chunk at %d differs from the file", a.Name(), c.pos)
			}
			prev = c
		}
		a.mu.Unlock()
		a.wmu.Unlock()
	}
}

// checkFetches reads every batch of the model through Read, as the fetch
// path does (CachedBytes, else the file), and compares.
func (m *model) checkFetches(t *testing.T, l *Log) {
	t.Helper()
	for _, want := range m.batches {
		h, _ := records.ParseHeader(want)
		if h.LastOffset() < l.StartOffset() {
			continue
		}
		from := max(h.BaseOffset, l.StartOffset()) // DeleteRecords may have cut into it
		s, err := l.Read(from, from+1, 1)
		if err != nil {
			t.Fatalf("read %d: %v", h.BaseOffset, err)
		}
		var got []byte
		if parts := s.CachedBytes(); parts != nil {
			got = bytes.Join(parts, nil)
		} else {
			if got, err = s.Bytes(); err != nil {
				t.Fatal(err)
			}
		}
		s.Release()
		if !bytes.Equal(got, want) {
			f, _ := s.Bytes()
			t.Fatalf("batch at %d: fetched bytes differ from what was appended (pos %d size %d, want %d bytes, cached %v, file equal %v)", h.BaseOffset, s.Pos, s.Size, len(want), s.CachedBytes() != nil, bytes.Equal(f, want))
		}
	}
}

// withReadCache sets the read cache's budget for a test.
func withReadCache(t *testing.T, n int64) {
	old := defaultReadCache.budget()
	defaultReadCache.SetLimit(0) // drops what logs of earlier tests left (a crash test's abandoned ones)
	defaultReadCache.SetLimit(n)
	idle := defaultReadCache.idle.Swap(0) // keep chunks before the first fetch too
	t.Cleanup(func() {
		defaultReadCache.SetLimit(old)
		defaultReadCache.idle.Store(idle)
	})
}

func directLog(t *testing.T, cfg Config) (*Log, *CrashFS) {
	t.Helper()
	directMin.Store(directBlock)
	t.Cleanup(func() { directMin.Store(64 << 10) })
	fs := NewCrashFS(1)
	fs.SetDirectIO(true)
	return openLog(t, fs, "/d", cfg, newSyncer(t), nil), fs
}

func appendDurable(t *testing.T, l *Log, m *model, n, size int) {
	t.Helper()
	for i := 0; i < n; i++ {
		b := batch(t, 1, size, int64(i))
		info, err := l.Append(b, 0)
		if err != nil {
			t.Fatal(err)
		}
		m.batches = append(m.batches, b)
		m.ords = append(m.ords, info.Ordinal)
	}
	if err := l.WaitDurable(context.Background(), l.EndOffset()); err != nil {
		t.Fatal(err)
	}
}

// TestReadCacheServesRecent: with direct I/O a fetch of what was just
// written is answered from memory, byte for byte; an older range the
// budget no longer holds comes from the file; the counters say which.
func TestReadCacheServesRecent(t *testing.T) {
	withReadCache(t, 3<<20)
	cfg := testConfig()
	cfg.SegmentBytes = 64 << 20
	l, _ := directLog(t, cfg)
	m := &model{}
	before := defaultReadCache.Stats()
	for round := 0; round < 12; round++ {
		appendDurable(t, l, m, 40, 3000) // ~120 KiB per cycle: direct writes
		last := m.batches[len(m.batches)-1]
		h, _ := records.ParseHeader(last)
		s, err := l.Read(h.BaseOffset, h.BaseOffset+1, 1)
		if err != nil {
			t.Fatal(err)
		}
		parts := s.CachedBytes()
		s.Release()
		if parts == nil {
			t.Fatalf("round %d: the batch just made durable is not in the read cache", round)
		}
		if !bytes.Equal(bytes.Join(parts, nil), last) {
			t.Fatalf("round %d: cached bytes differ from the batch", round)
		}
		checkReadCache(t, l)
	}
	st := defaultReadCache.Stats()
	if st.Hits-before.Hits < 12 {
		t.Fatalf("hits %d, want at least 12", st.Hits-before.Hits)
	}
	if st.Bytes > st.Limit {
		t.Fatalf("cache holds %d bytes over its budget %d", st.Bytes, st.Limit)
	}
	if st.Evictions == before.Evictions {
		t.Fatal("12 cycles of 1 MiB buffers fit a 3 MiB budget: nothing evicted")
	}
	// The first batch's chunk has been evicted: read from the file.
	h, _ := records.ParseHeader(m.batches[0])
	s, err := l.Read(h.BaseOffset, h.BaseOffset+1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s.CachedBytes() != nil {
		t.Fatal("the oldest batch is still cached past the budget")
	}
	s.Release()
	if defaultReadCache.Stats().Misses == st.Misses {
		t.Fatal("a miss not counted")
	}
	m.checkFetches(t, l)
	l.Close()
	if got := defaultReadCache.Stats().Bytes; got != 0 {
		t.Fatalf("closed log's chunks still count %d bytes", got)
	}
}

// TestReadCacheLent: bytes a fetch was lent stay as they were while its
// Slice is held, though the cache dropped their chunk and later
// write-outs took buffers from the pool.
func TestReadCacheLent(t *testing.T) {
	withReadCache(t, 1<<20)
	l, _ := directLog(t, testConfig2(64<<20))
	m := &model{}
	appendDurable(t, l, m, 40, 3000)
	h, _ := records.ParseHeader(m.batches[0])
	s, err := l.Read(h.BaseOffset, h.BaseOffset+1, 1)
	if err != nil {
		t.Fatal(err)
	}
	parts := s.CachedBytes()
	if parts == nil {
		t.Fatal("not cached")
	}
	for i := 0; i < 40; i++ { // write-outs of the same size class through a 1 MiB budget
		appendDurable(t, l, m, 40, 3000)
	}
	if again := s.CachedBytes(); again != nil {
		t.Fatal("the first chunk is still in the cache")
	}
	if !bytes.Equal(bytes.Join(parts, nil), m.batches[0]) {
		t.Fatal("lent bytes changed while the Slice was held")
	}
	s.Release()
	checkReadCache(t, l)
	m.checkFetches(t, l)
}

// TestReadCacheTruncate: a follower's truncation (leader change) cuts the
// cache with the file; the new bytes appended at the same positions are
// what a fetch then gets, never the old ones.
func TestReadCacheTruncate(t *testing.T) {
	withReadCache(t, 64<<20)
	l, _ := directLog(t, testConfig2(64<<20))
	m := &model{}
	appendDurable(t, l, m, 60, 3000)
	h, _ := records.ParseHeader(m.batches[30])
	if err := l.Truncate(h.BaseOffset); err != nil {
		t.Fatal(err)
	}
	m.truncate(h.BaseOffset)
	checkReadCache(t, l)
	// Different bytes at the same positions, with a higher epoch.
	for i := 0; i < 30; i++ {
		b := batch(t, 1, 3000, int64(1000+i))
		info, err := l.Append(b, 1)
		if err != nil {
			t.Fatal(err)
		}
		m.batches = append(m.batches, b)
		m.ords = append(m.ords, info.Ordinal)
	}
	if err := l.WaitDurable(context.Background(), l.EndOffset()); err != nil {
		t.Fatal(err)
	}
	checkReadCache(t, l)
	m.checkFetches(t, l)
	// Truncating inside what is cached and fetching at once, before the
	// next cycle: nothing past the cut is served.
	h, _ = records.ParseHeader(m.batches[10])
	if err := l.Truncate(h.BaseOffset); err != nil {
		t.Fatal(err)
	}
	m.truncate(h.BaseOffset)
	checkReadCache(t, l)
	if _, err := l.Read(h.BaseOffset, h.BaseOffset+1, 1); err == nil {
		s, _ := l.Read(h.BaseOffset, h.BaseOffset+1, 1)
		if s.Size != 0 {
			t.Fatalf("read past the truncation point returned %d bytes", s.Size)
		}
	}
	m.checkFetches(t, l)
}

func testConfig2(segBytes int64) Config {
	c := testConfig()
	c.SegmentBytes = segBytes
	return c
}

// TestReadCacheDeleteAndRoll: DeleteRecords and retention move the start
// past cached bytes (nothing below the start is served), rolled and
// removed segments give their chunks back to the budget.
func TestReadCacheDeleteAndRoll(t *testing.T) {
	withReadCache(t, 64<<20)
	l, _ := directLog(t, testConfig2(256<<10))
	m := &model{}
	for i := 0; i < 6; i++ {
		appendDurable(t, l, m, 30, 3000)
	}
	if l.Segments() < 3 {
		t.Fatalf("%d segments, want rolls", l.Segments())
	}
	checkReadCache(t, l)
	h, _ := records.ParseHeader(m.batches[100])
	if err := l.DeleteBefore(h.BaseOffset + 1); err != nil { // inside a batch
		t.Fatal(err)
	}
	if _, err := l.Read(h.BaseOffset-1, h.BaseOffset, 1); err == nil {
		t.Fatal("read below the log start offset succeeded")
	}
	checkReadCache(t, l)
	m.checkFetches(t, l)
	held := defaultReadCache.Stats().Bytes
	l.Close()
	if got := defaultReadCache.Stats().Bytes; got != 0 {
		t.Fatalf("after Close %d bytes still counted (had %d)", got, held)
	}
}

// TestReadCacheCompaction: a cleaning pass swaps segments for rewritten
// ones; fetches then read the cleaned files, never chunks of the old ones.
func TestReadCacheCompaction(t *testing.T) {
	withReadCache(t, 64<<20)
	cfg := compactConfig()
	cfg.SegmentBytes = 128 << 10
	l, _ := directLog(t, cfg)
	val := bytes.Repeat([]byte("v"), 3000)
	for round := 0; round < 8; round++ {
		for i := 0; i < 30; i++ {
			b := keyed(t, records.Batch{}, int64(round*100+i), kv{k([]string{"k1", "k2", "k3"}[i%3]), val})
			if _, err := l.Append(b, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.WaitDurable(context.Background(), l.EndOffset()); err != nil {
			t.Fatal(err)
		}
	}
	// Fetch everything once so the old segments' bytes were served.
	before := readAll(t, l, l.StartOffset())
	res := mustClean(t, l, cleanOpts(l))
	if res.BatchesEmptied == 0 || res.Segments == 0 {
		t.Fatalf("the pass changed nothing: %+v", res)
	}
	checkReadCache(t, l)
	// Every batch a fetch returns is what the log scan says is there now.
	want := readAll(t, l, l.StartOffset())
	size := func(bs [][]byte) (n int) {
		for _, b := range bs {
			n += len(b)
		}
		return n
	}
	if size(want) >= size(before) {
		t.Fatalf("%d bytes after cleaning, %d before", size(want), size(before))
	}
	for _, w := range want {
		h, _ := records.ParseHeader(w)
		s, err := l.Read(h.BaseOffset, h.BaseOffset+1, 1)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		if parts := s.CachedBytes(); parts != nil {
			got = bytes.Join(parts, nil)
		} else {
			got, _ = s.Bytes()
		}
		s.Release()
		if !bytes.Equal(got, w) {
			t.Fatalf("batch at %d: fetched bytes differ from the cleaned log", h.BaseOffset)
		}
	}
}

// TestReadCacheOS: log.direct.io on the real filesystem: a fetch of the
// newest batches is served from memory (where the filesystem accepts
// O_DIRECT) and matches the file.
func TestReadCacheOS(t *testing.T) {
	withReadCache(t, 64<<20)
	dir := filepath.Join(t.TempDir(), "p0")
	cfg := testConfig2(64 << 20)
	l, err := Open(dir, cfg, Options{FS: OSFSDirectIO(), Syncer: newSyncer(t), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	m := &model{}
	appendDurable(t, l, m, 100, 3000) // ~300 KiB: over directMin
	checkReadCache(t, l)
	m.checkFetches(t, l)
	if l.syncer.SegmentWrites().DirectBytes == 0 {
		if _, err := os.Stat("/proc/self/fd"); err == nil {
			t.Log("the filesystem refused O_DIRECT: no cache to check")
		}
	}
}

// TestReadCacheIdle: a log nobody fetched from keeps no chunks (a
// write-only load does not cycle its write-outs through the budget); the
// first fetch is served from the file, and what is written after it is
// kept.
func TestReadCacheIdle(t *testing.T) {
	withReadCache(t, 64<<20)
	defaultReadCache.idle.Store(int64(time.Hour))
	l, _ := directLog(t, testConfig2(64<<20))
	m := &model{}
	appendDurable(t, l, m, 40, 3000)
	if st := defaultReadCache.Stats(); st.Bytes != 0 {
		t.Fatalf("%d bytes cached before any fetch", st.Bytes)
	}
	h, _ := records.ParseHeader(m.batches[0])
	s, err := l.Read(h.BaseOffset, h.BaseOffset+1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s.CachedBytes() != nil {
		t.Fatal("served from the cache before anything was kept")
	}
	s.Release()
	appendDurable(t, l, m, 40, 3000)
	h, _ = records.ParseHeader(m.batches[len(m.batches)-1])
	s, err = l.Read(h.BaseOffset, h.BaseOffset+1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	if s.CachedBytes() == nil {
		t.Fatal("written after a fetch, and not kept")
	}
	checkReadCache(t, l)
	m.checkFetches(t, l)
}

// TestReadCachePerNode: two logs with read caches of their own (two
// brokers in one process) share neither budget nor counters: the chunks
// and hits of one log's fetches count in its cache only.
func TestReadCachePerNode(t *testing.T) {
	directMin.Store(directBlock)
	t.Cleanup(func() { directMin.Store(64 << 10) })
	cfg := testConfig()
	cfg.SegmentBytes = 64 << 20
	open := func(rc *ReadCache) *Log {
		fs := NewCrashFS(1)
		fs.SetDirectIO(true)
		l, err := Open("/d", cfg, Options{FS: fs, Syncer: newSyncer(t), Logger: quiet, ReadCache: rc})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	a, b := NewReadCache(8<<20), NewReadCache(8<<20)
	a.idle.Store(0) // keep chunks before the first fetch
	la := open(a)
	open(b)
	m := &model{}
	appendDurable(t, la, m, 40, 3000)
	h, _ := records.ParseHeader(m.batches[len(m.batches)-1])
	s, err := la.Read(h.BaseOffset, h.BaseOffset+1, 1)
	if err != nil {
		t.Fatal(err)
	}
	parts := s.CachedBytes()
	s.Release()
	if parts == nil {
		t.Fatal("the batch just made durable is not in its log's read cache")
	}
	if st := a.Stats(); st.Hits != 1 || st.Bytes == 0 {
		t.Fatalf("the log's own cache: %+v", st)
	}
	if st := b.Stats(); st != (ReadCacheStats{Limit: 8 << 20}) {
		t.Fatalf("the other node's cache counted the first node's fetch: %+v", st)
	}
}
