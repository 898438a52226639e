package raft

import (
	"cmp"
	"slices"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/bufref"
)

// The seams of a Host: what it depends on that the deterministic
// simulation (sim_test.go) replaces. A node's host talks to its peers over
// TCP (transport.go) and runs two goroutines of its own, a ticker and the
// Ready loop. A simulated host gets an in-memory network instead
// (memnet_test.go), whose every delivery, drop, delay and duplicate the
// harness decides, and runs no goroutine at all: the harness ticks it
// (tickOnce) and runs its Ready cycles (runReady) itself, all from one
// goroutine and one seed, so a run repeats exactly.

// transport carries a host's Raft messages to its peers. send never blocks
// and never reports back synchronously into a group whose lock is held:
// a message it cannot deliver is reported later (transportEvents).
type transport interface {
	addr() string
	addPeer(id uint64, addr string)
	peerAddr(id uint64) (string, bool)
	send(group uint64, m *pb.Message)
	// sendHeld is send for a message whose entries' data lie in refs'
	// buffers: it releases one reference of each once it no longer reads
	// m (written to the peer, or dropped).
	sendHeld(group uint64, m *pb.Message, refs []*bufref.Ref)
	setIdentity(NodeIdentity)
	identities() map[uint64]PeerIdentity
	// heardWithin: a frame from peer arrived within d (quiesced groups
	// wake when the node they depend on goes silent).
	heardWithin(peer uint64, d time.Duration) bool
	// heardAllWithin: every peer a frame ever came from sent one within d
	// (then no quiesced group has a reason to wake: tickOnce skips them).
	heardAllWithin(d time.Duration) bool
	stats() TransportStats
	close()
}

// outMsg is one Raft message of a group.
type outMsg struct {
	group uint64
	m     *pb.Message
	// refs: the counted buffers m's entries' data lie in (a produce
	// frame, Host.ProposeOwned), one reference each that the transport
	// releases once m is written or dropped: until then the buffer is not
	// reused.
	refs []*bufref.Ref
}

// transportEvents is what a transport tells its host.
type transportEvents interface {
	receive(from uint64, msgs []outMsg)
	unreachable(peer uint64, groups []uint64)
	snapshotSent(peer, group uint64, ok bool)
}

// tickOnce ticks every group that is not quiesced (one tick of tickLoop).
// The groups go in id order: a stepped host's run repeats exactly.
//
// While every peer is heard from, a quiesced group's tick would do
// nothing (checkQuiescedLocked), so only the active list is walked: the
// groups not quiesced since they were last seen quiet (activate). A node
// with 10,000 quiesced groups walked all of them ten times a second.
// When a peer falls silent, every group is ticked, so that the quiesced
// ones that depend on it wake up.
func (h *Host) tickOnce() {
	electionTimeout := h.cfg.TickInterval * time.Duration(h.cfg.ElectionTicks)
	if !h.tr.heardAllWithin(electionTimeout) {
		if h.silentTicks.Add(1); !h.silent {
			// Every quiesced group that depends on the silent peer wakes
			// and ticks (at 10,000 partitions a burst of elections and
			// heartbeats): said once per silence, so that a burst of idle
			// CPU can be told from one.
			h.silent = true
			h.log.Warn("raft: a peer has not been heard from for an election timeout: every group ticks, and the quiesced ones that depend on it wake", "timeout", electionTimeout)
		}
		h.tickBuf = h.snapshotGroupsInto(h.tickBuf[:0])
		gs := h.tickBuf
		if h.cfg.stepped {
			slices.SortFunc(gs, func(a, b *group) int { return cmp.Compare(a.id, b.id) })
		}
		for i, g := range gs {
			gs[i] = nil // the buffer does not keep removed groups alive
			h.tickGroup(g, electionTimeout)
		}
		return
	}
	if h.silent {
		h.silent = false
		h.log.Info("raft: every peer heard from again")
	}
	h.activeMu.Lock()
	gs := h.active
	h.active = h.tickBuf[:0]
	for _, g := range gs {
		g.inActive = false
	}
	h.activeMu.Unlock()
	if h.cfg.stepped {
		slices.SortFunc(gs, func(a, b *group) int { return cmp.Compare(a.id, b.id) })
	}
	for i, g := range gs {
		if g.quiet.Load() {
			continue // quiesced since it was listed: it leaves the list
		}
		if !h.tickGroup(g, electionTimeout) {
			gs[i] = nil // failed or removed: RetryGroup lists it again
		}
	}
	// Back on the list: the groups still not quiesced (one woken meanwhile
	// is back already, by activate).
	h.activeMu.Lock()
	for i, g := range gs {
		gs[i] = nil
		if g != nil && !g.inActive && !g.quiet.Load() {
			g.inActive = true
			h.active = append(h.active, g)
		}
	}
	h.tickBuf = gs[:0]
	h.activeMu.Unlock()
}

// runReady takes the Readys of the groups with work, if any (the first
// stage of readyLoop), and reports whether there were any.
func (h *Host) runReady() bool {
	h.dirtyMu.Lock()
	n := len(h.dirty)
	h.dirtyMu.Unlock()
	h.qMu.Lock()
	n += len(h.applyQ) // the sole-voter path's applies (solo.go)
	h.qMu.Unlock()
	if n == 0 {
		return false
	}
	h.takeReadys()
	return true
}

// runStore runs one store round over the queued appends, if any (the
// second stage of readyLoop), and reports whether there were any.
func (h *Host) runStore() bool {
	if !h.storePending() {
		return false
	}
	h.storeQueued()
	return true
}

// storePending reports whether appends (or journal records) wait for a
// store round.
func (h *Host) storePending() bool {
	h.qMu.Lock()
	defer h.qMu.Unlock()
	return len(h.appendQ) > 0 || h.jflush
}

// takeDirty returns the groups marked dirty since the last call (in id
// order on a stepped host) and clears the set. The caller (takeReadys,
// under readyMu) hands the list back with putDirty when done with it.
func (h *Host) takeDirty() []*group {
	h.dirtyMu.Lock()
	gs := h.dirty
	h.dirty, h.dirtySpare = h.dirtySpare[:0], nil
	for _, g := range gs {
		g.dirty = false
	}
	h.dirtyMu.Unlock()
	if h.cfg.stepped {
		slices.SortFunc(gs, func(a, b *group) int { return cmp.Compare(a.id, b.id) })
	}
	return gs
}

// putDirty gives takeDirty's list back for reuse.
func (h *Host) putDirty(gs []*group) {
	clear(gs) // keeps no removed group alive
	h.dirtyMu.Lock()
	if h.dirtySpare == nil {
		h.dirtySpare = gs[:0]
	}
	h.dirtyMu.Unlock()
}

// goAsync runs fn on its own goroutine, or inline on a stepped host (whose
// transport never reports back synchronously).
func (h *Host) goAsync(fn func()) {
	if h.cfg.stepped {
		fn()
		return
	}
	go fn()
}
