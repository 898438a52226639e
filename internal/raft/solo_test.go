package raft

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"holdfast/internal/records"
	"holdfast/internal/storage"
)

func init() {
	// The package's tests with the sole-voter path on (solo.go), as the
	// broker and partition suites take HOLDFAST_TEST_RAFT_SOLO too.
	testSoloPath = os.Getenv("HOLDFAST_TEST_RAFT_SOLO") == "1"
}

// TestSoloPathTakesNoReadyPerProposal: with the sole-voter path a
// one-voter group's proposals take no RawNode Ready at all (each took at
// least one before: the append's, then the commit's); each committed batch
// still reaches OnCommit exactly once, in order, with its offsets and
// bytes. The tick loop runs once an hour: nothing but the proposals moves
// the group.
func TestSoloPathTakesNoReadyPerProposal(t *testing.T) {
	const n = 100
	for _, solo := range []bool{false, true} {
		t.Run(fmt.Sprint("solo=", solo), func(t *testing.T) {
			var mu sync.Mutex
			var got []Committed
			c := newClusterOpts(t, 1, 1, time.Hour, false, withSolo(solo), func(c *cluster) {
				c.onCommit = func(_, _ uint64, ents []Committed) {
					mu.Lock()
					defer mu.Unlock()
					for _, e := range ents {
						e.Data = slices.Clone(e.Data)
						got = append(got, e)
					}
				}
			})
			const gid = 1
			c.waitLeader(gid)
			c.propose(gid, "warm")
			h := c.nodes[1].host
			r0, s0 := h.readys.Load(), h.soloProposals.Load()
			var ps []Proposal
			for i := range n {
				ps = append(ps, c.propose(gid, fmt.Sprint("v", i)))
			}
			readys, solos := h.readys.Load()-r0, h.soloProposals.Load()-s0
			t.Logf("%d proposals: %d Readys, %d on the sole-voter path", n, readys, solos)
			if !solo {
				if readys < n || solos != 0 {
					t.Fatalf("Ready path: %d Readys, %d solo proposals for %d proposals", readys, solos, n)
				}
				return
			}
			// The warm-up's apply may still be taken in the window.
			if solos != n || readys > 2 {
				t.Fatalf("sole-voter path: %d Readys and %d solo proposals for %d proposals", readys, solos, n)
			}
			mu.Lock()
			defer mu.Unlock()
			byIndex := map[uint64]Committed{}
			for i, e := range got {
				if i > 0 && e.Index != got[i-1].Index+1 {
					t.Fatalf("OnCommit got index %d after %d", e.Index, got[i-1].Index)
				}
				byIndex[e.Index] = e
			}
			for i, p := range ps {
				e, ok := byIndex[p.Index]
				if !ok || e.Term != p.Term || e.BaseOffset != p.BaseOffset || e.EndOffset != p.EndOffset {
					t.Fatalf("proposal %+v: OnCommit got %+v (%v)", p, e, ok)
				}
				recs, err := records.Records(e.Data)
				if err != nil || len(recs) != 1 || string(recs[0].Value) != fmt.Sprint("v", i) {
					t.Fatalf("proposal %+v: OnCommit data %v %v", p, recs, err)
				}
			}
			st, err := h.Status(gid)
			if err != nil || st.CommitIndex != ps[n-1].Index || st.CommitOffset != ps[n-1].EndOffset || st.LastIndex != ps[n-1].Index {
				t.Fatalf("status %+v (%v), want everything committed", st, err)
			}
		})
	}
}

