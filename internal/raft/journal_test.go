package raft

import (
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
