package raft

import (
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// State is this node's role in one Raft group (Status.State). Callers
// compare against the constants; String gives etcd raft's names
// ("StateLeader", ...), which is what logs, the CLI and JSON have always
// shown, so the type changes no output.
type State uint8

const (
	StateFollower State = iota
	StateCandidate
	StateLeader
	StatePreCandidate
)

var stateNames = [...]string{
	StateFollower:     "StateFollower",
	StateCandidate:    "StateCandidate",
	StateLeader:       "StateLeader",
	StatePreCandidate: "StatePreCandidate",
}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "StateUnknown"
}

// MarshalText keeps the name in JSON and text encodings.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// stateOf maps etcd raft's role onto ours by name, not by number, so a
// reordering upstream cannot silently swap roles.
func stateOf(st raft.StateType) State {
	switch st {
	case raft.StateLeader:
		return StateLeader
	case raft.StateCandidate:
		return StateCandidate
	case raft.StatePreCandidate:
		return StatePreCandidate
	default:
		return StateFollower
	}
}

// ProgressState is how the leader is replicating to one replica
// (ReplicaStatus.State), after etcd raft's tracker: probing for its log
// end, replicating eagerly, or waiting on a snapshot. String gives etcd's
// names ("StateReplicate", ...), as shown before the type existed.
type ProgressState uint8

const (
	ProgressProbe ProgressState = iota
	ProgressReplicate
	ProgressSnapshot
)

var progressNames = [...]string{
	ProgressProbe:     "StateProbe",
	ProgressReplicate: "StateReplicate",
	ProgressSnapshot:  "StateSnapshot",
}

func (s ProgressState) String() string {
	if int(s) < len(progressNames) {
		return progressNames[s]
	}
	return "StateUnknown"
}

// MarshalText keeps the name in JSON and text encodings.
func (s ProgressState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func progressOf(st tracker.StateType) ProgressState {
	switch st {
	case tracker.StateReplicate:
		return ProgressReplicate
	case tracker.StateSnapshot:
		return ProgressSnapshot
	default:
		return ProgressProbe
	}
}
