package raft

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/cryptotest"
	"time"

	"go.etcd.io/raft/v3"

	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// The deterministic simulation: hosts of a 3-node cluster in one process,
// stepped (no goroutine of their own), joined by a memNet, each on its own
// CrashFS, all driven from the test's goroutine by one random source. A
// seed fixes everything the harness decides - which message is delivered
// next, which are lost, late, duplicated or reordered, when a node ticks,
// when a Ready cycle (with its fsyncs) runs, which faults happen when - and
// etcd raft's randomized election timeouts, which it draws from
// crypto/rand: testing/cryptotest.SetGlobalRandom seeds that (etcd raft
// v3.7's globalRand reads crypto/rand.Reader), and since every draw happens
// on this one goroutine, their order is fixed too. So a seed's run repeats
// exactly; TestRandomFaultsRepeat checks that on a digest of every
// delivered message and committed entry.
//
// What the harness checks, online and at the end: no two nodes ever commit
// different entries at one index, and a committed entry never changes
// (compared on every commit any node reports, and against every log at the
// end), nor goes missing (every log reaches the highest committed index);
// at most one node leads a group in a term (checked after every tick and
// Ready cycle); committed entries' Kafka offsets are contiguous (each entry
// starts where the one before it ends); every acknowledged proposal is in
// every log at the offset it was acknowledged at, and no value is stored
// twice; offsets follow the order clients saw (a proposal made after
// another was acknowledged sits at a higher offset); after healing, every
// node's log holds the same entries, byte for byte.
//
// A failing seed is logged with the events before the failure and
// RAFT_SEED=n repeats it; RAFT_SEEDS=n runs n seeds, RAFT_SIM_TICKS=n makes
// each run n faulty ticks long (300 by default).

const simTick = 100 * time.Millisecond // what a tick stands for (quiesce, timestamps)

type simConfig struct {
	nodes, groups int
	ticks         int     // ticks with faults, before healing
	faultRate     float64 // chance of a fault action per tick
	// ackBeforeFsync runs the hosts with a planted bug (Config's
	// ackBeforeFsync): TestRandomFaultsCatchesEarlyAck checks that the
	// simulation finds it.
	ackBeforeFsync bool
}

var defaultSim = simConfig{nodes: 3, groups: 2, ticks: 300, faultRate: 0.15}

// simResult sums up a run; digest covers every delivered message and
// committed entry, in order.
type simResult struct {
	digest                         string
	delivered, dropped, duplicated int64
	commits, acked, faults         int
}

type sim struct {
	t      testing.TB
	cfg    simConfig
	rng    *rand.Rand
	net    *memNet
	c      *cluster
	trace  hash.Hash
	now    int64
	recent []string // the last faults and acknowledgements, for a failure

	committed map[uint64]map[uint64]commitRec // group -> index -> the entry committed there
	leaders   map[[2]uint64]uint64            // (group, term) -> the node seen leading it
	pending   []simProp
	acks      map[uint64][]acked
	ackTimes  map[uint64][]ackTime // group -> when each acknowledged proposal was made and acknowledged
	op        int64                // counts proposals and acknowledgements: the order clients saw them in
	next      map[uint64]int       // group -> next value's number

	noProposals bool // step proposes nothing (an idle cluster)

	restartAt map[uint64]int64 // a stopped node starts again at this tick
	// rejoin: the node's replicas open as rebuilt ones (GroupConfig.Rejoin:
	// its storage was lost and its data directory is new).
	rejoin map[uint64]bool
	// afterDelivery, if set, runs after each message the harness delivers
	// (a scripted test's fault at an exact point).
	afterDelivery func()
	resumeAt      map[uint64]int64 // a paused node resumes at this tick
	armed         map[uint64]bool  // a power cut is set to happen during this node's I/O

	commits, faults int
}

// commitRec is what was committed at an index.
type commitRec struct {
	term      uint64
	base, end int64
	digest    [32]byte
}

// simProp is a proposal waiting for its outcome on the host that took it.
type simProp struct {
	h  *Host
	v  string
	p  Proposal
	at int64 // sim.op when proposed
}

// ackTime is when (in sim.op) an acknowledged proposal was made and when
// it was acknowledged.
type ackTime struct {
	v               string
	proposed, acked int64
	base            int64
}

