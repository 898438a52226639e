package txn

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestEndTxnV2: KIP-890 part 2's EndTxn bumps the epoch on every commit and
// abort, writes the markers with the bumped epoch, answers a retry of the
// old epoch the same way (also after a restart: replay), refuses the old
// epoch otherwise, and moves an exhausted producer to a new producer id.
func TestEndTxnV2(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	c := r.start(t, Config{}, nil)
	pid, epoch, err := c.InitProducerID(ctx, "v2", 60_000, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	tp := TopicPartition{"t", 0}
	if err := c.AddPartitions("v2", pid, epoch, []TopicPartition{tp})(ctx); err != nil {
		t.Fatal(err)
	}
	npid, nepoch, err := c.EndTxnV2(ctx, "v2", pid, epoch, true)(ctx)
	if err != nil || npid != pid || nepoch != epoch+1 {
		t.Fatalf("commit: %v %d/%d", err, npid, nepoch)
	}
	if m := r.markers[len(r.markers)-1]; m.epoch != epoch+1 || !m.commit {
		t.Fatalf("marker %+v: want the bumped epoch %d", m, epoch+1)
	}
	if _, e, err := c.EndTxnV2(ctx, "v2", pid, epoch, true)(ctx); err != nil || e != epoch+1 {
		t.Fatalf("retry: %v epoch %d", err, e)
	}
	if _, _, err := c.EndTxnV2(ctx, "v2", pid, epoch, false)(ctx); !errors.Is(err, kerr.ProducerFenced) {
		t.Fatalf("abort at the old epoch: %v", err)
	}
	// The old epoch can neither join nor start a transaction.
	if err := c.AddPartitions("v2", pid, epoch, []TopicPartition{{"t", 1}})(ctx); !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("implicit add at the old epoch: %v", err)
	}
	c.Close()

	c = r.start(t, Config{}, nil)
	if _, e, err := c.EndTxnV2(ctx, "v2", pid, epoch, true)(ctx); err != nil || e != epoch+1 {
		t.Fatalf("retry after replay: %v epoch %d", err, e)
	}
	// An empty abort bumps too; an empty commit is refused.
	if _, e, err := c.EndTxnV2(ctx, "v2", pid, epoch+1, false)(ctx); err != nil || e != epoch+2 {
		t.Fatalf("empty abort: %v epoch %d", err, e)
	}
	if _, _, err := c.EndTxnV2(ctx, "v2", pid, epoch+2, true)(ctx); !errors.Is(err, kerr.InvalidTxnState) {
		t.Fatalf("empty commit: %v", err)
	}

	// Exhaustion: the epoch reaches the top, the producer gets a new id.
	c.mu.Lock()
	c.txns["v2"].epoch = math.MaxInt16 - 1
	c.mu.Unlock()
	last := int16(math.MaxInt16 - 1)
	if err := c.AddPartitions("v2", pid, last, []TopicPartition{tp})(ctx); err != nil {
		t.Fatal(err)
	}
	npid, nepoch, err = c.EndTxnV2(ctx, "v2", pid, last, true)(ctx)
	if err != nil || npid == pid || nepoch != 0 {
		t.Fatalf("commit at the last epoch: %v %d/%d, want a new id at epoch 0", err, npid, nepoch)
	}
	if m := r.markers[len(r.markers)-1]; m.pid != pid || m.epoch != math.MaxInt16 {
		t.Fatalf("marker %+v: want the old id at epoch %d", m, math.MaxInt16)
	}
	if p, e, err := c.EndTxnV2(ctx, "v2", pid, last, true)(ctx); err != nil || p != npid || e != 0 {
		t.Fatalf("retry with the old id: %v %d/%d", err, p, e)
	}
	c.Close()
	c = r.start(t, Config{}, nil)
	in, ok := c.Describe("v2")
	if !ok || in.ProducerID != npid || in.Epoch != 0 || in.State != kmsg.TransactionStateCompleteCommit {
		t.Fatalf("after replay: %+v", in)
	}
	if p, e, err := c.EndTxnV2(ctx, "v2", pid, last, true)(ctx); err != nil || p != npid || e != 0 {
		t.Fatalf("retry with the old id after replay: %v %d/%d", err, p, e)
	}
	if err := c.AddPartitions("v2", npid, 0, []TopicPartition{tp})(ctx); err != nil {
		t.Fatalf("the new id's transaction: %v", err)
	}
}
