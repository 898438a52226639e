package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"holdfast/internal/records"
	"holdfast/internal/testwait"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// batch builds a valid batch of n records with value size vsize at ts.
func batch(t testing.TB, n, vsize int, ts int64) []byte {
	t.Helper()
	recs := make([]records.Record, n)
	for i := range recs {
		v := make([]byte, vsize)
		for j := range v {
			v[j] = byte(i + j)
		}
		recs[i] = records.Record{Timestamp: ts, Value: v}
	}
	b, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func testConfig() Config {
	c := DefaultConfig()
	c.SegmentBytes = 4096
	c.IndexIntervalBytes = 256
	return c
}

func openLog(t testing.TB, fs FS, dir string, cfg Config, sy *Syncer, now func() time.Time) *Log {
	t.Helper()
	l, err := Open(dir, cfg, Options{FS: fs, Syncer: sy, Logger: quiet, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newSyncer(t testing.TB) *Syncer {
	s := NewSyncer(quiet)
	t.Cleanup(func() { s.Close() })
	return s
}

func readAll(t testing.TB, l *Log, from int64) [][]byte {
	t.Helper()
	var out [][]byte
	err := l.Scan(from, func(h records.Header, b []byte) error {
		out = append(out, append([]byte(nil), b...))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAppendReadRoll(t *testing.T) {
	for _, name := range []string{"crashfs", "osfs"} {
		t.Run(name, func(t *testing.T) {
			var fs FS = NewCrashFS(1)
			dir := "/data/p0"
			if name == "osfs" {
				fs, dir = OSFS(), filepath.Join(t.TempDir(), "p0")
			}
			sy := newSyncer(t)
			l := openLog(t, fs, dir, testConfig(), sy, nil)
			var want [][]byte
			var next int64
			for i := 0; i < 200; i++ {
				b := batch(t, 1+i%5, 10+i*3%200, int64(1000+i))
				info, err := l.Append(b, 1)
				if err != nil {
					t.Fatal(err)
				}
				if info.BaseOffset != next || info.LastOffset != next+int64(1+i%5)-1 || info.Size != len(b) {
					t.Fatalf("append %d: %+v", i, info)
				}
				next = info.LastOffset + 1
				want = append(want, b)
			}
			if l.EndOffset() != next {
				t.Fatalf("end %d want %d", l.EndOffset(), next)
			}
			if l.Segments() < 5 {
				t.Fatalf("only %d segments: no roll", l.Segments())
			}
			if err := l.WaitDurable(context.Background(), next); err != nil {
				t.Fatal(err)
			}
			if l.DurableOffset() != next {
				t.Fatalf("durable %d", l.DurableOffset())
			}
			got := readAll(t, l, 0)
			if len(got) != len(want) {
				t.Fatalf("%d batches, want %d", len(got), len(want))
			}
			for i := range got {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("batch %d differs", i)
				}
			}
			// Every offset reads from the batch containing it.
			for off := int64(0); off < next; off++ {
				s, err := l.Read(off, next, 1)
				if err != nil {
					t.Fatal(err)
				}
				b, err := s.Bytes()
				s.Release()
				if err != nil {
					t.Fatal(err)
				}
				h, err := records.Validate(b, 0)
				if err != nil {
					t.Fatalf("offset %d: %v", off, err)
				}
				if h.BaseOffset > off || h.LastOffset() < off || s.BaseOffset != h.BaseOffset || s.LastOffset != h.LastOffset() {
					t.Fatalf("offset %d read batch [%d,%d] slice [%d,%d]", off, h.BaseOffset, h.LastOffset(), s.BaseOffset, s.LastOffset)
				}
			}
			// Reopen: same content, indexes loaded lazily.
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openLog(t, fs, dir, testConfig(), sy, nil)
			defer l.Close()
			if l.EndOffset() != next || l.StartOffset() != 0 || l.DurableOffset() != next {
				t.Fatalf("reopen: end %d start %d durable %d", l.EndOffset(), l.StartOffset(), l.DurableOffset())
			}
			got = readAll(t, l, 0)
			if len(got) != len(want) {
				t.Fatalf("reopen: %d batches", len(got))
			}
			for i := range got {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("reopen: batch %d differs", i)
				}
			}
		})
	}
}

func TestReadLimits(t *testing.T) {
	fs := NewCrashFS(1)
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 20
	l := openLog(t, fs, "/d", cfg, newSyncer(t), nil)
	defer l.Close()
	var sizes []int
	for i := 0; i < 100; i++ {
		b := batch(t, 2, 50, 1)
		sizes = append(sizes, len(b))
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name                 string
		off, maxOff          int64
		maxBytes             int
		wantFirst, wantCount int
	}{
		{"one batch even if larger than maxBytes", 0, 200, 1, 0, 1},
		{"offset inside a batch", 7, 200, 1, 3, 1},
		{"maxBytes whole batches", 0, 200, sizes[0]*10 + 5, 0, 10},
		{"maxOffset cuts", 10, 20, 1 << 20, 5, 5},
		{"maxOffset inside a batch keeps it", 10, 21, 1 << 20, 5, 6},
		{"everything", 0, 1 << 40, 1 << 20, 0, 100},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := l.Read(c.off, c.maxOff, c.maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Release()
			if s.Size != sizes[0]*c.wantCount {
				t.Fatalf("size %d, want %d batches (%d)", s.Size, c.wantCount, sizes[0]*c.wantCount)
			}
			if s.BaseOffset != int64(c.wantFirst*2) || s.LastOffset != int64((c.wantFirst+c.wantCount)*2-1) {
				t.Fatalf("offsets [%d,%d]", s.BaseOffset, s.LastOffset)
			}
		})
	}
	if s, err := l.Read(200, 1<<40, 100); err != nil || s.Size != 0 {
		t.Fatalf("read at end: %v %d", err, s.Size)
	}
	if s, err := l.Read(10, 10, 100); err != nil || s.Size != 0 {
		t.Fatalf("read at maxOffset: %v %d", err, s.Size)
	}
	if _, err := l.Read(201, 1<<40, 100); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("beyond end: %v", err)
	}
	if _, err := l.Read(-1, 1<<40, 100); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("negative: %v", err)
	}
}

func TestAppendRejects(t *testing.T) {
	fs := NewCrashFS(1)
	cfg := testConfig()
	cfg.MaxMessageBytes = 2000
	l := openLog(t, fs, "/d", cfg, newSyncer(t), nil)
	defer l.Close()
	good := batch(t, 3, 10, 1)
	bad := append([]byte(nil), good...)
	bad[len(bad)-1] ^= 0xff
	magic := append([]byte(nil), good...)
	magic[16] = 1
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"crc", bad, records.ErrCorrupt},
		{"magic", magic, records.ErrUnsupportedMagic},
		{"truncated", good[:len(good)-1], records.ErrTruncated},
		{"too large", batch(t, 1, 3000, 1), records.ErrTooLarge},
	}
	for _, c := range cases {
		if _, err := l.Append(c.b, 0); !errors.Is(err, c.want) {
			t.Fatalf("%s: got %v want %v", c.name, err, c.want)
		}
	}
	if l.EndOffset() != 0 {
		t.Fatal("a refused batch advanced the log")
	}
	if _, err := l.Append(good, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(batch(t, 1, 1, 1), 4); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("stale epoch: %v", err)
	}
	rb := batch(t, 1, 1, 1)
	records.SetBaseOffset(rb, 7)
	if _, err := l.AppendReplicated(rb); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("replicated gap: %v", err)
	}
	records.SetBaseOffset(rb, 3)
	records.SetLeaderEpoch(rb, 6)
	if info, err := l.AppendReplicated(rb); err != nil || info.BaseOffset != 3 {
		t.Fatalf("replicated: %v %+v", err, info)
	}
	if e, off := l.EndOffsetForEpoch(5); e != 5 || off != 3 {
		t.Fatalf("epoch 5: %d %d", e, off)
	}
	// A checked batch is taken as checked: at the log end only, within
	// max.message.bytes, and never the zero value.
	if _, err := l.AppendValidated(records.Validated{}); !errors.Is(err, records.ErrCorrupt) {
		t.Fatalf("zero Validated: %v", err)
	}
	v, err := records.Check(batch(t, 2, 1, 1), 0)
	if err != nil {
		t.Fatal(err)
	}
	v.SetLeaderEpoch(6)
	v.SetBaseOffset(9)
	if _, err := l.AppendValidated(v); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("validated gap: %v", err)
	}
	v.SetBaseOffset(l.EndOffset())
	if info, err := l.AppendValidated(v); err != nil || info.BaseOffset != 4 || l.EndOffset() != 6 {
		t.Fatalf("validated: %v %+v end %d", err, info, l.EndOffset())
	}
	big, err := records.Check(batch(t, 1, 3000, 1), 0)
	if err != nil {
		t.Fatal(err)
	}
	big.SetBaseOffset(l.EndOffset())
	if _, err := l.AppendValidated(big); !errors.Is(err, records.ErrTooLarge) {
		t.Fatalf("validated too large: %v", err)
	}
}

