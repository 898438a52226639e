package raft

import (
	"bytes"
	"errors"
	"os"
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
