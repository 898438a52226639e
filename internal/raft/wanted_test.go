package raft

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"holdfast/internal/storage"
)

// A node that does not run a group (its replica is not open yet) hears
// of it through SetWantedHook when the group's other replicas elect a
// leader and replicate to it; groups it runs are never named.
func TestWantedHookNamesGroupsNotRunHere(t *testing.T) {
	c := newCluster(t, 3, 1)
	var mu sync.Mutex
	var wanted []uint64
	c.nodes[3].host.SetWantedHook(func(g uint64) {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(wanted, g) {
			wanted = append(wanted, g)
		}
	})
	c.waitLeader(1)
	const g = 2 // on nodes 1 and 2 only: a majority of its voters 1, 2, 3
	for _, id := range []uint64{1, 2} {
		nd := c.nodes[id]
		l, err := storage.Open(filepath.Join(nd.dir, "logs", fmt.Sprint(g)), storage.DefaultConfig(), storage.Options{Syncer: nd.syncer, Logger: c.logger})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		if err := nd.host.AddGroup(GroupConfig{ID: g, Log: l, Voters: c.voters}); err != nil {
			t.Fatal(err)
		}
	}
	c.waitLeader(g, 1, 2)
	c.propose(g, "x", 1, 2)
	waitFor(t, "node 3 told of group 2", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(wanted, g)
	})
	c.propose(1, "y")
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(wanted, 1) {
		t.Fatalf("the hook named group 1, which node 3 runs: %v", wanted)
	}
}