func runSim(t *testing.T, seed uint64, cfg simConfig) simResult {
	t.Helper()
	return runSimTB(t, t, seed, cfg)
}

// runSimTB runs the simulation reporting to tb (t, or a catchTB).
func runSimTB(t *testing.T, tb testing.TB, seed uint64, cfg simConfig) simResult {
	tb.Helper()
	groups := make([]uint64, 0, cfg.groups)
	for g := 1; g <= cfg.groups; g++ {
		groups = append(groups, uint64(g))
	}
	s := newSim(t, tb, seed, cfg, groups)
	defer func() { // also on t.Fatalf (runtime.Goexit) and a catchTB's panic
		if tb.Failed() {
			tb.Logf("seed %d: the last things that happened (RAFT_SEED=%d to repeat this run):\n%s", seed, seed, strings.Join(s.recent, "\n"))
		}
		for _, id := range s.c.ids {
			s.kill(id)
		}
	}()
	for _, id := range s.c.ids {
		s.start(id)
	}
	for range cfg.ticks {
		s.step(true)
	}
	s.heal()
	s.settle()
	for _, g := range s.c.groups {
		s.checkGroup(g)
	}
	return simResult{
		digest: hex.EncodeToString(s.trace.Sum(nil)), delivered: s.net.delivered, dropped: s.net.dropped, duplicated: s.net.duplicated,
		commits: s.commits, acked: s.ackCount(), faults: s.faults,
	}
}

// newSim sets up a simulated cluster of cfg.nodes nodes with the given
// groups; no node runs yet (start).
func newSim(t *testing.T, tb testing.TB, seed uint64, cfg simConfig, groups []uint64) *sim {
	cryptotest.SetGlobalRandom(t, seed) // etcd raft's election timeouts
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	s := &sim{
		t: tb, cfg: cfg, rng: rng, net: newMemNet(rng, simTick), trace: sha256.New(),
		committed: map[uint64]map[uint64]commitRec{}, leaders: map[[2]uint64]uint64{}, acks: map[uint64][]acked{},
		ackTimes: map[uint64][]ackTime{}, next: map[uint64]int{},
		restartAt: map[uint64]int64{}, resumeAt: map[uint64]int64{}, armed: map[uint64]bool{}, rejoin: map[uint64]bool{},
	}
	s.net.onDeliver = s.traceDelivery
	s.c = &cluster{tb: tb, nodes: map[uint64]*testNode{}, logger: testLogger(t), tick: simTick}
	for i := 1; i <= cfg.nodes; i++ {
		id := uint64(i)
		s.c.ids = append(s.c.ids, id)
		s.c.nodes[id] = &testNode{id: id, dir: fmt.Sprint("/node", id), fs: storage.NewCrashFS(int64(seed) + int64(id))}
	}
	for _, g := range groups {
		s.c.groups = append(s.c.groups, g)
		s.committed[g] = map[uint64]commitRec{}
	}
	s.c.voters = slices.Clone(s.c.ids)
	return s
}

func (s *sim) ackCount() int {
	n := 0
	for _, a := range s.acks {
		n += len(a)
	}
	return n
}

func (s *sim) note(format string, args ...any) {
	line := fmt.Sprintf("tick %d: ", s.now) + fmt.Sprintf(format, args...)
	s.trace.Write([]byte(line))
	s.recent = append(s.recent, line)
	if len(s.recent) > 60 {
		s.recent = s.recent[1:]
	}
}

func (s *sim) traceDelivery(e *envelope) {
	var b [32]byte
	binary.BigEndian.PutUint64(b[0:], e.from)
	binary.BigEndian.PutUint64(b[8:], e.to)
	binary.BigEndian.PutUint64(b[16:], e.group)
	binary.BigEndian.PutUint64(b[24:], uint64(len(e.data)))
	s.trace.Write(b[:])
	s.trace.Write(e.data)
}

// start opens node id from what its disk holds.
func (s *sim) start(id uint64) {
	s.t.Helper()
	nd := s.c.nodes[id]
	nd.fs.Reboot()
	nd.syncer = storage.NewSyncer(s.c.logger)
	nd.syncer.Close() // a closed Syncer fsyncs inline, on the caller's goroutine
	h, err := NewHost(Config{
		ID: id, Dir: nd.dir, TickInterval: simTick, ElectionTicks: 10, FS: nd.fs, Logger: s.c.logger.With("test_node", id),
		stepped: true, ackBeforeFsync: s.cfg.ackBeforeFsync, newTransport: func(ev transportEvents) (transport, error) { return s.net.attach(id, ev), nil },
	})
	if err != nil {
		s.t.Fatalf("start node %d: %v", id, err)
	}
	nd.host = h
	nd.logs = map[uint64]*storage.Log{}
	for _, g := range s.c.groups {
		s.addGroup(id, g)
	}
	s.note("node %d started", id)
}

