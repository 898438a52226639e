package partition

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"holdfast/internal/raft"
	"holdfast/internal/storage"
)

// newCrashNode is newNode on a CrashFS: the data directory exists
// durably (the operator made it), what the node writes in it follows the
// power-loss rules.
func newCrashNode(t *testing.T, fsys *storage.CrashFS, dir string) *testNode {
	t.Helper()
	fsys.MkdirAllForTest(dir)
	s := testSyncer(t, fsys, dir)
	h, err := raft.NewHost(raft.Config{ID: 1, Dir: dir, TickInterval: 10 * time.Millisecond, FS: fsys, SoloPath: testSolo})
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{Manager: NewManager(dir, storage.Options{FS: fsys, Syncer: s}), t: t, dir: dir, sync: s, host: h}
	t.Cleanup(n.stop)
	return n
}

// crashStep is a node on a CrashFS that cuts the power in place of its
// step-th filesystem operation, torn on odd steps.
func crashStep(t *testing.T, step int64) (*storage.CrashFS, *testNode) {
	t.Helper()
	fsys := storage.NewCrashFS(step)
	fsys.SetDirPrefix(true)
	m := newCrashNode(t, fsys, "/data")
	if step%2 == 1 {
		fsys.CrashTornAfter(step)
	} else {
		fsys.CrashAfter(step)
	}
	return fsys, m
}

// reboot cuts the power if the crash step was not reached (done: the
// operations all ran first), tears m down and starts a node again on what
// the disk kept.
func reboot(t *testing.T, fsys *storage.CrashFS, m *testNode) (*testNode, bool) {
	t.Helper()
	done := !fsys.Down()
	if done {
		fsys.Crash()
	}
	m.crash()
	fsys.Reboot()
	return newCrashNode(t, fsys, "/data"), done
}

// hangGuard gives contexts that end after 30 s: a guard against a hang,
// never a deadline the test means.
func hangGuard(t *testing.T) func() context.Context {
	return func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
}

// powerCut loses everything not durable, then tears the node down (its
// handles are dead: nothing more reaches the disk).
func (n *testNode) powerCut(fsys *storage.CrashFS, torn bool) {
	if torn {
		fsys.CrashTorn()
	} else {
		fsys.Crash()
	}
	n.crash()
}

