package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/records"
	"holdfast/internal/testwait"
)

// kv is one record to write: a nil Val is a tombstone, a nil Key a keyless record.
type kv struct{ Key, Val []byte }

func k(s string) []byte { return []byte(s) }

// keyed builds a batch of kvs with the given producer fields and codec.
func keyed(t testing.TB, opts records.Batch, ts int64, kvs ...kv) []byte {
	t.Helper()
	recs := make([]records.Record, len(kvs))
	for i, r := range kvs {
		recs[i] = records.Record{Timestamp: ts, Key: r.Key, Value: r.Val}
	}
	if opts.ProducerID == 0 && !opts.Transactional {
		opts.ProducerID, opts.ProducerEpoch, opts.BaseSequence = -1, -1, -1
	}
	b, err := records.Build(opts, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func marker(t testing.TB, pid int64, epoch int16, commit bool, ts int64) []byte {
	t.Helper()
	key := kmsg.NewControlRecordKey()
	key.Type = kmsg.ControlRecordKeyTypeAbort
	if commit {
		key.Type = kmsg.ControlRecordKeyTypeCommit
	}
	val := kmsg.NewEndTxnMarker()
	b, err := records.Build(records.Batch{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: -1, Transactional: true, Control: true},
		[]records.Record{{Timestamp: ts, Key: key.AppendTo(nil), Value: val.AppendTo(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func compactConfig() Config {
	c := testConfig()
	c.Compact = true
	c.DeleteRetention = time.Hour
	c.MinCleanableRatio = 0
	return c
}

func cleanOpts(l *Log) CleanOptions {
	return CleanOptions{Committed: l.EndOffset(), RemoveBelow: math.MaxInt64, Map: NewOffsetMap(1 << 20)}
}

func mustClean(t testing.TB, l *Log, o CleanOptions) CleanResult {
	t.Helper()
	res, err := l.Clean(o)
	if err != nil {
		t.Fatalf("clean: %v", err)
	}
	return res
}

// rec is a record as read back.
type rec struct {
	off      int64
	key, val []byte
	ts       int64
}

// records reads every record of the log from its start, checking every
// batch's CRC and that offsets only grow.
func logRecords(t testing.TB, l *Log) []rec {
	t.Helper()
	var out []rec
	prev := int64(-1)
	err := l.Scan(l.StartOffset(), func(h records.Header, b []byte) error {
		if _, err := records.Validate(b, 0); err != nil {
			return fmt.Errorf("batch at %d: %w", h.BaseOffset, err)
		}
		if h.BaseOffset <= prev {
			return fmt.Errorf("batch at %d after %d", h.BaseOffset, prev)
		}
		prev = h.LastOffset()
		if h.IsControl() {
			return nil
		}
		return records.Each(b, func(r records.Record) {
			out = append(out, rec{r.Offset, bytes.Clone(r.Key), bytes.Clone(r.Value), r.Timestamp})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// live is the view a consumer reading from the start ends with: the last
// value of each key, deleted keys absent.
func live(recs []rec) map[string]string {
	m := map[string]string{}
	for _, r := range recs {
		if r.key == nil {
			continue
		}
		if r.val == nil {
			delete(m, string(r.key))
		} else {
			m[string(r.key)] = string(r.val)
		}
	}
	return m
}

func sameMap(t testing.TB, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d live keys, want %d", what, len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: key %q = %q, want %q", what, k, got[k], v)
		}
	}
}

// subsetOf checks that every record of got was written at that offset.
func subsetOf(t testing.TB, got []rec, written map[int64]rec) {
	t.Helper()
	for _, r := range got {
		w, ok := written[r.off]
		if !ok || !bytes.Equal(w.key, r.key) || !bytes.Equal(w.val, r.val) || (w.val == nil) != (r.val == nil) || w.ts != r.ts {
			t.Fatalf("record at %d (%q=%q ts %d) was not written there", r.off, r.key, r.val, r.ts)
		}
	}
}

func TestCleanLatestPerKey(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_000_000)}
	l := openLog(t, NewCrashFS(1), "/d", compactConfig(), newSyncer(t), clk.now)
	defer l.Close()
	written := map[int64]rec{}
	want := map[string]string{}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		key := fmt.Sprintf("k%03d", rng.Intn(50))
		// Values of 100 bytes: an emptied batch keeps its 61-byte header.
		val := fmt.Sprintf("v%-99d", i)
		info, err := l.Append(keyed(t, records.Batch{}, int64(i), kv{k(key), k(val)}), 0)
		if err != nil {
			t.Fatal(err)
		}
		written[info.BaseOffset] = rec{info.BaseOffset, k(key), k(val), int64(i)}
		want[key] = val
	}
	before := l.Segments()
	if before < 10 {
		t.Fatalf("only %d segments", before)
	}
	activeBase := l.active().base
	res := mustClean(t, l, cleanOpts(l))
	if res.End != activeBase || res.Segments != before-1 {
		t.Fatalf("cleaned [%d, %d) in %d segments; want up to the active segment %d, %d segments", res.FirstDirty, res.End, res.Segments, activeBase, before-1)
	}
	got := logRecords(t, l)
	subsetOf(t, got, written)
	sameMap(t, "after clean", live(got), want)
	// Below the active segment, each key at most once.
	seen := map[string]bool{}
	for _, r := range got {
		if r.off < activeBase {
			if seen[string(r.key)] {
				t.Fatalf("key %q twice in the cleaned section", r.key)
			}
			seen[string(r.key)] = true
		}
	}
	// Every batch stays (emptied: batch i of a Raft log is entry i), so
	// of these one-record batches only the records' bytes go.
	if res.BytesAfter >= res.BytesBefore/2 || res.BatchesEmptied < int64(len(written))/2 {
		t.Fatalf("bytes %d -> %d, %d batches emptied: nothing reclaimed", res.BytesBefore, res.BytesAfter, res.BatchesEmptied)
	}
	if l.FirstDirtyOffset() != activeBase {
		t.Fatalf("checkpoint %d, want %d", l.FirstDirtyOffset(), activeBase)
	}
	// Reading at any offset works (gaps are skipped), and reopening keeps it.
	for off := int64(0); off < l.EndOffset(); off += 37 {
		s, err := l.Read(off, l.EndOffset(), 1)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if s.Size == 0 || s.LastOffset < off {
			t.Fatalf("read at %d: %+v", off, s)
		}
		s.Release()
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := openLog(t, l.fs, "/d", compactConfig(), newSyncer(t), clk.now)
	defer l2.Close()
	got2 := logRecords(t, l2)
	if len(got2) != len(got) {
		t.Fatalf("reopened: %d records, had %d", len(got2), len(got))
	}
	sameMap(t, "reopened", live(got2), want)
	if l2.FirstDirtyOffset() != activeBase {
		t.Fatalf("checkpoint after reopen %d, want %d", l2.FirstDirtyOffset(), activeBase)
	}
	// A second pass with nothing dirty removes nothing, and merges the
	// small cleaned segments (a first pass cannot: they were full).
	cleanedSegs := l2.Segments()
	res = mustClean(t, l2, cleanOpts(l2))
	if res.RecordsRemoved != 0 {
		t.Fatalf("second pass removed %d records", res.RecordsRemoved)
	}
	if l2.Segments() > cleanedSegs*2/3 {
		t.Fatalf("%d segments after merging, from %d (%d before cleaning)", l2.Segments(), cleanedSegs, before)
	}
	sameMap(t, "merged", live(logRecords(t, l2)), want)
}

func TestCleanTombstonesAfterDeleteRetention(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_000_000)}
	cfg := compactConfig()
	l := openLog(t, NewCrashFS(1), "/d", cfg, newSyncer(t), clk.now)
	defer l.Close()
	app := func(kvs ...kv) {
		t.Helper()
		if _, err := l.Append(keyed(t, records.Batch{}, clk.t.UnixMilli(), kvs...), 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		app(kv{k("a"), k(fmt.Sprint("a", i))}, kv{k("b"), k(fmt.Sprint("b", i))})
	}
	app(kv{k("a"), nil}, kv{nil, k("keyless")})
	for i := 0; i < 60; i++ {
		app(kv{k(fmt.Sprint("filler", i%3)), bytes.Repeat(k("x"), 100)})
	}
	mustClean(t, l, cleanOpts(l))
	recs := logRecords(t, l)
	tomb := 0
	for _, r := range recs {
		if string(r.key) == "a" {
			if r.val != nil {
				t.Fatalf("old value of a survived next to its tombstone: %q at %d", r.val, r.off)
			}
			tomb++
		}
		if r.key == nil {
			t.Fatal("keyless record survived")
		}
	}
	if tomb != 1 {
		t.Fatalf("%d tombstones of a, want 1 (kept until delete.retention.ms)", tomb)
	}
	c, _ := l.CleanableState(l.EndOffset(), math.MaxInt64)
	if c.HorizonDue {
		t.Fatal("horizon due at once")
	}
	// Before the horizon: still there.
	clk.t = clk.t.Add(cfg.DeleteRetention / 2)
	mustClean(t, l, cleanOpts(l))
	if n := countKey(logRecords(t, l), "a"); n != 1 {
		t.Fatalf("tombstone gone before delete.retention.ms: %d", n)
	}
	// A replica that has not stored it yet (RemoveBelow) keeps it too.
	clk.t = clk.t.Add(cfg.DeleteRetention)
	if c, _ := l.CleanableState(l.EndOffset(), math.MaxInt64); !c.HorizonDue || !c.Due {
		t.Fatalf("horizon passed but not due: %+v", c)
	}
	o := cleanOpts(l)
	o.RemoveBelow = 1
	mustClean(t, l, o)
	if n := countKey(logRecords(t, l), "a"); n != 1 {
		t.Fatalf("tombstone removed above RemoveBelow: %d", n)
	}
	// Due again as soon as every replica has it, and not before; a
	// restart remembers.
	l.Close()
	l = openLog(t, l.fs, "/d", cfg, newSyncer(t), clk.now)
	defer l.Close()
	if c, _ := l.CleanableState(l.EndOffset(), 1); c.Due {
		t.Fatalf("due while still blocked: %+v", c)
	}
	if c, _ := l.CleanableState(l.EndOffset(), math.MaxInt64); !c.Due || !c.HorizonDue {
		t.Fatalf("not due once unblocked: %+v", c)
	}
	res := mustClean(t, l, cleanOpts(l))
	if n := countKey(logRecords(t, l), "a"); n != 0 || res.Tombstones != 1 {
		t.Fatalf("tombstone still there after delete.retention.ms: %d (removed %d)", n, res.Tombstones)
	}
	if live(logRecords(t, l))["b"] != "b19" {
		t.Fatal("b lost")
	}
}

func countKey(recs []rec, key string) int {
	n := 0
	for _, r := range recs {
		if string(r.key) == key {
			n++
		}
	}
	return n
}

// headers lists every batch header of the log.
func headers(t testing.TB, l *Log) []records.Header {
	t.Helper()
	var out []records.Header
	if err := l.ScanHeaders(l.StartOffset(), func(h records.Header) error { out = append(out, h); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// On a Raft log every batch keeps its place and header fields: the Raft
// index of every batch stays the same, and a scan of headers (what the
// Raft store does at open) sees contiguous batches.
func TestCleanPreservesBatches(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_000_000)}
	fs := NewCrashFS(1)
	l := openLog(t, fs, "/d", compactConfig(), newSyncer(t), clk.now)
	codecs := []records.Codec{records.CodecNone, records.CodecGzip, records.CodecSnappy, records.CodecLZ4, records.CodecZstd}
	epoch := int32(1)
	for i := 0; i < 600; i++ {
		if i%100 == 0 {
			epoch++
		}
		b := keyed(t, records.Batch{ProducerID: 7, ProducerEpoch: 0, BaseSequence: int32(i * 3), Codec: codecs[i%len(codecs)], BaseOffset: l.EndOffset(), PartitionLeaderEpoch: epoch}, int64(i),
			kv{k(fmt.Sprint("k", i%7)), k(fmt.Sprint(i))}, kv{k(fmt.Sprint("k", (i+1)%7)), k(fmt.Sprint(i))}, kv{k("x"), nil})
		if _, err := l.AppendReplicated(b); err != nil {
			t.Fatal(err)
		}
	}
	before := headers(t, l)
	ords := l.EndOrdinal()
	mustClean(t, l, cleanOpts(l))
	check := func(l *Log) {
		t.Helper()
		after := headers(t, l)
		if len(after) != len(before) || l.EndOrdinal() != ords {
			t.Fatalf("%d batches, %d ordinals after cleaning; %d, %d before", len(after), l.EndOrdinal(), len(before), ords)
		}
		empty := 0
		for i, a := range after {
			b := before[i]
			if a.BaseOffset != b.BaseOffset || a.LastOffsetDelta != b.LastOffsetDelta || a.PartitionLeaderEpoch != b.PartitionLeaderEpoch ||
				a.ProducerID != b.ProducerID || a.ProducerEpoch != b.ProducerEpoch || a.BaseSequence != b.BaseSequence || a.MaxTimestamp != b.MaxTimestamp {
				t.Fatalf("batch %d: header %+v became %+v", i, b, a)
			}
			if i > 0 && a.BaseOffset != after[i-1].LastOffset()+1 {
				t.Fatalf("batch %d at %d after one ending at %d", i, a.BaseOffset, after[i-1].LastOffset())
			}
			if ord, err := l.OrdinalOf(a.BaseOffset); err != nil || ord != int64(i) {
				t.Fatalf("batch %d: ordinal %d, %v", i, ord, err)
			}
			if a.NumRecords == 0 {
				empty++
			}
		}
		if empty < len(after)/2 {
			t.Fatalf("only %d of %d batches emptied", empty, len(after))
		}
		if got := live(logRecords(t, l)); len(got) != 7 {
			t.Fatalf("live keys %v", got)
		}
		if e := l.EpochAt(after[len(after)-1].BaseOffset); e != after[len(after)-1].PartitionLeaderEpoch {
			t.Fatalf("epoch cache says %d", e)
		}
	}
	check(l)
	l.Close()
	l = openLog(t, fs, "/d", compactConfig(), newSyncer(t), clk.now)
	defer l.Close()
	check(l)
}

// Aborted data goes, committed data is compacted like any other, markers
// stay while their transaction has records and go after their horizon, an
// open transaction bounds the pass, and a producer's last batch stays.
func TestCleanTransactions(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_000_000)}
	cfg := compactConfig()
	l := openLog(t, NewCrashFS(1), "/d", cfg, newSyncer(t), clk.now)
	defer l.Close()
	ts := clk.t.UnixMilli()
	txn := func(pid int64, seq int32, kvs ...kv) []byte {
		return keyed(t, records.Batch{ProducerID: pid, ProducerEpoch: 0, BaseSequence: seq, Transactional: true}, ts, kvs...)
	}
	app := func(b []byte) int64 {
		t.Helper()
		info, err := l.Append(b, 0)
		if err != nil {
			t.Fatal(err)
		}
		return info.BaseOffset
	}
	app(keyed(t, records.Batch{}, ts, kv{k("a"), k("plain")}))
	app(txn(1, 0, kv{k("a"), k("committed")}, kv{k("c"), k("c1")}))
	abortedAt := app(txn(2, 0, kv{k("b"), k("aborted")}, kv{k("a"), k("aborted")}))
	app(marker(t, 1, 0, true, ts))
	app(marker(t, 2, 0, false, ts))
	// Producer 3: a committed transaction whose records are all superseded.
	p3 := app(txn(3, 0, kv{k("d"), k("old")}))
	m3 := app(marker(t, 3, 0, true, ts))
	app(keyed(t, records.Batch{}, ts, kv{k("d"), k("new")}))
	for i := 0; i < 40; i++ {
		app(keyed(t, records.Batch{}, ts, kv{k(fmt.Sprint("f", i%4)), bytes.Repeat(k("y"), 100)}))
	}
	// Producer 4 is open: nothing from its first offset on is cleaned.
	open := app(txn(4, 0, kv{k("e"), k("open")}))
	for i := 0; i < 40; i++ {
		app(keyed(t, records.Batch{}, ts, kv{k(fmt.Sprint("f", i%4)), bytes.Repeat(k("z"), 100)}))
	}
	res := mustClean(t, l, cleanOpts(l))
	if res.End != open {
		t.Fatalf("cleaned up to %d; the open transaction starts at %d", res.End, open)
	}
	recs := logRecords(t, l)
	for _, r := range recs {
		if string(r.val) == "aborted" {
			t.Fatalf("aborted record at %d survived", r.off)
		}
		if r.off == abortedAt || r.off == p3 {
			t.Fatalf("record at %d survived", r.off)
		}
	}
	if v := live(recs); v["a"] != "committed" || v["c"] != "c1" || v["d"] != "new" || v["e"] != "open" || v["b"] != "" {
		t.Fatalf("live view %v", v)
	}
	markers := func() map[int64]records.Header {
		m := map[int64]records.Header{}
		for _, h := range headers(t, l) {
			if h.IsControl() {
				m[h.ProducerID] = h
			}
		}
		return m
	}
	ms := markers()
	if ms[1].NumRecords != 1 {
		t.Fatal("commit marker of a transaction with live records is gone")
	}
	if _, has := ms[1].DeleteHorizon(); has {
		t.Fatal("commit marker of a live transaction got a delete horizon")
	}
	for _, pid := range []int64{2, 3} {
		if _, has := ms[pid].DeleteHorizon(); !has || ms[pid].NumRecords != 1 {
			t.Fatalf("marker of producer %d: %+v; want kept with a delete horizon", pid, ms[pid])
		}
	}
	clk.t = clk.t.Add(2 * cfg.DeleteRetention)
	mustClean(t, l, cleanOpts(l))
	ms = markers()
	if ms[2].NumRecords != 0 {
		t.Fatalf("abort marker with no records left survived its horizon: %+v", ms[2])
	}
	// Producer 3's last batch is its marker's epoch carrier only if it has
	// no data batch of that epoch: its data batch is kept (empty).
	var p3h *records.Header
	for _, h := range headers(t, l) {
		if h.BaseOffset == p3 {
			hh := h
			p3h = &hh
		}
	}
	if p3h == nil || p3h.NumRecords != 0 || p3h.BaseSequence != 0 {
		t.Fatalf("producer 3's last data batch: %+v; want kept empty with its sequence", p3h)
	}
	if h, ok := markers()[3]; ok && h.BaseOffset == m3 && h.NumRecords != 0 {
		t.Fatalf("marker of producer 3 survived its horizon: %+v", h)
	}
}

func TestCleanableState(t *testing.T) {
	clk := &clock{t: time.UnixMilli(10_000_000)}
	cfg := compactConfig()
	cfg.MinCleanableRatio = 0.5
	l := openLog(t, NewCrashFS(1), "/d", cfg, newSyncer(t), clk.now)
	defer l.Close()
	for i := 0; i < 200; i++ {
		l.Append(keyed(t, records.Batch{}, clk.t.UnixMilli(), kv{k(fmt.Sprint(i % 5)), bytes.Repeat(k("v"), 50)}), 0)
	}
	c, err := l.CleanableState(l.EndOffset(), math.MaxInt64)
	if err != nil || !c.Due || c.Ratio != 1 || c.FirstDirty != 0 {
		t.Fatalf("fresh log: %+v, %v", c, err)
	}
	// Nothing committed: nothing cleanable.
	if c, _ := l.CleanableState(0, math.MaxInt64); c.Due {
		t.Fatalf("uncommitted log due: %+v", c)
	}
	mustClean(t, l, cleanOpts(l))
	c, _ = l.CleanableState(l.EndOffset(), math.MaxInt64)
	if c.Due || c.DirtyBytes != 0 {
		t.Fatalf("just cleaned: %+v", c)
	}
	// min.compaction.lag.ms: young segments are not cleanable.
	cfg.MinCompactionLag = time.Hour
	l.SetConfig(cfg)
	for i := 0; i < 200; i++ {
		l.Append(keyed(t, records.Batch{}, clk.t.UnixMilli(), kv{k(fmt.Sprint(i % 5)), bytes.Repeat(k("v"), 50)}), 0)
	}
	if c, _ := l.CleanableState(l.EndOffset(), math.MaxInt64); c.Due || c.DirtyBytes != 0 {
		t.Fatalf("records younger than min.compaction.lag.ms cleanable: %+v", c)
	}
	res := mustClean(t, l, cleanOpts(l))
	if res.End != c.FirstDirty && res.RecordsRemoved > 0 {
		t.Fatalf("pass cleaned young records: %+v", res)
	}
	clk.t = clk.t.Add(2 * time.Hour)
	if c, _ := l.CleanableState(l.EndOffset(), math.MaxInt64); !c.Due {
		t.Fatalf("after the lag: %+v", c)
	}
	// max.compaction.lag.ms makes a log due whatever its ratio.
	cfg.MinCompactionLag = 0
	cfg.MinCleanableRatio = 1
	cfg.MaxCompactionLag = time.Minute
	l.SetConfig(cfg)
	c, _ = l.CleanableState(l.EndOffset(), math.MaxInt64)
	if !c.MaxLagExceeded || !c.Due {
		t.Fatalf("past max.compaction.lag.ms: %+v", c)
	}
	// And it rolls the active segment that long after its first append.
	before := l.Segments()
	clk.t = clk.t.Add(2 * time.Minute)
	l.Append(keyed(t, records.Batch{}, clk.t.UnixMilli(), kv{k("x"), k("y")}), 0)
	if l.Segments() != before+1 {
		t.Fatalf("active segment not rolled after max.compaction.lag.ms: %d -> %d segments", before, l.Segments())
	}
}

// A small offset map cleans the dirty section in several passes.
func TestCleanSmallMap(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_000_000)}
	l := openLog(t, NewCrashFS(1), "/d", compactConfig(), newSyncer(t), clk.now)
	defer l.Close()
	want := map[string]string{}
	for i := 0; i < 6000; i++ {
		key, val := fmt.Sprint("k", i%4000), fmt.Sprint(i)
		want[key] = val
		l.Append(keyed(t, records.Batch{}, int64(i), kv{k(key), k(val)}), 0)
	}
	m := NewOffsetMap(0) // the minimum: ~2.4k keys
	passes := 0
	for {
		o := cleanOpts(l)
		o.Map = m
		res := mustClean(t, l, o)
		passes++
		if res.MapUtilization > 1 {
			t.Fatalf("map over full: %+v", res)
		}
		sameMap(t, fmt.Sprint("pass ", passes), live(logRecords(t, l)), want)
		if c, _ := l.CleanableState(l.EndOffset(), math.MaxInt64); c.DirtyBytes == 0 {
			break
		}
		if passes > 10 {
			t.Fatal("not converging")
		}
	}
	if passes < 2 {
		t.Fatalf("%d passes with a small map", passes)
	}
	// A batch with more keys than the map holds: uncleanable, nothing lost.
	recs := make([]kv, 3000)
	for i := range recs {
		recs[i] = kv{k(fmt.Sprint("big", i)), k("v")}
	}
	l.Append(keyed(t, records.Batch{}, 1, recs...), 0)
	for i := 0; i < 100; i++ {
		l.Append(keyed(t, records.Batch{}, 1, kv{k("z"), bytes.Repeat(k("z"), 100)}), 0)
	}
	var err error
	for i := 0; i < 3 && err == nil; i++ {
		o := cleanOpts(l)
		o.Map = m
		_, err = l.Clean(o)
	}
	if !errors.Is(err, ErrUncleanable) {
		t.Fatalf("batch larger than the map: %v", err)
	}
	if countKey(logRecords(t, l), "big7") != 1 {
		t.Fatal("uncleanable batch damaged")
	}
}

// The model test: random appends (values, tombstones, keyless records,
// transactions), cleaning passes with random commit points and replica
// limits, clock jumps and reopenings, compared after every step with the
// simplest model: the last value of each key, among committed records of
// committed transactions.
func TestCleanModel(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 5
	}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { cleanModelSeed(t, seed) })
	}
}

