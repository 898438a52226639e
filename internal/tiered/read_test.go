package tiered

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"holdfast/internal/partition"
	"holdfast/internal/records"
)

// gatedStore serves one segment's two objects; the .log's bytes up to cut
// at once, the rest once gate is closed (a download under way).
type gatedStore struct {
	memStore
	cut  int
	gate chan struct{}
}

func (s *gatedStore) GetTo(ctx context.Context, key string, w io.Writer, limit int64) (int64, error) {
	b, ok := s.memStore[key]
	if !ok {
		return 0, errors.New("no such key")
	}
	n, err := w.Write(b[:s.cut])
	if err != nil {
		return int64(n), err
	}
	select {
	case <-s.gate:
	case <-ctx.Done():
		return int64(n), ctx.Err()
	}
	m, err := w.Write(b[s.cut:])
	return int64(n + m), err
}

// testSegment is ten batches of ten 100-byte records, offsets 0-99, with
// its record and sidecar; corrupt, if >= 0, flips a byte in that batch's
// records (after its CRC was computed, as on a bad disk).
func testSegment(t *testing.T, corrupt int) (log []byte, ends []int, seg Segment, side []byte) {
	t.Helper()
	for i := range 10 {
		recs := make([]records.Record, 10)
		for j := range recs {
			recs[j] = records.Record{Timestamp: 1, Value: bytes.Repeat([]byte{byte(i)}, 100)}
		}
		b, err := records.Build(records.Batch{BaseOffset: int64(10 * i), ProducerID: -1}, recs)
		if err != nil {
			t.Fatal(err)
		}
		if i == corrupt {
			b[len(b)-5] ^= 0xff
		}
		log = append(log, b...)
		ends = append(ends, len(log))
	}
	seg = Segment{Base: 0, Next: 100, Size: int64(len(log)), CRC: crc32.Checksum(log, castagnoli)}
	side, err := json.Marshal(sidecar{Segment: seg, Index: [][2]int64{{0, 0}, {50, int64(ends[4])}}})
	if err != nil {
		t.Fatal(err)
	}
	return log, ends, seg, side
}

