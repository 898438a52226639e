package metadata

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"holdfast/internal/clock"
	"holdfast/internal/storage"
)

// SnapshotPolicy says when the store writes a snapshot of its image
// (cluster.json). Between snapshots the metadata Raft log is the record:
// a restart loads the snapshot and replays the log's committed entries
// after its applied offset, so these bound the replay.
type SnapshotPolicy struct {
	// MaxBytes: a snapshot is taken once the commands applied since the
	// last one add up to this many bytes of log, or to the size of the
	// last snapshot if that is larger - so the cost of snapshots per
	// command stays proportional to the command, never to the cluster
	// (Kafka's metadata.log.max.record.bytes.between.snapshots).
	MaxBytes int64
	// MaxInterval: a snapshot is taken this long after the last one if
	// anything changed since (metadata.log.max.snapshot.interval.ms);
	// 0: never for time alone.
	MaxInterval time.Duration
}

// DefaultSnapshotPolicy is Kafka's: 20 MiB of log or an hour.
var DefaultSnapshotPolicy = SnapshotPolicy{MaxBytes: 20 << 20, MaxInterval: time.Hour}

// finishedName is the file of the deletions this node finished (their data
// removed) since the last snapshot: node-local, not in the metadata log.
const finishedName = "finished-deletes.json"

// finishedRemoteName is the same for the deleted tiered topics whose
// objects in the object store this node deleted (RemoteDeleting).
const finishedRemoteName = "finished-remote-deletes.json"

// The two kinds of finished deletions (snapshotter.finished).
const (
	finishedData   = 0 // the topic's local data (Deleting, finishedName)
	finishedRemote = 1 // its objects in the object store (RemoteDeleting, finishedRemoteName)
)

var finishedNames = [2]string{finishedName, finishedRemoteName}

// finishedVersion is the format of finishedName: a JSON array of
// finishedDelete (no version field; docs/storage.md).
const finishedVersion = 1

// finishedDelete is one FinishDelete: the topic id and the applied offset
// then. The delete command was at or below At, so a snapshot at a higher
// applied offset holds its effect and the entry can go.
type finishedDelete struct {
	ID [16]byte `json:"id"`
	At int64    `json:"applied_offset"`
}

// snapshotter decides when to snapshot and writes snapshots off the apply
// path: it encodes an immutable image while later commands apply. Guarded
// by the store's mu.
type snapshotter struct {
	s      *Store
	policy SnapshotPolicy
	since  int64 // log bytes applied since the last snapshot was taken
	size   int64 // the last snapshot's size in bytes
	dirty  bool  // the image changed since the last snapshot was taken
	timer  *clock.Timer
	clk    clock.Clock // runs timer (SetClock)

	writing bool // a background write is under way
	pending bool // and another was asked for meanwhile
	idle    *sync.Cond
	closed  bool

	finished [2][]finishedDelete // by kind: finishedData, finishedRemote
}

func (sn *snapshotter) init(s *Store) {
	sn.s, sn.policy, sn.clk = s, DefaultSnapshotPolicy, clock.Real()
	sn.idle = sync.NewCond(&s.mu)
}

// SetClock sets the clock of the snapshots' MaxInterval timer (the node's:
// broker.Config.Clock); nil: the wall clock. A timer already set keeps
// its clock.
func (s *Store) SetClock(c clock.Clock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snap.clk = clock.OrReal(c)
}

// SetSnapshotPolicy replaces the snapshot policy (zero fields: the
// default's).
func (s *Store) SetSnapshotPolicy(p SnapshotPolicy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.MaxBytes <= 0 {
		p.MaxBytes = DefaultSnapshotPolicy.MaxBytes
	}
	s.snap.policy = p
}

// applied counts a command of size bytes of log. Called with mu held.
func (sn *snapshotter) applied(size int) {
	sn.dirty = true
	sn.since += int64(max(size, 1))
	if sn.closed {
		return // nothing is written after Close: the log has it
	}
	if sn.since >= max(sn.policy.MaxBytes, sn.size) {
		sn.take()
		return
	}
	if sn.policy.MaxInterval > 0 && sn.timer == nil {
		sn.timer = sn.clk.AfterFunc(sn.policy.MaxInterval, sn.timed)
	}
}

func (sn *snapshotter) timed() {
	sn.s.mu.Lock()
	defer sn.s.mu.Unlock()
	sn.timer = nil
	if sn.dirty && !sn.closed {
		sn.take()
	}
}

// take starts a snapshot of the current image in the background. Called
// with mu held.
func (sn *snapshotter) take() {
	sn.since, sn.dirty = 0, false
	if sn.timer != nil {
		sn.timer.Stop()
		sn.timer = nil
	}
	if sn.writing {
		sn.pending = true
		return
	}
	sn.writing = true
	go sn.write(sn.s.img)
}