// addGroup opens group g's log on node id and adds the group to its host.
func (s *sim) addGroup(id, g uint64) {
	s.t.Helper()
	nd := s.c.nodes[id]
	lc := storage.DefaultConfig()
	lc.SegmentBytes = 16 << 10 // segments roll and compaction drops them
	l, err := storage.Open(fmt.Sprint(nd.dir, "/logs/", g), lc, storage.Options{FS: nd.fs, Syncer: nd.syncer, Logger: s.c.logger, Now: s.clock})
	if err != nil {
		s.t.Fatalf("node %d: open log: %v", id, err)
	}
	nd.logs[g] = l
	if err := nd.host.AddGroup(GroupConfig{ID: g, Log: l, Voters: s.c.voters, OnCommit: s.onCommit(id), AckOnQuorum: true,
		Rejoin: s.rejoin[id], LazyCommit: g%2 == 0}); err != nil { // partitions' setting, and the default, side by side
		s.t.Fatalf("node %d add group %d: %v", id, g, err)
	}
}

func (s *sim) clock() time.Time {
	return time.Unix(1_700_000_000, 0).Add(time.Duration(s.now) * simTick)
}

// kill ends node id's process at once (kill -9): nothing more is written,
// flushed or fsynced; its disk keeps what was written (the page cache),
// unless the power was cut first.
func (s *sim) kill(id uint64) {
	nd := s.c.nodes[id]
	h := nd.host
	if h == nil {
		return
	}
	h.tr.close()
	j := h.journal
	j.mu.Lock()
	if j.f != nil {
		j.f.Close()
		j.f, j.buf = nil, nil
	}
	j.mu.Unlock()
	close(h.done)
	nd.host, nd.logs = nil, nil // abandoned, not closed: closing would fsync
	delete(s.net.paused, id)
	delete(s.resumeAt, id)
	delete(s.armed, id)
	s.pending = slices.DeleteFunc(s.pending, func(p simProp) bool { return p.h == h })
}

// onCommit checks every committed entry any node reports against what was
// committed at its index before, and its offsets against its neighbours'.
func (s *sim) onCommit(node uint64) func(uint64, []Committed) {
	return func(g uint64, ents []Committed) {
		byIdx := s.committed[g]
		for _, c := range ents {
			rec := commitRec{term: c.Term, base: c.BaseOffset, end: c.EndOffset, digest: sha256.Sum256(append(slices.Clone(c.Data), c.Command...))}
			if old, ok := byIdx[c.Index]; ok && old != rec {
				s.t.Fatalf("node %d group %d: committed index %d as term %d [%d, %d); it was committed as term %d [%d, %d) (same data: %v)",
					node, g, c.Index, rec.term, rec.base, rec.end, old.term, old.base, old.end, old.digest == rec.digest)
			}
			byIdx[c.Index] = rec
			if prev, ok := byIdx[c.Index-1]; ok && prev.end != rec.base {
				s.t.Fatalf("group %d: committed entry %d starts at offset %d, entry %d ended at %d", g, c.Index, rec.base, c.Index-1, prev.end)
			}
			if next, ok := byIdx[c.Index+1]; ok && rec.end != next.base {
				s.t.Fatalf("group %d: committed entry %d ends at offset %d, entry %d starts at %d", g, c.Index, rec.end, c.Index+1, next.base)
			}
			s.commits++
			var b [48]byte
			binary.BigEndian.PutUint64(b[0:], node)
			binary.BigEndian.PutUint64(b[8:], g)
			binary.BigEndian.PutUint64(b[16:], c.Index)
			binary.BigEndian.PutUint64(b[24:], c.Term)
			binary.BigEndian.PutUint64(b[32:], uint64(c.BaseOffset))
			binary.BigEndian.PutUint64(b[40:], uint64(c.EndOffset))
			s.trace.Write(b[:])
			s.trace.Write(rec.digest[:])
		}
	}
}

