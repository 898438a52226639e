package replica

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/metadata"
	"holdfast/internal/partition"
	"holdfast/internal/raft"
)

// State is a partition's leadership as this node sees it: what Metadata,
// FindCoordinator and the transaction markers tell clients and nodes.
type State struct {
	Leader      int32 // -1: none now (Err says why)
	LeaderEpoch int32
	Replicas    []int32 // the assignment, in preference order
	ISR         []int32 // sorted
	Offline     []int32 // sorted
	// Err is Kafka's code when there is no usable leader:
	// LEADER_NOT_AVAILABLE (an election, a fenced leader, or this node's
	// replica failed and it knows no other leader) or KAFKA_STORAGE_ERROR
	// (this node's replica failed and no other is live).
	Err int16
}

// State describes partition i of t. A leader knows its followers'
// progress: the in-sync set is the voters caught up to its log end within
// replica.lag.time.max.ms (raft.ReplicaStatus.InSync). A follower
// reports the unfenced replicas; a node without a replica the first
// unfenced one as leader; a replica not open here yet, no leader; a
// replica that failed here, the leader Raft last named (unserved).
func (m *Manager) State(t metadata.Topic, i int32) State {
	s := State{Leader: -1, LeaderEpoch: -1, Replicas: []int32{}, ISR: []int32{}, Offline: []int32{}}
	if int(i) < len(t.Replicas) {
		s.Replicas = slices.Clone(t.Replicas[i])
	}
	for _, r := range s.Replicas {
		if m.meta.Fenced(r) {
			s.Offline = append(s.Offline, r)
		}
	}
	live := slices.DeleteFunc(slices.Clone(s.Replicas), m.meta.Fenced)
	p := m.Get(t.Name, i)
	if p == nil {
		if m.isOffline(topicPartition{t.Name, i}) {
			// Assigned here, and its storage could not be opened.
			return m.unserved(s, live, Group(t.ID, i), 0, 0)
		}
		if len(live) == 0 || slices.Contains(s.Replicas, m.cfg.NodeID) {
			// No live replica, or ours is not open yet (the topic was
			// just created or the node is starting): naming a guessed
			// leader here sent a client to a partition with no leader
			// and let a "wait until in sync" check pass on an election
			// that had not happened. Someone asked for it: ours opens
			// next (as Lookup's), or a client that asks Metadata until
			// there is a leader, and so never produces, waited for the
			// whole queue of a restart's opens.
			m.Promote(t.Name, i)
			s.Err = kerr.LeaderNotAvailable.Code
			return s
		}
		s.Leader, s.ISR = live[0], live
		return s
	}
	st, err := p.RaftStatus()
	switch {
	case err != nil || st.Failed != "":
		return m.unserved(s, live, p.RaftGroup(), st.Leader, st.Term)
	case st.Leader == 0 || m.meta.Fenced(int32(st.Leader)) || st.QuorumSilent:
		// An election is running, or the leader we last heard of is
		// fenced, or this node leads but heard from no quorum within an
		// election timeout (the others may have elected another):
		// clients must not be sent to it.
		s.Err = kerr.LeaderNotAvailable.Code
		return s
	}
	// The leader's epoch is its Raft term. The partition's own epoch
	// (p.LeaderEpoch) moves only once an entry of the new term commits:
	// until then a new leader would be named with its predecessor's epoch.
	// A client that sends the new epoch to it meanwhile gets
	// UNKNOWN_LEADER_EPOCH and retries.
	s.Leader = int32(st.Leader)
	s.LeaderEpoch = int32(st.Term)
	if st.State != raft.StateLeader {
		// Followers do not track the others' progress.
		s.ISR = live
		return s
	}
	for _, r := range st.Replicas {
		id := int32(r.ID)
		switch {
		case r.Learner:
			// A replica being added by a reassignment: not in sync
			// until it votes.
		case m.meta.Fenced(id):
		case r.InSync:
			s.ISR = append(s.ISR, id)
		case !r.Active:
			s.Offline = append(s.Offline, id)
		}
	}
	slices.Sort(s.ISR)
	slices.Sort(s.Offline)
	return s
}

// unserved is State for a partition whose replica here failed or could
// not be opened, so that this node cannot serve it: the leader is the one
// Raft last told this node of (the failed group's last view, or a later
// leader whose appends and heartbeats still reach it), this replica is
// offline and not in sync, as Kafka answers for a replica on an offline
// log directory. It said leader -1 with KAFKA_STORAGE_ERROR, although a
// healthy leader served the partition elsewhere: clients that asked this
// node (kadm's ListOffsets) failed as a whole. LEADER_NOT_AVAILABLE when
// no other live leader is known; KAFKA_STORAGE_ERROR still when no other
// replica is live (a single node's).
func (m *Manager) unserved(s State, live []int32, group, leader, term uint64) State {
	me := m.cfg.NodeID
	if !slices.Contains(s.Offline, me) {
		s.Offline = append(s.Offline, me)
		slices.Sort(s.Offline)
	}
	if l, tm := m.host.HeardLeader(group); l != 0 && tm >= term {
		leader, term = l, tm
	}
	s.ISR = slices.DeleteFunc(live, func(id int32) bool { return id == me })
	if len(s.ISR) == 0 {
		s.Err = kerr.KafkaStorageError.Code // the only copy is the failed one
		return s
	}
	if leader == 0 || int32(leader) == me || m.meta.Fenced(int32(leader)) || !slices.Contains(s.Replicas, int32(leader)) {
		s.Err = kerr.LeaderNotAvailable.Code
		return s
	}
	s.Leader, s.LeaderEpoch = int32(leader), int32(term)
	return s
}

// RaftChanges is the change count of p's Raft group (raft.Host.Changes):
// while it and the metadata's Generation stay the same, so does
// InSyncCount(p).
func (m *Manager) RaftChanges(p *partition.Partition) uint64 { return m.host.Changes(p.RaftGroup()) }

// AllRaftChanges moves with every replica's RaftChanges, and as replicas'
// groups come and go (raft.Host.AllChanges).
func (m *Manager) AllRaftChanges() uint64 { return m.host.AllChanges() }

// InSyncCount is len(State(t, p.Index()).ISR) for this node's replica p of
// topic t, without State's copies where this node leads p: the stats loop
// asks it of every partition this node leads each second. buf is scratch
// space, returned for the next call.
func (m *Manager) InSyncCount(p *partition.Partition, buf []uint64) (int, []uint64) {
	ids, leading := m.host.InSyncVoters(p.RaftGroup(), buf[:0])
	if !leading {
		// Not (or no longer) the leader: State's other cases.
		t, ok := m.meta.Topic(p.Topic())
		if !ok {
			return 0, ids
		}
		return len(m.State(t, p.Index()).ISR), ids
	}
	if m.meta.Fenced(m.cfg.NodeID) {
		return 0, ids // a fenced leader is none (State: LEADER_NOT_AVAILABLE)
	}
	n := 0
	for _, id := range ids {
		if !m.meta.Fenced(int32(id)) {
			n++
		}
	}
	return n, ids
}
