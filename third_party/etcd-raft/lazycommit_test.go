package raft

// Tests of Holdfast's Config.LazyCommit patch (PATCHES.md).

import (
	"testing"

	"github.com/stretchr/testify/require"

	pb "go.etcd.io/raft/v3/raftpb"
)

// lazyNetwork is a 3-voter network whose node 1 leads, with LazyCommit as
// given, and a count of the messages of each type the network carried.
func lazyNetwork(t *testing.T, lazy bool) (*network, map[pb.MessageType]int, func() []*pb.Message) {
	nw := newNetworkWithConfig(func(c *Config) { c.LazyCommit = lazy }, nil, nil, nil)
	nw.send(&pb.Message{From: new(uint64(1)), To: new(uint64(1)), Type: pb.MsgHup.Enum()})
	require.Equal(t, StateLeader, nw.peers[1].(*raft).state)
	counts := map[pb.MessageType]int{}
	var apps []*pb.Message
	nw.msgHook = func(m *pb.Message) bool {
		counts[m.GetType()]++
		if m.GetType() == pb.MsgApp {
			apps = append(apps, m)
		}
		return true
	}
	return nw, counts, func() []*pb.Message { a := apps; apps = nil; return a }
}

func committed(nw *network, id uint64) uint64 { return nw.peers[id].(*raft).raftLog.committed }

// A commit that moves sends no MsgApp of its own: each follower learns it
// with the next entries or, when none follow, a heartbeat round later.
func TestLazyCommitSendsNoCommitOnlyAppend(t *testing.T) {
	nw, counts, apps := lazyNetwork(t, true)
	// Catch the followers up on the election's commit: a heartbeat round
	// (the first one skips them, they just got the empty entry).
	nw.send(&pb.Message{From: new(uint64(1)), To: new(uint64(1)), Type: pb.MsgBeat.Enum()})
	nw.send(&pb.Message{From: new(uint64(1)), To: new(uint64(1)), Type: pb.MsgBeat.Enum()})
	start := committed(nw, 1)
	require.Equal(t, start, committed(nw, 2))
	apps()
	clear(counts)

	nw.send(&pb.Message{From: new(uint64(1)), To: new(uint64(1)), Type: pb.MsgProp.Enum(), Entries: []*pb.Entry{{Data: []byte("a")}}})
	require.Equal(t, start+1, committed(nw, 1))
	for _, m := range apps() {
		require.NotEmpty(t, m.GetEntries(), "a MsgApp that carries only the commit index: %s", DescribeMessage(m, nil))
	}
	require.Equal(t, 2, counts[pb.MsgApp], "one MsgApp per follower")
	require.Equal(t, 2, counts[pb.MsgAppResp])
	require.Equal(t, start, committed(nw, 2), "the follower has not heard of the new commit yet")

	// The next entries carry it.
	nw.send(&pb.Message{From: new(uint64(1)), To: new(uint64(1)), Type: pb.MsgProp.Enum(), Entries: []*pb.Entry{{Data: []byte("b")}}})
	require.Equal(t, start+1, committed(nw, 2))
	require.Equal(t, start+1, committed(nw, 3))

	// With no entries after the last, the second heartbeat round carries
	// it: the first skips followers that got an append since the round
	// before.
	clear(counts)
	nw.send(&pb.Message{From: new(uint64(1)), To: new(uint64(1)), Type: pb.MsgBeat.Enum()})
	require.Zero(t, counts[pb.MsgHeartbeat])
	require.Equal(t, start+1, committed(nw, 2))
	nw.send(&pb.Message{From: new(uint64(1)), To: new(uint64(1)), Type: pb.MsgBeat.Enum()})
	require.Equal(t, 2, counts[pb.MsgHeartbeat])
	require.Equal(t, start+2, committed(nw, 2))
	require.Equal(t, start+2, committed(nw, 3))
}

// Without LazyCommit the leader sends the new commit at once, as upstream
// does.
func TestEagerCommitSendsCommitOnlyAppend(t *testing.T) {
	nw, counts, _ := lazyNetwork(t, false)
	start := committed(nw, 1)
	nw.send(&pb.Message{From: new(uint64(1)), To: new(uint64(1)), Type: pb.MsgProp.Enum(), Entries: []*pb.Entry{{Data: []byte("a")}}})
	require.Equal(t, start+1, committed(nw, 2))
	require.Equal(t, start+1, committed(nw, 3))
	require.Equal(t, 4, counts[pb.MsgApp], "the entries, then the commit, to each follower")
	nw.send(&pb.Message{From: new(uint64(1)), To: new(uint64(1)), Type: pb.MsgBeat.Enum()})
	require.Equal(t, 2, counts[pb.MsgHeartbeat])
}

// A follower that got no append since the last round (a lost one that
// filled its inflights, or an idle group) still gets its heartbeat, so the
// leader hears from it and resends what it lacks.
func TestLazyCommitHeartbeatRecoversLostAppend(t *testing.T) {
	nw, counts, _ := lazyNetwork(t, true)
	nw.send(&pb.Message{From: new(uint64(1)), To: new(uint64(1)), Type: pb.MsgBeat.Enum()})
	nw.send(&pb.Message{From: new(uint64(1)), To: new(uint64(1)), Type: pb.MsgBeat.Enum()})
	nw.drop(1, 3, 2.0)
	nw.send(&pb.Message{From: new(uint64(1)), To: new(uint64(1)), Type: pb.MsgProp.Enum(), Entries: []*pb.Entry{{Data: []byte("a")}}})
	last := nw.peers[1].(*raft).raftLog.lastIndex()
	require.Less(t, nw.peers[3].(*raft).raftLog.lastIndex(), last)
	nw.recover()
	clear(counts)
	nw.send(&pb.Message{From: new(uint64(1)), To: new(uint64(1)), Type: pb.MsgBeat.Enum()})
	nw.send(&pb.Message{From: new(uint64(1)), To: new(uint64(1)), Type: pb.MsgBeat.Enum()})
	require.Equal(t, last, nw.peers[3].(*raft).raftLog.lastIndex(), "the heartbeat's response brought the lost append again")
	require.Equal(t, committed(nw, 1), committed(nw, 3))
}
