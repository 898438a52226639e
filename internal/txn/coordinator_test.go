package txn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/testwait"
)

// memLog is an in-memory __transaction_state partition: the coordinator's
// storage, not the coordinator, so the tests exercise the real replay.
type memLog struct {
	mu      sync.Mutex
	batches [][]byte
}

func (l *memLog) Append(b []byte) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches = append(l.batches, append([]byte(nil), b...))
	return int64(len(l.batches)), nil
}
func (l *memLog) WaitCommitted(context.Context, int64) error { return nil }
func (l *memLog) Scan(fn func([]byte) error) error {
	l.mu.Lock()
	bs := append([][]byte(nil), l.batches...)
	l.mu.Unlock()
	for _, b := range bs {
		if err := fn(b); err != nil {
			return err
		}
	}
	return nil
}

type marker struct {
	pid    int64
	epoch  int16
	commit bool
	parts  []TopicPartition
}

type rig struct {
	logs    []Log
	ids     *IDAllocator
	mu      sync.Mutex
	markers []marker
	fail    bool
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ids, err := OpenIDAllocator(nil, filepath.Join(t.TempDir(), "ids"))
	if err != nil {
		t.Fatal(err)
	}
	return &rig{logs: []Log{&memLog{}, &memLog{}, &memLog{}}, ids: ids}
}

func (r *rig) start(t *testing.T, cfg Config, now func() time.Time) *Coordinator {
	t.Helper()
	c := New(cfg, r.logs, Options{IDs: r.ids, Now: now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Markers: func(_ context.Context, pid int64, epoch int16, commit bool, parts []TopicPartition) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.fail {
			return errors.New("disk on fire")
		}
		r.markers = append(r.markers, marker{pid, epoch, commit, parts})
		return nil
	}})
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (r *rig) markerCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.markers)
}

// TestPartitionForMatchesKafka: placement is Kafka's abs(hashCode) % n, so
// ids land where a Kafka cluster would put them. Values from Java's
// "...".hashCode().
func TestPartitionForMatchesKafka(t *testing.T) {
	for _, c := range []struct {
		id   string
		n    int
		want int32
	}{
		{"", 50, 0},
		{"a", 50, 97 % 50},
		{"my-txn", 50, 1061187895 % 50}, // "my-txn".hashCode() = -1061187895
		{"polygenelubricants", 50, 0},   // hashCode() = Integer.MIN_VALUE: abs maps it to 0
	} {
		if got := PartitionFor(c.id, c.n); got != c.want {
			t.Errorf("PartitionFor(%q, %d) = %d, want %d", c.id, c.n, got, c.want)
		}
	}
}

var tp0 = TopicPartition{"t", 0}

func TestCommitWritesMarkersAndReplayKeepsState(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	c := r.start(t, Config{}, nil)
	pid, epoch, err := c.InitProducerID(ctx, "id", 60000, -1, -1)
	if err != nil || epoch != 0 {
		t.Fatalf("init: %d/%d %v", pid, epoch, err)
	}
	if err := c.Verify(tp0, pid, epoch); !errors.Is(err, kerr.InvalidTxnState) {
		t.Fatalf("verify before add: %v", err)
	}
	if err := c.AddPartitions("id", pid, epoch, []TopicPartition{tp0})(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(tp0, pid, epoch); err != nil {
		t.Fatalf("verify after add: %v", err)
	}
	if err := c.Verify(tp0, pid, epoch-1); !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("verify old epoch: %v", err)
	}
	if err := c.EndTxn("id", pid, epoch, true)(ctx); err != nil {
		t.Fatal(err)
	}
	if len(r.markers) != 1 || !r.markers[0].commit || r.markers[0].pid != pid || len(r.markers[0].parts) != 1 {
		t.Fatalf("markers %+v", r.markers)
	}
	// A retried commit is fine; an abort now is not.
	if err := c.EndTxn("id", pid, epoch, true)(ctx); err != nil {
		t.Fatalf("retried commit: %v", err)
	}
	if err := c.EndTxn("id", pid, epoch, false)(ctx); !errors.Is(err, kerr.InvalidTxnState) {
		t.Fatalf("abort after commit: %v", err)
	}
	c.Close()

	c2 := r.start(t, Config{}, nil)
	in, ok := c2.Describe("id")
	if !ok || in.ProducerID != pid || in.Epoch != epoch || in.State != kmsg.TransactionStateCompleteCommit {
		t.Fatalf("after replay: %+v", in)
	}
	// The next InitProducerID keeps the id and bumps the epoch.
	pid2, epoch2, err := c2.InitProducerID(ctx, "id", 60000, -1, -1)
	if err != nil || pid2 != pid || epoch2 != epoch+1 {
		t.Fatalf("re-init: %d/%d %v", pid2, epoch2, err)
	}
}

