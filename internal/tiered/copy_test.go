package tiered

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"path/filepath"
	"testing"

	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// TestSegmentReaderStreamsWhatWasChecked: the upload's second read of a
// segment through the log (no copy on the local disk) hands out exactly
// the segment's bytes, again after a seek to the start (the client's
// retry); when the bytes do not match the size or CRC the first pass
// recorded, the read fails before handing out the last chunk, so no PUT of
// other bytes than the record describes completes.
func TestSegmentReaderStreamsWhatWasChecked(t *testing.T) {
	l, err := storage.Open(filepath.Join(t.TempDir(), "p0"), storage.DefaultConfig(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	value := bytes.Repeat([]byte("x"), 1000)
	for range 3000 { // about 3 MiB: the reader's 1 MiB reads come in several chunks
		b, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
			[]records.Record{{Value: value}, {Value: value}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(b, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.SyncNow(); err != nil {
		t.Fatal(err)
	}
	from, next := int64(10), l.EndOffset()-20 // batch boundaries: every batch holds 2 records
	var want []byte
	for off := from; off < next; {
		s, err := l.Read(off, next, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Bytes()
		s.Release()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, b...)
		off = s.LastOffset + 1
	}
	crc := crc32.Checksum(want, castagnoli)
	r := &segmentReader{log: l, from: from, next: next, size: int64(len(want)), crc: crc, chunk: make([]byte, 1<<20)}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (%v), want the segment's %d", len(got), err, len(want))
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	part := make([]byte, 5000)
	if _, err := io.ReadFull(r, part); err != nil {
		t.Fatal(err)
	}
	if at, err := r.Seek(0, io.SeekCurrent); err != nil || at != 5000 {
		t.Fatalf("position after 5000 bytes: %d (%v)", at, err)
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after a seek to the start: %d bytes (%v), want %d", len(got), err, len(want))
	}
	for name, bad := range map[string]*segmentReader{
		"crc":       {log: l, from: from, next: next, size: int64(len(want)), crc: crc + 1},
		"shorter":   {log: l, from: from, next: next, size: int64(len(want)) - 1, crc: crc},
		"longer":    {log: l, from: from, next: next, size: int64(len(want)) + 1, crc: crc},
		"past next": {log: l, from: from, next: next + 20, size: int64(len(want)), crc: crc},
	} {
		got, err := io.ReadAll(bad)
		if !errors.Is(err, errSegmentChanged) {
			t.Fatalf("%s: read %d bytes, err %v, want errSegmentChanged", name, len(got), err)
		}
		if len(got) >= len(want) {
			t.Fatalf("%s: %d bytes handed out before the error, the whole segment is %d", name, len(got), len(want))
		}
	}
}