// step is one tick: faults (if faulty), proposals, every running node's
// tick and node heartbeats, then messages and Ready cycles in a random
// interleaving until nothing more can happen in this tick.
func (s *sim) step(faulty bool) {
	s.now++
	s.net.now = s.now
	for _, id := range s.c.ids {
		if at, ok := s.restartAt[id]; ok && at <= s.now {
			delete(s.restartAt, id)
			s.start(id)
		}
		if at, ok := s.resumeAt[id]; ok && at <= s.now {
			delete(s.resumeAt, id)
			delete(s.net.paused, id)
			s.note("node %d resumed", id)
		}
	}
	if faulty && s.rng.Float64() < s.cfg.faultRate {
		s.fault()
	}
	if !s.noProposals {
		s.propose()
	}
	order := slices.Clone(s.c.ids)
	s.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, id := range order {
		if h := s.live(id); h != nil {
			h.tickOnce()
			s.checkLeaders(id)
			s.net.heartbeats(id, s.c.ids)
		}
	}
	s.drain()
}

// checkLeaders: node id leads no group in a term another node led (Raft's
// election safety: at most one leader per term).
func (s *sim) checkLeaders(id uint64) {
	h := s.c.nodes[id].host
	if h == nil {
		return
	}
	for _, gid := range s.c.groups {
		g := h.group(gid)
		if g == nil {
			continue
		}
		g.mu.Lock()
		var bs raft.BasicStatus
		ok := g.failed == nil && !g.removed
		if ok {
			bs = g.rn.BasicStatus()
		}
		g.mu.Unlock()
		if !ok || bs.RaftState != raft.StateLeader {
			continue
		}
		k := [2]uint64{gid, bs.GetTerm()}
		if other, seen := s.leaders[k]; !seen {
			s.leaders[k] = id
			s.note("node %d leads group %d in term %d", id, gid, bs.GetTerm())
		} else if other != id {
			s.t.Fatalf("group %d: nodes %d and %d both lead term %d", gid, other, id, bs.GetTerm())
		}
	}
}

// live returns node id's host if it runs and is not paused.
func (s *sim) live(id uint64) *Host {
	if s.net.paused[id] {
		return nil
	}
	return s.c.nodes[id].host
}

func hasWork(h *Host) bool {
	h.dirtyMu.Lock()
	defer h.dirtyMu.Unlock()
	return len(h.dirty) > 0
}

// A host's two Ready stages (ready.go) are picked apart, so that messages
// are delivered and Readys taken between an append and its store round:
// a leader's followers acknowledge before its own fsync, a power cut
// falls between the two.
type simWork struct {
	id    uint64
	store bool
}

// drain delivers messages and runs Ready cycles, picked at random, until
// neither is left for this tick.
func (s *sim) drain() {
	for range 100_000 {
		cands := s.net.candidates()
		var busy []simWork
		for _, id := range s.c.ids {
			if h := s.live(id); h != nil {
				if hasWork(h) {
					busy = append(busy, simWork{id, false})
				}
				if h.storePending() {
					busy = append(busy, simWork{id, true})
				}
			}
		}
		if len(cands)+len(busy) == 0 {
			return
		}
		k := s.rng.IntN(len(cands) + len(busy))
		if k < len(cands) {
			s.net.deliverIndex(cands[k])
			if s.afterDelivery != nil {
				s.afterDelivery()
			}
			continue
		}
		w := busy[k-len(cands)]
		id := w.id
		if w.store {
			s.c.nodes[id].host.runStore()
		} else {
			s.c.nodes[id].host.runReady()
		}
		if s.c.nodes[id].fs.Down() {
			s.note("node %d: power cut during its I/O", id)
			s.kill(id)
			s.restartAt[id] = s.now + 1 + int64(s.rng.IntN(20))
			continue
		}
		s.checkLeaders(id)
		s.outcomes(id)
	}
	s.t.Fatalf("tick %d: messages and Ready cycles did not settle within 100000 steps", s.now)
}