// await waits for ch with a generous bound (a hang is a failure, not a
// timing assertion).
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// testCache is a 1 GiB read cache in a temporary directory, closed when
// the test ends.
func testCache(t *testing.T) *cache {
	t.Helper()
	c, err := newCache(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

// readToEnd reads e from offset off (the segment's batches end at offset
// 99) once the rest of it has arrived, and wants bytes from to end.
func readToEnd(t *testing.T, e *entry, off, from, end int64) {
	t.Helper()
	for {
		pos, got, first, last, w, err := e.batches(off, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if got > pos {
			if pos != from || got != end || first != off || last != 99 {
				t.Fatalf("read from %d: bytes %d-%d offsets %d-%d, want %d-%d offsets %d-99", off, pos, got, first, last, from, end, off)
			}
			return
		}
		await(t, w, "the rest of the segment")
	}
}

// TestRemoteReadServesBatchesAsTheyArrive: a segment being downloaded is
// read from before its last byte arrives (the whole batches that did and
// passed their CRC), and the rest once it comes.
func TestRemoteReadServesBatchesAsTheyArrive(t *testing.T) {
	log, ends, seg, side := testSegment(t, -1)
	const key = "t/0/seg"
	store := &gatedStore{memStore: memStore{key + ".log": log, key + ".index": side}, cut: ends[5] + 10, gate: make(chan struct{})}
	m := &Manager{store: store, ctx: context.Background()}
	c := testCache(t)

	e, wait, err := c.acquire(key, m.loader(key, seg))
	if e != nil || err != nil {
		t.Fatalf("first acquire: %v %v, want a download started", e, err)
	}
	await(t, wait, "the segment to be readable")
	e, _, err = c.acquire(key, m.loader(key, seg))
	if e == nil || err != nil {
		t.Fatalf("acquire after publishing: %v %v", e, err)
	}
	// Six whole batches arrive (and ten bytes of the seventh): offsets 0
	// to 59 can be read, the seventh batch not yet.
	await(t, e.waitFor(int64(ends[5])), "six batches to arrive")
	check := func(offset int64, maxBytes int, wantPos, wantEnd int, wantFirst, wantLast int64) {
		t.Helper()
		pos, end, first, last, _, err := e.batches(offset, maxBytes)
		if err != nil || pos != int64(wantPos) || end != int64(wantEnd) || first != wantFirst || last != wantLast {
			t.Fatalf("read from %d, at most %d bytes: bytes %d-%d offsets %d-%d (%v), want %d-%d offsets %d-%d",
				offset, maxBytes, pos, end, first, last, err, wantPos, wantEnd, wantFirst, wantLast)
		}
	}
	check(0, ends[3], 0, ends[3], 0, 39)   // a full fetch: four batches, the fifth would not fit
	check(0, ends[5], 0, ends[5], 0, 59)   // all that arrived, a full fetch too
	check(52, 1, ends[4], ends[5], 50, 59) // through the offset index; at least one batch
	// A fetch that more batches would fill waits for them (a consumer
	// catching up is not sent a trickle); so does one whose batch is not in.
	for _, off := range []int64{0, 60} {
		pos, end, _, _, w, err := e.batches(off, 1<<20)
		if err != nil || end != pos || w == nil {
			t.Fatalf("read from %d before enough arrived: bytes %d-%d, wait %v, %v", off, pos, end, w, err)
		}
		select {
		case <-w:
			t.Fatalf("read from %d: told to look again before more arrived", off)
		default:
		}
	}
	close(store.gate)
	readToEnd(t, e, 60, int64(ends[5]), int64(ends[9]))
	got := make([]byte, len(log))
	if _, err := e.f.ReadAt(got, 0); err != nil || !bytes.Equal(got, log) {
		t.Fatalf("cached file differs from the object (%v)", err)
	}
	c.release(e)
}

// TestRemoteReadNeverServesACorruptBatch: a batch whose CRC does not
// match is never served, nor anything after it; the checked batches
// before it are, and the next read of the segment downloads it again.
func TestRemoteReadNeverServesACorruptBatch(t *testing.T) {
	log, ends, seg, side := testSegment(t, 7)
	// The record matches the object (as if corrupted before the upload
	// read it): only the batch's own CRC tells.
	seg.CRC = crc32.Checksum(log, castagnoli)
	const key = "t/0/seg"
	store := &gatedStore{memStore: memStore{key + ".log": log, key + ".index": side}, cut: ends[5], gate: make(chan struct{})}
	m := &Manager{store: store, ctx: context.Background()}
	c := testCache(t)

	_, wait, _ := c.acquire(key, m.loader(key, seg))
	await(t, wait, "the segment to be readable")
	e, _, err := c.acquire(key, m.loader(key, seg))
	if e == nil || err != nil {
		t.Fatalf("acquire after publishing: %v %v", e, err)
	}
	await(t, e.waitFor(int64(ends[5])), "six batches to arrive")
	close(store.gate)
	for _, off := range []int64{60, 70, 99} {
		for {
			pos, end, _, _, w, err := e.batches(off, 1<<20)
			if end > pos {
				t.Fatalf("read from %d served bytes %d-%d of a segment whose batch of offsets 70-79 is corrupt", off, pos, end)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "CRC-32C") {
					t.Fatalf("read from %d: %v, want the CRC error", off, err)
				}
				break
			}
			await(t, w, "the download to end")
		}
	}
	// What was checked stays readable to whoever holds it (all there is:
	// sent although it fills no fetch).
	if _, end, _, last, _, err := e.batches(0, 1<<20); err != nil || end != int64(ends[5]) || last != 59 {
		t.Fatalf("read from 0 after the failure: end %d last %d, %v", end, last, err)
	}
	c.release(e)
	// The cache forgot the segment: the next read reports the failure
	// once, then downloads again.
	if e, _, err := c.acquire(key, m.loader(key, seg)); e != nil || err == nil {
		t.Fatalf("acquire after the failure: %v %v, want the error", e, err)
	}
	if e, wait, err := c.acquire(key, m.loader(key, seg)); e != nil || wait == nil || err != nil {
		t.Fatalf("acquire after the error was reported: %v %v %v, want a new download", e, wait, err)
	}
}

// sideStore serves a segment's .log at once and counts the GETs of its
// other objects, holding them until gate is closed.
type sideStore struct {
	memStore
	gate chan struct{}
	mu   sync.Mutex
	gets []string
}

func (s *sideStore) GetTo(_ context.Context, key string, w io.Writer, _ int64) (int64, error) {
	b, ok := s.memStore[key]
	if !ok {
		return 0, errors.New("no such key")
	}
	n, err := w.Write(b)
	return int64(n), err
}

func (s *sideStore) Get(ctx context.Context, key string, limit int64) ([]byte, error) {
	s.mu.Lock()
	s.gets = append(s.gets, key)
	s.mu.Unlock()
	select {
	case <-s.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.memStore.Get(ctx, key, limit)
}

// buildSegment is n batches of ten 100-byte records from offset 0, those
// at txn (producer 7) transactional, an abort marker after them; with its
// record and its .index as an upload writes them (copySegment).
func buildSegment(t *testing.T, n int, txn map[int]bool) (log []byte, ends []int, seg Segment, sc sidecar) {
	t.Helper()
	var off int64
	lastIndexed := int64(-indexEvery)
	for i := range n {
		recs := make([]records.Record, 10)
		for j := range recs {
			recs[j] = records.Record{Timestamp: 1, Value: bytes.Repeat([]byte{byte(i)}, 100)}
		}
		opts := records.Batch{BaseOffset: off, ProducerID: -1}
		if txn[i] {
			opts.ProducerID, opts.Transactional = 7, true
		}
		b, err := records.Build(opts, recs)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(log))-lastIndexed >= indexEvery {
			sc.Index = append(sc.Index, [2]int64{off, int64(len(log))})
			lastIndexed = int64(len(log))
		}
		log = append(log, b...)
		ends = append(ends, len(log))
		off += 10
	}
	seg = Segment{Base: 0, Next: off, Size: int64(len(log)), CRC: crc32.Checksum(log, castagnoli)}
	sc.Segment = seg
	return log, ends, seg, sc
}

// readWhole acquires key until it is readable and waits for its download
// to end.
func readWhole(t *testing.T, c *cache, m *Manager, key string, seg Segment) *entry {
	t.Helper()
	for {
		e, wait, err := c.acquire(key, m.loader(key, seg))
		if err != nil {
			t.Fatal(err)
		}
		if e != nil {
			return e
		}
		await(t, wait, "the segment to be readable")
	}
}

// TestRemoteReadNeedsNoIndexObject: a segment without a transactional
// batch is read with its .log alone (one GET, not two): its offset index
// is built as the batches arrive, the same as the uploaded .index's.
func TestRemoteReadNeedsNoIndexObject(t *testing.T) {
	log, ends, seg, sc := buildSegment(t, 300, nil)
	if len(sc.Index) < 3 {
		t.Fatalf("test segment of %d bytes has %d index entries, want several", len(log), len(sc.Index))
	}
	const key = "t/0/seg"
	store := &sideStore{memStore: memStore{key + ".log": log}, gate: make(chan struct{})} // no .index at all
	m := &Manager{store: store, ctx: context.Background()}
	c := testCache(t)
	e := readWhole(t, c, m, key, seg)
	defer c.release(e)
	for {
		if _, done, err := e.state(); done || err != nil {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		await(t, e.waitFor(seg.Size), "the download")
	}
	index, aborted := e.lookup()
	if !slices.Equal(index, sc.Index) || len(aborted) != 0 {
		t.Fatalf("offset index %v aborted %v, want the upload's %v and none", index, aborted, sc.Index)
	}
	if len(store.gets) != 0 {
		t.Fatalf("GETs besides the .log: %v", store.gets)
	}
	// Every offset is found through it: the batch holding it, at least one.
	for _, off := range []int64{0, 5, 1234, 2990, 2999} {
		b := int(off / 10)
		pos, end, first, last, _, err := e.batches(off, 1)
		wantPos := 0
		if b > 0 {
			wantPos = ends[b-1]
		}
		if err != nil || pos != int64(wantPos) || end != int64(ends[b]) || first != int64(10*b) || last != int64(10*b+9) {
			t.Fatalf("read from %d: bytes %d-%d offsets %d-%d (%v), want %d-%d offsets %d-%d", off, pos, end, first, last, err, wantPos, ends[b], 10*b, 10*b+9)
		}
	}
}

// TestRemoteReadTransactionalWaitsForItsAborted: in a segment with a
// transactional batch, the batches before it are readable at once and it
// (and all after it) only once the .index brought the aborted
// transactions, which a read_committed fetch needs.
func TestRemoteReadTransactionalWaitsForItsAborted(t *testing.T) {
	log, ends, seg, sc := buildSegment(t, 10, map[int]bool{4: true, 6: true})
	sc.Aborted = []partition.AbortedTxn{{ProducerID: 7, FirstOffset: 40, LastOffset: 70}}
	side, err := json.Marshal(sc)
	if err != nil {
		t.Fatal(err)
	}
	const key = "t/0/seg"
	store := &sideStore{memStore: memStore{key + ".log": log, key + ".index": side}, gate: make(chan struct{})}
	m := &Manager{store: store, ctx: context.Background()}
	c := testCache(t)
	e := readWhole(t, c, m, key, seg)
	defer c.release(e)
	// The whole .log is in: the four batches before the transactional
	// one are readable (a full fetch of them), it is not.
	await(t, e.waitFor(int64(ends[3])), "four batches")
	if pos, end, _, last, _, err := e.batches(0, ends[3]); err != nil || pos != 0 || end != int64(ends[3]) || last != 39 {
		t.Fatalf("read from 0: bytes %d-%d last %d (%v), want 0-%d last 39", pos, end, last, err, ends[3])
	}
	pos, end, _, _, w, err := e.batches(40, 1<<20)
	if err != nil || end != pos || w == nil {
		t.Fatalf("read of the transactional batch before the .index: bytes %d-%d, wait %v, %v", pos, end, w, err)
	}
	if avail, done, _ := e.state(); avail != int64(ends[3]) || done {
		t.Fatalf("before the .index: %d bytes readable (done %v), want %d", avail, done, ends[3])
	}
	close(store.gate)
	await(t, w, "the .index")
	readToEnd(t, e, 40, int64(ends[3]), int64(ends[9]))
	if _, aborted := e.lookup(); !slices.Equal(aborted, sc.Aborted) {
		t.Fatalf("aborted %v, want %v", aborted, sc.Aborted)
	}
	if !slices.Equal(store.gets, []string{key + ".index"}) {
		t.Fatalf("GETs besides the .log: %v, want the .index once", store.gets)
	}
}