func cleanModelSeed(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	clk := &clock{t: time.UnixMilli(1_000_000)}
	cfg := compactConfig()
	cfg.SegmentBytes = int64(1024 + rng.Intn(4096))
	cfg.DeleteRetention = time.Duration(rng.Intn(3)) * time.Minute
	fs := NewCrashFS(seed)
	sy := newSyncer(t)
	l := openLog(t, fs, "/d", cfg, sy, clk.now)
	defer func() { l.Close() }()
	written := map[int64]rec{}
	// The model: every record written, in offset order, with its fate.
	type modelRec struct {
		r      rec
		pid    int64
		status int // 0 committed, 1 pending, 2 aborted
	}
	var all []modelRec
	seq := map[int64]int32{}
	openTxn := map[int64]bool{}
	mapBytes := 64<<10 + rng.Intn(256<<10)
	model := func() map[string]string {
		var rs []rec
		for _, m := range all {
			if m.status == 0 {
				rs = append(rs, m.r)
			}
		}
		return live(rs)
	}
	appendBatch := func(b []byte) int64 {
		t.Helper()
		info, err := l.Append(b, 0)
		if err != nil {
			t.Fatal(err)
		}
		return info.BaseOffset
	}
	var total CleanResult
	defer func() {
		t.Logf("removed %d records, %d tombstones, %d markers; %d batches emptied",
			total.RecordsRemoved, total.Tombstones, total.Markers, total.BatchesEmptied)
	}()
	nkeys := 5 + rng.Intn(60)
	for step := 0; step < 400; step++ {
		switch op := rng.Intn(20); {
		case op < 12: // a plain or transactional batch
			n := 1 + rng.Intn(4)
			kvs := make([]kv, n)
			for i := range kvs {
				key := k(fmt.Sprint("k", rng.Intn(nkeys)))
				switch x := rng.Intn(20); {
				case x == 0:
					kvs[i] = kv{nil, k("keyless")}
				case x < 4:
					kvs[i] = kv{key, nil}
				default:
					kvs[i] = kv{key, k(fmt.Sprintf("%d-%d", step, i))}
				}
			}
			ts := clk.t.UnixMilli()
			pid := int64(-1)
			opts := records.Batch{}
			if rng.Intn(3) == 0 {
				pid = int64(1 + rng.Intn(3))
				opts = records.Batch{ProducerID: pid, BaseSequence: seq[pid], Transactional: true}
				seq[pid] += int32(n)
			}
			base := appendBatch(keyed(t, opts, ts, kvs...))
			status := 0
			if pid >= 0 {
				status = 1
				openTxn[pid] = true
			}
			for i, x := range kvs {
				r := rec{base + int64(i), x.Key, x.Val, ts}
				written[r.off] = r
				all = append(all, modelRec{r, pid, status})
			}
		case op < 14: // end a transaction
			for pid := range openTxn {
				commit := rng.Intn(3) > 0
				appendBatch(marker(t, pid, 0, commit, clk.t.UnixMilli()))
				for i := range all {
					if all[i].pid == pid && all[i].status == 1 {
						all[i].status = 2
						if commit {
							all[i].status = 0
						}
					}
				}
				delete(openTxn, pid)
				break
			}
		case op < 17: // clean
			o := CleanOptions{Committed: l.EndOffset() - int64(rng.Intn(3)), RemoveBelow: math.MaxInt64, Map: NewOffsetMap(mapBytes)}
			if rng.Intn(4) == 0 {
				o.RemoveBelow = int64(rng.Intn(int(l.EndOffset() + 1)))
			}
			res, err := l.Clean(o)
			if err != nil && !errors.Is(err, ErrUncleanable) {
				t.Fatalf("step %d: clean: %v", step, err)
			}
			total.RecordsRemoved += res.RecordsRemoved
			total.Tombstones += res.Tombstones
			total.Markers += res.Markers
			total.BatchesEmptied += res.BatchesEmptied
		case op < 19:
			clk.t = clk.t.Add(time.Duration(rng.Intn(90)) * time.Second)
		default:
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openLog(t, fs, "/d", cfg, sy, clk.now)
		}
		checkSegments(t, l)
		got := logRecords(t, l)
		subsetOf(t, got, written)
		// The live view, reading committed transactions only (what
		// read_committed sees once the open ones are decided as aborted):
		// recompute from the log with the markers.
		view := committedView(t, l)
		sameMap(t, fmt.Sprintf("seed %d step %d", seed, step), view, model())
	}
}

