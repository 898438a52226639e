package replica

import (
	"errors"

	"holdfast/internal/metadata"
	"holdfast/internal/storage"
)

// discardCorruptLocked prepares the reopen of a replica whose open failed
// (repair.go). An open that found corrupt data (storage.ErrCorrupt: a bad
// batch followed by good ones, a damaged checkpoint or segment header)
// fails again however often it is retried, so the replica is discarded
// first, as a replica whose log failed is: its Raft group marked as one
// that lost its data (no vote until it has caught up), then its directory
// deleted; the reopen copies it from the other replicas. It returns false
// when the reopen must not happen now (the only replica: nothing to copy
// from, it stays offline with its data; or the discard failed).
func (m *Manager) discardCorruptLocked(t metadata.Topic, i int32) bool {
	m.offlineMu.Lock()
	err := m.offline[topicPartition{t.Name, i}]
	m.offlineMu.Unlock()
	if !errors.Is(err, storage.ErrCorrupt) {
		return true // another failure (an I/O error): try again as it is
	}
	lg := m.log.With("topic", t.Name, "partition", i)
	if int(i) >= len(t.Replicas) || len(t.Replicas[i]) < 2 {
		lg.Error("the only replica's data is corrupt: it keeps its data and stays offline", "err", err)
		return false
	}
	lg.Warn("replica data corrupt: discarding it here and copying it again from the other replicas", "err", err)
	if err := m.host.DiscardStopped(Group(t.ID, i)); err != nil {
		lg.Error("discarding a corrupt replica", "err", err)
		return false
	}
	if err := m.parts.RemoveUnopened(t.Name, i); err != nil {
		lg.Error("deleting a corrupt replica's data", "err", err)
		return false
	}
	return true
}
