package storage

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"holdfast/internal/records"
)

// countFS counts the writes to segment files.
type countFS struct {
	FS
	writes atomic.Int64
}

type countFile struct {
	File
	fs *countFS
}

func (f countFile) Write(b []byte) (int, error) {
	f.fs.writes.Add(1)
	return f.File.Write(b)
}

func (fs *countFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, logSuffix) {
		return f, err
	}
	return countFile{f, fs}, nil
}

// TestAppendsCoalesce: small appends between two sync cycles reach the
// segment file in one write, read back right (from the buffer before the
// cycle, from the file after), and survive a crash once synced.
func TestAppendsCoalesce(t *testing.T) {
	cfs := NewCrashFS(1)
	fs := &countFS{FS: cfs}
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 20
	l := openLog(t, fs, "/d", cfg, newSyncer(t), nil)
	var want [][]byte
	for i := 0; i < 20; i++ {
		b := batch(t, 2, 50, int64(i))
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
		want = append(want, b)
	}
	if n := fs.writes.Load(); n != 0 {
		t.Fatalf("%d writes before the sync cycle", n)
	}
	// Readable before the cycle: from the buffer.
	if got := readAll(t, l, 0); len(got) != 20 || !bytes.Equal(got[19], want[19]) {
		t.Fatalf("%d batches readable before the sync", len(got))
	}
	sl, err := l.Read(10, l.EndOffset(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sl.Bytes()
	sl.Release()
	if err != nil || !bytes.Equal(b, bytes.Join(want[5:], nil)) {
		t.Fatalf("Read from offset 10 before the sync: %v", err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := fs.writes.Load(); n != 1 {
		t.Fatalf("%d writes for 20 small appends and one sync cycle, want 1", n)
	}
	// A large batch goes out at once, after what was buffered.
	big := batch(t, 1, appendDirect, 99)
	if _, err := l.Append(batch(t, 1, 10, 98), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(big, 0); err != nil {
		t.Fatal(err)
	}
	if n := fs.writes.Load(); n != 3 {
		t.Fatalf("%d writes, want 3 (buffer, then the large batch)", n)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	// Unsynced appends are lost in a crash, synced ones are not.
	if _, err := l.Append(batch(t, 1, 10, 100), 0); err != nil {
		t.Fatal(err)
	}
	end := l.DurableOffset()
	cfs.Crash()
	cfs.Reboot()
	l2 := openLog(t, cfs, "/d", cfg, newSyncer(t), nil)
	defer l2.Close()
	if l2.EndOffset() != end {
		t.Fatalf("end %d after crash, durable was %d", l2.EndOffset(), end)
	}
	got := readAll(t, l2, 0)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("batch %d differs after crash", i)
		}
	}
}

// TestTruncateInsideBuffer: a follower cutting its unsynced tail cuts the
// buffer; what follows is written where the cut bytes were.
func TestTruncateInsideBuffer(t *testing.T) {
	fs := NewCrashFS(1)
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 20
	l := openLog(t, fs, "/d", cfg, newSyncer(t), nil)
	var want [][]byte
	for i := 0; i < 5; i++ {
		b := batch(t, 1, 40, int64(i))
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
		want = append(want, b)
		if i == 1 {
			if err := l.Sync(); err != nil { // offsets 0-1 in the file, 2-4 buffered
				t.Fatal(err)
			}
		}
	}
	if err := l.Truncate(3); err != nil {
		t.Fatal(err)
	}
	want = want[:3]
	for i := 0; i < 2; i++ {
		b := batch(t, 1, 60, int64(10+i))
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
		want = append(want, b)
	}
	if err := l.Truncate(1); err != nil { // below the file's end: the file is cut too
		t.Fatal(err)
	}
	want = want[:1]
	b := batch(t, 1, 70, 20)
	if _, err := l.Append(b, 0); err != nil {
		t.Fatal(err)
	}
	want = append(want, b)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = openLog(t, fs, "/d", cfg, newSyncer(t), nil)
	defer l.Close()
	got := readAll(t, l, 0)
	if len(got) != len(want) {
		t.Fatalf("%d batches, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("batch %d differs", i)
		}
	}
}

// TestIndexWrittenInBulk: index entries of the active segment wait until
// indexPersistEntries are due (or Close); a crash before then costs a
// longer recovery scan, never a batch.
func TestIndexWrittenInBulk(t *testing.T) {
	fs := NewCrashFS(1)
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 20
	l := openLog(t, fs, "/d", cfg, newSyncer(t), nil)
	idx := "/d/" + segmentName(0, indexSuffix)
	// Sync returns once the durable offset moved, which the sync cycle does
	// under the log lock just before it writes due index entries: taking the
	// lock waits for the end of that cycle.
	indexSize := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return fs.Sizes()[idx]
	}
	var want [][]byte
	for i := 0; i < indexPersistEntries-1; i++ {
		b := batch(t, 1, cfg.IndexIntervalBytes, int64(i)) // an entry per batch
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		want = append(want, b)
	}
	if n := indexSize(); n != 0 {
		t.Fatalf("index has %d bytes before %d entries were due", n, indexPersistEntries)
	}
	b := batch(t, 1, cfg.IndexIntervalBytes, 99)
	if _, err := l.Append(b, 0); err != nil {
		t.Fatal(err)
	}
	want = append(want, b)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	// The first due cycle asks the index creator for the files, which then
	// writes what is durable (indexcreate.go).
	l.syncer.waitIndexJobs()
	if n := indexSize(); n != indexPersistEntries*offEntrySize {
		t.Fatalf("index has %d bytes, want %d", n, indexPersistEntries*offEntrySize)
	}
	for i := 0; i < 5; i++ {
		b := batch(t, 1, cfg.IndexIntervalBytes, int64(100+i))
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
		want = append(want, b)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	fs.Reboot()
	l = openLog(t, fs, "/d", cfg, newSyncer(t), nil)
	defer l.Close()
	got := readAll(t, l, 0)
	if len(got) != len(want) {
		t.Fatalf("%d batches after crash, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("batch %d differs after crash", i)
		}
	}
	// The recovered index finds every batch.
	for i := range want {
		sl, err := l.Read(int64(i), int64(i+1), 1)
		if err != nil || sl.BaseOffset != int64(i) {
			t.Fatalf("read %d: %v %d", i, err, sl.BaseOffset)
		}
		sl.Release()
	}
}

// TestOneDescriptorPerSegment: a reopened log holds its segment files
// open, not their index files (a node with 10,000 partitions held three
// descriptors per log and could not restart under a 20,000 limit).
func TestOneDescriptorPerSegment(t *testing.T) {
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd:", err)
		}
		return len(ents)
	}
	dir := t.TempDir()
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 20
	sy := newSyncer(t)
	l := openLog(t, OSFS(), dir, cfg, sy, nil)
	for i := 0; i < 3*indexPersistEntries; i++ {
		if _, err := l.Append(batch(t, 1, cfg.IndexIntervalBytes, int64(i)), 0); err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	before := count()
	const n = 8
	var logs []*Log
	for i := 0; i < n; i++ {
		logs = append(logs, openLog(t, OSFS(), dir+"-"+string(rune('a'+i)), cfg, sy, nil))
	}
	l = openLog(t, OSFS(), dir, cfg, sy, nil) // recovery writes its index
	logs = append(logs, l)
	if got := count() - before; got != n+1 {
		t.Fatalf("%d logs hold %d descriptors, want one each", n+1, got)
	}
	for _, l := range logs {
		l.Close()
	}
}

// TestAppendQueue: appends past a buffer's capacity queue it instead of
// writing it (a background write-out starts; past maxQueued the append
// writes them all out), reads see
// every queued byte, a Truncate inside a queued buffer cuts it, and a
// crash after the sync keeps exactly what was appended; with and without
// direct I/O (where the buffers are 1 MiB and the whole blocks of each
// write-out go O_DIRECT: CrashFS checks the alignment).
func TestAppendQueue(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			cfs := NewCrashFS(1)
			cfs.SetDirectIO(direct)
			fs := &countFS{FS: cfs}
			cfg := testConfig()
			cfg.SegmentBytes = 64 << 20
			var l *Log
			if direct {
				l = openLog(t, cfs, "/d", cfg, newSyncer(t), nil)
			} else {
				l = openLog(t, fs, "/d", cfg, newSyncer(t), nil) // counts writes, no direct ones
			}
			bufMax := appendBufSize
			if direct {
				bufMax = directBufSize
			}
			var want [][]byte
			appendN := func(n int) {
				for total := 0; total < n; {
					b := batch(t, 1, 40<<10+len(want)%7*1000, int64(len(want)))
					if _, err := l.Append(b, 0); err != nil {
						t.Fatal(err)
					}
					want = append(want, b)
					total += len(b)
				}
			}
			check := func(l *Log) { t.Helper(); checkBatches(t, l, want) }
			appendN(bufMax * (maxQueued + 1) / 2) // fills some buffers: queued, written behind
			check(l)
			// Cut inside the second buffer, append again.
			h, _ := records.ParseHeader(want[len(want)*2/5])
			if err := l.Truncate(h.BaseOffset); err != nil {
				t.Fatal(err)
			}
			want = want[:len(want)*2/5]
			check(l)
			appendN(bufMax * (maxQueued + 2)) // past maxQueued: written out by the append
			if !direct && fs.writes.Load() == 0 {
				t.Fatal("no write after more than maxQueued full buffers")
			}
			check(l)
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if direct && cfs.DirectWrites() == 0 {
				t.Fatal("no direct write")
			}
			appendN(100 << 10) // unsynced: lost
			cfs.Crash()
			cfs.Reboot()
			want = want[:len(want)-3]
			l2 := openLog(t, cfs, "/d", cfg, newSyncer(t), nil)
			defer l2.Close()
			check(l2)
		})
	}
}

