package raft

import (
	"encoding/json"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// The typed states print as etcd raft's names did when Status carried
// strings, so logs and JSON are unchanged; and each etcd value maps to the
// state of the same name.
func TestStateNames(t *testing.T) {
	for _, st := range []raft.StateType{raft.StateFollower, raft.StateCandidate, raft.StateLeader, raft.StatePreCandidate} {
		if got := stateOf(st).String(); got != st.String() {
			t.Errorf("stateOf(%v) prints %q", st, got)
		}
	}
	for _, st := range []tracker.StateType{tracker.StateProbe, tracker.StateReplicate, tracker.StateSnapshot} {
		if got := progressOf(st).String(); got != st.String() {
			t.Errorf("progressOf(%v) prints %q", st, got)
		}
	}
	b, err := json.Marshal(Status{State: StateLeader, Replicas: []ReplicaStatus{{State: ProgressReplicate}}})
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		State    string
		Replicas []struct{ State string }
	}
	if err := json.Unmarshal(b, &m); err != nil || m.State != "StateLeader" || m.Replicas[0].State != "StateReplicate" {
		t.Fatalf("JSON %s: %+v %v", b, m, err)
	}
}