// epochs returns the leader epoch of every batch of l.
func epochs(t *testing.T, l *storage.Log) []int32 {
	t.Helper()
	var out []int32
	if err := l.Scan(l.StartOffset(), func(h records.Header, _ []byte) error {
		out = append(out, h.PartitionLeaderEpoch)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSoloPathThenMembers: a one-voter group takes proposals on the
// sole-voter path while a learner is added and then promoted (an RF=1
// partition reassigned to two replicas), with proposals going on
// throughout. Every acknowledged batch ends up on both replicas, once, at
// its offset; the conf changes went through etcd raft with no hand-back
// election: the leader's term (the leader epoch) is the same after the
// learner joined, and the epochs along the log never go down.
func TestSoloPathThenMembers(t *testing.T) {
	c := newClusterOpts(t, 1, 1, 50*time.Millisecond, false, withSolo(true))
	const gid = 1
	ctx := context.Background()
	c.waitLeader(gid)
	c.propose(gid, "warm")
	h := c.nodes[1].host
	_, term0 := c.leader(gid)
	var hosts, ackMu sync.Mutex
	var acks []acked
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { c.proposeLoop("s", gid, &hosts, stop, &acks, &ackMu) })
	count := func() int {
		ackMu.Lock()
		defer ackMu.Unlock()
		return len(acks)
	}
	waitFor(t, "proposals on the sole-voter path", func() bool { return h.soloProposals.Load() >= 50 })
	hosts.Lock()
	c.addNode(2)
	hosts.Unlock()
	c.changeConf(gid, func(h *Host) error { return h.AddLearner(ctx, gid, 2) })
	if _, term := c.leader(gid, 1); term != term0 {
		t.Fatalf("term %d after adding a learner to a group led in term %d: the hand-back cost an election", term, term0)
	}
	at := count()
	waitFor(t, "proposals with a learner", func() bool { return count() >= at+50 })
	c.changeConf(gid, func(h *Host) error { return h.AddVoter(ctx, gid, 2) })
	at = count()
	waitFor(t, "proposals with two voters", func() bool { return count() >= at+50 })
	close(stop)
	wg.Wait()
	c.propose(gid, "last")
	c.waitConverged(gid)
	c.checkAcked(gid, acks)
	for _, id := range c.ids {
		es := epochs(t, c.nodes[id].logs[gid])
		for i := 1; i < len(es); i++ {
			if es[i] < es[i-1] {
				t.Fatalf("node %d: epoch %d after %d along the log", id, es[i], es[i-1])
			}
		}
		if es[0] != int32(term0) {
			t.Fatalf("node %d: first batch of epoch %d, want %d", id, es[0], term0)
		}
	}
	t.Logf("%d acknowledged, %d on the sole-voter path, %d handed to etcd raft", len(acks), h.soloProposals.Load(), h.soloAcks.Load())
}

// TestSoloPathCrashAtEveryStep: a power cut in place of each file
// operation (torn on odd steps) while a one-voter group takes proposals on
// the sole-voter path, several per store round. After the restart, which
// reads the log back through etcd raft, every acknowledged batch
// (WaitCommitted returned nil) is there, once, at its offset, and the group
// leads again and takes a proposal.
func TestSoloPathCrashAtEveryStep(t *testing.T) {
	const gid = 1
	var solos uint64
	for step := int64(1); ; step++ {
		if step > 400 {
			t.Fatal("the proposals never completed without a crash")
		}
		c := newClusterOpts(t, 1, 1, 20*time.Millisecond, true, withSolo(true))
		nd := c.nodes[1]
		c.waitLeader(gid)
		acks := []acked{{"warm", c.propose(gid, "warm")}}
		h := nd.host
		s0 := h.soloProposals.Load()
		if step%2 == 1 {
			nd.fs.CrashTornAfter(step)
		} else {
			nd.fs.CrashAfter(step)
		}
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard, not a deadline
			defer cancel()
			for round := range 4 {
				var ps []acked
				for i := range 3 {
					v := fmt.Sprint("r", round, "-", i)
					p, err := h.Propose(ctx, gid, batch(t, v))
					if err != nil {
						return
					}
					ps = append(ps, acked{v, p})
				}
				for _, a := range ps {
					if err := h.WaitCommitted(ctx, a.p); err != nil {
						return
					}
					acks = append(acks, a)
				}
			}
		}()
		solos += h.soloProposals.Load() - s0
		crashed := nd.fs.Down()
		if !crashed {
			nd.fs.CrashAfter(0)
			nd.fs.Crash() // after the whole of it: a power cut keeps what was fsynced
		}
		c.stop(1)
		nd.fs.Reboot()
		c.start(1)
		c.waitLeader(gid)
		c.checkAcked(gid, acks)
		acks = append(acks, acked{"after", c.propose(gid, "after")})
		c.checkAcked(gid, acks)
		c.stop(1)
		if !crashed {
			if solos == 0 {
				t.Fatal("no proposal took the sole-voter path")
			}
			t.Logf("%d file operations; a power cut at each loses no acknowledged batch (%d proposals on the sole-voter path)", step-1, solos)
			return
		}
	}
}

// TestSoloPathHandsBackMidRound: a stepped host (nothing runs but what
// the test runs) takes three batches on the sole-voter path, then, before
// any store round, a command and two more batches, which go through etcd
// raft (the RawNode has the command unstable). The round finds the RawNode
// no longer a sole leader with nothing in flight and acknowledges the solo
// entries to it as its own append's response; etcd raft commits and applies
// them. The next batches take the sole-voter path again; then a command is
// committed and its apply not yet taken when batches on the path complete a
// round: handed to etcd raft too (without that step nothing would commit
// them). Every entry reaches OnCommit exactly once, in index order.
func TestSoloPathHandsBackMidRound(t *testing.T) {
	dir := t.TempDir()
	net := newMemNet(rand.New(rand.NewPCG(1, 2)), simTick)
	h, err := NewHost(Config{ID: 1, Dir: dir, TickInterval: simTick, Logger: testLogger(t), SoloPath: true, stepped: true,
		newTransport: func(ev transportEvents) (transport, error) { return net.attach(1, ev), nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	syncer := storage.NewSyncer(testLogger(t))
	syncer.Close() // a closed Syncer fsyncs inline
	l, err := storage.Open(dir+"/log", storage.DefaultConfig(), storage.Options{Syncer: syncer, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var got []Committed
	onCommit := func(_ uint64, ents []Committed) {
		for _, e := range ents {
			e.Data = slices.Clone(e.Data)
			got = append(got, e)
		}
	}
	if err := h.AddGroup(GroupConfig{ID: 1, Log: l, Voters: []uint64{1}, OnCommit: onCommit, AckOnQuorum: true}); err != nil {
		t.Fatal(err)
	}
	run := func() {
		for h.runReady() || h.runStore() {
		}
	}
	run() // elected, its empty entry stored and applied
	ctx := context.Background()
	var ps []Proposal
	propose := func(v string) {
		p, err := h.Propose(ctx, 1, batch(t, v))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for i := range 3 {
		propose(fmt.Sprint("a", i))
	}
	if n := h.soloProposals.Load(); n != 3 {
		t.Fatalf("%d batches on the sole-voter path, want 3", n)
	}
	pc, err := h.ProposeCommand(ctx, 1, []byte("cmd"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		propose(fmt.Sprint("b", i))
	}
	if n := h.soloProposals.Load(); n != 3 {
		t.Fatalf("%d batches on the sole-voter path with a command unstable, want 3", n)
	}
	run()
	if n := h.soloAcks.Load(); n != 1 {
		t.Fatalf("%d solo rounds acknowledged to etcd raft, want 1", n)
	}
	for i := range 3 {
		propose(fmt.Sprint("c", i))
	}
	if n := h.soloProposals.Load(); n != 6 {
		t.Fatalf("%d batches on the sole-voter path after the hand-back, want 6", n)
	}
	run()
	// A command stored and committed whose apply Ready is not taken yet,
	// then batches on the path: their round finds etcd raft with entries
	// to apply and hands them to it; nothing later would commit them.
	pc2, err := h.ProposeCommand(ctx, 1, []byte("cmd2"))
	if err != nil {
		t.Fatal(err)
	}
	h.runReady()
	h.runStore()
	for i := range 2 {
		propose(fmt.Sprint("d", i))
	}
	if n := h.soloProposals.Load(); n != 8 {
		t.Fatalf("%d batches on the sole-voter path, want 8", n)
	}
	h.runStore()
	if n := h.soloAcks.Load(); n != 2 {
		t.Fatalf("%d solo rounds acknowledged to etcd raft, want 2", n)
	}
	run()
	ps = append(ps, pc2)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a hang guard, not a deadline
	defer cancel()
	for _, p := range append(slices.Clone(ps), pc) {
		if err := h.WaitCommitted(wctx, p); err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
	}
	var vals []string
	for i, e := range got {
		if i > 0 && e.Index != got[i-1].Index+1 {
			t.Fatalf("OnCommit got index %d after %d", e.Index, got[i-1].Index)
		}
		switch {
		case e.Command != nil:
			vals = append(vals, string(e.Command))
		case len(e.Data) > 0:
			recs, err := records.Records(e.Data)
			if err != nil || len(recs) != 1 {
				t.Fatalf("entry %d: %v %v", e.Index, recs, err)
			}
			vals = append(vals, string(recs[0].Value))
		}
	}
	want := []string{"a0", "a1", "a2", "cmd", "b0", "b1", "c0", "c1", "c2", "cmd2", "d0", "d1"}
	if !slices.Equal(vals, want) {
		t.Fatalf("OnCommit got %v, want %v", vals, want)
	}
	if v := values(t, l); !slices.Equal(v, []string{"a0", "a1", "a2", "b0", "b1", "c0", "c1", "c2", "d0", "d1"}) {
		t.Fatalf("log holds %v", v)
	}
}
