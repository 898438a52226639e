package tiered

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"strings"
	"testing"
	"time"

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

// TestRemoteReadServesBatchesAsTheyArrive: a segment being downloaded is
// read from before its last byte arrives (the whole batches that did and
// passed their CRC), and the rest once it comes.
func TestRemoteReadServesBatchesAsTheyArrive(t *testing.T) {
	log, ends, seg, side := testSegment(t, -1)
	const key = "t/0/seg"
	store := &gatedStore{memStore: memStore{key + ".log": log, key + ".index": side}, cut: ends[5] + 10, gate: make(chan struct{})}
	m := &Manager{store: store, ctx: context.Background()}
	c, err := newCache(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()

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
	for {
		pos, end, first, last, w, err := e.batches(60, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if end > pos {
			if pos != int64(ends[5]) || end != int64(ends[9]) || first != 60 || last != 99 {
				t.Fatalf("read from 60: bytes %d-%d offsets %d-%d, want %d-%d offsets 60-99", pos, end, first, last, ends[5], ends[9])
			}
			break
		}
		await(t, w, "the rest of the segment")
	}
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
	c, err := newCache(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()

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