// outcomes resolves node id's proposals whose index it has committed:
// acknowledged if its own entry is there, lost otherwise.
func (s *sim) outcomes(id uint64) {
	h := s.c.nodes[id].host
	s.pending = slices.DeleteFunc(s.pending, func(sp simProp) bool {
		if sp.h != h {
			return false
		}
		g := h.group(sp.p.Group)
		g.mu.Lock()
		commit, failed := g.ackIndexLocked(), g.failed // WaitCommitted's condition
		g.mu.Unlock()
		if failed != nil {
			return true
		}
		if commit < sp.p.Index {
			return false
		}
		if g.st.holds(sp.p) {
			s.op++
			s.acks[sp.p.Group] = append(s.acks[sp.p.Group], acked{sp.v, sp.p})
			s.ackTimes[sp.p.Group] = append(s.ackTimes[sp.p.Group], ackTime{sp.v, sp.at, s.op, sp.p.BaseOffset})
			s.note("node %d acknowledged %s at offset %d", id, sp.v, sp.p.BaseOffset)
		}
		return true
	})
}

// propose: now and then, a client sends one to three batches to a node
// that believes it leads the group (with a partition, there may be two).
func (s *sim) propose() {
	for _, g := range s.c.groups {
		if s.rng.IntN(2) == 0 {
			continue
		}
		var leaders []uint64
		for _, id := range s.c.ids {
			if h := s.live(id); h != nil {
				if l, err := h.Leadership(g); err == nil && l.Proposing {
					leaders = append(leaders, id)
				}
			}
		}
		if len(leaders) == 0 {
			continue
		}
		id := leaders[s.rng.IntN(len(leaders))]
		h := s.c.nodes[id].host
		if s.rng.IntN(4) == 0 {
			// A side entry (no offset) among the batches: a leader writes
			// a batch ahead only once every side entry before it is stored.
			_, _ = h.ProposeCommand(context.Background(), g, []byte("sim-command"))
		}
		for range 1 + s.rng.IntN(3) {
			v := fmt.Sprintf("g%d-%d", g, s.next[g])
			s.next[g]++
			b, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
				[]records.Record{{Timestamp: s.clock().UnixMilli(), Value: []byte(v)}})
			if err != nil {
				s.t.Fatal(err)
			}
			p, err := h.Propose(context.Background(), g, b)
			if err != nil {
				break
			}
			s.op++
			s.pending = append(s.pending, simProp{h, v, p, s.op})
		}
	}
}

// faultWeights: how often each fault action of fault is picked, by its
// number. Power cuts weigh most: the windows they hit (between a write and
// its fsync, between a message and the state it speaks for) are narrow.
var faultWeights = []int{
	0:  2, // cut a link both ways
	1:  1, // cut one way
	2:  2, // isolate a node
	3:  2, // lossy link
	4:  1, // slow link
	5:  1, // duplicating link
	6:  1, // reordering link
	7:  3, // heal the links
	8:  0,
	9:  2, // pause a node
	10: 2, // kill a node
	11: 3, // power loss on a node
	12: 3, // power cut during a node's next writes and fsyncs
	13: 1, // power loss on every node
	14: 2, // compaction (retention) on a node
}

func (s *sim) pickFault() int {
	total := 0
	for _, w := range faultWeights {
		total += w
	}
	r := s.rng.IntN(total)
	for k, w := range faultWeights {
		if r < w {
			return k
		}
		r -= w
	}
	return 0
}

