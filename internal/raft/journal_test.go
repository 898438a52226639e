package raft

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/storage"
)

// syncGateFS passes every call to the OS, except that a journal file's
// Sync, once armed, signals entered and waits for release.
type syncGateFS struct {
	storage.FS
	armed            *atomic.Bool // gate every Sync
	entered, release chan struct{}
}

type syncGateFile struct {
	storage.File
	fs *syncGateFS
}

func (f syncGateFS) OpenFile(name string, flag int, perm os.FileMode) (storage.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return syncGateFile{file, &f}, nil
}

func (f syncGateFile) Sync() error {
	if f.fs.armed.Load() {
		f.fs.entered <- struct{}{}
		<-f.fs.release
	}
	return f.File.Sync()
}

// TestJournalPutsDoNotWaitForFsync: while a flush is in its fsync, the
// Ready loop's puts and AddGroup's snapshot of a group go on (with 10,000
// groups they all queued behind every fsync of a restart); the records put
// meanwhile go out, fsynced, with the next flush, and everything survives
// a reopen.
func TestJournalPutsDoNotWaitForFsync(t *testing.T) {
	dir := t.TempDir()
	fs := syncGateFS{FS: storage.OSFS(), armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	j, err := openJournal(fs, dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	j.putHardState(1, &pb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(0))}, 0)
	fs.armed.Store(true)
	flushed := make(chan error, 1)
	go func() { flushed <- j.flush(false) }()
	<-fs.entered // the first flush is in its fsync, and stays there
	put := make(chan struct{})
	go func() {
		j.putHardState(2, &pb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(uint64(0))}, 0)
		if s := j.snapshot(1); s.hs.GetTerm() != 2 {
			t.Errorf("group 1 during the fsync: %+v", s.hs)
		}
		close(put)
	}()
	select {
	case <-put:
	case err := <-flushed:
		t.Fatalf("the flush returned (%v) before its fsync was released", err)
	case <-time.After(time.Minute):
		t.Fatal("a put and a snapshot waited for the journal's fsync")
	}
	second := make(chan error, 1)
	go func() { second <- j.flush(false) }() // waits for the first, then fsyncs group 2's term
	fs.release <- struct{}{}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	<-fs.entered
	fs.armed.Store(false)
	fs.release <- struct{}{}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	j, err = openJournal(storage.OSFS(), dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	if s := j.snapshot(1); s.hs.GetTerm() != 2 || s.hs.GetVote() != 1 {
		t.Fatalf("group 1 after reopen: %+v", s.hs)
	}
	if s := j.snapshot(2); s.hs.GetTerm() != 3 || s.hs.GetVote() != 2 {
		t.Fatalf("group 2 after reopen: %+v", s.hs)
	}
}

