// Holdfast patch (PATCHES.md, 3): a leader that is the only member of its
// configuration appends and commits its entries without this package's
// per-entry work, and keeps the RawNode's view of its log exact.

package raft

// soleLeader reports whether this node leads a configuration whose only
// member it is (one voter, itself; no learners; not joint), with no
// leadership transfer under way and nothing in its unstable log.
func (rn *RawNode) soleLeader() bool {
	r := rn.raft
	if r.state != StateLeader || r.leadTransferee != None || !r.trk.IsSingleton() ||
		len(r.trk.Learners) != 0 || len(r.trk.LearnersNext) != 0 {
		return false
	}
	if _, ok := r.trk.Voters[0][r.id]; !ok {
		return false
	}
	u := &r.raftLog.unstable
	return len(u.entries) == 0 && u.snapshot == nil
}

// SoleAppended tells a sole leader (see soleLeader) that the application
// appended entries of the leader's term to Storage itself, up to index last
// (Storage.LastIndex() is last): the unstable log now starts after last, as
// it does after those entries were handed out in a Ready and their append
// was acknowledged (stableTo). The entries are not yet durable: the
// leader's own progress does not match them (SoleCommitted does that).
// Reports false, changing nothing, if the node is not a sole leader or last
// is not the storage's last index.
func (rn *RawNode) SoleAppended(last uint64) bool {
	r := rn.raft
	if !rn.soleLeader() || last < r.raftLog.unstable.offset {
		return false
	}
	if li, err := r.raftLog.storage.LastIndex(); err != nil || li != last {
		return false
	}
	r.raftLog.unstable.offset = last + 1
	r.raftLog.unstable.offsetInProgress = last + 1
	return true
}

// SoleCommitted tells a sole leader (see soleLeader) that its log is durable
// on this node up to index, an entry of its current term, and that the
// application has applied every entry up to it itself: its own progress
// matches index, the commit index moves to it (a quorum of one), and so do
// the applied index and the hard state last handed out (the application
// persists the commit itself). What the leader's own MsgAppResp and the
// Ready that hands out the committed entries would do, with no Ready.
// Reports false, changing nothing, unless the node is a sole leader whose
// every committed entry is applied and index is within its log, above its
// commit index and of its term.
func (rn *RawNode) SoleCommitted(index uint64) bool {
	r := rn.raft
	l := r.raftLog
	if !rn.soleLeader() || index <= l.committed || l.applied != l.committed || l.applying != l.committed ||
		index > l.lastIndex() {
		return false
	}
	if t, err := l.term(index); err != nil || t != r.Term {
		return false
	}
	pr := r.trk.Progress[r.id]
	if pr == nil {
		return false
	}
	pr.MaybeUpdate(index)
	l.commitTo(index)
	l.appliedTo(index, 0)
	rn.prevHardSt = r.hardState()
	return true
}

// SoleLeader reports whether this node leads, in term, a configuration
// whose only member it is, with no leadership transfer under way and
// nothing in its unstable log: where SoleAppended may be used. (No
// BasicStatus: that allocates the hard state, and this is asked per
// proposal.)
func (rn *RawNode) SoleLeader(term uint64) bool { return rn.raft.Term == term && rn.soleLeader() }
