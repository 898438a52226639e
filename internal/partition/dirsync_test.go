package partition

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"holdfast/internal/storage"
)

// syncLog is an FS whose SyncDir records when each call began and ended
// on a shared sequence, and fails while fail is set.
type syncLog struct {
	storage.FS
	seq  *atomic.Int64
	mu   sync.Mutex
	runs [][2]int64
	fail atomic.Bool
}

func (f *syncLog) SyncDir(string) error {
	begin := f.seq.Add(1)
	err := error(nil)
	if f.fail.Load() {
		err = errors.New("injected")
	}
	end := f.seq.Add(1)
	f.mu.Lock()
	f.runs = append(f.runs, [2]int64{begin, end})
	f.mu.Unlock()
	return err
}

// TestDirSyncerCoversEveryCaller: each caller returns only after an fsync
// that began after it called (what it changed before is durable), however
// many call at once; a failed fsync fails the callers it covers.
func TestDirSyncerCoversEveryCaller(t *testing.T) {
	var seq atomic.Int64
	fs := &syncLog{FS: storage.OSFS(), seq: &seq}
	d := newDirSyncer(fs, t.TempDir())
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 20 {
				called := seq.Add(1)
				if err := d.sync(); err != nil {
					t.Error(err)
					return
				}
				returned := seq.Add(1)
				fs.mu.Lock()
				covered := false
				for _, r := range fs.runs {
					covered = covered || r[0] > called && r[1] < returned
				}
				fs.mu.Unlock()
				if !covered {
					t.Errorf("call at %d returned at %d with no fsync begun and ended between", called, returned)
					return
				}
			}
		})
	}
	wg.Wait()
	fs.fail.Store(true)
	if err := d.sync(); err == nil {
		t.Fatal("a failed fsync reported success")
	}
	fs.fail.Store(false)
	if err := d.sync(); err != nil {
		t.Fatalf("an fsync after the failure: %v", err)
	}
}