func TestTruncate(t *testing.T) {
	fs := NewCrashFS(1)
	sy := newSyncer(t)
	l := openLog(t, fs, "/d", testConfig(), sy, nil)
	var bounds []int64
	for i := 0; i < 100; i++ {
		bounds = append(bounds, l.EndOffset())
		if _, err := l.Append(batch(t, 3, 40, int64(i)), int32(i/10)); err != nil {
			t.Fatal(err)
		}
	}
	segs := l.Segments()
	if err := l.Truncate(bounds[50] + 1); !errors.Is(err, ErrNotBoundary) {
		t.Fatalf("inside batch: %v", err)
	}
	if err := l.Truncate(bounds[50]); err != nil {
		t.Fatal(err)
	}
	if l.EndOffset() != bounds[50] || l.Segments() >= segs {
		t.Fatalf("end %d segs %d->%d", l.EndOffset(), segs, l.Segments())
	}
	if e, off := l.EndOffsetForEpoch(9); e != 4 || off != bounds[50] {
		t.Fatalf("epochs after truncate: %d %d", e, off)
	}
	if e, off := l.EndOffsetForEpoch(3); e != 3 || off != bounds[40] {
		t.Fatalf("epoch 3: %d %d", e, off)
	}
	// Appending continues at the truncation point, with a new epoch.
	info, err := l.Append(batch(t, 1, 1, 1), 20)
	if err != nil || info.BaseOffset != bounds[50] {
		t.Fatalf("append after truncate: %v %+v", err, info)
	}
	if got := len(readAll(t, l, 0)); got != 51 {
		t.Fatalf("%d batches", got)
	}
	l.Close()
	l = openLog(t, fs, "/d", testConfig(), sy, nil)
	defer l.Close()
	if got := len(readAll(t, l, 0)); got != 51 || l.EndOffset() != bounds[50]+1 {
		t.Fatalf("reopen: %d batches end %d", got, l.EndOffset())
	}
	if e, off := l.EndOffsetForEpoch(19); e != 4 || off != bounds[50] {
		t.Fatalf("reopen epochs: %d %d", e, off)
	}
	if e, off := l.EndOffsetForEpoch(-1); e != -1 || off != -1 {
		t.Fatalf("no epoch: %d %d", e, off)
	}
	// Truncate to 0 drops everything.
	if err := l.Truncate(0); err != nil || l.EndOffset() != 0 || l.Segments() != 1 {
		t.Fatalf("truncate 0: %v end %d segs %d", err, l.EndOffset(), l.Segments())
	}
}

