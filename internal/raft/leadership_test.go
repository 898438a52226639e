package raft

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/cryptotest"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// publishedLeadership is node id's last OnLeadership event for group g.
func (c *cluster) publishedLeadership(id, g uint64) (Leadership, bool) {
	v, ok := c.nodes[id].published.Load(g)
	if !ok {
		return Leadership{}, false
	}
	return v.(Leadership), true
}

// The leadership a partition reads on every produce comes as events from
// the host: on every node the last event is what Leadership answers, as a
// leader is elected, settles, hands over to another node and fails.
func TestLeadershipEvents(t *testing.T) {
	// 100 election ticks (2-4 s), not 10: the test reads the leader's
	// events after waitLeader and a propose, and at 200-400 ms a heartbeat
	// held up on a loaded machine elected another leader in between. Its
	// only elections are the first one (the preferred replica's campaign)
	// and a transfer, neither of which waits a timeout.
	c := newCluster(t, 3, 1, func(c *cluster) { c.electionTicks = 100 })
	agree := func(what string) {
		t.Helper()
		waitFor(t, what, func() bool {
			for _, nd := range c.running() {
				got, ok := c.publishedLeadership(nd.id, 1)
				want, err := nd.host.Leadership(1)
				if !ok || err != nil || got != want {
					return false
				}
			}
			return true
		})
	}
	leader, _ := c.waitLeader(1)
	c.propose(1, "a")
	agree("every node's last event matching its Leadership")
	if l, _ := c.publishedLeadership(leader, 1); !l.Settled || !l.Proposing {
		t.Fatalf("leader %d published %+v", leader, l)
	}
	target := c.ids[0]
	if target == leader {
		target = c.ids[1]
	}
	if err := c.nodes[leader].host.TransferLeader(1, target); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("node %d publishing a settled leadership", target), func() bool {
		l, _ := c.publishedLeadership(target, 1)
		return l.Settled
	})
	waitFor(t, fmt.Sprintf("node %d publishing that it no longer leads", leader), func() bool {
		l, _ := c.publishedLeadership(leader, 1)
		return !l.Leading && l.Leader == target
	})
	agree("every node's last event matching its Leadership after the transfer")
	// A failed group says so: a produce sees the failure without asking.
	g := c.nodes[target].host.group(1)
	c.nodes[target].host.failGroup(g, fmt.Errorf("injected"))
	if l, _ := c.publishedLeadership(target, 1); !l.Failed || l.Leading || l.Settled {
		t.Fatalf("failed group published %+v", l)
	}
}

// Proposals this node will not store as proposed (Raft replaced them, or it
// stopped leading first) are reported like a truncated suffix: the
// partition counted them in its producer state when it proposed them.
func TestDroppedProposalsReported(t *testing.T) {
	var truncated []int64
	g := &group{id: 1, cfg: GroupConfig{OnTruncate: func(_ uint64, off int64) { truncated = append(truncated, off) }}}
	for i := range 4 {
		v, err := records.Check(batch(t, fmt.Sprint(i)), 0)
		if err != nil {
			t.Fatal(err)
		}
		v.SetBaseOffset(int64(10 + i))
		g.local = append(g.local, localBatch{index: uint64(i + 1), term: 2, v: v})
	}
	if _, ok := g.takeLocalLocked(1, 2); !ok || len(truncated) != 0 {
		t.Fatalf("stored in order: ok=%v truncated %v", ok, truncated)
	}
	// Index 2 was replaced by another leader's entry: 3 comes next.
	if lb, ok := g.takeLocalLocked(3, 2); !ok || lb.v.Header().BaseOffset != 12 || !slices.Equal(truncated, []int64{11}) {
		t.Fatalf("after a gap: %v %+v, truncated %v", ok, lb.v.Header(), truncated)
	}
	g.dropLocalLocked(len(g.local)) // stepped down with index 4 unstored
	if !slices.Equal(truncated, []int64{11, 13}) || len(g.local) != 0 {
		t.Fatalf("step-down: truncated %v, left %d", truncated, len(g.local))
	}
}

