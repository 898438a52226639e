package storage

import "sort"

// Index files are created off the sync cycle.
//
// An active segment's index files are first needed when its first
// indexPersistEntries entries (or indexPersistBytes) are durable and due
// (indexDueLocked). Creating a file can be slow: ~0.8 ms on this project's
// benchmark VM (ext4 without a journal, whose inode allocator avoids
// recently deleted inodes), and a 1,000-partition load brings all 1,000
// logs due within a few cycles. Created inside the sync cycle (syncEnd,
// under the log's lock, in the Raft Ready loop's store round), the 2,000
// creations stalled every acknowledgement of the node for ~1.6 s and were
// ~10% of the run's CPU in the store round.
//
// So the cycle only queues the segment here; one goroutine per Syncer
// creates the files, writes the entries that are durable, and marks the
// segment (idxExists); later cycles write as before. Until then the
// entries wait in memory, which is what they do anyway until they are due:
// the index is derived from the segment, and a crash before the files
// exist costs a longer recovery scan of the active segment (from its start
// instead of its last written entry), never a batch. The directory entry
// of an active segment's index files is not made durable here (nor was it
// before): sealing a segment fsyncs its index files and the directory.
//
// Creating a segment's index files with the segment (at log creation and at
// roll) was the other choice: it moves the cost to topic creation (10,000
// partitions: ~16 s more on that VM) and to the append that rolls, and
// makes files for logs that never get enough data to need them.

type indexJob struct {
	l *Log
	s *segment
}

// queueIndexCreateLocked asks the index creator for s's files, once until
// it ran. The caller holds s.idxMu (and l.mu).
func (l *Log) queueIndexCreateLocked(s *segment) {
	if s.idxQueued {
		return
	}
	s.idxQueued = l.syncer.queueIndex(indexJob{l, s})
}

// queueIndex adds a job; false once the Syncer is closed (the files are
// then made by the seal or Close that needs them).
func (s *Syncer) queueIndex(j indexJob) bool {
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	if s.idxClosed {
		return false
	}
	s.idxJobs = append(s.idxJobs, j)
	select {
	case s.idxKick <- struct{}{}:
	default:
	}
	return true
}

func (s *Syncer) indexLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.idxKick:
		case <-s.done:
			return
		}
		if s.manualIndex {
			continue // the test runs them (runIndexJobs)
		}
		s.runIndexJobs()
	}
}

// runIndexJobs runs the queued index creations until none is left.
func (s *Syncer) runIndexJobs() {
	for {
		s.idxMu.Lock()
		if len(s.idxJobs) == 0 {
			s.idxRunning = false
			s.idxIdle.Broadcast()
			s.idxMu.Unlock()
			return
		}
		j := s.idxJobs[0]
		s.idxJobs[0] = indexJob{}
		s.idxJobs = s.idxJobs[1:]
		s.idxRunning = true
		s.idxMu.Unlock()
		j.l.createIndexFiles(j.s)
		select {
		case <-s.done:
			s.idxMu.Lock()
			s.idxJobs, s.idxRunning = nil, false
			s.idxIdle.Broadcast()
			s.idxMu.Unlock()
			return
		default:
		}
	}
}

// waitIndexJobs returns once no index creation is queued or running (tests).
func (s *Syncer) waitIndexJobs() {
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	for (len(s.idxJobs) > 0 && !s.idxClosed) || s.idxRunning {
		s.idxIdle.Wait()
	}
}

// createIndexFiles creates s's index files and writes its durable entries,
// if s is still the open log's active segment without them.
//
// It holds l.mu shared and s.idxMu throughout: everything that removes or
// replaces a segment's files (Truncate, reset, retention, Delete, Close)
// holds l.mu exclusively, and everything that writes the index files holds
// s.idxMu, so none of it runs between the check and the creation. An
// append to this log, or its sync cycle's end, waits for the creation at
// most (one file pair, once per segment), not the node's every log.
func (l *Log) createIndexFiles(s *segment) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	s.idxQueued = false
	if l.closed || l.failed != nil || len(l.segs) == 0 || s != l.active() || s.idxExists {
		return
	}
	err := s.openIndexFilesFlagLocked(l, true)
	if err == nil {
		err = s.persistOpenLocked(l, s.durablePosLocked(l), false)
	}
	s.closeIndexFilesLocked()
	if err != nil {
		// The next due cycle queues it again.
		l.dirLogger().Warn("storage: index file creation failed", "file", s.path(indexSuffix), "err", err)
	}
}

// durablePosLocked returns a byte position in the active segment s below
// which every index entry (offset and time) points at a durable batch: the
// whole segment if the log is durable to its end, else just past the last
// offset entry whose batch is below the durable offset. (An exact position
// is only known to the sync cycle; this one is conservative: the rest is
// written by the next cycle that finds entries due.) The caller holds
// l.mu (shared) and s.idxMu.
func (s *segment) durablePosLocked(l *Log) int64 {
	d := l.durable.Load()
	if d >= l.end {
		return s.size
	}
	i := sort.Search(len(s.offIdx), func(i int) bool { return s.base+int64(s.offIdx[i].rel) >= d })
	if i == 0 {
		return 0
	}
	return int64(s.offIdx[i-1].pos) + 1
}