// committedView replays the log as a read_committed consumer would once
// every open transaction aborted: the last value per key of non-aborted
// records.
func committedView(t testing.TB, l *Log) map[string]string {
	t.Helper()
	type txnRecs []rec
	open := map[int64]txnRecs{}
	var out []rec
	err := l.Scan(l.StartOffset(), func(h records.Header, b []byte) error {
		if h.IsControl() {
			if !h.IsTransactional() || h.NumRecords == 0 {
				return nil
			}
			if markerKind(b) == 1 {
				out = append(out, open[h.ProducerID]...)
			}
			delete(open, h.ProducerID)
			return nil
		}
		return records.Each(b, func(r records.Record) {
			x := rec{r.Offset, bytes.Clone(r.Key), bytes.Clone(r.Value), r.Timestamp}
			if h.IsTransactional() {
				open[h.ProducerID] = append(open[h.ProducerID], x)
			} else {
				out = append(out, x)
			}
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].off < out[j].off })
	return live(out)
}

// cleanFixture is a log with cleaning work to do: values, tombstones and
// transactions over several segments, a first pass done (delete horizons
// set), more writes, and the clock past the horizons, all fsynced.
type cleanFixture struct {
	fs      *CrashFS
	clk     *clock
	cfg     Config
	l       *Log
	written map[int64]rec
	view    map[string]string // what read_committed sees
	opts    CleanOptions
}

func newCleanFixture(t *testing.T) *cleanFixture {
	t.Helper()
	f := &cleanFixture{fs: NewCrashFS(7), clk: &clock{t: time.UnixMilli(1_000_000)}, cfg: compactConfig(), written: map[int64]rec{}}
	f.cfg.SegmentBytes = 2048
	f.l = openLog(t, f.fs, "/d", f.cfg, newSyncer(t), f.clk.now)
	rng := rand.New(rand.NewSource(3))
	write := func(n, keys int) {
		for i := 0; i < n; i++ {
			ts := f.clk.t.UnixMilli()
			var b []byte
			var kvs []kv
			key := k(fmt.Sprint("k", rng.Intn(keys)))
			pad := bytes.Repeat(k("."), 300)
			switch x := rng.Intn(10); {
			case x == 0:
				kvs = []kv{{key, nil}}
			case x == 1:
				// Written once: survives every pass, wherever it lands.
				kvs = []kv{{k(fmt.Sprint("u", len(f.written))), k(fmt.Sprint("once", i))}}
			default:
				kvs = []kv{{key, append(k(fmt.Sprint("v", i, "-", rng.Intn(1000))), pad...)}}
			}
			pid := int64(-1)
			if rng.Intn(4) == 0 {
				pid = 5
				b = keyed(t, records.Batch{ProducerID: pid, BaseSequence: int32(i), Transactional: true}, ts, kvs...)
			} else {
				b = keyed(t, records.Batch{}, ts, kvs...)
			}
			records.SetBaseOffset(b, f.l.EndOffset())
			records.SetLeaderEpoch(b, 1)
			info, err := f.l.AppendReplicated(b)
			if err != nil {
				t.Fatal(err)
			}
			for j, x := range kvs {
				f.written[info.BaseOffset+int64(j)] = rec{info.BaseOffset + int64(j), x.Key, x.Val, ts}
			}
			if pid >= 0 {
				m := marker(t, pid, 0, rng.Intn(3) > 0, ts)
				records.SetBaseOffset(m, f.l.EndOffset())
				records.SetLeaderEpoch(m, 1)
				if _, err = f.l.AppendReplicated(m); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	f.opts = CleanOptions{RemoveBelow: math.MaxInt64, Map: NewOffsetMap(1 << 20)}
	write(80, 25)
	f.opts.Committed = f.l.EndOffset()
	mustClean(t, f.l, f.opts)
	write(60, 12) // the tombstones of keys 12-24 stay, to go after their horizon
	f.clk.t = f.clk.t.Add(2 * f.cfg.DeleteRetention)
	if err := f.l.Sync(); err != nil {
		t.Fatal(err)
	}
	f.opts.Committed = f.l.EndOffset()
	f.view = committedView(t, f.l)
	return f
}

// A power cut at every file operation of a cleaning pass, and then at
// every operation of the recovery that follows: the log always opens, with
// nothing lost (every record the finished pass keeps is there) and nothing
// resurrected (everything there was written at that offset, and the view
// of a consumer reading from the start is the one before the pass).
func TestCleanCrashAtEachStep(t *testing.T) {
	for _, torn := range []bool{false, true} {
		// torn: the cut tears unsynced writes and keeps a prefix of the
		// unsynced directory changes (a commit's renames in part).
		t.Run(fmt.Sprint("torn=", torn), func(t *testing.T) {
			ref := newCleanFixture(t)
			ops0 := ref.fs.Ops()
			res := mustClean(t, ref.l, ref.opts)
			nops := ref.fs.Ops() - ops0
			if res.Segments < 3 || res.SegmentsAfter > res.Segments-2 || res.Tombstones == 0 || res.Markers == 0 {
				t.Fatalf("the fixture's pass does too little to test: %+v", res)
			}
			cleaned := logRecords(t, ref.l)
			sameMap(t, "uncrashed pass", committedView(t, ref.l), ref.view)
			ref.l.Close()
			t.Logf("%d file operations in the pass: %+v", nops, res)
			swaps := 0
			for n := int64(1); n <= nops; n++ {
				f := newCleanFixture(t)
				if torn {
					f.fs.SetDirPrefix(true)
					f.fs.CrashTornAfter(n)
				} else {
					f.fs.CrashAfter(n)
				}
				if _, err := f.l.Clean(f.opts); err == nil {
					t.Fatalf("op %d: pass survived the power cut", n)
				}
				f.l.Close()
				f.fs.Reboot()
				pending := false
				names, _ := f.fs.ReadDir("/d")
				for _, name := range names {
					if ext := filepathExt(name); ext == swapSuffix {
						pending = true
					}
				}
				check := func(what string) {
					t.Helper()
					l, err := Open("/d", f.cfg, Options{FS: f.fs, Syncer: newSyncer(t), Logger: quiet, Now: f.clk.now})
					if err != nil {
						t.Fatalf("op %d%s: open after the power cut: %v", n, what, err)
					}
					defer l.Close()
					names, _ := f.fs.ReadDir("/d")
					for _, name := range names {
						if ext := filepathExt(name); ext == swapSuffix || ext == cleanedSuffix {
							t.Fatalf("op %d%s: %s left after recovery", n, what, name)
						}
					}
					checkSegments(t, l)
					got := logRecords(t, l)
					subsetOf(t, got, f.written)
					have := map[int64]bool{}
					for _, r := range got {
						have[r.off] = true
					}
					for _, r := range cleaned {
						if !have[r.off] {
							t.Fatalf("op %d%s: record at %d (%q) lost", n, what, r.off, r.key)
						}
					}
					sameMap(t, fmt.Sprintf("op %d%s", n, what), committedView(t, l), f.view)
					hs := headers(t, l)
					for i := 1; i < len(hs); i++ {
						if hs[i].BaseOffset != hs[i-1].LastOffset()+1 {
							t.Fatalf("op %d%s: batch at %d after one ending at %d", n, what, hs[i].BaseOffset, hs[i-1].LastOffset())
						}
					}
					// The next pass finishes the job.
					o := f.opts
					o.Map = NewOffsetMap(1 << 20)
					mustClean(t, l, o)
					sameMap(t, fmt.Sprintf("op %d%s, cleaned again", n, what), committedView(t, l), f.view)
				}
				if !pending {
					check("")
					continue
				}
				// A committed swap: also cut the power during its recovery
				// (for every third such point: the recovery's steps are the
				// same for each).
				swaps++
				if swaps%3 != 1 {
					check("")
					continue
				}
				ops0 := f.fs.Ops()
				l, err := Open("/d", f.cfg, Options{FS: f.fs, Syncer: newSyncer(t), Logger: quiet, Now: f.clk.now})
				if err != nil {
					t.Fatalf("op %d: open: %v", n, err)
				}
				rops := f.fs.Ops() - ops0
				l.Close()
				// Replay the same crash, then crash the recovery at each step.
				for m := int64(1); m <= rops; m++ {
					g := newCleanFixture(t)
					if torn {
						g.fs.SetDirPrefix(true)
						g.fs.CrashTornAfter(n)
					} else {
						g.fs.CrashAfter(n)
					}
					g.l.Clean(g.opts)
					g.l.Close()
					g.fs.Reboot()
					g.fs.CrashAfter(m)
					if l, err := Open("/d", g.cfg, Options{FS: g.fs, Syncer: newSyncer(t), Logger: quiet, Now: g.clk.now}); err == nil {
						l.Close()
					}
					g.fs.Reboot()
					f = g
					check(fmt.Sprintf(", recovery cut at op %d", m))
				}
			}
			if swaps == 0 {
				t.Fatal("no power cut fell between a swap's commit and its end")
			}
		})
	}
}

func filepathExt(name string) string {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '.' {
			return name[i:]
		}
	}
	return ""
}

// checkSegments verifies the log's structure from its files: each
// segment's batches lie in [its base, the next segment's base), in order,
// the first at its base.
func checkSegments(t testing.TB, l *Log) {
	t.Helper()
	l.mu.RLock()
	defer l.mu.RUnlock()
	for i, s := range l.segs {
		limit := int64(math.MaxInt64)
		if i+1 < len(l.segs) {
			limit = l.segs[i+1].base
		}
		prev := s.base - 1
		for pos := int64(0); pos < s.size; {
			h, err := readHeader(s.f, pos)
			if err != nil {
				t.Fatalf("segment %d: %v", s.base, err)
			}
			if pos == 0 && h.BaseOffset != s.base || h.BaseOffset <= prev || h.LastOffset() >= limit {
				t.Fatalf("segment %d (next %d): batch [%d, %d] at %d after %d", s.base, limit, h.BaseOffset, h.LastOffset(), pos, prev)
			}
			prev = h.LastOffset()
			pos += int64(h.Size())
		}
	}
}

// Appends, reads, cleaning passes and front deletions (DeleteRecords,
// retention) at once (run with -race): every read returns valid batches,
// the segments stay well formed, and the view from the log start is the
// model's for the records at or above it.
func TestCleanConcurrent(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_000_000)}
	cfg := compactConfig()
	cfg.SegmentBytes = 2048
	cfg.DeleteRetention = 0
	fs := NewCrashFS(1)
	l := openLog(t, fs, "/d", cfg, newSyncer(t), clk.now)
	defer l.Close()
	var mu sync.Mutex
	written := map[int64]rec{}
	swapped, aborted := 0, 0
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // appender
		defer wg.Done()
		defer close(done)
		rng := rand.New(rand.NewSource(1))
		for i := 0; i < 3000; i++ {
			key := k(fmt.Sprint("k", rng.Intn(40)))
			var val []byte
			if rng.Intn(10) > 0 {
				val = k(fmt.Sprint("v", i))
			}
			info, err := l.Append(keyed(t, records.Batch{}, 1, kv{key, val}), 0)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			written[info.BaseOffset] = rec{info.BaseOffset, key, val, 1}
			mu.Unlock()
		}
		// The appends can all land before a cleaning pass finishes (each
		// one they overlap aborts): keep the cleaner, readers and
		// deletions going until a pass has swapped something in, bounded
		// (the check below then fails).
		testwait.Poll(30*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return swapped > 0
		})
	}()
	for _, fn := range []func(rng *rand.Rand){
		func(rng *rand.Rand) { // cleaner
			o := cleanOpts(l)
			o.Committed = l.EndOffset()
			res, err := l.Clean(o)
			if err != nil && !errors.Is(err, ErrCleanAborted) {
				t.Error(err)
			}
			mu.Lock()
			swapped += res.Segments
			if errors.Is(err, ErrCleanAborted) {
				aborted++
			}
			mu.Unlock()
		},
		func(rng *rand.Rand) { // reader
			end := l.EndOffset()
			s, err := l.Read(l.StartOffset()+rng.Int63n(max(end-l.StartOffset(), 1)), end, 512)
			if errors.Is(err, ErrOffsetOutOfRange) {
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			b, err := s.Bytes()
			s.Release()
			for len(b) > 0 && err == nil {
				var one []byte
				if one, b, err = records.Next(b); err == nil {
					_, err = records.Validate(one, 0)
				}
			}
			if err != nil {
				t.Errorf("read: %v", err)
			}
		},
		func(rng *rand.Rand) { // DeleteRecords now and then
			if rng.Intn(10) == 0 {
				l.DeleteBefore(l.StartOffset() + rng.Int63n(max(l.EndOffset()-l.StartOffset(), 1)/4+1))
			}
			time.Sleep(time.Millisecond) // pacing: deletions now and then, not a busy loop
		},
	} {
		wg.Add(1)
		go func(fn func(*rand.Rand)) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(2))
			for {
				select {
				case <-done:
					return
				default:
				}
				fn(rng)
			}
		}(fn)
	}
	wg.Wait()
	t.Logf("%d segments swapped, %d passes aborted", swapped, aborted)
	if swapped == 0 {
		t.Fatal("no pass swapped anything in")
	}
	mustClean(t, l, cleanOpts(l))
	checkSegments(t, l)
	got := logRecords(t, l)
	subsetOf(t, got, written)
	var above []rec
	for off, r := range written {
		if off >= l.StartOffset() {
			above = append(above, r)
		}
	}
	sort.Slice(above, func(i, j int) bool { return above[i].off < above[j].off })
	sameMap(t, "after the storm", live(got), live(above))
}