// fault does one random fault action.
func (s *sim) fault() {
	s.faults++
	ids := s.c.ids
	a, b := ids[s.rng.IntN(len(ids))], ids[s.rng.IntN(len(ids))]
	var down, paused int
	for _, id := range ids {
		if s.c.nodes[id].host == nil {
			down++
		}
		if s.net.paused[id] {
			paused++
		}
	}
	switch k := s.pickFault(); {
	case k == 0 && a != b:
		s.net.link(a, b).cut, s.net.link(b, a).cut = true, true
		s.note("cut %d-%d", a, b)
	case k == 1 && a != b:
		s.net.link(a, b).cut = true
		s.note("cut %d->%d only", a, b)
	case k == 2:
		for _, o := range ids {
			if o != a {
				s.net.link(a, o).cut, s.net.link(o, a).cut = true, true
			}
		}
		s.note("isolate %d", a)
	case k == 3 && a != b:
		p := 0.1 + 0.4*s.rng.Float64()
		s.net.link(a, b).loss = p
		s.note("lossy %d->%d (%.2f)", a, b, p)
	case k == 4 && a != b:
		d := 1 + s.rng.IntN(5)
		s.net.link(a, b).delay = d
		s.note("delay %d->%d up to %d ticks", a, b, d)
	case k == 5 && a != b:
		p := 0.1 + 0.3*s.rng.Float64()
		s.net.link(a, b).dup = p
		s.note("duplicate %d->%d (%.2f)", a, b, p)
	case k == 6 && a != b:
		s.net.link(a, b).reorder = true
		s.net.link(a, b).delay = max(s.net.link(a, b).delay, 2)
		s.note("reorder %d->%d", a, b)
	case k == 7:
		s.net.healAll()
		s.note("heal links")
	case k == 9 && paused == 0 && s.c.nodes[a].host != nil:
		s.net.paused[a] = true
		s.resumeAt[a] = s.now + 1 + int64(s.rng.IntN(40))
		s.note("pause %d until tick %d", a, s.resumeAt[a])
	case k == 10 && down == 0:
		s.kill(a)
		s.restartAt[a] = s.now + 1 + int64(s.rng.IntN(30))
		s.note("kill %d, restart at tick %d", a, s.restartAt[a])
	case k == 11 && down == 0 && s.c.nodes[a].host != nil:
		torn := s.rng.IntN(2) == 0
		if torn {
			s.c.nodes[a].fs.CrashTorn()
		} else {
			s.c.nodes[a].fs.Crash()
		}
		s.kill(a)
		s.restartAt[a] = s.now + 1 + int64(s.rng.IntN(30))
		s.note("power loss on %d (torn %v), restart at tick %d", a, torn, s.restartAt[a])
	case k == 12 && down == 0 && len(s.armed) == 0 && s.c.nodes[a].host != nil:
		n := 1 + int64(s.rng.IntN(40))
		s.c.nodes[a].fs.CrashAfter(n)
		s.armed[a] = true
		s.note("power cut on %d at its %dth write or fsync from now", a, n)
	case k == 13:
		for _, id := range ids {
			if s.c.nodes[id].host != nil {
				s.c.nodes[id].fs.Crash()
				s.kill(id)
			}
		}
		s.note("power loss on every node")
		for _, id := range ids {
			delete(s.restartAt, id)
			s.start(id)
		}
	case k == 14:
		nd := s.c.nodes[a]
		if nd.host == nil || s.net.paused[a] {
			return
		}
		for _, g := range s.c.groups {
			st, err := nd.host.Status(g)
			if err != nil || st.CommitOffset <= 20 {
				continue
			}
			to := st.CommitOffset - 5 - int64(s.rng.IntN(20))
			if err := nd.host.Compact(g, to); err != nil {
				if nd.fs.Down() {
					break
				}
				s.t.Fatalf("compact node %d group %d to %d: %v", a, g, to, err)
			}
			s.note("compact node %d group %d below %d", a, g, to)
		}
		if nd.fs.Down() {
			s.note("node %d: power cut during compaction", a)
			s.kill(a)
			s.restartAt[a] = s.now + 1 + int64(s.rng.IntN(20))
		}
	default:
		s.faults--
	}
}

// heal ends every fault: links, pauses, armed power cuts; stopped nodes
// start.
func (s *sim) heal() {
	s.net.healAll()
	for _, id := range s.c.ids {
		s.c.nodes[id].fs.CrashAfter(0)
		delete(s.net.paused, id)
		delete(s.resumeAt, id)
		if s.c.nodes[id].host == nil {
			delete(s.restartAt, id)
			s.start(id)
		}
	}
	clear(s.armed)
	s.note("healed")
}

// settle runs fault-free ticks until every group has committed a final
// proposal and every node holds the same log, committed and durable to
// its end.
func (s *sim) settle() {
	final := map[uint64]bool{}
	for range 3000 {
		s.step(false)
		for _, g := range s.c.groups {
			if final[g] {
				continue
			}
			for _, a := range s.acks[g] {
				if strings.HasPrefix(a.v, "final") {
					final[g] = true
				}
			}
			if !final[g] && !slices.ContainsFunc(s.pending, func(p simProp) bool { return p.p.Group == g && strings.HasPrefix(p.v, "final") }) {
				s.proposeFinal(g)
			}
		}
		if len(final) == len(s.c.groups) && s.converged() {
			return
		}
	}
	s.t.Fatalf("the healed cluster did not converge within 3000 ticks")
}