// TestReplayFinishesPrepared: a PrepareCommit without its Complete (a
// crash between them) is finished at load, markers included.
func TestReplayFinishesPrepared(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	crash := true
	c := r.start(t, Config{AfterPrepare: func(string) bool { return crash }}, nil)
	pid, epoch, _ := c.InitProducerID(ctx, "p", 60000, -1, -1)
	c.AddPartitions("p", pid, epoch, []TopicPartition{tp0, {"u", 3}})(ctx)
	if err := c.EndTxn("p", pid, epoch, true)(ctx); err == nil {
		t.Fatal("crashed commit reported success")
	}
	if r.markerCount() != 0 {
		t.Fatal("markers written before the crash point")
	}
	// Decided, not complete: everything else about this id must wait.
	if err := c.AddPartitions("p", pid, epoch, []TopicPartition{{"v", 0}})(ctx); !errors.Is(err, kerr.ConcurrentTransactions) {
		t.Fatalf("add while prepared: %v", err)
	}
	if err := c.EndTxn("p", pid, epoch, true)(ctx); !errors.Is(err, kerr.ConcurrentTransactions) {
		t.Fatalf("commit retry while prepared: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, e, err := c.InitProducerID(short, "p", 60000, -1, -1); err == nil {
		t.Fatalf("init while prepared got epoch %d instead of waiting", e)
	}
	c.Close()
	crash = false
	c2 := r.start(t, Config{}, nil)
	testwait.Until(t, 10*time.Second, "the prepared transaction to complete after replay", func() bool {
		in, _ := c2.Describe("p")
		return in.State == kmsg.TransactionStateCompleteCommit
	})
	if m := r.markers; len(m) != 1 || !m[0].commit || len(m[0].parts) != 2 {
		t.Fatalf("markers after replay: %+v", m)
	}
}

// TestFenceAbortsOngoing: InitProducerID for an id with an ongoing
// transaction aborts it with a bumped epoch and fences the old producer.
func TestFenceAbortsOngoing(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	c := r.start(t, Config{}, nil)
	pid, e0, _ := c.InitProducerID(ctx, "f", 60000, -1, -1)
	c.AddPartitions("f", pid, e0, []TopicPartition{tp0})(ctx)
	_, e1, err := c.InitProducerID(ctx, "f", 60000, -1, -1)
	if err != nil || e1 <= e0+1 {
		t.Fatalf("fencing init: epoch %d (old %d) %v", e1, e0, err)
	}
	if m := r.markers; len(m) != 1 || m[0].commit || m[0].epoch <= e0 {
		t.Fatalf("fence markers %+v", m)
	}
	for name, err := range map[string]error{
		"add":    c.AddPartitions("f", pid, e0, []TopicPartition{tp0})(ctx),
		"end":    c.EndTxn("f", pid, e0, true)(ctx),
		"verify": c.Verify(tp0, pid, e0),
	} {
		if !errors.Is(err, kerr.InvalidProducerEpoch) {
			t.Errorf("%s with the old epoch: %v", name, err)
		}
	}
	// KIP-360: a producer naming a stale id/epoch is fenced too.
	if _, _, err := c.InitProducerID(ctx, "f", 60000, pid, e0); !errors.Is(err, kerr.ProducerFenced) {
		t.Fatalf("init with a stale epoch: %v", err)
	}
	if _, _, err := c.InitProducerID(ctx, "f", int32((time.Hour).Milliseconds()), -1, -1); !errors.Is(err, kerr.InvalidTransactionTimeout) {
		t.Fatalf("timeout above the max: %v", err)
	}
}

// TestTimeoutAbortsAndFailedMarkersRetry uses an injected clock.
func TestTimeoutAbortsAndFailedMarkersRetry(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c := r.start(t, Config{AbortInterval: time.Hour}, clock)
	pid, e0, _ := c.InitProducerID(ctx, "slow", 1000, -1, -1)
	c.AddPartitions("slow", pid, e0, []TopicPartition{tp0})(ctx)
	c.AbortTimedOut()
	if in, _ := c.Describe("slow"); in.State != kmsg.TransactionStateOngoing {
		t.Fatalf("aborted before its timeout: %v", in.State)
	}
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	r.mu.Lock()
	r.fail = true
	r.mu.Unlock()
	c.AbortTimedOut()
	waitState := func(want State) {
		t.Helper()
		testwait.For(t, 10*time.Second, "the transaction's state", func() error {
			in, _ := c.Describe("slow")
			c.mu.Lock()
			busy := c.txns["slow"].done != nil
			c.mu.Unlock()
			if in.State != want || busy {
				return fmt.Errorf("state %v (busy %v), want %v", in.State, busy, want)
			}
			return nil
		})
	}
	waitState(kmsg.TransactionStatePrepareAbort) // markers failed: still decided, not complete
	r.mu.Lock()
	r.fail = false
	r.mu.Unlock()
	c.AbortTimedOut() // the retry
	waitState(kmsg.TransactionStateCompleteAbort)
	if in, _ := c.Describe("slow"); in.Epoch != e0+1 {
		t.Fatalf("epoch %d after the timeout abort, want %d", in.Epoch, e0+1)
	}
	if err := c.EndTxn("slow", pid, e0, true)(ctx); !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("commit by the timed-out producer: %v", err)
	}
}

