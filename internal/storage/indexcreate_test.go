package storage

import (
	"bytes"
	"testing"

	"holdfast/internal/records"
)

// indexCreatorScript drives one log through the index creator's order: a
// segment's batches made durable by sync cycles until its entries are due
// (the cycle queues the segment and writes nothing), more batches, the
// creator making the files and writing only what is durable, more cycles
// writing entries, then rolls (each sealing the segment before, whose
// files may or may not exist yet). It stops at the first failed sync (the
// power cut) and returns the batches appended and how many of them were
// acknowledged (durable).
func indexCreatorScript(t *testing.T, fs *CrashFS, sy *Syncer, cfg Config, probe bool) (appended [][]byte, acked int) {
	t.Helper()
	l, err := Open("/d", cfg, Options{FS: fs, Syncer: sy, Logger: quiet})
	if err != nil {
		return nil, 0 // the cut came during creation: nothing was acknowledged
	}
	const n = 3*indexPersistEntries + 10
	for i := 0; i < n; i++ {
		b := batch(t, 1, cfg.IndexIntervalBytes, int64(1000+i)) // an index entry per batch
		if _, err := l.Append(b, 0); err != nil {
			return appended, acked
		}
		appended = append(appended, b)
		if i%4 == 3 || i == n-1 {
			if err := l.Sync(); err != nil {
				return appended, acked
			}
			acked = len(appended)
		}
		if i == indexPersistEntries+6 {
			// Due since a few cycles, queued once; one more batch is
			// appended but not durable when the creator runs.
			if probe {
				if _, ok := fs.Sizes()["/d/"+segmentName(0, indexSuffix)]; ok {
					t.Fatal("the sync cycle created the index file")
				}
			}
			sy.runIndexJobs()
			if probe {
				s := l.active()
				s.idxMu.Lock()
				exists, persisted, entries := s.idxExists, s.offPersisted, len(s.offIdx)
				s.idxMu.Unlock()
				if !exists || persisted == 0 || persisted >= entries {
					t.Fatalf("after the creator: files %v, %d of %d entries written (want some, not the undurable last)", exists, persisted, entries)
				}
			}
		}
	}
	if probe {
		if l.Segments() < 2 {
			t.Fatal("the script needs a roll")
		}
	}
	return appended, acked
}

// TestIndexCreatorCrashAtEveryStep: with index files created by the index
// creator after their entries were due (indexcreate.go), a power cut at
// every step of the script loses no acknowledged batch, keeps nothing but
// a prefix of what was appended, and the recovered log's index finds every
// batch - also after a clean reopen, whose sealed segments load their index
// files strictly.
func TestIndexCreatorCrashAtEveryStep(t *testing.T) {
	cfg := testConfig()
	cfg.IndexIntervalBytes = 64
	cfg.SegmentBytes = 9 << 10 // rolls after ~55 batches of ~160 bytes
	newManual := func() *Syncer {
		sy := NewSyncer(quiet)
		sy.manualIndex = true
		return sy
	}
	sy := newManual()
	probe := NewCrashFS(1)
	indexCreatorScript(t, probe, sy, cfg, true)
	sy.Close()
	steps := probe.Ops()
	t.Logf("%d mutating steps", steps)
	for cut := int64(1); cut <= steps+1; cut++ {
		fs := NewCrashFS(cut)
		fs.CrashAfter(cut)
		sy := newManual()
		appended, acked := indexCreatorScript(t, fs, sy, cfg, false)
		sy.Close()
		if !fs.Down() {
			fs.Crash()
		}
		fs.Reboot()
		for reopen := 0; reopen < 2; reopen++ {
			sy := NewSyncer(quiet)
			l, err := Open("/d", cfg, Options{FS: fs, Syncer: sy, Logger: quiet})
			if err != nil {
				t.Fatalf("cut at step %d of %d, open %d: %v", cut, steps, reopen, err)
			}
			got := readAll(t, l, 0)
			if len(got) < acked || len(got) > len(appended) {
				t.Fatalf("cut at step %d: %d batches recovered, %d acknowledged, %d appended", cut, len(got), acked, len(appended))
			}
			for i, b := range got {
				if !bytes.Equal(b, appended[i]) {
					t.Fatalf("cut at step %d: batch %d differs from what was appended", cut, i)
				}
			}
			// Every batch found through the index, by offset and by time.
			for i := range got {
				sl, err := l.Read(int64(i), int64(i+1), 1)
				if err != nil || sl.BaseOffset != int64(i) {
					t.Fatalf("cut at step %d, open %d: read %d: %v at %d", cut, reopen, i, err, sl.BaseOffset)
				}
				sl.Release()
				h, _ := records.ParseHeader(got[i])
				if off, _, err := l.OffsetForTimestamp(h.MaxTimestamp); err != nil || off != int64(i) {
					t.Fatalf("cut at step %d, open %d: offset for timestamp %d: %d (%v), want %d", cut, reopen, h.MaxTimestamp, off, err, i)
				}
			}
			sy.waitIndexJobs()
			if err := l.Close(); err != nil {
				t.Fatalf("cut at step %d: close: %v", cut, err)
			}
			sy.Close()
		}
	}
}

// TestNoIndexFilesUntilDue: index files are made for entries that are due,
// not for every log: a new log, closed and reopened, and one with a few
// batches, cut by a power loss and recovered, have none (on a node with
// 10,000 idle partitions those were 20,000 file creations at the first
// clean stop or restart).
func TestNoIndexFilesUntilDue(t *testing.T) {
	fs := NewCrashFS(1)
	sy := newSyncer(t)
	noIndexFiles := func(when string) {
		t.Helper()
		names, err := fs.ReadDir("/d")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if _, suf, ok := parseSegmentName(n); ok && suf != logSuffix {
				t.Fatalf("%s: index file %s exists (%v)", when, n, names)
			}
		}
	}
	cfg := testConfig()
	l := openLog(t, fs, "/d", cfg, sy, nil)
	l.Close()
	l = openLog(t, fs, "/d", cfg, sy, nil)
	l.Close()
	noIndexFiles("empty log closed twice")
	l = openLog(t, fs, "/d", cfg, sy, nil)
	for i := 0; i < 4; i++ {
		if _, err := l.Append(batch(t, 1, cfg.IndexIntervalBytes, int64(i)), 0); err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	fs.Crash()
	l = openLog(t, fs, "/d", cfg, sy, nil)
	sy.waitIndexJobs()
	noIndexFiles("recovered with entries not due")
	if got := readAll(t, l, 0); len(got) != 4 {
		t.Fatalf("%d batches recovered, want 4", len(got))
	}
	l.Close() // now it has entries: Close writes them
	l = openLog(t, fs, "/d", cfg, sy, nil)
	defer l.Close()
	if got := readAll(t, l, 0); len(got) != 4 {
		t.Fatalf("%d batches after a clean reopen, want 4", len(got))
	}
}