// TestNewPartitionSurvivesPowerCut: records acknowledged in a partition
// created just before are there after a power cut. The partition's
// directory is a new entry of the data directory: claimDir fsyncs that,
// or the cut drops the directory with the log in it (and the Raft journal
// remembers entries the node no longer has).
func TestNewPartitionSurvivesPowerCut(t *testing.T) {
	fsys := storage.NewCrashFS(1)
	m := newCrashNode(t, fsys, "/data")
	p, err := m.Open("t", [16]byte{1}, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, p, batch(t, -1, -1, -1, 3), 0, false)
	m.powerCut(fsys, false)
	if _, ok := fsys.ReadFileForTest("/data/t-0/" + metadataFile); !ok {
		t.Fatalf("%s lost: the directory would be claimed by whichever topic opens it next", metadataFile)
	}

	m = newCrashNode(t, fsys, "/data")
	if p, err = m.Open("t", [16]byte{1}, 0, storage.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if end := p.LogEndOffset(); end != 3 {
		t.Fatalf("log end %d after the power cut, want the 3 acknowledged records", end)
	}
}

// TestDeletedTopicStaysDeletedAfterPowerCut: a topic deleted while its
// partition was not open in this process (a restart in between, as the
// start-up's FinishPendingDelete does), or while open, then a power cut. Its directory
// can come back, whole or (the unlinks inside it half done) without some
// files - partition.metadata among them; a new topic of the same name
// must then neither serve the old records (claiming the directory as its
// own) nor fail to open over it (ErrForeignData, with the deletion already
// finished: nothing would ever remove it).
func TestDeletedTopicStaysDeletedAfterPowerCut(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		for _, c := range []struct{ torn, restart bool }{{false, true}, {true, true}, {false, false}, {true, false}} {
			torn := c.torn
			fsys := storage.NewCrashFS(seed)
			m := newCrashNode(t, fsys, "/data")
			p, err := m.Open("d", [16]byte{4}, 0, storage.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			mustAppend(t, p, batch(t, -1, -1, -1, 3), 0, false)
			if c.restart { // else deleted while open (removeData)
				m.stop()
				m = newCrashNode(t, fsys, "/data")
			}
			if err := m.DeleteTopic("d"); err != nil {
				t.Fatal(err)
			}
			m.powerCut(fsys, torn)

			m = newCrashNode(t, fsys, "/data")
			p, err = m.Open("d", [16]byte{5}, 0, storage.DefaultConfig())
			if err != nil {
				t.Fatalf("seed %d torn %v: the new topic does not open over the deleted one's directory: %v (foreign data: %v)", seed, torn, err, errors.Is(err, ErrForeignData))
			}
			if end := p.LogEndOffset(); end != 0 {
				t.Fatalf("seed %d torn %v: the new topic has the deleted one's records (end %d)", seed, torn, end)
			}
			m.stop()
		}
	}
}

// TestProducerSnapshotSurvivesPowerCut: a clean stop writes a partition's
// producer snapshot into producer-snapshots, a directory the first
// snapshot creates. Its name is an entry of the data directory: unless
// that is fsynced, a power cut after the stop drops the directory with
// every snapshot in it (the next open then rebuilds the producers by
// scanning the whole log).
func TestProducerSnapshotSurvivesPowerCut(t *testing.T) {
	fsys := storage.NewCrashFS(1)
	m := newCrashNode(t, fsys, "/data")
	p, err := m.Open("t", [16]byte{1}, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, p, batch(t, 7, 0, 0, 3), 0, false)
	snap := p.snapPath()
	m.stop()
	if _, ok := fsys.ReadFileForTest(snap); !ok {
		t.Fatalf("a clean stop wrote no producer snapshot at %s", snap)
	}
	fsys.Crash()
	if _, ok := fsys.ReadFileForTest(snap); !ok {
		t.Fatalf("the producer snapshot %s is gone after a power cut that followed the clean stop", snap)
	}
}

// TestDeleteWithFailedDirSyncStaysDeleted: the data directory's fsync
// after a partition's directory was renamed aside fails (EIO), so the
// rename is not durable; the deletion fails and is retried (as the
// replica manager's FinishPendingDelete does), succeeds, then the power
// goes. The directory must not come back at its name: whole, the new
// topic of the name could never open over it; without some files
// (partition.metadata), it would serve the deleted topic's records.
func TestDeleteWithFailedDirSyncStaysDeleted(t *testing.T) {
	for seed := int64(1); seed <= 10; seed++ {
		for _, torn := range []bool{false, true} {
			fsys := storage.NewCrashFS(seed)
			m := newCrashNode(t, fsys, "/data")
			p, err := m.Open("d", [16]byte{4}, 0, storage.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			mustAppend(t, p, batch(t, -1, -1, -1, 3), 0, false)
			fsys.InjectErrorPath(storage.OpSyncDir, "/data", syscall.EIO)
			if err := m.DeleteTopic("d"); !errors.Is(err, syscall.EIO) {
				t.Fatalf("delete with a failing fsync of the data directory: %v", err)
			}
			fsys.ClearErrors()
			if err := m.DeleteTopic("d"); err != nil {
				t.Fatalf("retried delete: %v", err)
			}
			m.powerCut(fsys, torn)

			m = newCrashNode(t, fsys, "/data")
			p, err = m.Open("d", [16]byte{5}, 0, storage.DefaultConfig())
			if err != nil {
				t.Fatalf("seed %d torn %v: the new topic does not open over the deleted one's directory: %v", seed, torn, err)
			}
			if end := p.LogEndOffset(); end != 0 {
				t.Fatalf("seed %d torn %v: the new topic has the deleted one's records (end %d)", seed, torn, end)
			}
			m.stop()
		}
	}
}

// TestDeleteTopicListingErrorFails: DeleteTopic finds the directories of
// partitions not open in this process by listing the data directory; when
// the listing fails (EMFILE) the deletion must fail too, to be retried,
// not pass as finished with the directories left at their names.
func TestDeleteTopicListingErrorFails(t *testing.T) {
	fsys := storage.NewCrashFS(1)
	m := newCrashNode(t, fsys, "/data")
	p, err := m.Open("d", [16]byte{4}, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, p, batch(t, -1, -1, -1, 3), 0, false)
	m.stop()
	m = newCrashNode(t, fsys, "/data")
	fsys.InjectErrorPath(storage.OpReadDir, "/data", syscall.EMFILE)
	if err := m.DeleteTopic("d"); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("delete with a failing listing of the data directory: %v", err)
	}
	fsys.ClearErrors()
	if err := m.DeleteTopic("d"); err != nil {
		t.Fatalf("retried delete: %v", err)
	}
	if p, err = m.Open("d", [16]byte{5}, 0, storage.DefaultConfig()); err != nil {
		t.Fatalf("the new topic does not open after the deletion: %v", err)
	}
	if end := p.LogEndOffset(); end != 0 {
		t.Fatalf("the new topic has the deleted one's records (end %d)", end)
	}
}

// TestDeleteRecreateCrashAtEveryStep: create a topic, acknowledge
// records, delete it, create a topic of the same name and acknowledge
// records in it, with a power cut in place of each filesystem operation
// in turn (torn on odd steps). After it, with the deletion retried if it
// had not finished (as the replica manager's start-up does), the new
// topic opens, holds every record acknowledged in it and none of the
// deleted one's. The old topic's batch has 3 records, the new one's 2.
func TestDeleteRecreateCrashAtEveryStep(t *testing.T) {
	ctx := hangGuard(t)
	for step := int64(1); ; step++ {
		fsys, m := crashStep(t, step)
		deleted, acked := false, false
		func() {
			p, err := m.Open("d", [16]byte{4}, 0, storage.DefaultConfig())
			if err != nil {
				return
			}
			res, err := p.Append(batch(t, -1, -1, -1, 3))
			if err != nil || p.WaitCommitted(ctx(), res.LastOffset+1) != nil {
				return
			}
			if m.DeleteTopic("d") != nil {
				return
			}
			deleted = true
			if p, err = m.Open("d", [16]byte{5}, 0, storage.DefaultConfig()); err != nil {
				return
			}
			if res, err = p.Append(batch(t, -1, -1, -1, 2)); err != nil || p.WaitCommitted(ctx(), res.LastOffset+1) != nil {
				return
			}
			acked = true
		}()
		var done bool
		m, done = reboot(t, fsys, m)
		if !deleted {
			if err := m.DeleteTopic("d"); err != nil {
				t.Fatalf("step %d: retried delete: %v", step, err)
			}
		}
		p, err := m.Open("d", [16]byte{5}, 0, storage.DefaultConfig())
		if err != nil {
			t.Fatalf("step %d: the new topic does not open: %v", step, err)
		}
		end := p.LogEndOffset()
		if end != 0 && end != 2 || acked && end != 2 {
			t.Fatalf("step %d (deleted %v, acked %v): the new topic ends at %d: want its 2 records (0 if unacknowledged), never the deleted one's 3", step, deleted, acked, end)
		}
		m.stop()
		if done {
			t.Logf("%d steps", step)
			return
		}
	}
}

// TestSnapshotReadErrorFailsOpen: a producer snapshot that cannot be read
// (EMFILE) fails the partition's open (it is offline and retried) rather
// than being removed and the producers rebuilt by scanning the log: the
// scan cannot see producers whose batches retention removed, and the
// removal made the loss permanent. Once the file reads again, the open
// restores them: a retry of the producer's last batch is recognised.
func TestSnapshotReadErrorFailsOpen(t *testing.T) {
	fsys := storage.NewCrashFS(1)
	m := newCrashNode(t, fsys, "/data")
	cfg := storage.DefaultConfig()
	cfg.SegmentBytes = 1024
	p, err := m.Open("t", [16]byte{1}, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	last := batch(t, 7, 0, 0, 3)
	mustAppend(t, p, bytes.Clone(last), 0, false)
	for i := range 40 { // other producers, until the log has rolled
		mustAppend(t, p, batch(t, int64(100+i), 0, 0, 1), int64(3+i), false)
	}
	if p.Log().Segments() < 2 {
		t.Fatalf("%d segments: no roll", p.Log().Segments())
	}
	if err := m.host.Compact(p.RaftGroup(), p.Log().EndOffset()-1); err != nil {
		t.Fatal(err)
	}
	snap := p.snapPath()
	m.stop()

	m = newCrashNode(t, fsys, "/data")
	fsys.InjectErrorPath(storage.OpOpen, snap, syscall.EMFILE)
	if _, err := m.Open("t", [16]byte{1}, 0, cfg); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("open with an unreadable producer snapshot: %v, want the read error", err)
	}
	fsys.ClearErrors()
	if _, ok := fsys.ReadFileForTest(snap); !ok {
		t.Fatal("the producer snapshot was removed after a read error")
	}
	p, err = m.Open("t", [16]byte{1}, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Append(bytes.Clone(last))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Duplicate {
		t.Fatalf("producer 7's retried batch appended again at %d: its state was lost", res.BaseOffset)
	}
}

// TestNewPartitionDirSyncFailureRetried: the data directory's fsync that
// makes a new partition's directory name durable fails (or the listing
// that tells a new directory fails), so the open fails (the replica is
// offline) and is retried. The retry must still make the directory's name
// durable - with partition.metadata already in it, it took the directory
// as made long ago - or a power cut drops the partition with records
// acknowledged after the retry.
func TestNewPartitionDirSyncFailureRetried(t *testing.T) {
	for _, fault := range []struct{ op, path string }{{storage.OpSyncDir, "/data"}, {storage.OpReadDir, "/data/t-0"}} {
		fsys := storage.NewCrashFS(1)
		m := newCrashNode(t, fsys, "/data")
		fsys.InjectErrorPath(fault.op, fault.path, syscall.EIO)
		if _, err := m.Open("t", [16]byte{1}, 0, storage.DefaultConfig()); !errors.Is(err, syscall.EIO) {
			t.Fatalf("%s %s fails: open: %v", fault.op, fault.path, err)
		}
		fsys.ClearErrors()
		p, err := m.Open("t", [16]byte{1}, 0, storage.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		mustAppend(t, p, batch(t, -1, -1, -1, 3), 0, false)
		m.powerCut(fsys, false)

		m = newCrashNode(t, fsys, "/data")
		if p, err = m.Open("t", [16]byte{1}, 0, storage.DefaultConfig()); err != nil {
			t.Fatal(err)
		}
		if end := p.LogEndOffset(); end != 3 {
			t.Fatalf("%s %s failed once: log end %d after the power cut, want the 3 acknowledged records", fault.op, fault.path, end)
		}
		m.stop()
	}
}

// TestPartitionFilesOfNewerFormatRefused: a producer snapshot or a
// partition.metadata of a newer version than this binary's fails the
// partition's open with an error naming the file, the version found and
// the versions known, and the file stays as it was. Before, the snapshot
// was ignored and removed (the producers whose batches retention removed
// were lost: a retry appended again) and partition.metadata's version was
// not read. With the files of today's version restored, the partition
// opens and the producer's retry is still recognised.
func TestPartitionFilesOfNewerFormatRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		file  func(p *Partition) string
		newer func(b []byte) []byte
		want  string
	}{
		{"producer snapshot", func(p *Partition) string { return p.snapPath() }, func(b []byte) []byte {
			body := bytes.Replace(b[4:], []byte(`"version":1`), []byte(`"version":2`), 1)
			return append(binary.BigEndian.AppendUint32(nil, crc32.Checksum(body, castagnoli)), body...)
		}, "format version 2, this binary reads version 1"},
		{"partition.metadata", func(p *Partition) string { return filepath.Join(p.Log().Dir(), metadataFile) }, func(b []byte) []byte {
			return bytes.Replace(b, []byte("version: 0"), []byte("version: 1"), 1)
		}, "format version 1, this binary reads version 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := storage.NewCrashFS(1)
			m := newCrashNode(t, fsys, "/data")
			cfg := storage.DefaultConfig()
			cfg.SegmentBytes = 1024
			p, err := m.Open("t", [16]byte{1}, 0, cfg)
			if err != nil {
				t.Fatal(err)
			}
			last := batch(t, 7, 0, 0, 3)
			mustAppend(t, p, bytes.Clone(last), 0, false)
			for i := range 40 {
				mustAppend(t, p, batch(t, int64(100+i), 0, 0, 1), int64(3+i), false)
			}
			if err := m.host.Compact(p.RaftGroup(), p.Log().EndOffset()-1); err != nil {
				t.Fatal(err)
			}
			path := tc.file(p)
			m.stop()

			good, ok := fsys.ReadFileForTest(path)
			if !ok {
				t.Fatalf("no %s", path)
			}
			newer := tc.newer(good)
			if bytes.Equal(newer, good) {
				t.Fatalf("%s: the version was not changed: %q", path, good)
			}
			fsys.WriteFileForTest(path, newer)
			m = newCrashNode(t, fsys, "/data")
			_, err = m.Open("t", [16]byte{1}, 0, cfg)
			if !errors.Is(err, storage.ErrUnknownFormat) {
				t.Fatalf("open: %v, want ErrUnknownFormat", err)
			}
			for _, w := range []string{path, tc.want} {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("open: %q does not say %q", err, w)
				}
			}
			if got, _ := fsys.ReadFileForTest(path); !bytes.Equal(got, newer) {
				t.Fatalf("%s changed by the refused open", path)
			}
			fsys.WriteFileForTest(path, good)
			p, err = m.Open("t", [16]byte{1}, 0, cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Append(bytes.Clone(last))
			if err != nil {
				t.Fatal(err)
			}
			if !res.Duplicate {
				t.Fatalf("producer 7's retried batch appended again at %d: its state was lost", res.BaseOffset)
			}
		})
	}
}
