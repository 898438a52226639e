package raft

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// TestCompactAnchorFsyncDoesNotHoldUpFlush: while Compact's anchor is in
// its fsync, the store round's flush (a produce's path: a commit's hard
// state, nothing that needs an fsync) writes and returns; the anchor is
// durable once putAnchorSynced returns, and both survive a reopen.
// Before, the anchor's fsync held flushMu and the store round waited for
// it (issue 28: produce p99 while uploading).
func TestCompactAnchorFsyncDoesNotHoldUpFlush(t *testing.T) {
	dir := t.TempDir()
	fs := syncGateFS{FS: storage.OSFS(), armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	j, err := openJournal(fs, dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hs := func(commit uint64) *pb.HardState {
		return &pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(commit)}
	}
	j.putHardState(1, hs(5), 5)
	if err := j.flush(false); err != nil { // the term and vote: fsynced here, before the gate
		t.Fatal(err)
	}
	fs.armed.Store(true)
	a := anchor{Index: 4, Term: 2, Offset: 40}
	anchored := make(chan error, 1)
	go func() { anchored <- j.putAnchorSynced(1, a) }()
	<-fs.entered // the anchor is in its fsync, and stays there
	flushed := make(chan error, 1)
	go func() {
		j.putHardState(1, hs(9), 9) // a commit moved: no fsync needed
		flushed <- j.flush(false)
	}()
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatal(err)
		}
	case err := <-anchored:
		t.Fatalf("the anchor returned (%v) before its fsync was released", err)
	case <-fs.entered:
		t.Fatal("the store round's flush fsynced a commit-only hard state")
	case <-time.After(time.Minute): // a hang guard, not a timing assertion: the flush returns at once, or never
		t.Fatal("the store round's flush waited for the anchor's fsync")
	}
	fs.release <- struct{}{}
	if err := <-anchored; err != nil {
		t.Fatal(err)
	}
	fs.armed.Store(false)
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	j, err = openJournal(storage.OSFS(), dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	s := j.snapshot(1)
	if s.anc != a || s.ancPending {
		t.Fatalf("anchor after reopen: %+v (pending %v), want %+v", s.anc, s.ancPending, a)
	}
	if s.hs.GetCommit() != 9 {
		t.Fatalf("hard state after reopen: %+v", s.hs)
	}
}

// TestCompactAnchorWithDirtyRecordsFsyncsFirst: a record that needs an
// fsync (a new term and vote) buffered when Compact comes is fsynced with
// the anchor under flushMu, as flush(true) does: a store round whose
// flush finds the buffer empty must find that record durable.
func TestCompactAnchorWithDirtyRecordsFsyncsFirst(t *testing.T) {
	dir := t.TempDir()
	fs := syncGateFS{FS: storage.OSFS(), armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	j, err := openJournal(fs, dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	j.putHardState(1, &pb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(uint64(0))}, 0)
	fs.armed.Store(true)
	anchored := make(chan error, 1)
	go func() { anchored <- j.putAnchorSynced(1, anchor{Index: 1, Term: 3, Offset: 10}) }()
	<-fs.entered
	// The flush must wait: what it would rely on is in that fsync.
	flushed := make(chan error, 1)
	go func() { flushed <- j.flush(false) }()
	fs.armed.Store(false)
	fs.release <- struct{}{}
	if err := <-anchored; err != nil {
		t.Fatal(err)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	dirty := j.dirty
	j.mu.Unlock()
	if dirty {
		t.Fatal("the term and vote are still marked as needing an fsync")
	}
}

// TestCompactCrashAtEveryStep: a power cut in place of each mutating file
// operation of Host.Compact in turn (the anchor's journal write and fsync,
// the log-start checkpoint, the segment removals), then a restart: the
// group opens, its log starts at the old start or at the compaction point
// (never between, never a removed range back under a durable start),
// every acknowledged record from there on is at its offset exactly once,
// and a retried Compact and a clean restart finish the job.
func TestCompactCrashAtEveryStep(t *testing.T) {
	const g = 1
	cfg := storage.DefaultConfig()
	cfg.SegmentBytes = 300 // a few batches a segment: Compact removes segments
	for step := int64(1); ; step++ {
		if step > 200 {
			t.Fatal("Compact never completed without a crash")
		}
		c := newClusterOpts(t, 1, 1, 20*time.Millisecond, true, withLogConfig(cfg))
		nd := c.nodes[1]
		c.waitLeader(g)
		var acks []acked
		for i := range 40 {
			v := fmt.Sprint("v", i)
			acks = append(acks, acked{v, c.propose(g, v)})
		}
		oldStart := nd.logs[g].StartOffset()
		cut := acks[25].p.BaseOffset
		nd.fs.CrashAfter(step)
		cerr := nd.host.Compact(g, cut)
		crashed := nd.fs.Down()
		if !crashed {
			if cerr != nil {
				t.Fatalf("step %d: Compact without a crash: %v", step, cerr)
			}
			nd.fs.CrashAfter(0)
			nd.fs.Crash() // after the whole of it: a power cut keeps it all
		}
		c.stop(1)
		nd.fs.Reboot()
		c.start(1)
		c.waitLeader(g)
		start := nd.logs[g].StartOffset()
		if start != oldStart && start != cut {
			t.Fatalf("step %d: log starts at %d after the crash, want %d (before) or %d (compacted)", step, start, oldStart, cut)
		}
		if !crashed && start != cut {
			t.Fatalf("step %d: a completed Compact to %d came back starting at %d", step, cut, start)
		}
		checkAckedFrom(t, nd.logs[g], acks, start)
		// The caller (the log-start manager) retries: it completes.
		if err := nd.host.Compact(g, cut); err != nil {
			t.Fatalf("step %d: Compact again after the crash: %v", step, err)
		}
		acks = append(acks, acked{"after", c.propose(g, "after")})
		c.stop(1)
		c.start(1)
		c.waitLeader(g)
		if start := nd.logs[g].StartOffset(); start != cut {
			t.Fatalf("step %d: after the retried Compact and a restart the log starts at %d, want %d", step, start, cut)
		}
		checkAckedFrom(t, nd.logs[g], acks, cut)
		c.stop(1)
		if !crashed {
			t.Logf("Compact takes %d mutating file operations; a power cut at each of them loses nothing", step-1)
			return
		}
	}
}

// checkAckedFrom: every acknowledged record at or above from is in l at
// its offset, once, and l holds nothing else from there.
func checkAckedFrom(t *testing.T, l *storage.Log, acks []acked, from int64) {
	t.Helper()
	want := map[int64]string{}
	for _, a := range acks {
		if a.p.BaseOffset >= from {
			want[a.p.BaseOffset] = a.v
		}
	}
	got := map[int64]string{}
	if err := l.Scan(from, func(h records.Header, b []byte) error {
		if h.IsControl() {
			return nil
		}
		recs, err := records.Records(b)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if _, dup := got[r.Offset]; dup {
				return fmt.Errorf("offset %d twice", r.Offset)
			}
			got[r.Offset] = string(r.Value)
		}
		return nil
	}); err != nil {
		t.Fatalf("scan from %d: %v", from, err)
	}
	for off, v := range want {
		if got[off] != v {
			t.Fatalf("offset %d holds %q, acknowledged %q", off, got[off], v)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("the log holds %d records from %d, %d acknowledged", len(got), from, len(want))
	}
}
