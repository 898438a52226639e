package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"holdfast/internal/testwait"
)

// TestQuorumControllerCLI changes a running 3-node dev cluster's controller
// quorum with the commands an operator runs (issue 29, KIP-853): a fourth
// `holdfast serve --join` node starts at its own address, `holdfast
// cluster add-controller` makes it a voter, `holdfast metadata-quorum`
// lists it with its directory and endpoints (its Raft one too), `holdfast
// metadata-quorum remove-controller` (Kafka's spelling) takes it out again
// and describe --replication shows it as an observer. A node that is no voter, a
// missing --controller-id and a malformed directory id fail with the
// error in plain words.
func TestQuorumControllerCLI(t *testing.T) {
	dc := runDevCluster(t)
	b := "--bootstrap-server=" + dc.boot
	var peers []string
	for i := range 3 {
		peers = append(peers, fmt.Sprintf("%d@127.0.0.1:%d", i+1, dc.base+100+i))
	}
	// Ports of its own, none of the dev cluster's (base..base+202, bound
	// while it starts).
	port := func() int {
		for {
			if p := freePort(t); p < dc.base || p > dc.base+202 {
				return p
			}
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port())
	raft := fmt.Sprintf("127.0.0.1:%d", port())
	p4 := startProc(t, t.TempDir(), addr, "--node-id", "4", "--listen", addr, "--raft-listen", raft, "--metrics-listen", "",
		"--peers", strings.Join(peers, ","), "--join", dc.boot)

	// The node registers and becomes a learner first; until then the
	// controller says it is not registered.
	var r result
	if !testwait.Poll(60*time.Second, func() bool {
		r = hf(t, "", "cluster", "add-controller", "--controller-id", "4", b)
		return r.code == 0
	}) {
		t.Fatalf("add-controller: exit %d\n%s%s\nnode 4:\n%s\ncluster:\n%s", r.code, r.out, r.err, p4.logs, dc.Logs())
	}
	if !strings.Contains(r.out, "node 4 is a voter of the controller quorum") {
		t.Fatalf("add-controller:\n%s", r.out)
	}
	status := ok(t, "", "metadata-quorum", b)
	row(t, status, "CurrentVoters:", "[1,2,3,4]")
	if f := row(t, status, "Voter", "4:", "directory"); len(f[3]) != 22 || !strings.Contains(status, "RAFT://"+raft) {
		t.Fatalf("metadata-quorum: no directory id or Raft endpoint for voter 4:\n%s", status)
	}
	fails(t, 1, "DUPLICATE_VOTER", "cluster", "add-controller", "--controller-id", "4", b)

	ok(t, "", "metadata-quorum", "remove-controller", "--controller-id", "4", b)
	repl := ok(t, "", "metadata-quorum", "describe", "--replication", b)
	if f := row(t, repl, "4"); f[len(f)-1] != "Observer" || len(f[1]) != 22 {
		t.Fatalf("metadata-quorum --replication: node 4 not an observer with its directory id:\n%s", repl)
	}
	row(t, ok(t, "", "metadata-quorum", "describe", "--status", b), "CurrentVoters:", "[1,2,3]")
	fails(t, 2, "--status or --replication", "metadata-quorum", "describe", b)

	fails(t, 1, "VOTER_NOT_FOUND", "cluster", "remove-controller", "--controller-id", "4", b)
	fails(t, 2, "--controller-id", "cluster", "remove-controller", b)
	fails(t, 2, "--controller-directory-id", "cluster", "add-controller", "--controller-id", "4", "--controller-directory-id", "nope", b)
}