// TestJournalCorruptionIsNotATornTail: a bad record in the middle of the
// journal, with good ones after it, stops the open with ErrJournalCorrupt
// and leaves the file as it was (the old replay cut the file there,
// forgetting every later term and vote); a bad last record is a torn
// tail, cut.
func TestJournalCorruptionIsNotATornTail(t *testing.T) {
	write := func(t *testing.T) (string, []int) {
		dir := t.TempDir()
		j, err := openJournal(storage.OSFS(), dir, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		var ends []int
		for i := range 20 {
			j.putHardState(uint64(1+i%4), &pb.HardState{Term: new(uint64(10 + i)), Vote: new(uint64(1 + i%3)), Commit: new(uint64(i))}, uint64(i))
			if err := j.flush(true); err != nil {
				t.Fatal(err)
			}
			ends = append(ends, int(j.size))
		}
		if err := j.close(); err != nil {
			t.Fatal(err)
		}
		return dir, ends
	}
	flip := func(t *testing.T, path string, at int) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[at] ^= 0x5a
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Run("middle", func(t *testing.T) {
		dir, ends := write(t)
		path := dir + "/" + journalName
		want := flip(t, path, ends[9]+20) // inside the 11th record's body
		_, err := openJournal(storage.OSFS(), dir, testLogger(t))
		if !errors.Is(err, ErrJournalCorrupt) {
			t.Fatalf("open of a journal with a flipped middle record: %v, want ErrJournalCorrupt", err)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
			t.Fatalf("the corrupt journal was changed: %d bytes, was %d", len(got), len(want))
		}
	})
	t.Run("length", func(t *testing.T) {
		dir, ends := write(t)
		flip(t, dir+"/"+journalName, ends[4]+2) // a record's length
		if _, err := openJournal(storage.OSFS(), dir, testLogger(t)); !errors.Is(err, ErrJournalCorrupt) {
			t.Fatalf("open: %v, want ErrJournalCorrupt", err)
		}
	})
	t.Run("torn", func(t *testing.T) {
		dir, ends := write(t)
		path := dir + "/" + journalName
		if err := os.Truncate(path, int64(ends[19]-7)); err != nil {
			t.Fatal(err)
		}
		j, err := openJournal(storage.OSFS(), dir, testLogger(t))
		if err != nil {
			t.Fatalf("torn tail: %v", err)
		}
		defer j.close()
		if j.size != int64(ends[18]) {
			t.Fatalf("kept %d bytes, want %d", j.size, ends[18])
		}
		if s := j.snapshot(4); s.hs.GetTerm() != 10+15 {
			t.Fatalf("group 4 term %d, want 25", s.hs.GetTerm())
		}
	})
}

// TestJournalRecordOfNewerFormatRefused: a whole record with a valid CRC
// whose kind (or payload) this binary does not know was written by a newer
// Holdfast. Last in the file, the old replay took it for a torn tail and
// cut it; in the middle, for corruption (ErrJournalCorrupt, which moves the
// data directory aside). Now the open fails with an error naming the file,
// the kind found and the kinds known, and the file is unchanged. A journal
// of today's kinds (an older release's file) opens.
func TestJournalRecordOfNewerFormatRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		record []byte
		last   bool
		want   []string
		format bool
	}{
		{"new kind last", appendRecord(nil, jRejoin+1, 3, []byte{1, 2, 3}), true, []string{"record kind 9,", "reads record kinds [1 2 3 4 5 6 7 8]"}, true},
		{"new kind middle", appendRecord(nil, 200, 3, nil), false, []string{"record kind 200,"}, true},
		{"longer hardstate", appendRecord(nil, jHardState, 3, make([]byte, 40)), true, []string{"valid checksum", "bad hardstate record"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			j, err := openJournal(storage.OSFS(), dir, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			put := func(i int) {
				j.putHardState(uint64(1+i%4), &pb.HardState{Term: new(uint64(10 + i)), Vote: new(uint64(1 + i%3)), Commit: new(uint64(i))}, uint64(i))
				if err := j.flush(true); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 5 {
				put(i)
			}
			keep := j.size
			j.mu.Lock()
			j.buf = append(j.buf, tc.record...)
			j.dirty = true
			j.mu.Unlock()
			if err := j.flush(true); err != nil {
				t.Fatal(err)
			}
			if !tc.last {
				put(5)
			}
			if err := j.close(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, journalName)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = openJournal(storage.OSFS(), dir, testLogger(t))
			if err == nil {
				t.Fatal("opened a journal with a record of a newer format")
			}
			if errors.Is(err, ErrJournalCorrupt) || errors.Is(err, storage.ErrUnknownFormat) != tc.format {
				t.Fatalf("open: %v: want ErrUnknownFormat %v, never ErrJournalCorrupt", err, tc.format)
			}
			for _, w := range append(tc.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("open: %q does not say %q", err, w)
				}
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
				t.Fatalf("the refused journal changed: %d bytes, was %d", len(after), len(before))
			}
			// Without the new record it opens with everything before it.
			if err := os.WriteFile(path, before[:keep], 0o644); err != nil {
				t.Fatal(err)
			}
			j, err = openJournal(storage.OSFS(), dir, testLogger(t))
			if err != nil {
				t.Fatalf("the journal without the new record: %v", err)
			}
			defer j.close()
			if s := j.snapshot(1); s.hs.GetTerm() != 14 {
				t.Fatalf("group 1 term %d, want 14", s.hs.GetTerm())
			}
		})
	}
}

// TestJournalCommitsAllocateNothing: a store round journals a HardState for
// every group whose commit moved (1,000 a round at 1,000 busy partitions);
// buffering one allocates nothing once the buffer has grown (the old code:
// a HardState copy, its payload and the record's body, 5 objects), and the
// records read back.
func TestJournalCommitsAllocateNothing(t *testing.T) {
	dir := t.TempDir()
	j, err := openJournal(storage.OSFS(), dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	term, vote, commit := uint64(2), uint64(1), uint64(0)
	hs := &pb.HardState{Term: &term, Vote: &vote, Commit: &commit}
	put := func() {
		commit++
		j.putHardState(1, hs, commit)
	}
	for range 300 { // grows the buffer the flush hands back for reuse
		put()
	}
	if err := j.flush(false); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, put); n != 0 {
		t.Fatalf("%v allocations per HardState record", n)
	}
	if s := j.snapshot(1); s.hs.GetCommit() != commit || s.applied != commit {
		t.Fatalf("in memory: commit %d applied %d, want %d", s.hs.GetCommit(), s.applied, commit)
	}
	if err := j.flush(false); err != nil {
		t.Fatal(err)
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	j, err = openJournal(storage.OSFS(), dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	if s := j.snapshot(1); s.hs.GetTerm() != 2 || s.hs.GetVote() != 1 || s.hs.GetCommit() != commit || s.applied != commit {
		t.Fatalf("after reopen: %+v applied %d, want commit and applied %d", s.hs, s.applied, commit)
	}
}
