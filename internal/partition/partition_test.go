package partition

import (
	"context"
	"errors"
	"math"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/raft"
	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// testNode is a single node: its partitions are one-voter Raft groups, as
// a single broker's are.
type testNode struct {
	*Manager
	t    *testing.T
	dir  string
	sync *storage.Syncer
	host *raft.Host
}

// testSolo: the nodes' Raft hosts run the sole-voter path
// (raft.Config.SoloPath), as a node does by default; off with
// HOLDFAST_TEST_RAFT_SOLO=0.
var testSolo = os.Getenv("HOLDFAST_TEST_RAFT_SOLO") != "0"

// testSyncer is the node's Syncer: with HOLDFAST_TEST_LOG_JOURNAL=1 it
// journals the logs under dir (storage/datajournal.go), after replaying
// what an earlier node on the same directory left.
func testSyncer(t *testing.T, fsys storage.FS, dir string) *storage.Syncer {
	t.Helper()
	s := storage.NewSyncer(nil)
	if os.Getenv("HOLDFAST_TEST_LOG_JOURNAL") != "1" {
		return s
	}
	j, err := storage.OpenDataJournal(dir, storage.JournalOptions{FS: fsys, FileBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s.SetJournal(j)
	return s
}

func newNode(t *testing.T, dir string) *testNode {
	t.Helper()
	s := testSyncer(t, nil, dir)
	h, err := raft.NewHost(raft.Config{ID: 1, Dir: dir, TickInterval: 10 * time.Millisecond, SoloPath: testSolo})
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{Manager: NewManager(dir, storage.Options{Syncer: s}), t: t, dir: dir, sync: s, host: h}
	t.Cleanup(n.stop)
	return n
}

// Open opens a partition as the node's one-voter Raft group.
func (n *testNode) Open(topic string, id [16]byte, index int32, cfg storage.Config) (*Partition, error) {
	g := uint64(id[0])<<32 | uint64(index) | 1<<63
	return n.Manager.Open(topic, id, index, cfg, Replication{Host: n.host, Group: g, Voters: []uint64{1}})
}

// stop closes the node cleanly (producer snapshots written), the Raft
// host first, as a broker does.
func (n *testNode) stop() {
	if n.host == nil {
		return
	}
	n.host.Close()
	n.Manager.Close()
	n.sync.Journal().Close()
	n.sync.Close()
	n.host = nil
}

// crash stops the node as a crash would: no producer snapshots.
func (n *testNode) crash() {
	n.Manager.mu.Lock()
	for _, p := range n.Manager.parts {
		p.log.Close()
	}
	n.Manager.parts = map[key]*Partition{}
	n.Manager.closed = true
	n.Manager.mu.Unlock()
	n.host.Close()
	n.sync.Close()
	n.host = nil
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
	m := newNode(t, dir)
	cfg := storage.DefaultConfig()
	p, err := m.Open("t", [16]byte{1}, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b0, b1 := batch(t, 7, 0, 0, 3), batch(t, 7, 0, 3, 2)
	mustAppend(t, p, append([]byte(nil), b0...), 0, false)
	mustAppend(t, p, append([]byte(nil), b1...), 3, false)
	// Stop without a snapshot, as a crash would leave it.
	m.crash()
	m = newNode(t, dir)
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
}

// TestSequenceWrap: sequences continue from MaxInt32 to 0.
func TestSequenceWrap(t *testing.T) {
	m := newNode(t, t.TempDir())
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
	m := newNode(t, t.TempDir())
	p, err := m.Open("n", [16]byte{3}, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ch := p.Notify()
	if _, err := p.Append(batch(t, -1, -1, -1, 2)); err != nil {
		t.Fatal(err)
	}
	select { // acks=0 style: nobody waits, the Raft commit advances it
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
	m := newNode(t, t.TempDir())
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

func txnBatch(t *testing.T, pid int64, epoch int16, seq int32, n int) []byte {
	t.Helper()
	recs := make([]records.Record, n)
	for i := range recs {
		recs[i] = records.Record{Timestamp: time.Now().UnixMilli(), Value: []byte("t")}
	}
	b, err := records.Build(records.Batch{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, Transactional: true}, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func commitAll(t *testing.T, p *Partition) {
	t.Helper()
	// Everything proposed (the log end may not have it yet: the Raft
	// loop writes proposals after they are made).
	if err := p.WaitCommitted(context.Background(), p.stateEnd.Load()); err != nil {
		t.Fatal(err)
	}
}

// TestTxnLSOAndAbortedIndex: open transactions hold the LSO; an abort
// enters the aborted index, which a read_committed read returns; the state
// comes back both from the snapshot (clean close) and by scanning (crash).
func TestTxnLSOAndAbortedIndex(t *testing.T) {
	for _, clean := range []bool{true, false} {
		dir := t.TempDir()
		m := newNode(t, dir)
		m.SetVerifier(func(string, int32, int64, int16) error { return nil })
		p, err := m.Open("t", [16]byte{1}, 0, storage.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		mustAppend(t, p, batch(t, -1, -1, -1, 2), 0, false)  // 0-1 plain
		mustAppend(t, p, txnBatch(t, 10, 0, 0, 3), 2, false) // 2-4 pid 10, to be aborted
		mustAppend(t, p, txnBatch(t, 11, 0, 0, 1), 5, false) // 5 pid 11, stays open
		if lso := p.LastStableOffset(); lso != 2 {
			t.Fatalf("LSO %d with pid 10 open from 2", lso)
		}
		if _, err := p.AppendMarker(10, 0, false, 0); err != nil { // 6
			t.Fatal(err)
		}
		commitAll(t, p)
		if lso := p.LastStableOffset(); lso != 5 {
			t.Fatalf("LSO %d after the abort, want 5 (pid 11 open)", lso)
		}
		check := func(p *Partition, when string) {
			t.Helper()
			res, err := p.Read(0, 1<<20, true)
			if err != nil {
				t.Fatal(err)
			}
			if res.LastStableOffset != 5 || len(res.Aborted) != 1 || res.Aborted[0] != (AbortedTxn{10, 2, 6}) {
				t.Fatalf("%s: LSO %d aborted %+v", when, res.LastStableOffset, res.Aborted)
			}
			if got := lastOffsetIn(res.Records); got != 4 {
				t.Fatalf("%s: read_committed read up to %d, want 4", when, got)
			}
			// A stale marker epoch is refused.
			if _, err := p.AppendMarker(11, -1, true, 0); !errors.Is(err, kerr.InvalidProducerEpoch) && p.producers[11] != nil {
				t.Fatalf("%s: stale marker: %v", when, err)
			}
		}
		check(p, "live")
		if clean {
			m.stop()
		} else {
			m.crash() // no snapshot: the scan rebuilds it
		}
		m2 := newNode(t, dir)
		m2.SetVerifier(func(string, int32, int64, int16) error { return nil })
		p2, err := m2.Open("t", [16]byte{1}, 0, storage.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		check(p2, map[bool]string{true: "after snapshot", false: "after scan"}[clean])
		// Committing pid 11 releases the LSO to the end.
		if _, err := p2.AppendMarker(11, 0, true, 0); err != nil {
			t.Fatal(err)
		}
		commitAll(t, p2)
		if lso, end := p2.LastStableOffset(), p2.LogEndOffset(); lso != end {
			t.Fatalf("LSO %d after the last commit, want the end %d", lso, end)
		}
		m2.stop()
	}
}

// TestTxnBatchNeedsVerifier: without the coordinator's yes, a transactional
// batch is refused and nothing is written.
func TestTxnBatchNeedsVerifier(t *testing.T) {
	m := newNode(t, t.TempDir())
	p, err := m.Open("t", [16]byte{2}, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Append(txnBatch(t, 3, 0, 0, 1)); !errors.Is(err, kerr.InvalidTxnState) {
		t.Fatalf("no verifier: %v", err)
	}
	m.SetVerifier(func(string, int32, int64, int16) error { return kerr.ProducerFenced })
	if _, err := p.Append(txnBatch(t, 3, 0, 0, 1)); !errors.Is(err, kerr.ProducerFenced) {
		t.Fatalf("refusing verifier: %v", err)
	}
	if end := p.LogEndOffset(); end != 0 {
		t.Fatalf("end offset %d after refused batches", end)
	}
}

// lastOffsetIn is the last offset of the whole batches in b (-1 if none).
func lastOffsetIn(b []byte) int64 {
	last := int64(-1)
	for len(b) > 0 {
		batch, rest, err := records.Next(b)
		if err != nil {
			break
		}
		if h, err := records.ParseHeader(batch); err == nil {
			last = h.LastOffset()
		}
		b = rest
	}
	return last
}

// TestSnapshotOnlyWithStateToKeep: a clean close writes no producer
// snapshot for a partition with nothing in it (an open rebuilds that empty
// state for free; with 10,000 partitions the snapshots were most of a
// stop), and still writes one for a partition with a producer, which then
// comes back from it.
func TestSnapshotOnlyWithStateToKeep(t *testing.T) {
	dir := t.TempDir()
	m := newNode(t, dir)
	cfg := storage.DefaultConfig()
	empty, err := m.Open("t", [16]byte{1}, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	used, err := m.Open("t", [16]byte{1}, 1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b0 := batch(t, 7, 0, 0, 3)
	mustAppend(t, used, append([]byte(nil), b0...), 0, false)
	emptySnap, usedSnap := empty.snapPath(), used.snapPath()
	m.stop()
	if _, err := os.Stat(emptySnap); err == nil {
		t.Errorf("an empty partition left a producer snapshot at %s", emptySnap)
	}
	if _, err := os.Stat(usedSnap); err != nil {
		t.Fatalf("a partition with a producer left no snapshot: %v", err)
	}
	m = newNode(t, dir)
	empty, err = m.Open("t", [16]byte{1}, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	used, err = m.Open("t", [16]byte{1}, 1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(empty.producers) != 0 || empty.LogEndOffset() != 0 {
		t.Fatalf("empty partition reopened with %d producers, end %d", len(empty.producers), empty.LogEndOffset())
	}
	mustAppend(t, empty, batch(t, 8, 0, 0, 1), 0, false)
	mustAppend(t, used, append([]byte(nil), b0...), 0, true) // the snapshot's producer state
	mustAppend(t, used, batch(t, 7, 0, 3, 1), 3, false)
}
