package partition

import (
	"sync"

	"holdfast/internal/storage"
)

// dirSyncer makes changes in one directory durable for many goroutines
// with few fsyncs: a caller waits for an fsync of the directory that
// started after it called, and callers who arrive while one runs share the
// next. Opening thousands of partitions at once, each removing its
// producer snapshot, did one fsync of the snapshot directory apiece, and
// each fsync's journal commit held up the others' removals.
type dirSyncer struct {
	syncOnce func() error // the fsync (or syncfs) shared

	mu        sync.Mutex
	cond      *sync.Cond
	running   bool
	started   uint64 // fsyncs started
	completed uint64 // fsyncs completed (they run one at a time)
	failed    uint64 // the last failed one (0: none)
	err       error  // its error
}

func newDirSyncer(fs storage.FS, dir string) *dirSyncer {
	return newSharedSync(func() error { return fs.SyncDir(dir) })
}

// newFilesystemSyncer shares syncfs calls of the filesystem holding dir
// (storage.SyncFilesystem) the same way: a caller's every change on that
// filesystem is durable when sync returns.
func newFilesystemSyncer(dir string) *dirSyncer {
	return newSharedSync(func() error { return storage.SyncFilesystem(dir) })
}

func newSharedSync(fn func() error) *dirSyncer {
	d := &dirSyncer{syncOnce: fn}
	d.cond = sync.NewCond(&d.mu)
	return d
}

// sync returns once an fsync of the directory that began after the call
// has completed: whatever the caller changed in it before is durable.
func (d *dirSyncer) sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	need := d.started + 1 // the next to start; one running now may have missed our change
	for d.completed < need {
		if d.running {
			d.cond.Wait()
			continue
		}
		d.running = true
		d.started++
		n := d.started
		d.mu.Unlock()
		err := d.syncOnce()
		d.mu.Lock()
		d.running = false
		d.completed = n
		if err != nil {
			d.failed, d.err = n, err
		}
		d.cond.Broadcast()
	}
	if d.failed >= need {
		return d.err
	}
	return nil
}
