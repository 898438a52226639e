package replica

import (
	"errors"
	"slices"
	"syscall"
	"time"

	"holdfast/internal/metadata"
	"holdfast/internal/partition"
	"holdfast/internal/raft"
	"holdfast/internal/storage"
)

// A Raft group that fails stops on this node only: it sends and
// acknowledges nothing, and the other replicas carry on (the partition
// stays available while a quorum of them can talk). The repair loop brings
// it back, with a growing pause between attempts:
//   - a group whose log failed (an fsync or write error: what was written
//     after the last good fsync is in an unknown state) is discarded and
//     reopened empty, catching up from the other replicas without a vote
//     until it has (raft.Host.DiscardGroup). A partition with no other
//     replica keeps its data and stays failed until the broker restarts
//     with a working disk: there is nothing to catch up from;
//   - any other failure (etcd raft panicked on a broken invariant or an
//     unreadable log) restarts the group from its log and journal, as a
//     restart of the broker would.
//
// The pause is remembered after a repair until the replica has stayed
// healthy for as long, so one that fails again soon (a disk that fills
// again) waits twice as long each time, up to repairMaxPause. A replica
// that failed for ENOSPC also waits, checked at every walk, until its
// filesystem has recopyReserve bytes free plus an eighth of what the
// replica held: recopied at once, a full follower's replica filled the
// disk again, 41 times in 70 s, each recopy costing its partition's leader
// an election (issue 26). RepairsDeferred counts the checks that put a
// recopy off for room.

const (
	repairEvery    = 2 * time.Second
	repairMaxPause = 5 * time.Minute
	recopyReserve  = 16 << 20
)

type repairState struct {
	next  time.Time
	pause time.Duration
	// noSpace: the replica failed for ENOSPC; size is what it held then.
	noSpace bool
	size    int64
	waiting bool // put off for room since the last check (logged once)
}

// due reports whether a repair may be tried at now and, if so, starts the
// next pause, twice as long up to repairMaxPause.
func (r *repairState) due(now time.Time) bool {
	if now.Before(r.next) {
		return false
	}
	r.next = now.Add(r.pause)
	r.pause = min(2*r.pause, repairMaxPause)
	return true
}

// healed reports whether a replica no longer failing has stayed healthy
// for as long as its last pause: its backoff is then forgotten.
func (r *repairState) healed(now time.Time) bool { return now.After(r.next.Add(r.pause)) }

// roomToRecopy: a replica that failed for a full disk is recopied only
// once its filesystem has room (where statfs can tell); checked at every
// walk, so the recopy starts as soon as there is room, and waiting for it
// does not lengthen the pause.
func (m *Manager) roomToRecopy(r *repairState, topic string, i int32) bool {
	if !r.noSpace {
		return true
	}
	free, ok := storage.FreeBytes(m.cfg.FS, m.cfg.DataDir)
	need := recopyReserve + r.size/8
	if !ok || free >= need {
		r.waiting = false
		return true
	}
	m.repairsDeferred.Add(1)
	if !r.waiting {
		r.waiting = true
		m.log.Warn("replica failed for a full disk: not recopying it until there is room", "topic", topic, "partition", i, "free_bytes", free, "need_bytes", need)
	}
	return false
}