// refuseDirectFS: files that claim direct I/O but refuse it when asked,
// as a filesystem without O_DIRECT does.
type refuseDirectFS struct{ FS }

type refuseDirectFile struct{ File }

func (refuseDirectFile) DirectIO() bool { return true }
func (f refuseDirectFile) WriteDirect(p []byte, off int64) (int, error) {
	return 0, fmt.Errorf("%w: %s: %w", errDirectUnsupported, f.Name(), syscall.EINVAL)
}

func (fs refuseDirectFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, logSuffix) {
		return f, err
	}
	return refuseDirectFile{f}, nil
}

// TestDirectIOFallback: where O_DIRECT is refused the log writes through
// the page cache, says so once, and loses nothing.
func TestDirectIOFallback(t *testing.T) {
	cfs := NewCrashFS(1)
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	directWarned.Store(false)
	cfg := testConfig()
	cfg.SegmentBytes = 16 << 20
	l, err := Open("/d", cfg, Options{FS: refuseDirectFS{cfs}, Syncer: newSyncer(t), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for i := 0; i < 40; i++ {
		b := batch(t, 1, 30<<10, int64(i))
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
		want = append(want, b)
		if i%10 == 9 {
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	l.Close()
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if strings.Count(out, "refuses O_DIRECT") != 1 {
		t.Fatalf("want one warning about O_DIRECT, log has:\n%s", out)
	}
	cfs.Crash()
	cfs.Reboot()
	l2 := openLog(t, cfs, "/d", cfg, newSyncer(t), nil)
	defer l2.Close()
	got := readAll(t, l2, 0)
	if len(got) != len(want) {
		t.Fatalf("%d batches after a crash, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("batch %d differs", i)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestDirectIOOS: log.direct.io on the real filesystem (O_DIRECT where it
// is supported, else the page cache): what is read back, before and after
// a reopen, is what was appended, with batches of every size around the
// block and buffer boundaries.
func TestDirectIOOS(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.SegmentBytes = 8 << 20 // a few rolls
	sy := newSyncer(t)
	before := osDirectWrites.Load()
	l, err := Open(dir, cfg, Options{FS: OSFSDirectIO(), Syncer: sy, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	sizes := []int{100, 4000, 4096, 70 << 10, 300 << 10, 1<<20 - 200, 5000, 64 << 10}
	for i := 0; i < 60; i++ {
		b := batch(t, 1, sizes[i%len(sizes)]+i, int64(i))
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
		want = append(want, b)
		if i%3 == 2 {
			if err := l.WaitDurable(context.Background(), l.EndOffset()); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(l *Log) { t.Helper(); checkBatches(t, l, want) }
	check(l)
	if f, err := os.OpenFile(filepath.Join(dir, "probe"), os.O_CREATE|os.O_WRONLY|syscall.O_DIRECT, 0o644); err != nil {
		t.Logf("this filesystem refuses O_DIRECT (%v): the page cache path was tested", err)
	} else {
		f.Close()
		os.Remove(f.Name())
		if osDirectWrites.Load() == before {
			t.Fatal("O_DIRECT is supported here, but no direct write happened")
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, cfg, Options{FS: OSFS(), Syncer: sy, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	check(l)
}

// checkBatches fails t unless l holds exactly want, batch for batch.
func checkBatches(t *testing.T, l *Log, want [][]byte) {
	t.Helper()
	got := readAll(t, l, 0)
	if len(got) != len(want) {
		t.Fatalf("%d batches, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("batch %d differs", i)
		}
	}
}

// TestAppendBufGrowsFromTiny: without direct I/O a file's first small
// append takes a tiny unaligned buffer (one small record to each of
// 100,000 logs must not hold 24 KiB apiece), and appends that outgrow it,
// then the 16 KiB and 256 KiB classes, read back whole from the buffers
// and from the file once written out.
func TestAppendBufGrowsFromTiny(t *testing.T) {
	fs := NewCrashFS(1)
	f, err := fs.OpenFile("/seg", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	a := newAppendFile(f, 0)
	defer a.Close()
	var want []byte
	add := func(n int) {
		t.Helper()
		b := bytes.Repeat([]byte{byte(len(want) % 251)}, n)
		for i := range b {
			b[i] = byte((len(want) + i) % 251)
		}
		if _, err := a.Write(b); err != nil {
			t.Fatal(err)
		}
		want = append(want, b...)
	}
	add(100)
	a.mu.Lock()
	class := a.cur.class
	a.mu.Unlock()
	if class != appendBufTiny {
		t.Fatalf("first buffer of a small append: class %d, want %d", class, appendBufTiny)
	}
	for _, n := range []int{1000, 1500, 9000, 30000, 200000, 50000, 7} {
		add(n)
		got := make([]byte, len(want))
		if k, err := a.ReadAt(got, 0); err != nil || k != len(want) || !bytes.Equal(got, want) {
			t.Fatalf("after %d bytes: read %d, %v; equal %v", len(want), k, err, bytes.Equal(got, want))
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if k, err := f.ReadAt(got, 0); err != nil || k != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("file after the write-out: %d bytes, %v; equal %v", k, err, bytes.Equal(got, want))
	}
}