// A leader writes its proposals to the log as it proposes them, and the
// Ready loop only records them; if it stops leading before a Ready stored
// them, what it wrote ahead is cut from the log before another leader's
// entry is stored in its place, and reported like a truncated suffix.
func TestWrittenAheadTailCut(t *testing.T) {
	dir := t.TempDir()
	l, err := storage.Open(dir+"/log", storage.DefaultConfig(), storage.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h, err := NewHost(Config{ID: 1, Dir: dir, Listen: "127.0.0.1:0", TickInterval: 10 * time.Millisecond, Logger: testLogger(t), raftPathOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.AddGroup(GroupConfig{ID: 1, Log: l, Voters: []uint64{1}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := h.WaitSettled(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p, err := h.Propose(ctx, 1, batch(t, "stored"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.WaitCommitted(ctx, p); err != nil {
		t.Fatal(err)
	}
	g := h.group(1)
	if n := g.st.rebound.Load(); n != 1 {
		t.Fatalf("%d batches recorded as written by their proposer, want 1", n)
	}
	// A batch written ahead that no Ready stored (as if the node had
	// stopped leading right after proposing it).
	end := g.st.endOffset()
	ahead, err := records.Check(batch(t, "ahead"), 0)
	if err != nil {
		t.Fatal(err)
	}
	ahead.SetBaseOffset(end)
	ahead.SetLeaderEpoch(int32(p.Term))
	if _, err := l.AppendValidated(ahead); err != nil {
		t.Fatal(err)
	}
	// Another leader's entry at the same place, as the Ready loop stores it.
	other := batch(t, "other")
	records.SetBaseOffset(other, end)
	records.SetLeaderEpoch(other, int32(p.Term+1))
	last, _ := g.st.LastIndex()
	cut, err := g.st.appendEntry(&pb.Entry{Index: new(last + 1), Term: new(p.Term + 1), Data: other}, nil)
	if err != nil || cut != end {
		t.Fatalf("cut %d, err %v; want the tail from %d cut", cut, err, end)
	}
	if got := values(t, l); !slices.Equal(got, []string{"stored", "other"}) {
		t.Fatalf("log holds %v", got)
	}
}

// TestNewGroupLeaderWhilePeersOpenLate: a new group's first replica
// campaigns at once, but its peers create the group a few ticks later (they
// learn of a new topic from the metadata log after it does) and drop the
// pre-votes that came first. The first replica asks again while it is a
// pre-candidate, so the group has a leader within a few ticks of the peers
// opening it, not an election timeout (10-20 ticks) later. Stepped hosts:
// ticks are counted, not timed.
func TestNewGroupLeaderWhilePeersOpenLate(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			cryptotest.SetGlobalRandom(t, seed)
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			s := &sim{t: t, rng: rng, net: newMemNet(rng, simTick), trace: sha256.New(),
				committed: map[uint64]map[uint64]commitRec{1: {}}, leaders: map[[2]uint64]uint64{}, acks: map[uint64][]acked{},
				ackTimes: map[uint64][]ackTime{}, next: map[uint64]int{}}
			s.c = &cluster{tb: t, nodes: map[uint64]*testNode{}, logger: testLogger(t), tick: simTick}
			for id := uint64(1); id <= 3; id++ {
				s.c.ids = append(s.c.ids, id)
				s.c.nodes[id] = &testNode{id: id, dir: fmt.Sprint("/node", id), fs: storage.NewCrashFS(int64(seed + id))}
			}
			s.c.voters = slices.Clone(s.c.ids)
			defer func() {
				for _, id := range s.c.ids {
					s.kill(id)
				}
			}()
			for _, id := range s.c.ids {
				s.start(id) // no groups yet
			}
			s.c.groups = []uint64{1}
			s.addGroup(1, 1) // the first replica: it campaigns at once
			const peersAt = 3
			for tick := 1; tick <= 30; tick++ {
				if tick == peersAt {
					s.addGroup(2, 1)
					s.addGroup(3, 1)
				}
				s.now++
				s.net.now = s.now
				for _, id := range s.c.ids {
					s.c.nodes[id].host.tickOnce()
					s.net.heartbeats(id, s.c.ids)
				}
				s.drain()
				if len(s.leaders) > 0 {
					if tick > peersAt+3 {
						t.Fatalf("a leader only at tick %d, the peers opened the group at tick %d: %v", tick, peersAt, s.leaders)
					}
					return
				}
			}
			t.Fatalf("no leader in 30 ticks")
		})
	}
}