// TestTimedOutProducerRecoversAndIdleIDsExpire: the producer whose
// transaction timed out is not a zombie - naming its old epoch (KIP-360) it
// gets a new one; an id idle past transactional.id.expiration.ms is
// forgotten, also after a replay.
func TestTimedOutProducerRecoversAndIdleIDsExpire(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	cfg := Config{AbortInterval: time.Hour, IDExpiration: time.Hour}
	c := r.start(t, cfg, clock)
	pid, e0, _ := c.InitProducerID(ctx, "late", 1000, -1, -1)
	c.AddPartitions("late", pid, e0, []TopicPartition{tp0})(ctx)
	advance(2 * time.Second)
	c.AbortTimedOut()
	testwait.Until(t, 10*time.Second, "the timed-out transaction to abort", func() bool {
		in, _ := c.Describe("late")
		return in.State == kmsg.TransactionStateCompleteAbort
	})
	pid2, e2, err := c.InitProducerID(ctx, "late", 1000, pid, e0)
	if err != nil || pid2 != pid || e2 <= e0+1 {
		t.Fatalf("recovery of the timed-out producer: %d/%d %v", pid2, e2, err)
	}
	if _, _, err := c.InitProducerID(ctx, "late", 1000, pid, e0); !errors.Is(err, kerr.ProducerFenced) {
		t.Fatalf("the old epoch after recovery: %v", err)
	}

	advance(2 * time.Hour)
	c.AbortTimedOut()
	if _, ok := c.Describe("late"); ok {
		t.Fatal("idle transactional id not expired")
	}
	c.Close()
	c2 := r.start(t, cfg, clock)
	if _, ok := c2.Describe("late"); ok {
		t.Fatal("expired transactional id back after replay")
	}
	pid3, e3, err := c2.InitProducerID(ctx, "late", 1000, -1, -1)
	if err != nil || pid3 == pid || e3 != 0 {
		t.Fatalf("init after expiry: %d/%d %v, want a new id at epoch 0", pid3, e3, err)
	}
}

// TestInitWithCurrentEpochAbortsAndKeepsProducer: KIP-360 recovery by the
// current producer itself (after an abortable error) aborts its ongoing
// transaction and hands it a new epoch instead of fencing it.
func TestInitWithCurrentEpochAbortsAndKeepsProducer(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	c := r.start(t, Config{}, nil)
	pid, e0, _ := c.InitProducerID(ctx, "self", 60000, -1, -1)
	c.AddPartitions("self", pid, e0, []TopicPartition{tp0})(ctx)
	pid1, e1, err := c.InitProducerID(ctx, "self", 60000, pid, e0)
	if err != nil || pid1 != pid || e1 <= e0 {
		t.Fatalf("recovery with the current epoch: %d/%d %v", pid1, e1, err)
	}
	if m := r.markers; len(m) != 1 || m[0].commit {
		t.Fatalf("the ongoing transaction was not aborted: %+v", m)
	}
}