func TestDeleteBeforeAndRetention(t *testing.T) {
	fs := NewCrashFS(1)
	sy := newSyncer(t)
	clk := &clock{t: time.UnixMilli(1_000_000)}
	cfg := testConfig()
	cfg.RetentionMs = 10 * time.Second
	l := openLog(t, fs, "/d", cfg, sy, clk.now)
	for i := 0; i < 100; i++ {
		if _, err := l.Append(batch(t, 2, 40, 1_000_000+int64(i)*1000), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.DeleteBefore(31); err != nil {
		t.Fatal(err)
	}
	if l.StartOffset() != 31 {
		t.Fatalf("start %d", l.StartOffset())
	}
	if _, err := l.Read(30, 1<<40, 100); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below start: %v", err)
	}
	s, err := l.Read(31, 1<<40, 1)
	if err != nil || s.BaseOffset != 30 {
		t.Fatalf("read at start: %v %d", err, s.BaseOffset)
	}
	s.Release()
	segsBefore := l.Segments()
	l.Close()
	l = openLog(t, fs, "/d", cfg, sy, clk.now)
	if l.StartOffset() != 31 || l.Segments() != segsBefore {
		t.Fatalf("reopen: start %d segs %d/%d", l.StartOffset(), l.Segments(), segsBefore)
	}
	// Time: batches are 1 s apart; at 1_000_000+100 s with retention 10 s
	// everything but ~the last 10 s (and the active segment) goes.
	clk.t = time.UnixMilli(1_000_000 + 100_000)
	n, err := applyRetention(l)
	if err != nil || n == 0 {
		t.Fatalf("retention.ms: %d %v", n, err)
	}
	if st := l.StartOffset(); st < 150 || st > 190 {
		t.Fatalf("start after time retention %d", st)
	}
	// Bytes: keep at most ~2 segments' worth.
	for i := 0; i < 100; i++ {
		if _, err := l.Append(batch(t, 2, 40, clk.t.UnixMilli()), 0); err != nil {
			t.Fatal(err)
		}
	}
	cfg.RetentionBytes = 8192
	cfg.RetentionMs = -1
	l.SetConfig(cfg)
	if _, err := applyRetention(l); err != nil {
		t.Fatal(err)
	}
	if l.Segments() > 3 {
		t.Fatalf("%d segments left under retention.bytes", l.Segments())
	}
	got := readAll(t, l, l.StartOffset())
	if len(got) == 0 || l.EndOffset() != 400 {
		t.Fatalf("%d batches, end %d", len(got), l.EndOffset())
	}
	l.Close()
}

func TestOffsetForTimestamp(t *testing.T) {
	fs := NewCrashFS(1)
	sy := newSyncer(t)
	l := openLog(t, fs, "/d", testConfig(), sy, nil)
	for i := 0; i < 200; i++ {
		if _, err := l.Append(batch(t, 1, 30, 10*int64(i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	check := func(l *Log) {
		for _, c := range []struct{ ts, off, gotTS int64 }{
			{-5, 0, 0}, {0, 0, 0}, {1, 1, 10}, {10, 1, 10}, {995, 100, 1000}, {1990, 199, 1990}, {1991, -1, -1},
		} {
			off, ts, err := l.OffsetForTimestamp(c.ts)
			if err != nil || off != c.off || ts != c.gotTS {
				t.Fatalf("ts %d: got (%d,%d,%v) want (%d,%d)", c.ts, off, ts, err, c.off, c.gotTS)
			}
		}
		if ts, off := l.MaxTimestamp(); ts != 1990 || off != 199 {
			t.Fatalf("max timestamp %d at %d", ts, off)
		}
	}
	check(l)
	l.Close()
	l = openLog(t, fs, "/d", testConfig(), sy, nil)
	defer l.Close()
	check(l)
}

func TestForeignAndDamagedFiles(t *testing.T) {
	fs := NewCrashFS(1)
	sy := newSyncer(t)
	l := openLog(t, fs, "/d", testConfig(), sy, nil)
	for i := 0; i < 60; i++ {
		l.Append(batch(t, 1, 100, 1), 0)
	}
	l.Close()
	fs.WriteFileForTest("/d/notes.txt", []byte("hi"))
	if _, err := Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("notes.txt")) {
		t.Fatalf("foreign file: %v", err)
	}
	fs.Remove("/d/notes.txt")
	// Damage the first sealed segment's header.
	name := "/d/" + segmentName(0, logSuffix)
	b, _ := fs.ReadFileForTest(name)
	b[16] = 9
	fs.WriteFileForTest(name, b)
	if _, err := Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet}); err == nil || !bytes.Contains([]byte(err.Error()), []byte(segmentName(0, logSuffix))) {
		t.Fatalf("damaged segment: %v", err)
	}
	b[16] = 2
	fs.WriteFileForTest(name, b)
	// A damaged index is rebuilt on first use.
	fs.WriteFileForTest("/d/"+segmentName(0, indexSuffix), []byte("garbage"))
	fs.Remove("/d/" + segmentName(0, timeIndexSuffix))
	l = openLog(t, fs, "/d", testConfig(), sy, nil)
	defer l.Close()
	if got := len(readAll(t, l, 0)); got != 60 {
		t.Fatalf("%d batches after index rebuild", got)
	}
	if off, _, err := l.OffsetForTimestamp(1); err != nil || off != 0 {
		t.Fatalf("time lookup after rebuild: %d %v", off, err)
	}
}

func TestFlushPolicyParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		err  bool
	}{
		{"sync", "sync", false}, {"os", "os", false}, {"interval:100ms", "interval:100ms", false},
		{"interval:0s", "", true}, {"interval:x", "", true}, {"never", "", true},
	} {
		p, err := ParseFlushPolicy(c.in)
		if (err != nil) != c.err || (err == nil && p.String() != c.want) {
			t.Fatalf("%q: %v %v", c.in, p, err)
		}
	}
}

