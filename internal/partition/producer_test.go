package partition

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// TestProducerSequenceRules: Kafka's ProducerStateManager rules. A retry of
// one of the last five batches gets its original offsets; nothing else but
// the next sequence is appended; a sequence below the cached batches is
// OUT_OF_ORDER_SEQUENCE_NUMBER, never DUPLICATE_SEQUENCE_NUMBER (which
// clients take as success: issue 10 saw 6,000 such "acks" for records
// never stored).
func TestProducerSequenceRules(t *testing.T) {
	m := newNode(t, t.TempDir())
	p, err := m.Open("seq", [16]byte{9}, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	const pid = 42
	// Ten batches of two records: sequences 0..19 at offsets 0..19; the
	// cache keeps the last five (sequences 10..19).
	for i := range 10 {
		mustAppend(t, p, batch(t, pid, 0, int32(2*i), 2), int64(2*i), false)
	}
	for _, tc := range []struct {
		name     string
		pid      int64
		epoch    int16
		seq      int32
		n        int
		wantBase int64 // for a duplicate or an append
		wantDup  bool
		wantErr  *kerr.Error
	}{
		{"retry of the newest batch", pid, 0, 18, 2, 18, true, nil},
		{"retry of the oldest cached batch", pid, 0, 10, 2, 10, true, nil},
		{"retry of a middle cached batch", pid, 0, 14, 2, 14, true, nil},
		{"below the cache, once stored", pid, 0, 8, 2, 0, false, kerr.OutOfOrderSequenceNumber},
		{"below the cache, sequence 0", pid, 0, 0, 2, 0, false, kerr.OutOfOrderSequenceNumber},
		{"overlapping a cached batch", pid, 0, 11, 2, 0, false, kerr.OutOfOrderSequenceNumber},
		{"a gap", pid, 0, 21, 1, 0, false, kerr.OutOfOrderSequenceNumber},
		{"unknown producer not at 0", 43, 0, 5, 1, 0, false, kerr.UnknownProducerID},
		{"new epoch not at 0", pid, 1, 5, 1, 0, false, kerr.OutOfOrderSequenceNumber},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := p.Append(batch(t, tc.pid, tc.epoch, tc.seq, tc.n))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("got %v (base %d dup %v), want %v", err, res.BaseOffset, res.Duplicate, tc.wantErr)
				}
				return
			}
			if err != nil || res.BaseOffset != tc.wantBase || res.Duplicate != tc.wantDup {
				t.Fatalf("got base %d dup %v err %v, want base %d dup %v", res.BaseOffset, res.Duplicate, err, tc.wantBase, tc.wantDup)
			}
		})
	}
	if p.LogEndOffset() != 20 {
		t.Fatalf("log end %d after refused and duplicate batches, want 20", p.LogEndOffset())
	}
	// The next sequence appends; a new epoch starts at 0 and fences the old.
	mustAppend(t, p, batch(t, pid, 0, 20, 1), 20, false)
	mustAppend(t, p, batch(t, pid, 1, 0, 1), 21, false)
	if _, err := p.Append(batch(t, pid, 0, 21, 1)); !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("old epoch after a bump: %v, want INVALID_PRODUCER_EPOCH", err)
	}
	// An unknown producer starts at 0.
	mustAppend(t, p, batch(t, 43, 0, 0, 1), 22, false)
}

// TestConfirmStored: a duplicate's offsets are confirmed only when the
// batch stored there is its original (same producer, epoch, sequence and
// offsets); otherwise the retry is NOT_LEADER_OR_FOLLOWER.
func TestConfirmStored(t *testing.T) {
	m := newNode(t, t.TempDir())
	p, err := m.Open("confirm", [16]byte{8}, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, p, batch(t, 5, 0, 0, 2), 0, false)
	mustAppend(t, p, batch(t, 5, 0, 2, 3), 2, false)
	res, err := p.Append(batch(t, 5, 0, 2, 3))
	if err != nil || !res.Duplicate || res.BaseOffset != 2 {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if err := p.confirmStored(res); err != nil {
		t.Fatalf("the original is stored: %v", err)
	}
	// The same offsets holding another producer's batch (what a new
	// leader's log has where this leader's uncommitted original was).
	for _, d := range []dupOf{{pid: 6, epoch: 0, seq: 2}, {pid: 5, epoch: 1, seq: 2}, {pid: 5, epoch: 0, seq: 7}} {
		other := res
		other.dup = d
		if err := p.confirmStored(other); !errors.Is(err, kerr.NotLeaderForPartition) {
			t.Fatalf("original %+v not stored: %v, want NOT_LEADER_OR_FOLLOWER", d, err)
		}
	}
	shifted := res
	shifted.BaseOffset, shifted.LastOffset = 1, 3
	if err := p.confirmStored(shifted); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("offsets that do not start a batch: %v", err)
	}
}

// TestTxnVerificationGuard: KIP-890's guard. A verified producer's batch is
// admitted; a marker drops the verification, so a verification that was
// in flight when the marker came admits nothing.
func TestTxnVerificationGuard(t *testing.T) {
	m := newNode(t, t.TempDir())
	// As in a cluster: the partition's own check refuses what was not
	// verified beforehand.
	m.SetVerifier(func(string, int32, int64, int16) error { return kerr.InvalidTxnState })
	p, err := m.Open("guard", [16]byte{7}, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	tb := func(seq int32) []byte {
		b, err := records.Build(records.Batch{ProducerID: 7, ProducerEpoch: 0, BaseSequence: seq, Transactional: true},
			[]records.Record{{Timestamp: 1, Value: []byte("v")}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if _, err := p.Append(tb(0)); !errors.Is(err, kerr.InvalidTxnState) {
		t.Fatalf("unverified: %v", err)
	}
	guard, needed, err := p.BeginTxnVerification(7, 0)
	if err != nil || !needed {
		t.Fatalf("begin: needed %v err %v", needed, err)
	}
	p.CompleteTxnVerification(7, guard)
	mustAppend(t, p, tb(0), 0, false)
	if _, needed, _ := p.BeginTxnVerification(7, 0); needed {
		t.Fatal("a producer with an open transaction here needs no verification")
	}
	mustAppend(t, p, tb(1), 1, false)
	if _, err := p.AppendMarker(7, 0, true, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Append(tb(2)); !errors.Is(err, kerr.InvalidTxnState) {
		t.Fatalf("after the marker: %v, want INVALID_TXN_STATE", err)
	}
	// The race: verification begins, the marker lands, the yes arrives.
	guard, needed, _ = p.BeginTxnVerification(7, 0)
	if !needed {
		t.Fatal("no verification needed after the marker")
	}
	if _, err := p.AppendMarker(7, 0, false, 0); err != nil {
		t.Fatal(err)
	}
	p.CompleteTxnVerification(7, guard)
	if _, err := p.Append(tb(2)); !errors.Is(err, kerr.InvalidTxnState) {
		t.Fatalf("a verification that raced a marker admitted a batch: %v", err)
	}
	if lso, hw := p.LastStableOffset(), p.HighWatermark(); lso != hw {
		t.Fatalf("last stable offset %d, high watermark %d: a transaction hangs", lso, hw)
	}
}