func (m *Manager) repairLoop(stop <-chan struct{}) {
	tick := m.clk.NewTicker(repairEvery)
	defer tick.Stop()
	tries := map[uint64]*repairState{}
	topics := m.meta.NewTopicsCache()
	state := func(g uint64) *repairState {
		r := tries[g]
		if r == nil {
			r = &repairState{pause: repairEvery}
			tries[g] = r
		}
		return r
	}
	due := func(g uint64) bool { return state(g).due(m.clk.Now()) }
	// A walk of every partition each tick was a steady cost with 10,000 of
	// them (issue 17). Only a group failure (the host counts them), a
	// replica offline, or one the last walk left to retry needs a walk.
	walked, lastFailures := false, uint64(0)
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		failures := m.host.Failures()
		if walked && failures == lastFailures && len(tries) == 0 && !m.anyOffline() {
			continue
		}
		walked, lastFailures = true, failures
		seen := map[uint64]bool{}
		me := m.cfg.NodeID
		for _, t := range topics.Topics() {
			for i := int32(0); i < t.Partitions; i++ {
				p := m.parts.Get(t.Name, i)
				if p == nil && int(i) < len(t.Replicas) && slices.Contains(t.Replicas[i], me) {
					if m.openQueued(t.Name, i) {
						continue // the metadata's open of it is queued (opens.go)
					}
					// Assigned here but not open: a repair that discarded
					// the replica could not reopen it (the disk still
					// failed). Without its data it must catch up first.
					g := Group(t.ID, i)
					seen[g] = true
					if m.roomToRecopy(state(g), t.Name, i) && due(g) {
						m.reopen(t, i)
					}
					continue
				}
				if p == nil {
					continue
				}
				// The group's failure, or, for a replica left without its
				// group by an interrupted repair, ErrUnknownGroup: finish
				// it.
				err := m.host.GroupFailed(p.RaftGroup())
				if err == nil {
					continue
				}
				why := err.Error()
				g := p.RaftGroup()
				seen[g] = true
				if r := state(g); errors.Is(err, syscall.ENOSPC) {
					r.noSpace, r.size = true, p.Log().Size()
				}
				if m.roomToRecopy(state(g), t.Name, i) && due(g) {
					m.repair(t, i, p, why)
				}
			}
		}
		for g, r := range tries {
			if !seen[g] && r.healed(m.clk.Now()) {
				delete(tries, g)
			}
		}
	}
}

// repair brings back this node's failed replica of partition i of t.
func (m *Manager) repair(t metadata.Topic, i int32, p *partition.Partition, why string) {
	lg := m.log.With("topic", t.Name, "partition", i)
	g := p.RaftGroup()
	if _, err := m.host.Status(g); err == nil && p.Log().Failed() == nil && p.Log().Corrupt() == nil {
		if err := m.host.RetryGroup(g); err != nil {
			lg.Error("restarting a failed replica", "failure", why, "err", err)
		}
		return
	}
	if int(i) >= len(t.Replicas) || len(t.Replicas[i]) < 2 {
		lg.Error("the only replica's storage failed: it keeps its data and stays offline; restart the broker once the disk works", "failure", why)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.meta.Topic(t.Name); !ok || cur.ID != t.ID {
		return // deleted meanwhile
	}
	lg.Warn("replica storage failed: discarding its data here and catching up from the other replicas", "failure", why)
	// The journal says the replica lost its data before any is deleted, so
	// that it never votes with an empty log, also after a crash here.
	if err := m.host.DiscardGroup(g); err != nil && !errors.Is(err, raft.ErrUnknownGroup) {
		lg.Error("discarding a failed replica", "err", err)
		return
	}
	if err := m.parts.Remove(t.Name, i); err != nil {
		lg.Error("deleting a failed replica's data", "err", err)
		return
	}
	m.reopenLocked(t, i)
}

// reopen opens this node's replica of partition i of t, which must catch
// up before it votes.
func (m *Manager) reopen(t metadata.Topic, i int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.meta.Topic(t.Name); !ok || cur.ID != t.ID || m.parts.Get(t.Name, i) != nil || m.openQueued(t.Name, i) {
		return
	}
	if !m.discardCorruptLocked(t, i) {
		return
	}
	m.reopenLocked(t, i)
}

func (m *Manager) reopenLocked(t metadata.Topic, i int32) {
	lg := m.log.With("topic", t.Name, "partition", i)
	if err := m.FinishPendingDelete(t.Name); err != nil {
		lg.Error("the data of a deleted topic of the same name is still here", "err", err)
		return
	}
	if err := m.open(t, i, true, false); err != nil {
		lg.Error("reopening a discarded replica", "err", err)
		return
	}
	m.repairs.Add(1)
	lg.Info("replica reopened empty: catching up before it votes")
}