func TestIntervalFlush(t *testing.T) {
	fs := NewCrashFS(1)
	cfg := testConfig()
	cfg.Flush = FlushPolicy{Mode: FlushInterval, Interval: 5 * time.Millisecond}
	l := openLog(t, fs, "/d", cfg, newSyncer(t), nil)
	defer l.Close()
	info, err := l.Append(batch(t, 1, 1, 1), 0)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 5*time.Second, "the interval flush", func() bool { return l.DurableOffset() > info.LastOffset })
}

func TestSliceSurvivesDeletion(t *testing.T) {
	fs := NewCrashFS(1)
	l := openLog(t, fs, "/d", testConfig(), newSyncer(t), nil)
	defer l.Close()
	for i := 0; i < 100; i++ {
		l.Append(batch(t, 1, 100, 1), 0)
	}
	s, err := l.Read(0, 1<<40, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := s.Bytes()
	if err := l.DeleteBefore(90); err != nil {
		t.Fatal(err)
	}
	got, err := s.Bytes()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("slice after deletion: %v", err)
	}
	s.Release()
	s.Release() // idempotent
}

func TestGroupCommitSharesCycles(t *testing.T) {
	fs := NewCrashFS(1)
	fs.SetSyncDelay(2 * time.Millisecond)
	sy := newSyncer(t)
	var logs []*Log
	for i := 0; i < 8; i++ {
		l := openLog(t, fs, fmt.Sprintf("/d/%d", i), testConfig(), sy, nil)
		defer l.Close()
		logs = append(logs, l)
	}
	before := sy.Stats()
	const writers, each = 32, 20
	errc := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			l := logs[w%len(logs)]
			for i := 0; i < each; i++ {
				info, err := l.Append(batch(t, 1, 10, 1), 0)
				if err == nil {
					err = l.WaitDurable(context.Background(), info.LastOffset+1)
				}
				if err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for w := 0; w < writers; w++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	st := sy.Stats()
	cycles := st.Cycles - before.Cycles
	t.Logf("%d durable appends in %d cycles, %d fsyncs", writers*each, cycles, st.Fsyncs-before.Fsyncs)
	if cycles >= writers*each {
		t.Fatalf("no sharing: %d cycles for %d appends", cycles, writers*each)
	}
}

// On the real filesystem, a cycle over many logs uses one syncfs.
func TestGroupCommitOSFS(t *testing.T) {
	sy := newSyncer(t)
	dir := t.TempDir()
	var logs []*Log
	for i := 0; i < 8; i++ {
		l := openLog(t, OSFS(), filepath.Join(dir, fmt.Sprint(i)), testConfig(), sy, nil)
		defer l.Close()
		logs = append(logs, l)
	}
	const writers, each = 32, 10
	errc := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			l := logs[w%len(logs)]
			for i := 0; i < each; i++ {
				info, err := l.Append(batch(t, 1, 100, 1), 0)
				if err == nil {
					err = l.WaitDurable(context.Background(), info.LastOffset+1)
				}
				if err == nil && l.DurableOffset() <= info.LastOffset {
					err = fmt.Errorf("durable %d after waiting for %d", l.DurableOffset(), info.LastOffset+1)
				}
				if err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for w := 0; w < writers; w++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	st := sy.Stats()
	t.Logf("stats %+v", st)
	if syncfsReportsErrors() && st.Syncfs == 0 {
		t.Log("no cycle had enough logs for syncfs (timing); not an error")
	}
	for _, l := range logs {
		if got := len(readAll(t, l, 0)); got != writers/len(logs)*each {
			t.Fatalf("%s: %d batches", l.Dir(), got)
		}
	}
}

func TestEpochAt(t *testing.T) {
	l := openLog(t, NewCrashFS(1), "/d", testConfig(), newSyncer(t), nil)
	defer l.Close()
	for i := 0; i < 30; i++ {
		if _, err := l.Append(batch(t, 2, 10, 1), int32(i/10)*2); err != nil { // epochs 0, 2, 4
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		off  int64
		want int32
	}{{0, 0}, {19, 0}, {20, 2}, {59, 4}, {60, -1}, {-1, -1}} {
		if got := l.EpochAt(c.off); got != c.want {
			t.Fatalf("EpochAt(%d) = %d, want %d", c.off, got, c.want)
		}
	}
	if e, off := l.EndOffsetForEpoch(3); e != 2 || off != 40 {
		t.Fatalf("EndOffsetForEpoch(3) = %d, %d", e, off)
	}
	if err := l.DeleteBefore(45); err != nil {
		t.Fatal(err)
	}
	if got := l.EpochAt(44); got != 4 {
		t.Fatalf("epoch before start: %d", got)
	}
}

// Opening a log with many segments reads no sealed index: they load lazily.
func TestLazyIndexLoad(t *testing.T) {
	fs := NewCrashFS(1)
	sy := newSyncer(t)
	cfg := testConfig()
	cfg.SegmentBytes = minSegmentBytes
	l := openLog(t, fs, "/d", cfg, sy, nil)
	for i := 0; i < 3000; i++ {
		if _, err := l.Append(batch(t, 1, 300, int64(i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	start := time.Now()
	l = openLog(t, fs, "/d", cfg, sy, nil)
	defer l.Close()
	t.Logf("opened %d segments in %v", l.Segments(), time.Since(start))
	loaded := 0
	for _, s := range l.segs[:len(l.segs)-1] {
		if s.loaded {
			loaded++
		}
	}
	if loaded != 0 {
		t.Fatalf("%d sealed indexes loaded at open", loaded)
	}
	if s, err := l.Read(1500, 1<<40, 1); err != nil || s.BaseOffset != 1500 {
		t.Fatalf("read: %v %d", err, s.BaseOffset)
	}
}

// A lookup walks at most about index.interval.bytes of headers.
func TestReadUsesIndex(t *testing.T) {
	fs := NewCrashFS(1)
	cfg := DefaultConfig()
	cfg.IndexIntervalBytes = 4096
	l := openLog(t, fs, "/d", cfg, newSyncer(t), nil)
	defer l.Close()
	b := batch(t, 1, 40, 1)
	for i := 0; i < 20000; i++ {
		if _, err := l.Append(append([]byte(nil), b...), 0); err != nil {
			t.Fatal(err)
		}
	}
	walk := int64(4096/len(b) + 4)
	for _, off := range []int64{0, 777, 10000, 19999} {
		before := fs.Reads()
		s, err := l.Read(off, 1<<40, 64<<10)
		if err != nil || s.BaseOffset != off {
			t.Fatalf("read %d: %v %d", off, err, s.BaseOffset)
		}
		s.Release()
		if n := fs.Reads() - before; n > 2*walk {
			t.Fatalf("read at %d took %d reads: not using the index", off, n)
		}
		before = fs.Reads()
		if got, _, err := l.OffsetForTimestamp(1); err != nil || got != 0 {
			t.Fatalf("time lookup: %d %v", got, err)
		}
		if n := fs.Reads() - before; n > 2*walk {
			t.Fatalf("time lookup took %d reads", n)
		}
	}
}

func TestSegmentMsRoll(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_000_000)}
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 20
	cfg.SegmentMs = time.Minute
	l := openLog(t, NewCrashFS(1), "/d", cfg, newSyncer(t), clk.now)
	defer l.Close()
	// Ancient client timestamps must not roll every batch.
	for i := 0; i < 10; i++ {
		l.Append(batch(t, 1, 10, 1), 0)
	}
	if l.Segments() != 1 {
		t.Fatalf("%d segments before segment.ms", l.Segments())
	}
	clk.t = clk.t.Add(time.Minute)
	l.Append(batch(t, 1, 10, 1), 0)
	if l.Segments() != 2 {
		t.Fatalf("%d segments after segment.ms", l.Segments())
	}
}

// A roll makes the new segment's name durable in the sync cycle, not in
// the append: a failed directory fsync fails that cycle (and the log, as a
// failed fsync does), never acknowledges what is in the new segment, and a
// truncation to the durable offset brings the log back.
func TestRollDirSyncFailureFailsTheCycle(t *testing.T) {
	fs := NewCrashFS(1)
	l := openLog(t, fs, "/d", testConfig(), newSyncer(t), nil)
	defer l.Close()
	if _, err := l.Append(batch(t, 1, 100, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	durable := l.DurableOffset()
	fs.InjectError(OpSyncDir, "/d", syscall.EIO)
	for i := 0; l.Segments() < 2; i++ {
		if i == 100 {
			t.Fatal("no roll after 100 appends")
		}
		if _, err := l.Append(batch(t, 1, 100, 1), 0); err != nil {
			t.Fatalf("append %d (a roll does no directory fsync): %v", i, err)
		}
	}
	if err := l.Sync(); err == nil {
		t.Fatal("sync succeeded with the directory fsync failing")
	}
	if l.Failed() == nil || l.DurableOffset() != durable {
		t.Fatalf("failed %v, durable %d (was %d)", l.Failed(), l.DurableOffset(), durable)
	}
	fs.ClearErrors()
	if err := l.Truncate(l.DurableOffset()); err != nil {
		t.Fatalf("truncate to the durable offset: %v", err)
	}
	if _, err := l.Append(batch(t, 1, 100, 1), 0); err != nil {
		t.Fatalf("append after recovery: %v", err)
	}
	if err := l.Sync(); err != nil || l.Segments() != 1 {
		t.Fatalf("sync %v, %d segments", err, l.Segments())
	}
}

// Appends never fsync (not at a roll, not for a new leader epoch's
// checkpoint): the sync cycle does it, off the log's lock, before the
// durable offset passes them. A power cut after the cycle loses nothing,
// and the epochs come back.
func TestAppendNeverFsyncs(t *testing.T) {
	fs := NewCrashFS(1)
	var syncs sync.Map
	var inAppend atomic.Bool
	appender := goid()
	fs.OnSync(func(p string) {
		// The Syncer's goroutine may seal a rolled segment meanwhile
		// (a roll asks it to): only the appending goroutine counts.
		if inAppend.Load() && goid() == appender {
			syncs.Store(p, true)
		}
	})
	sy := newSyncer(t)
	l := openLog(t, fs, "/d", testConfig(), sy, nil)
	var ends []int64
	for i := 0; i < 60; i++ {
		inAppend.Store(true)
		info, err := l.Append(batch(t, 1, 200, int64(i)), int32(i/10))
		inAppend.Store(false)
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, info.LastOffset+1)
		if i%7 == 0 {
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	syncs.Range(func(k, _ any) bool {
		t.Errorf("append fsynced %v", k)
		return true
	})
	if l.Segments() < 3 {
		t.Fatalf("%d segments: the test needs rolls", l.Segments())
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	l2 := openLog(t, fs, "/d", testConfig(), sy, nil)
	defer l2.Close()
	if l2.EndOffset() != ends[len(ends)-1] {
		t.Fatalf("end %d after the crash, %d was durable", l2.EndOffset(), ends[len(ends)-1])
	}
	if got := l2.Epochs(); len(got) != 6 {
		t.Fatalf("epochs after the crash %v, want 0..5", got)
	}
	if got := l2.EpochAt(ends[len(ends)-1] - 1); got != 5 {
		t.Fatalf("epoch of the last batch %d, want 5", got)
	}
}

func TestRetentionKeepsUntimestampedSegments(t *testing.T) {
	clk := &clock{t: time.UnixMilli(10_000_000)}
	cfg := testConfig()
	cfg.RetentionMs = time.Second
	l := openLog(t, NewCrashFS(1), "/d", cfg, newSyncer(t), clk.now)
	defer l.Close()
	for i := 0; i < 100; i++ {
		l.Append(batch(t, 1, 100, -1), 0)
	}
	if n, err := applyRetention(l); err != nil || n != 0 {
		t.Fatalf("deleted %d segments without timestamps: %v", n, err)
	}
	if _, err := l.Append(emptyBatch(t), 0); !errors.Is(err, records.ErrCorrupt) {
		t.Fatalf("empty batch: %v", err)
	}
}

func emptyBatch(t *testing.T) []byte {
	b := batch(t, 1, 0, 1)
	b = b[:records.HeaderSize]
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[23:], 0)
	binary.BigEndian.PutUint32(b[57:], 0)
	binary.BigEndian.PutUint32(b[17:], records.Checksum(b))
	return b
}

// Appenders, readers, waiters and deleters at once (run with -race): every
// read returns valid batches holding the requested offset.
func TestConcurrentStress(t *testing.T) {
	fs := NewCrashFS(1)
	fs.SetSyncDelay(100 * time.Microsecond)
	cfg := testConfig()
	cfg.RetentionBytes = 64 << 10
	l := openLog(t, fs, "/d", cfg, newSyncer(t), nil)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	run := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := f(); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	for w := 0; w < 4; w++ {
		run(func() error {
			info, err := l.Append(batch(t, 1+w, 50, 1), 0)
			if err != nil {
				return err
			}
			return l.WaitDurable(context.Background(), info.LastOffset+1)
		})
	}
	for r := 0; r < 2; r++ {
		rng := rand.New(rand.NewSource(int64(r)))
		run(func() error {
			start, end := l.StartOffset(), l.EndOffset()
			if end == start {
				return nil
			}
			off := start + rng.Int63n(end-start)
			s, err := l.Read(off, end, 4096)
			if errors.Is(err, ErrOffsetOutOfRange) {
				return nil // retention moved the start meanwhile
			}
			if err != nil {
				return err
			}
			defer s.Release()
			b, err := s.Bytes()
			if err != nil {
				return err
			}
			first := true
			for len(b) > 0 {
				var one []byte
				if one, b, err = records.Next(b); err != nil {
					return err
				}
				h, err := records.Validate(one, 0)
				if err != nil {
					return err
				}
				if first && (h.BaseOffset > off || h.LastOffset() < off) {
					return fmt.Errorf("read %d got batch [%d,%d]", off, h.BaseOffset, h.LastOffset())
				}
				first = false
			}
			return nil
		})
	}
	run(func() error {
		if _, err := applyRetention(l); err != nil {
			return err
		}
		time.Sleep(time.Millisecond) // pacing: retention runs now and then among the readers and writers
		return nil
	})
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if l.DurableOffset() > l.EndOffset() || l.StartOffset() > l.EndOffset() {
		t.Fatalf("start %d durable %d end %d", l.StartOffset(), l.DurableOffset(), l.EndOffset())
	}
}

func TestScanHeaders(t *testing.T) {
	l := openLog(t, NewCrashFS(1), "/d", testConfig(), newSyncer(t), nil)
	defer l.Close()
	for i := 0; i < 100; i++ {
		l.Append(batch(t, 3, 50, 1), 0)
	}
	var bases []int64
	if err := l.ScanHeaders(100, func(h records.Header) error {
		bases = append(bases, h.BaseOffset)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(bases) != 67 || bases[0] != 99 || bases[66] != 297 {
		t.Fatalf("%d headers, first %d last %d", len(bases), bases[0], bases[len(bases)-1])
	}
}

// Ordinals: dense batch numbers for Raft, across rolls, reopen, truncation,
// DeleteRecords and reset.
func TestOrdinals(t *testing.T) {
	fs := NewCrashFS(1)
	sy := newSyncer(t)
	l := openLog(t, fs, "/d", testConfig(), sy, nil)
	var bases []int64
	for i := 0; i < 300; i++ {
		info, err := l.Append(batch(t, 1+i%4, 30, 1), 0)
		if err != nil {
			t.Fatal(err)
		}
		if info.Ordinal != int64(i) {
			t.Fatalf("batch %d got ordinal %d", i, info.Ordinal)
		}
		bases = append(bases, info.BaseOffset)
	}
	check := func(l *Log, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if off, err := l.OffsetOfOrdinal(int64(i)); err != nil || off != bases[i] {
				t.Fatalf("OffsetOfOrdinal(%d) = %d, %v; want %d", i, off, err, bases[i])
			}
			if ord, err := l.OrdinalOf(bases[i]); err != nil || ord != int64(i) {
				t.Fatalf("OrdinalOf(%d) = %d, %v; want %d", bases[i], ord, err, i)
			}
		}
		if l.EndOrdinal() != int64(to) {
			t.Fatalf("EndOrdinal %d, want %d", l.EndOrdinal(), to)
		}
		if off, err := l.OffsetOfOrdinal(int64(to)); err != nil || off != l.EndOffset() {
			t.Fatalf("OffsetOfOrdinal(end) = %d, %v", off, err)
		}
		if _, err := l.OffsetOfOrdinal(int64(to + 1)); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("beyond end: %v", err)
		}
	}
	if l.Segments() < 5 {
		t.Fatalf("%d segments", l.Segments())
	}
	check(l, 0, 300)
	l.Close()
	l = openLog(t, fs, "/d", testConfig(), sy, nil)
	check(l, 0, 300)
	if err := l.Truncate(bases[150]); err != nil {
		t.Fatal(err)
	}
	check(l, 0, 150)
	if info, err := l.Append(batch(t, 7, 30, 1), 0); err != nil || info.Ordinal != 150 {
		t.Fatalf("append after truncate: ordinal %d, %v", info.Ordinal, err)
	}
	bases = append(bases[:150], bases[150])
	if err := l.DeleteBefore(bases[101] + 1); err != nil { // inside batch 101
		t.Fatal(err)
	}
	if so, err := l.StartOrdinal(); err != nil || so != 101 {
		t.Fatalf("StartOrdinal %d, %v", so, err)
	}
	if _, err := l.OffsetOfOrdinal(10); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("below start: %v", err)
	}
	l.Close()
	l = openLog(t, fs, "/d", testConfig(), sy, nil)
	check(l, 102, 151)
	if ord, err := l.OrdinalOf(l.StartOffset()); err != nil || ord != 101 {
		t.Fatalf("OrdinalOf(start) = %d, %v", ord, err)
	}
	if err := l.ResetAt(5000, 777); err != nil {
		t.Fatal(err)
	}
	if info, err := l.Append(batch(t, 1, 1, 1), 0); err != nil || info.Ordinal != 777 || info.BaseOffset != 5000 {
		t.Fatalf("after reset: %+v %v", info, err)
	}
	l.Close()
	l = openLog(t, fs, "/d", testConfig(), sy, nil)
	defer l.Close()
	if l.EndOrdinal() != 778 || l.StartOffset() != 5000 {
		t.Fatalf("reopen after reset: ordinal %d start %d", l.EndOrdinal(), l.StartOffset())
	}
}

// Sealed indexes beyond the budget are evicted and reloaded on use; reads
// stay correct while readers race over many segments.
func TestIndexEviction(t *testing.T) {
	old := maxLoadedIndexEntries
	maxLoadedIndexEntries = 20
	defer func() { maxLoadedIndexEntries = old }()
	fs := NewCrashFS(1)
	sy := newSyncer(t)
	cfg := testConfig()
	cfg.IndexIntervalBytes = 64
	l := openLog(t, fs, "/d", cfg, sy, nil)
	var bases []int64
	for i := 0; i < 400; i++ {
		info, err := l.Append(batch(t, 1+i%3, 40, int64(i)), 0)
		if err != nil {
			t.Fatal(err)
		}
		bases = append(bases, info.BaseOffset)
	}
	l.Close()
	l = openLog(t, fs, "/d", cfg, sy, nil)
	defer l.Close()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(r)))
			for k := 0; k < 500; k++ {
				i := rng.Intn(len(bases))
				s, err := l.Read(bases[i], 1<<40, 1)
				if err == nil && s.BaseOffset != bases[i] {
					err = fmt.Errorf("read %d got %d", bases[i], s.BaseOffset)
				}
				s.Release()
				if err == nil {
					var ord int64
					if ord, err = l.OrdinalOf(bases[i]); err == nil && ord != int64(i) {
						err = fmt.Errorf("ordinal of batch %d: %d", i, ord)
					}
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	l.lruMu.Lock()
	n, entries := len(l.lru), l.lruEntries
	l.lruMu.Unlock()
	loaded := 0
	for _, s := range l.segs[:len(l.segs)-1] {
		s.idxMu.Lock()
		if s.loaded {
			loaded++
		}
		s.idxMu.Unlock()
	}
	t.Logf("%d segments, %d loaded (%d tracked, %d entries)", l.Segments(), loaded, n, entries)
	if loaded != n || loaded > 10 {
		t.Fatalf("%d sealed indexes loaded, %d tracked: eviction not working", loaded, n)
	}
	// Truncating into an evicted segment makes it active and loaded again.
	if err := l.Truncate(bases[10]); err != nil {
		t.Fatal(err)
	}
	if info, err := l.Append(batch(t, 1, 1, 1), 0); err != nil || info.Ordinal != 10 {
		t.Fatalf("append after truncate: %+v %v", info, err)
	}
}

// A power cut between a roll and the cycle that seals the rolled segment:
// the old segment lost its unsynced tail while the new segment's file
// survived with a batch. Recovery finds the new segment unlisted in the
// ordinal checkpoint, checks the one before it like an active segment, and
// removes the new one (it lies beyond a hole, and nothing in it was ever
// durable). And when the seal's checkpoint write alone failed, the unlisted
// segment is kept: the one before it is whole.
func TestRecoverUnsealedRoll(t *testing.T) {
	t.Run("torn", func(t *testing.T) {
		fs := NewCrashFS(1)
		sy := newSyncer(t)
		l := openLog(t, fs, "/d", testConfig(), sy, nil)
		for i := 0; i < 10; i++ {
			if _, err := l.Append(batch(t, 1, 100, 1), 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		durable := l.DurableOffset()
		var rolledAt int64
		for l.Segments() < 2 {
			info, err := l.Append(batch(t, 1, 100, 1), 0)
			if err != nil {
				t.Fatal(err)
			}
			rolledAt = info.BaseOffset
		}
		fs.Crash() // before any cycle: the old tail and the new name are lost
		b := batch(t, 1, 100, 1)
		records.SetBaseOffset(b, rolledAt)
		fs.WriteFileForTest("/d/"+segmentName(rolledAt, logSuffix), b) // as if its pages had been written back
		l2 := openLog(t, fs, "/d", testConfig(), sy, nil)
		defer l2.Close()
		if l2.Segments() != 1 || l2.EndOffset() != durable {
			t.Fatalf("after recovery: %d segments, end %d; want 1 segment ending at the durable %d", l2.Segments(), l2.EndOffset(), durable)
		}
		if _, err := l2.Append(batch(t, 1, 100, 1), 0); err != nil {
			t.Fatal(err)
		}
		if err := l2.Sync(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("whole", func(t *testing.T) {
		fs := NewCrashFS(1)
		sy := newSyncer(t)
		l := openLog(t, fs, "/d", testConfig(), sy, nil)
		for l.Segments() < 2 {
			if _, err := l.Append(batch(t, 1, 100, 1), 0); err != nil {
				t.Fatal(err)
			}
		}
		fs.InjectError(OpRename, ordinalCheckpoint, syscall.EIO)
		if err := l.Sync(); err != nil {
			t.Fatalf("a failed ordinal checkpoint must not fail the cycle: %v", err)
		}
		end := l.EndOffset()
		if l.DurableOffset() != end {
			t.Fatalf("durable %d, end %d", l.DurableOffset(), end)
		}
		fs.ClearErrors()
		fs.Crash()
		l2 := openLog(t, fs, "/d", testConfig(), sy, nil)
		defer l2.Close()
		if l2.Segments() != 2 || l2.EndOffset() != end {
			t.Fatalf("after recovery: %d segments, end %d; want 2 ending at %d", l2.Segments(), l2.EndOffset(), end)
		}
		for off := int64(0); off < end; off++ {
			if o, err := l2.OrdinalOf(off); err != nil || o != off {
				t.Fatalf("ordinal of %d: %d %v", off, o, err)
			}
		}
	})
}

// goid is the calling goroutine's id, from its stack header.
func goid() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	f := bytes.Fields(b)
	if len(f) < 2 {
		return ""
	}
	return string(f[1])
}

// A rolled segment's indexes are fsynced when the sync cycle seals it
// (docs/storage.md): they used to be written and closed, and the fsyncs
// that followed found no file to sync, so a power cut left the next start
// rebuilding them.
func TestSealedIndexesFsynced(t *testing.T) {
	fs := NewCrashFS(1)
	var synced sync.Map
	fs.OnSync(func(p string) { synced.Store(p, true) })
	l := openLog(t, fs, "/d", testConfig(), newSyncer(t), nil)
	defer l.Close()
	for i := 0; i < 60; i++ {
		if _, err := l.Append(batch(t, 1, 200, int64(i)), 0); err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 {
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.mu.RLock()
	segs := slices.Clone(l.segs)
	l.mu.RUnlock()
	if len(segs) < 3 {
		t.Fatalf("%d segments: the test needs rolls", len(segs))
	}
	for _, s := range segs[:len(segs)-1] {
		for _, p := range []string{s.path(indexSuffix), s.path(timeIndexSuffix)} {
			if _, ok := synced.Load(p); !ok {
				t.Errorf("sealed segment's %s never fsynced", p)
			}
		}
	}
}

// TestEpochCheckpointReadErrorFailsOpen: a leader epoch checkpoint that
// cannot be read (EMFILE, EIO) is not rebuilt by scanning the batches: the
// scan cannot know the epoch of the offset before the log start once the
// segment holding it is gone (Raft asks for the term before its first
// index), and the rebuilt checkpoint would replace the good one for good.
// The open fails instead (the replica is offline and retried); once the
// file reads again the log opens with what it held.
func TestEpochCheckpointReadErrorFailsOpen(t *testing.T) {
	fs := NewCrashFS(1)
	sy := newSyncer(t)
	l := openLog(t, fs, "/d", testConfig(), sy, nil)
	for l.Segments() < 2 {
		if _, err := l.Append(batch(t, 2, 100, 1), 1); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		if _, err := l.Append(batch(t, 2, 100, 1), 2); err != nil {
			t.Fatal(err)
		}
	}
	second := l.segs[1].base
	if err := l.DeleteBefore(second); err != nil {
		t.Fatal(err)
	}
	if l.Segments() != 1 || l.StartOffset() != second {
		t.Fatalf("DeleteBefore(%d): %d segments, start %d", second, l.Segments(), l.StartOffset())
	}
	if got := l.EpochAt(second - 1); got != 1 {
		t.Fatalf("epoch before the start: %d, want 1", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join("/d", epochCheckpoint)
	fs.InjectErrorPath(OpOpen, ckpt, syscall.EMFILE)
	if l, err := Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet}); err == nil {
		defer l.Close()
		t.Fatalf("opened with an unreadable epoch checkpoint (EpochAt(%d) = %d)", second-1, l.EpochAt(second-1))
	} else if !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("open: %v, want the read error", err)
	}
	fs.ClearErrors()
	l = openLog(t, fs, "/d", testConfig(), sy, nil)
	defer l.Close()
	if got := l.EpochAt(second - 1); got != 1 {
		t.Fatalf("after the read error cleared, the epoch before the start is %d, want 1: the checkpoint was rewritten from a scan", got)
	}
}

// TestLogsShareConfigUntilSet: logs opened with the same configuration
// share one copy (internConfig: a Config per partition was 128 bytes,
// issue 27), and a SetConfig of one changes that log only - the shared copy
// is never changed in place.
func TestLogsShareConfigUntilSet(t *testing.T) {
	fs, sy := NewCrashFS(1), newSyncer(t)
	cfg := testConfig()
	a := openLog(t, fs, "/a", cfg, sy, nil)
	b := openLog(t, fs, "/b", cfg, sy, nil)
	defer a.Close()
	defer b.Close()
	if a.cfg != b.cfg {
		t.Fatal("two logs of one configuration hold two copies of it")
	}
	changed := cfg
	changed.RetentionBytes = 8192
	a.SetConfig(changed)
	if got := a.Config().RetentionBytes; got != 8192 {
		t.Fatalf("a's retention.bytes %d after SetConfig, want 8192", got)
	}
	if got := b.Config(); got != cfg.normalize() {
		t.Fatalf("b's configuration changed with a's SetConfig: %+v", got)
	}
	c := openLog(t, fs, "/c", changed, sy, nil)
	defer c.Close()
	if c.cfg != a.cfg {
		t.Fatal("a log opened with a's new configuration holds a copy of its own")
	}
}