func (s *sim) proposeFinal(g uint64) {
	for _, id := range s.c.ids {
		h := s.live(id)
		if h == nil {
			continue
		}
		if l, err := h.Leadership(g); err != nil || !l.Proposing {
			continue
		}
		b, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
			[]records.Record{{Timestamp: s.clock().UnixMilli(), Value: []byte(fmt.Sprint("final", g))}})
		if err != nil {
			s.t.Fatal(err)
		}
		if p, err := h.Propose(context.Background(), g, b); err == nil {
			s.op++
			s.pending = append(s.pending, simProp{h, fmt.Sprint("final", g), p, s.op})
		}
		return
	}
}

func (s *sim) converged() bool {
	for _, g := range s.c.groups {
		var end int64 = -1
		for _, nd := range s.c.running() {
			st, err := nd.host.Status(g)
			if err != nil || st.Failed != "" {
				return false
			}
			if end == -1 {
				end = st.EndOffset
			}
			if st.EndOffset != end || st.CommitOffset != end || st.DurableOffset != end {
				return false
			}
		}
	}
	return true
}

// checkGroup: the logs agree (entries and bytes), every entry a log holds
// is the one committed at its index, every acknowledged proposal is there.
func (s *sim) checkGroup(g uint64) {
	s.t.Helper()
	nodes := s.c.running()
	s.c.checkIndexes(g, nodes)
	s.c.checkSameBytes(g, nodes)
	for _, nd := range nodes {
		st := nd.host.group(g).st
		first, _ := st.FirstIndex()
		last, _ := st.LastIndex()
		for i := first; i <= last; i++ {
			rec, ok := s.committed[g][i]
			if !ok {
				continue
			}
			ents, err := st.Entries(i, i+1, math.MaxUint64)
			if err != nil {
				s.t.Fatalf("node %d group %d: entry %d: %v", nd.id, g, i, err)
			}
			e := ents[0]
			data := e.Data
			if cmdData, ok := commandOf(e); ok {
				data = cmdData
			} else if !isDataEntry(e) {
				data = nil
			}
			if e.GetTerm() != rec.term || sha256.Sum256(data) != rec.digest {
				s.t.Fatalf("node %d group %d: entry %d is term %d, but term %d was committed there (same data: %v)", nd.id, g, i, e.GetTerm(), rec.term, sha256.Sum256(data) == rec.digest)
			}
		}
	}
	// No committed entry is missing from the end of a log (one that was
	// cut short would be caught above only for the indexes it kept).
	var top uint64
	for i := range s.committed[g] {
		top = max(top, i)
	}
	for _, nd := range nodes {
		if last, _ := nd.host.group(g).st.LastIndex(); last < top {
			s.t.Fatalf("node %d group %d: the log ends at index %d, index %d was committed", nd.id, g, last, top)
		}
	}
	s.checkOrder(g)
	a := slices.Clone(s.acks[g])
	// Acknowledgements from two leaders (one that did not know it was
	// deposed) can come out of offset order; the offsets must differ.
	slices.SortFunc(a, func(x, y acked) int { return cmp.Compare(x.p.BaseOffset, y.p.BaseOffset) })
	s.c.checkAcked(g, a)
}

// checkOrder: the offsets respect the order clients saw (linearizability
// of the log): a proposal made after another was acknowledged sits at a
// higher offset.
func (s *sim) checkOrder(g uint64) {
	s.t.Helper()
	ts := slices.Clone(s.ackTimes[g])
	slices.SortFunc(ts, func(x, y ackTime) int { return cmp.Compare(x.acked, y.acked) })
	top := make([]int, len(ts)) // top[i]: the index in ts[:i+1] of the highest offset
	for i := range ts {
		if i > 0 && ts[top[i-1]].base > ts[i].base {
			top[i] = top[i-1]
		} else {
			top[i] = i
		}
	}
	for _, b := range ts {
		n, _ := slices.BinarySearchFunc(ts, b.proposed, func(x ackTime, at int64) int { return cmp.Compare(x.acked, at) })
		if n > 0 && ts[top[n-1]].base >= b.base {
			a := ts[top[n-1]]
			s.t.Fatalf("group %d: %s was acknowledged at offset %d before %s was proposed, which was acknowledged at offset %d", g, a.v, a.base, b.v, b.base)
		}
	}
}