func (sn *snapshotter) write(img *Image) {
	s := sn.s
	for {
		size, err := s.persist(img.state())
		s.mu.Lock()
		if err != nil {
			// The log still holds every command: the next snapshot
			// retries, and a restart replays more meanwhile.
			s.log.Error("writing a metadata snapshot", "applied_offset", img.Applied(), "err", err)
			sn.dirty = true
		} else {
			sn.done(img, size)
		}
		if !sn.pending || sn.closed {
			sn.writing, sn.pending = false, false
			sn.idle.Broadcast()
			s.mu.Unlock()
			return
		}
		sn.pending = false
		img = s.img
		s.mu.Unlock()
	}
}

// done records a durable snapshot of img. Called with mu held.
func (sn *snapshotter) done(img *Image, size int64) {
	sn.size = size
	for kind := range sn.finished {
		keep := slices.DeleteFunc(slices.Clone(sn.finished[kind]), func(f finishedDelete) bool { return f.At < img.Applied() })
		if len(keep) != len(sn.finished[kind]) {
			sn.finished[kind] = keep
			if err := sn.writeFinished(kind, keep); err != nil {
				// Entries left in the file are harmless: they name deleted
				// topics' ids, never reused.
				sn.s.log.Warn("trimming the finished deletions", "err", err)
			}
		}
	}
}

// snapshotNowLocked writes a snapshot of the current image before it
// returns (the store's creation, a node-local change, Close). Called with
// mu held; waits for a background write first.
func (s *Store) snapshotNowLocked() error {
	sn := &s.snap
	for sn.writing {
		sn.idle.Wait()
	}
	img := s.img
	size, err := s.persist(img.state())
	if err != nil {
		return err
	}
	sn.since, sn.dirty = 0, false
	sn.done(img, size)
	return nil
}

// Close writes a last snapshot if anything changed since the one before
// (so a clean restart replays nothing), after any write under way. Apply
// after Close still changes memory, and the log still records it.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn := &s.snap
	sn.closed = true
	if sn.timer != nil {
		sn.timer.Stop()
		sn.timer = nil
	}
	if !sn.dirty {
		for sn.writing {
			sn.idle.Wait()
		}
		return nil
	}
	return s.snapshotNowLocked()
}

// finish records, durably, that the data (kind finishedData) or the
// remote objects (finishedRemote) of deleted topic id are gone. Called
// with mu held.
func (sn *snapshotter) finish(kind int, id [16]byte) error {
	next := append(slices.Clip(sn.finished[kind]), finishedDelete{ID: id, At: sn.s.img.st.Applied})
	if err := sn.writeFinished(kind, next); err != nil {
		return err
	}
	sn.finished[kind] = next
	return nil
}

func (sn *snapshotter) writeFinished(kind int, fs []finishedDelete) error {
	s := sn.s
	path := join(s.dir, finishedNames[kind])
	if len(fs) == 0 {
		if err := s.fs.Remove(path); err != nil && !isNotExist(err) {
			return fmt.Errorf("metadata: %w", err)
		}
		return nil
	}
	data, err := json.Marshal(fs)
	if err != nil {
		return err
	}
	if _, err := storage.WriteFileAtomic(s.fs, path, data); err != nil {
		return fmt.Errorf("metadata: recording a finished deletion: %w", err)
	}
	return nil
}

// loadFinished reads the deletions finished since the snapshot and drops
// them from the image's Deleting and RemoteDeleting. Called by Open.
func (s *Store) loadFinished() error {
	for kind := range s.snap.finished {
		if err := s.loadFinishedKind(kind); err != nil {
			return err
		}
	}
	s.img.st.Deleting = s.snap.dropFinished(finishedData, s.img.st.Deleting)
	s.img.st.RemoteDeleting = s.snap.dropFinished(finishedRemote, s.img.st.RemoteDeleting)
	return nil
}

func (s *Store) loadFinishedKind(kind int) error {
	finishedName := finishedNames[kind]
	data, err := readFile(s.fs, join(s.dir, finishedName))
	if isNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	// Version 1 is a bare JSON array. A later version is to be an object
	// with a "version" field, refused here rather than read as corrupt.
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		var v struct {
			Version int64 `json:"version"`
		}
		if err := json.Unmarshal(t, &v); err == nil {
			if err := storage.CheckVersion("version", v.Version, finishedVersion); err != nil {
				return fmt.Errorf("metadata: %s: %w", join(s.dir, finishedName), err)
			}
		}
	}
	var fs []finishedDelete
	if err := json.Unmarshal(data, &fs); err != nil {
		return fmt.Errorf("metadata: %s: %w: %v", join(s.dir, finishedName), errCorruptMetaDoc, err)
	}
	s.snap.finished[kind] = fs
	return nil
}

// dropFinished is deleting without the topics whose data (or objects, by
// kind) this node already removed; a new slice if any is dropped.
func (sn *snapshotter) dropFinished(kind int, deleting []Topic) []Topic {
	fin := func(t Topic) bool {
		return slices.ContainsFunc(sn.finished[kind], func(f finishedDelete) bool { return f.ID == t.ID })
	}
	if !slices.ContainsFunc(deleting, fin) {
		return deleting
	}
	return slices.DeleteFunc(slices.Clone(deleting), fin)
}