// flush.messages under a non-sync policy starts an fsync every N records.
func TestFlushMessages(t *testing.T) {
	cfg := testConfig()
	cfg.Flush = FlushPolicy{Mode: FlushOS}
	cfg.FlushMessages = 10
	l := openLog(t, NewCrashFS(1), "/d", cfg, newSyncer(t), nil)
	defer l.Close()
	for i := 0; i < 9; i++ {
		l.Append(batch(t, 1, 10, 1), 0)
	}
	time.Sleep(20 * time.Millisecond) // a negative check: an early fsync would show within this
	if d := l.DurableOffset(); d != 0 {
		t.Fatalf("fsynced to %d before flush.messages records", d)
	}
	l.Append(batch(t, 1, 10, 1), 0)
	testwait.Until(t, 10*time.Second, "an fsync after flush.messages records", func() bool { return l.DurableOffset() >= 10 })
}

// segment.index.bytes bounds a segment's offset index; segment.jitter.ms
// rolls a segment up to that much before segment.ms.
func TestIndexBoundAndJitter(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_000_000)}
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 20
	cfg.IndexIntervalBytes = 1
	cfg.IndexMaxEntries = 8
	l := openLog(t, NewCrashFS(1), "/d", cfg, newSyncer(t), clk.now)
	for i := 0; i < 20; i++ {
		l.Append(batch(t, 1, 10, 1), 0)
	}
	if n := l.Segments(); n != 3 {
		t.Fatalf("%d segments with 8 index entries each for 20 batches", n)
	}
	l.Close()
	// 45 minutes into a one-hour segment.ms, a segment with up to 30
	// minutes of jitter has rolled about half the time; without, never.
	cfg = testConfig()
	cfg.SegmentMs = time.Hour
	early := 0
	for _, jitter := range []time.Duration{0, 30 * time.Minute} {
		cfg.SegmentJitter = jitter
		for i := 0; i < 20; i++ {
			clk := &clock{t: time.UnixMilli(1_000_000)}
			l := openLog(t, NewCrashFS(int64(i)), "/d", cfg, newSyncer(t), clk.now)
			l.Append(batch(t, 1, 10, 1), 0)
			clk.t = clk.t.Add(45 * time.Minute)
			l.Append(batch(t, 1, 10, 1), 0)
			if l.Segments() == 2 {
				if jitter == 0 {
					t.Fatal("rolled before segment.ms without jitter")
				}
				early++
			}
			l.Close()
		}
	}
	if early == 0 {
		t.Fatal("jitter never rolls early")
	}
}
