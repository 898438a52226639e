package raft

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"holdfast/internal/clock"
	"holdfast/internal/storage"
	"holdfast/internal/testwait"
)

// The tick loop runs on Config.Clock: with an hour's tick, two nodes of a
// three-voter group (the first voter, the one that would campaign at
// once, never starts) elect a leader only as a fake clock is moved, an
// hour per step; on the time package they would wait an hour per tick.
// Before the clock seam this test timed out with no leader.
func TestTickLoopOnInjectedClock(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	logger := testLogger(t)
	const gid = 1
	hosts := map[uint64]*Host{}
	for _, id := range []uint64{1, 2} {
		dir := filepath.Join(t.TempDir(), fmt.Sprint("node", id))
		syncer := storage.NewSyncer(logger)
		t.Cleanup(func() { syncer.Close() })
		h, err := NewHost(Config{ID: id, Dir: dir, Listen: "127.0.0.1:0", TickInterval: time.Hour, Clock: clk,
			Logger: logger.With("test_node", id)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		l, err := storage.Open(filepath.Join(dir, "log"), storage.DefaultConfig(), storage.Options{Syncer: syncer, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		if err := h.AddGroup(GroupConfig{ID: gid, Log: l, Voters: []uint64{3, 1, 2}}); err != nil {
			t.Fatal(err)
		}
		hosts[id] = h
	}
	hosts[1].SetPeer(2, hosts[2].Addr())
	hosts[2].SetPeer(1, hosts[1].Addr())
	leader := func() bool {
		for _, h := range hosts {
			if st, err := h.Status(gid); err == nil && st.State == StateLeader {
				return true
			}
		}
		return false
	}
	if leader() {
		t.Fatal("a leader before any tick")
	}
	// A tick the loop has not read yet is dropped by the next (as with
	// time.Ticker): step one interval at a time until the election
	// timeout (10 to 20 ticks) has passed and the vote went through.
	testwait.Until(t, 30*time.Second, "a leader elected on the fake clock's ticks", func() bool {
		clk.Advance(time.Hour)
		return leader()
	})
}