// simSeeds: RAFT_SEED runs one seed; otherwise RAFT_SEEDS seeds (default
// 12, 3 with -short) from a base that changes every run (logged).
func simSeeds(t *testing.T) []uint64 {
	if v := os.Getenv("RAFT_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("RAFT_SEED=%q: %v", v, err)
		}
		return []uint64{seed}
	}
	n := 12
	if testing.Short() {
		n = 3
	}
	if v := os.Getenv("RAFT_SEEDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("RAFT_SEEDS=%q: want a count", v)
		}
	}
	base := uint64(time.Now().UnixNano()) % 1_000_000_000 * 1000
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = base + uint64(i)
	}
	return seeds
}

// TestRandomFaults runs simulated clusters under random faults, one per
// seed (see simSeeds), and checks safety in each (see the top of this
// file). A failing seed says how to repeat its run exactly.
func TestRandomFaults(t *testing.T) {
	cfg := defaultSim
	if v := os.Getenv("RAFT_SIM_TICKS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("RAFT_SIM_TICKS=%q: want a count of ticks", v)
		}
		cfg.ticks = n
	}
	for _, seed := range simSeeds(t) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := runSim(t, seed, cfg)
			if r.acked == 0 || r.faults == 0 {
				t.Fatalf("seed %d: a run with %d acknowledged proposals and %d faults tests nothing", seed, r.acked, r.faults)
			}
			t.Logf("seed %d: %d faults, %d messages delivered, %d dropped, %d duplicated, %d commits reported, %d proposals acknowledged; digest %.16s",
				seed, r.faults, r.delivered, r.dropped, r.duplicated, r.commits, r.acked, r.digest)
		})
	}
}

// TestRandomFaultsRepeat: a seed's run repeats exactly - the same digest of
// every delivered message and committed entry - and another seed's does
// not.
func TestRandomFaultsRepeat(t *testing.T) {
	seed := uint64(time.Now().UnixNano()) % 1_000_000
	a := runSim(t, seed, defaultSim)
	b := runSim(t, seed, defaultSim)
	if a != b {
		t.Fatalf("seed %d ran twice differently:\n%+v\n%+v", seed, a, b)
	}
	c := runSim(t, seed+1, defaultSim)
	if c.digest == a.digest {
		t.Fatalf("seeds %d and %d ran the same: %+v", seed, seed+1, a)
	}
	t.Logf("seed %d twice: %+v; seed %d: digest %.16s", seed, a, seed+1, c.digest)
}

// TestRandomFaultsCatchesEarlyAck: the simulation finds a planted bug - a
// follower that acknowledges appends before its fsync, so that a power cut
// on it can lose an entry the leader already counted as committed. Seeds
// from 1 up, until one fails; the seed that found it must pass without the
// bug. (About one seed in forty finds it; the seeds are fixed, so this
// test's run is the same every time for the same code.)
func TestRandomFaultsCatchesEarlyAck(t *testing.T) {
	cfg := defaultSim
	cfg.ackBeforeFsync = true
	const tries = 1000
	for seed := uint64(1); seed <= tries; seed++ {
		msg := simCatch(t, seed, cfg)
		if msg == "" {
			continue
		}
		t.Logf("seed %d found the planted bug: %s", seed, msg)
		runSim(t, seed, defaultSim)
		return
	}
	t.Fatalf("%d seeds did not find a follower acknowledging before its fsync", tries)
}

// simCatch runs a simulation and returns its first failure ("" if none)
// instead of failing t.
func simCatch(t *testing.T, seed uint64, cfg simConfig) (msg string) {
	c := &catchTB{TB: t}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(caught); !ok {
				panic(r)
			}
			msg = c.msg
		}
	}()
	runSimTB(t, c, seed, cfg)
	return c.msg
}

// catchTB records a run's first fatal failure and stops the run (a panic
// simCatch recovers) without failing the test.
type catchTB struct {
	testing.TB
	msg string
}

type caught struct{}

func (c *catchTB) Fatalf(format string, args ...any) {
	c.msg = fmt.Sprintf(format, args...)
	panic(caught{})
}

func (c *catchTB) Fatal(args ...any) {
	c.msg = fmt.Sprint(args...)
	panic(caught{})
}

func (c *catchTB) Errorf(format string, args ...any) { c.Fatalf(format, args...) }
func (c *catchTB) Failed() bool                      { return c.msg != "" }
func (c *catchTB) Logf(string, ...any)               {}
func (c *catchTB) Log(...any)                        {}
