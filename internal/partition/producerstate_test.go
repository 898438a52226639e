package partition

import (
	"errors"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// TestProducerStateMatchesPartition: the state tiered storage builds from
// a segment's batch headers (ProducerState.Apply) is the partition's own
// state, and installed in a partition that holds none of those batches (a
// restore, through the command every replica applies) it answers a retry
// with the original offsets, takes the next sequence and refuses a gap,
// installs nothing over a producer the partition already knows, and
// survives a rebuild of the state from the log.
func TestProducerStateMatchesPartition(t *testing.T) {
	m := newNode(t, t.TempDir())
	p, err := m.Open("src", [16]byte{1}, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Producer 42: seven batches of two (the cache keeps five); 43: one
	// batch in epoch 0, then epoch 1 starts over; 44: no idempotence.
	for i := range 7 {
		mustAppend(t, p, batch(t, 42, 0, int32(2*i), 2), int64(2*i), false)
	}
	mustAppend(t, p, batch(t, 43, 0, 0, 3), 14, false)
	mustAppend(t, p, batch(t, 43, 1, 0, 1), 17, false)
	mustAppend(t, p, batch(t, -1, -1, -1, 2), 18, false)

	var s ProducerState
	if err := p.log.Scan(0, func(h records.Header, _ []byte) error { s.Apply(h); return nil }); err != nil {
		t.Fatal(err)
	}
	if s.End != 20 || s.Len() != 2 {
		t.Fatalf("state ends at %d with %d producers, want 20 and 2", s.End, s.Len())
	}
	for id, e := range p.producers {
		sp := s.Producers[id]
		var got []batchMeta
		for _, b := range sp.Batches {
			if b.CRC == 0 {
				t.Fatalf("producer %d: a batch without its CRC", id)
			}
			got = append(got, batchMeta{FirstSeq: b.FirstSeq, LastSeq: b.LastSeq, baseOffset: b.BaseOffset, lastOffset: b.LastOffset, appendTime: b.AppendTime})
		}
		if sp.Epoch != e.epoch || !reflect.DeepEqual(got, e.batches) {
			t.Fatalf("producer %d: built epoch %d %+v, the partition's %d %+v", id, sp.Epoch, got, e.epoch, e.batches)
		}
	}
	if ep, seq, ok := s.NextSequence(42); !ok || ep != 0 || seq != 14 {
		t.Fatalf("next sequence of 42: %d %d %v", ep, seq, ok)
	}

	cmd, err := RestoreProducersCommand(s)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := m.Open("dst", [16]byte{2}, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, dst, batch(t, 43, 2, 0, 1), 0, false) // 43 wrote here already
	dst.applyRestoreProducers(cmd)
	if e := dst.producers[43]; e == nil || e.epoch != 2 {
		t.Fatalf("a producer the partition knew was replaced: %+v", e)
	}
	// A retry of 42's newest batch (the same bytes): its original
	// offsets, no append. The same sequences with other contents (a
	// producer of the new cluster given the same id) are no retry.
	var newest []byte
	if err := p.log.Scan(12, func(h records.Header, b []byte) error {
		if h.BaseOffset == 12 {
			newest = append([]byte(nil), b...)
		}
		return nil
	}); err != nil || newest == nil {
		t.Fatalf("reading the batch at 12: %v", err)
	}
	if _, err := dst.Append(batch(t, 42, 0, 12, 2)); !errors.Is(err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("other contents with a restored batch's sequences: %v, want OUT_OF_ORDER_SEQUENCE_NUMBER", err)
	}
	res, err := dst.Append(newest)
	if err != nil || !res.Duplicate || res.BaseOffset != 12 {
		t.Fatalf("retry after the restore: %+v %v", res, err)
	}
	if err := dst.ConfirmStored(res); err != nil {
		t.Fatalf("a retry of a batch below the log start: %v", err)
	}
	if _, err := dst.Append(batch(t, 42, 0, 16, 1)); !errors.Is(err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("a gap after the restore: %v", err)
	}
	// A rebuild from the log (after a truncation) keeps them.
	dst.appendMu.Lock()
	err = dst.rebuildLocked()
	dst.appendMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, dst, batch(t, 42, 0, 14, 1), 1, false)
	if e := dst.producers[43]; e == nil || e.epoch != 2 {
		t.Fatalf("after a rebuild, producer 43: %+v", e)
	}
}
