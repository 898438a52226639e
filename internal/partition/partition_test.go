package partition

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/records"
	"holdfast/internal/storage"
)

func newManager(t *testing.T, dir string) (*Manager, *storage.Syncer) {
	t.Helper()
	s := storage.NewSyncer(nil)
	return NewManager(dir, storage.Options{Syncer: s}), s
}

func batch(t *testing.T, pid int64, epoch int16, seq int32, n int) []byte {
	t.Helper()
	recs := make([]records.Record, n)
	for i := range recs {
		recs[i] = records.Record{Timestamp: time.Now().UnixMilli(), Value: []byte("v")}
	}
	b, err := records.Build(records.Batch{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustAppend(t *testing.T, p *Partition, b []byte, wantBase int64, wantDup bool) {
	t.Helper()
	res, err := p.Append(b)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	if res.BaseOffset != wantBase || res.Duplicate != wantDup {
		t.Fatalf("append: base %d dup %v, want %d %v", res.BaseOffset, res.Duplicate, wantBase, wantDup)
	}
	if err := p.WaitCommitted(context.Background(), res.LastOffset+1); err != nil {
		t.Fatal(err)
	}
}

// TestProducerStateRebuiltByScan: without a snapshot (a crash), the state
// comes back from the log itself.
func TestProducerStateRebuiltByScan(t *testing.T) {
	dir := t.TempDir()
	m, s := newManager(t, dir)
	cfg := storage.DefaultConfig()
	p, err := m.Open("t", [16]byte{1}, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b0, b1 := batch(t, 7, 0, 0, 3), batch(t, 7, 0, 3, 2)
	mustAppend(t, p, append([]byte(nil), b0...), 0, false)
	mustAppend(t, p, append([]byte(nil), b1...), 3, false)
	// Close without a snapshot, as a crash would leave it.
	if err := p.close(false); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	delete(m.parts, key{"t", 0})
	m.mu.Unlock()
	p, err = m.Open("t", [16]byte{1}, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, p, append([]byte(nil), b0...), 0, true)
	mustAppend(t, p, append([]byte(nil), b1...), 3, true)
	if _, err := p.Append(batch(t, 7, 0, 9, 1)); !errors.Is(err, kerr.OutOfOrderSequenceNumber) {
		t.Fatalf("gap after rescan: %v", err)
	}
	if p.HighWatermark() != 5 || p.LogEndOffset() != 5 {
		t.Fatalf("hw %d end %d, want 5", p.HighWatermark(), p.LogEndOffset())
	}
	m.Close()
	s.Close()
}

// TestSequenceWrap: sequences continue from MaxInt32 to 0.
func TestSequenceWrap(t *testing.T) {
	m, s := newManager(t, t.TempDir())
	defer s.Close()
	defer m.Close()
	p, err := m.Open("w", [16]byte{2}, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, p, batch(t, 1, 0, 0, 1), 0, false)
	// Pretend the producer has written up to just before the wrap.
	p.appendMu.Lock()
	e := p.producers[1]
	e.batches[len(e.batches)-1].LastSeq = math.MaxInt32 - 2
	p.appendMu.Unlock()
	wrap := batch(t, 1, 0, math.MaxInt32-1, 4) // MaxInt32-1, MaxInt32, 0, 1
	mustAppend(t, p, append([]byte(nil), wrap...), 1, false)
	mustAppend(t, p, append([]byte(nil), wrap...), 1, true)
	mustAppend(t, p, batch(t, 1, 0, 2, 1), 5, false)
}

// TestHighWatermarkNotify: Notify fires once an append is durable, and the
// records are readable up to the high watermark only.
func TestHighWatermarkNotify(t *testing.T) {
	m, s := newManager(t, t.TempDir())
	defer s.Close()
	defer m.Close()
	p, err := m.Open("n", [16]byte{3}, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ch := p.Notify()
	if _, err := p.Append(batch(t, -1, -1, -1, 2)); err != nil {
		t.Fatal(err)
	}
	select { // acks=0 style: nobody waits, the durability loop advances it
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("high watermark never advanced")
	}
	res, err := p.Read(0, 1<<20, false)
	if err != nil || res.HighWatermark != 2 || len(res.Records) == 0 {
		t.Fatalf("read: %+v %v", res, err)
	}
	if _, err := p.Read(3, 1<<20, false); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read past the end: %v", err)
	}
}

// TestDeleteTopicThenRecreate: a deleted topic's data and producer state do
// not reappear under a new topic of the same name.
func TestDeleteTopicThenRecreate(t *testing.T) {
	m, s := newManager(t, t.TempDir())
	defer s.Close()
	defer m.Close()
	p, err := m.Open("d", [16]byte{4}, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, p, batch(t, 9, 0, 0, 3), 0, false)
	if err := m.DeleteTopic("d"); err != nil {
		t.Fatal(err)
	}
	if m.Get("d", 0) != nil {
		t.Fatal("deleted partition still open")
	}
	p, err = m.Open("d", [16]byte{5}, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if p.LogEndOffset() != 0 {
		t.Fatalf("recreated topic has end offset %d", p.LogEndOffset())
	}
	// Producer 9 is unknown to the new topic: its old sequence is refused.
	if _, err := p.Append(batch(t, 9, 0, 3, 1)); !errors.Is(err, kerr.UnknownProducerID) {
		t.Fatalf("stale producer on new topic: %v", err)
	}
}
