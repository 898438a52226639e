package brokertest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/cluster"
	"holdfast/internal/raft"
	"holdfast/internal/replica"
	"holdfast/internal/storage"
	"holdfast/internal/wire"
)

// The whole-node simulation, one floor above Raft: three real brokers in
// this process (each its cluster.Node with the metadata apply loop,
// registration and liveness, its replica manager, its coordinators, its
// Kafka listener), driven by a schedule drawn from one seed: acks=all
// produces, offset commits, Raft leadership transfers of data and
// __consumer_offsets partitions, a reassignment, clean restarts (fenced,
// then controlled shutdown) and crashes, a failing disk, a node cut off
// by a network partition for a while. The brokers' Raft traffic goes over
// a raft.MemNetwork (a partition is its Isolate), their Kafka connections
// over a PipeNet, their disks are CrashFS; each seed runs in a
// testing/synctest bubble (inBubble), on a fake clock. After every step
// it checks, once the cluster is quiet again:
//
//   - no acknowledged record is lost (every acked offset reads back with
//     its value; every acked offset commit reads back);
//   - at most one leader per term per Raft group (from the typed Raft
//     events of every node, so transient leaders count too);
//   - the metadata is the same on every node (applied offset and digest);
//   - no fenced broker is a partition leader, and none stays fenced (and
//     a broker fenced for a clean stop leads nothing another could once
//     it has handed over: checkFencedLeads);
//   - every __consumer_offsets partition is loaded by exactly one node's
//     coordinator, its Raft leader.
//
// HOLDFAST_SIM_SEED=n runs seed n alone and prints its trace; without it
// seeds 1 to 10 run (HOLDFAST_SIM_STEPS=n: longer runs of the same
// schedules). The schedule (each step and its node, partition, target:
// plan) is drawn from the seed before anything runs, a function of the
// seed alone, and so are the replica placement and the network's losses
// and delays; the fake clock makes elections and timeouts cost no wall
// time. What is not the seed's: the order Go's scheduler runs the
// goroutines that are runnable at once (the bubble fixes time, not that),
// so a failing seed replays its steps, and often but not always its
// interleaving (TestSimulationReplay compares what two runs did).
// TestSimulationCatchesPlantedBug shows the checks bite.

const (
	simNodes      = 3
	simTopic      = "sim"
	simPartitions = 3
	simGroups     = 3 // consumer groups whose offset commits are checked
	// movedTopic has one partition on two of the three nodes, which the
	// schedule reassigns.
	movedTopic = "moved"
)

// errInvariant marks an invariant the simulation found broken (not a
// harness failure).
var errInvariant = errors.New("invariant broken")

func TestSimulation(t *testing.T) {
	// In the bubble a seed takes a fraction of a second: ten run.
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	steps := 8
	if s := os.Getenv("HOLDFAST_SIM_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("HOLDFAST_SIM_SEED=%q: %v", s, err)
		}
		seeds = []uint64{n}
	}
	if s := os.Getenv("HOLDFAST_SIM_STEPS"); s != "" {
		// More steps of the same schedule: the first ones are the
		// default run's.
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("HOLDFAST_SIM_STEPS=%q: want a positive count", s)
		}
		steps = n
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s := newSim(t, seed, plantNone)
				err := s.run(steps)
				s.stopAll()
				if err != nil {
					t.Fatalf("%v\ntrace:\n%s\nreplay: HOLDFAST_SIM_SEED=%d go test ./internal/brokertest -run 'TestSimulation$' -v",
						err, strings.Join(s.trace, "\n"), seed)
				}
				if os.Getenv("HOLDFAST_SIM_SEED") != "" {
					t.Logf("trace:\n%s", strings.Join(s.trace, "\n"))
				}
			})
		})
	}
}

// TestSimulationReplay runs one seed twice and compares what the cluster
// did (sim.did: acknowledged offsets, the quiet metadata offset and
// leaders after each step, the leader of every term), not only the plan.
// The brokers run on the wall clock and real goroutines, so the two runs
// need not be identical: it reports the first difference, and fails only
// on a broken invariant. HOLDFAST_SIM_REPLAY_RUNS=n runs the seed n times
// and counts the runs that differ from the first (HOLDFAST_SIM_SEED and
// HOLDFAST_SIM_STEPS choose the run; seed 2, 6 steps by default).
func TestSimulationReplay(t *testing.T) {
	seed, steps, runs := uint64(2), 6, 2
	if s := os.Getenv("HOLDFAST_SIM_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("HOLDFAST_SIM_SEED=%q: %v", s, err)
		}
		seed = n
	}
	if s := os.Getenv("HOLDFAST_SIM_STEPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("HOLDFAST_SIM_STEPS=%q: want a positive count", s)
		}
		steps = n
	}
	if s := os.Getenv("HOLDFAST_SIM_REPLAY_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 {
			t.Fatalf("HOLDFAST_SIM_REPLAY_RUNS=%q: want a count of at least 2", s)
		}
		runs = n
	}
	var first []string
	differ := 0
	for i := range runs {
		var did []string
		inBubble(t, func(t *testing.T) {
			s := newSim(t, seed, plantNone)
			err := s.run(steps)
			s.stopAll()
			if err != nil {
				t.Fatalf("run %d: %v\ntrace:\n%s", i, err, strings.Join(s.trace, "\n"))
			}
			did = s.did
		})
		if t.Failed() {
			return
		}
		if i == 0 {
			first = did
			continue
		}
		s := struct{ did []string }{did}
		if d := firstDiff(first, s.did); d != "" {
			differ++
			t.Logf("run %d differs from run 0: %s", i, d)
		}
	}
	t.Logf("seed %d, %d steps: %d of %d runs did something other than run 0 (%d trace lines)", seed, steps, differ, runs-1, len(first))
}

// firstDiff describes the first line where two traces differ, and how
// many lines do ("" if none).
func firstDiff(a, b []string) string {
	first, n := "", 0
	for i := range max(len(a), len(b)) {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if n++; first == "" {
				first = fmt.Sprintf("line %d: %q, then %q", i, x, y)
			}
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d lines; first %s", n, max(len(a), len(b)), first)
}

// The schedule is a function of the seed alone: the same seed draws the
// same steps, a longer run of it starts with the shorter one's, and
// another seed draws others.
func TestSimulationPlanRepeats(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		a, b := fmt.Sprint(plan(seed, 8)), fmt.Sprint(plan(seed, 16)[:8])
		if a != b {
			t.Fatalf("seed %d: %s, then %s", seed, a, b)
		}
		if c := fmt.Sprint(plan(seed+1, 8)); c == a {
			t.Fatalf("seeds %d and %d draw the same schedule %s", seed, seed+1, a)
		}
	}
	kinds := map[stepKind]bool{}
	for seed := uint64(1); seed <= 20; seed++ {
		for _, st := range plan(seed, 8) {
			kinds[st.kind] = true
		}
	}
	if len(kinds) != int(stepIsolate)+1 {
		t.Fatalf("20 seeds drew only step kinds %v", kinds)
	}
}

// TestSimulationCatchesPlantedBug plants a bug in every node and runs
// seeds until the simulation reports it. It must within a few: a check
// that cannot fail is no check.
//
//   - stale coordinator: a __consumer_offsets partition a node stops
//     leading is not unloaded (broker.Config.PlantStaleCoordinator);
//   - fenced leader: a broker fenced for shutdown keeps its leaderships
//     (broker.Config.PlantFencedLeader). Only a clean stop fences a
//     running broker, and few schedules have one (5 of seeds 1 to 30 in
//     their first 10 steps): seeds without one are skipped, as their run
//     cannot reach the check, and a seed runs up to its clean stop.
func TestSimulationCatchesPlantedBug(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant plant
		want  string // in the report
		what  string
	}{
		{"stale coordinator", plantStaleCoordinator, "coordinator", "a coordinator left loaded on a node that stopped leading its partition"},
		{"fenced leader", plantFencedLeader, "fenced", "a broker fenced for shutdown that kept its leaderships"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tried := 0
			for seed := uint64(1); seed <= 30 && tried < 4; seed++ {
				steps := 10
				if tc.plant == plantFencedLeader {
					i := slices.IndexFunc(plan(seed, steps), func(st step) bool { return st.kind == stepRestart && st.clean })
					if i < 0 {
						continue
					}
					steps = i + 1
				}
				tried++
				caught := false
				inBubble(t, func(t *testing.T) {
					s := newSim(t, seed, tc.plant)
					err := s.run(steps)
					s.stopAll()
					if errors.Is(err, errInvariant) && strings.Contains(err.Error(), tc.want) {
						t.Logf("seed %d caught it: %v\n%s", seed, err, strings.Join(s.trace, "\n"))
						caught = true
						return
					}
					if err != nil {
						t.Fatalf("seed %d failed otherwise: %v\n%s", seed, err, strings.Join(s.trace, "\n"))
					}
				})
				if caught || t.Failed() {
					return
				}
			}
			t.Fatalf("%d seeds did not catch %s", tried, tc.what)
		})
	}
}

// inBubble runs a simulation in a testing/synctest bubble: the brokers'
// timers, tickers and sleeps run on the bubble's fake clock, which moves
// only when every goroutine of the bubble is blocked on it or on a
// channel (the cluster is on a raft.MemNetwork and a PipeNet: no socket),
// so elections, session timeouts and the harness's waits take no wall
// time. HOLDFAST_SIM_WALLCLOCK=1 runs it on the wall clock instead.
func inBubble(t *testing.T, fn func(t *testing.T)) {
	if os.Getenv("HOLDFAST_SIM_WALLCLOCK") != "" {
		fn(t)
		return
	}
	synctest.Test(t, fn)
}

// plant is a bug planted in every node, for the simulation to find.
type plant uint8

const (
	plantNone plant = iota
	plantStaleCoordinator
	plantFencedLeader
)

type tp struct {
	topic string
	part  int32
}

type sim struct {
	t     testing.TB
	seed  uint64
	c     *brokertest.Cluster
	cl    *kgo.Client
	adm   *kadm.Client
	trace []string
	// did is what the cluster did, without times or random ids (topic
	// and cluster ids): per step, the records and commits acknowledged
	// and at which offsets, and once quiet the metadata's applied offset
	// and each Raft group's leader and term; at the end, the leader of
	// every term of every group. Two runs of a seed that did the same
	// have equal did (TestSimulationReplay).
	did   []string
	seq   int
	began time.Time

	acked   map[tp]map[int64]string // partition -> offset -> value
	commits map[string]int64        // group -> last acknowledged commit (partition 0 of simTopic)

	// terms: per Raft group and term, the node that led it (from every
	// incarnation's typed events); collectors stop them.
	termsMu    sync.Mutex
	terms      map[[2]uint64]uint64
	twoLeaders error
	collectors map[int32]func()
	disks      map[int32]*storage.CrashFS // each node's: in memory, cut by a crash
	// reassigning: a reassignment was asked for since the last quiet
	// check (which waits for it to end).
	reassigning bool
}

func newSim(t testing.TB, seed uint64, bug plant) *sim {
	t.Helper()
	s := &sim{t: t, seed: seed, began: time.Now(),
		acked: map[tp]map[int64]string{}, commits: map[string]int64{},
		terms: map[[2]uint64]uint64{}, collectors: map[int32]func(){}, disks: map[int32]*storage.CrashFS{}}
	for id := int32(1); id <= simNodes; id++ {
		s.disks[id] = storage.NewCrashFS(int64(seed)*10 + int64(id))
	}
	// Replicas are placed from the seed: the same leaders in every run.
	var placeMu sync.Mutex
	placeRng := rand.New(rand.NewPCG(seed, seed^0x91ace))
	place := func(n int) int {
		placeMu.Lock()
		defer placeMu.Unlock()
		return placeRng.IntN(n)
	}
	s.c = brokertest.NewMemCluster(t, simNodes, seed, func(c *broker.Config, _ *wire.Limits) {
		c.FS = s.disks[c.NodeID]
		// Elections in 0.5-1 s, not 1-2 s: the schedule waits for them.
		c.RaftTickInterval = 50 * time.Millisecond
		c.BrokerHeartbeatInterval = 100 * time.Millisecond
		c.BrokerSessionTimeout = time.Second
		c.ControlledShutdownMaxWait = 5 * time.Second
		c.AutoLeaderRebalance = false // the schedule moves leaders, nothing else
		c.PlantStaleCoordinator = bug == plantStaleCoordinator
		c.PlantFencedLeader = bug == plantFencedLeader
		c.PlacementRand = place
		c.OffsetsTopicPartitions = simOffsetsPartitions
	})
	// Every Raft link is a little slow and lossy, as drawn from the seed
	// (the network draws each message's fate from it too): up to 3 ms
	// late, and on some links 1% lost.
	links := rand.New(rand.NewPCG(seed, seed^0x11a5))
	for a := uint64(1); a <= simNodes; a++ {
		for b := uint64(1); b <= simNodes; b++ {
			if a == b {
				continue
			}
			delay := time.Duration(links.IntN(4)) * time.Millisecond
			loss := float64(links.IntN(2)) / 100
			s.c.Net.UpdateLink(a, b, func(f *raft.LinkFaults) { f.Delay, f.Loss = delay, loss })
			s.logf("raft link %d->%d: up to %v late, %.0f%% lost", a, b, delay, loss*100)
		}
	}
	for _, n := range s.c.Nodes {
		s.collect(n)
	}
	s.cl = s.c.Client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	s.adm = kadm.NewClient(s.cl)
	s.c.CreateTopic(simTopic, simPartitions, simNodes, nil)
	s.c.CreateTopic(movedTopic, 1, 2, nil)
	// One commit per group first: __consumer_offsets exists (and its
	// partitions are in the schedule's reach) from the first step.
	for i := range simGroups {
		if err := s.commit(fmt.Sprint("g", i)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *sim) logf(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf("%3d %6.2fs ", len(s.trace), time.Since(s.began).Seconds())+fmt.Sprintf(format, args...))
}

// collect follows node n's current Raft host's leadership events until
// the node stops.
func (s *sim) collect(n *brokertest.Node) {
	id := uint64(n.Cfg.NodeID)
	sub := n.B.RaftHost().Subscribe(raft.EventLeadership)
	// What leads now, before any event: the host publishes to new
	// subscribers only changes.
	h := n.B.RaftHost()
	for _, g := range h.Groups() {
		if l, err := h.Leadership(g); err == nil && l.Leading {
			s.noteLeader(g, l.Term, id)
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var evs []raft.Event
		for {
			select {
			case <-stop:
				return
			case <-sub.Ready():
			}
			evs = sub.Take(evs[:0])
			for _, e := range evs {
				if e.State == raft.StateLeader {
					s.noteLeader(e.Group, e.Term(), id)
				}
			}
		}
	}()
	s.collectors[n.Cfg.NodeID] = func() {
		close(stop)
		<-done
		sub.Close()
	}
}

func (s *sim) noteLeader(group, term, node uint64) {
	s.termsMu.Lock()
	defer s.termsMu.Unlock()
	k := [2]uint64{group, term}
	if prev, ok := s.terms[k]; ok && prev != node && s.twoLeaders == nil {
		s.twoLeaders = fmt.Errorf("%w: raft group %d has two leaders in term %d: nodes %d and %d", errInvariant, group, term, prev, node)
	}
	s.terms[k] = node
}

func (s *sim) stopNode(n *brokertest.Node) {
	if stop := s.collectors[n.Cfg.NodeID]; stop != nil {
		stop()
		delete(s.collectors, n.Cfg.NodeID)
	}
	n.Stop()
}

func (s *sim) stopAll() {
	for _, n := range s.c.Nodes {
		if n.B != nil {
			s.stopNode(n)
		}
	}
}

// A step of the schedule: what the simulation does next, and to whom.
// The schedule is drawn from the seed before anything runs, so it is a
// function of the seed alone (TestSimulationPlanRepeats).
type step struct {
	kind  stepKind
	part  tp      // produce, failReplica: the partition
	n     int     // produce: how many records
	group string  // commit
	pick  int     // transfer: which of the Raft groups (sim.groups)
	node  int32   // transfer: the target; restart, failReplica, isolate: the node
	clean bool    // restart: a clean stop, else a crash
	to    []int32 // reassign: the new replicas
	then  int32   // restart, isolate: the sim partition produced to meanwhile
}

type stepKind uint8

const (
	stepProduce stepKind = iota
	stepCommit
	stepTransfer
	stepReassign
	stepRestart
	stepFailReplica
	stepIsolate
)

func (st step) String() string {
	switch st.kind {
	case stepProduce:
		return fmt.Sprintf("produce %d to %s-%d", st.n, st.part.topic, st.part.part)
	case stepCommit:
		return "commit " + st.group
	case stepTransfer:
		return fmt.Sprintf("transfer group #%d to node %d", st.pick, st.node)
	case stepReassign:
		return fmt.Sprintf("reassign %s-0 to %v", movedTopic, st.to)
	case stepRestart:
		how := "crash"
		if st.clean {
			how = "clean stop"
		}
		return fmt.Sprintf("restart node %d (%s), producing to %s-%d meanwhile", st.node, how, simTopic, st.then)
	case stepFailReplica:
		return fmt.Sprintf("fail node %d's disk for %s-%d", st.node, st.part.topic, st.part.part)
	case stepIsolate:
		return fmt.Sprintf("isolate node %d, producing to %s-%d meanwhile", st.node, simTopic, st.then)
	}
	return "?"
}

// simRaftGroups is the number of Raft groups a transfer picks from:
// movedTopic's, simTopic's and __consumer_offsets' partitions (sim.groups).
const (
	simOffsetsPartitions = 3
	simRaftGroups        = 1 + simPartitions + simOffsetsPartitions
)

// plan draws steps from the seed.
func plan(seed uint64, steps int) []step {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	node := func() int32 { return int32(1 + rng.IntN(simNodes)) }
	out := make([]step, 0, steps)
	for range steps {
		var st step
		switch r := rng.IntN(13); {
		case r < 3:
			st = step{kind: stepProduce, part: tp{simTopic, int32(rng.IntN(simPartitions))}}
			st.n = 1 + rng.IntN(4)
		case r < 4:
			st = step{kind: stepProduce, part: tp{movedTopic, 0}, n: 1 + rng.IntN(4)}
		case r < 6:
			st = step{kind: stepCommit, group: fmt.Sprint("g", rng.IntN(simGroups))}
		case r < 9:
			st = step{kind: stepTransfer, pick: rng.IntN(simRaftGroups)}
			st.node = node()
		case r < 10:
			perm := rng.Perm(simNodes)
			st = step{kind: stepReassign, to: []int32{int32(perm[0] + 1), int32(perm[1] + 1)}}
		case r < 11:
			st = step{kind: stepRestart, node: node()}
			st.clean = rng.IntN(2) == 0
			st.then = int32(rng.IntN(simPartitions))
		case r < 12:
			st = step{kind: stepFailReplica, node: node()}
			st.part = tp{simTopic, int32(rng.IntN(simPartitions))}
		default:
			st = step{kind: stepIsolate, node: node()}
			st.then = int32(rng.IntN(simPartitions))
		}
		out = append(out, st)
	}
	return out
}

// run runs the seed's schedule, each step followed by the checks.
func (s *sim) run(steps int) error {
	for i, st := range plan(s.seed, steps) {
		s.logf("step %d: %v", i, st)
		s.did = append(s.did, fmt.Sprintf("step %d: %v", i, st))
		var err error
		switch st.kind {
		case stepProduce:
			err = s.produce(st.part, st.n, 20*time.Second)
		case stepCommit:
			err = s.commit(st.group)
		case stepTransfer:
			err = s.transfer(st.pick, st.node)
		case stepReassign:
			err = s.reassign(st.to)
		case stepRestart:
			err = s.restart(st.node, st.clean, st.then)
		case stepFailReplica:
			err = s.failReplica(st.node, st.part.part)
		case stepIsolate:
			err = s.isolate(st.node, st.then)
		}
		if err == nil {
			err = s.check()
		}
		if err != nil {
			return err
		}
		s.noteQuiet()
	}
	if err := s.checkRecords(); err != nil {
		return err
	}
	s.noteTerms()
	return nil
}

// noteQuiet adds the quiet cluster's state to did: the metadata's
// applied offset (the same on every node: quietChecks) and every Raft
// group's leader and term.
func (s *sim) noteQuiet() {
	nodes := s.c.Running()
	applied, _ := nodes[0].B.MetadataFingerprint()
	var leaders []string
	for _, p := range s.raftGroupNames() {
		for _, n := range nodes {
			if l, err := n.B.RaftHost().Leadership(p.group); err == nil && l.Leading {
				leaders = append(leaders, fmt.Sprintf("%s:%d/%d", p.name, n.Cfg.NodeID, l.Term))
			}
		}
	}
	s.did = append(s.did, fmt.Sprintf("quiet: metadata applied %d; leaders %s", applied, strings.Join(leaders, " ")))
}

// noteTerms adds to did the leader of every term of every group, from
// the typed events of every node since the start.
func (s *sim) noteTerms() {
	s.termsMu.Lock()
	defer s.termsMu.Unlock()
	for _, p := range s.raftGroupNames() {
		var terms []uint64
		for k := range s.terms {
			if k[0] == p.group {
				terms = append(terms, k[1])
			}
		}
		slices.Sort(terms)
		var b strings.Builder
		for _, t := range terms {
			fmt.Fprintf(&b, " %d:%d", t, s.terms[[2]uint64{p.group, t}])
		}
		s.did = append(s.did, fmt.Sprintf("terms %s:%s", p.name, b.String()))
	}
}

// namedGroup is a Raft group and the partition it replicates: group ids
// derive from random topic ids, so a trace names the partition.
type namedGroup struct {
	name  string
	group uint64
}

func (s *sim) raftGroupNames() []namedGroup {
	out := []namedGroup{{"metadata", cluster.MetadataGroup}}
	for _, p := range s.groups() {
		if g, ok := s.raftGroup(p); ok {
			out = append(out, namedGroup{fmt.Sprintf("%s-%d", p.topic, p.part), g})
		}
	}
	return out
}

// produce sends n records to a partition, one at a time, each given
// up to wait to be acknowledged (an unacknowledged one promises nothing).
func (s *sim) produce(part tp, n int, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for range n {
		s.seq++
		v := fmt.Sprintf("s%d-%d", s.seed, s.seq)
		r, err := s.cl.ProduceSync(ctx, &kgo.Record{Topic: part.topic, Partition: part.part, Value: []byte(v)}).First()
		if err != nil {
			s.logf("produce %s to %s-%d: not acknowledged: %v", v, part.topic, part.part, err)
			s.did = append(s.did, fmt.Sprintf("not acked %s -> %s-%d", v, part.topic, part.part))
			continue // not acknowledged: nothing promised
		}
		if s.acked[part] == nil {
			s.acked[part] = map[int64]string{}
		}
		if old, ok := s.acked[part][r.Offset]; ok {
			return fmt.Errorf("%w: %s-%d offset %d acknowledged twice: %q and %q", errInvariant, part.topic, part.part, r.Offset, old, v)
		}
		s.acked[part][r.Offset] = v
		s.logf("produce %s -> %s-%d@%d", v, part.topic, part.part, r.Offset)
		s.did = append(s.did, fmt.Sprintf("acked %s -> %s-%d@%d", v, part.topic, part.part, r.Offset))
	}
	return nil
}

func (s *sim) commit(group string) error {
	s.seq++
	off := int64(s.seq)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: simTopic, Partition: 0, At: off, LeaderEpoch: -1})
	var err error
	for ctx.Err() == nil { // a coordinator moving answers retriable errors
		var resp kadm.OffsetResponses
		resp, err = s.adm.CommitOffsets(ctx, group, offs)
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			s.commits[group] = off
			s.logf("commit %s %s-0=%d", group, simTopic, off)
			s.did = append(s.did, fmt.Sprintf("acked commit %s=%d", group, off))
			return nil
		}
		time.Sleep(50 * time.Millisecond) // a retriable answer: ask again
	}
	s.logf("commit %s %d: not acknowledged: %v", group, off, err)
	s.did = append(s.did, fmt.Sprintf("not acked commit %s=%d", group, off))
	return nil
}

// groups is every Raft group the schedule may move: the data topic's and
// __consumer_offsets' partitions.
func (s *sim) groups() []tp {
	out := []tp{{movedTopic, 0}}
	for i := range int32(simPartitions) {
		out = append(out, tp{simTopic, i})
	}
	// Created at the start (newSim's commits), with a fixed count: a
	// transfer's pick names the same group in every run of a seed.
	for i := range int32(simOffsetsPartitions) {
		out = append(out, tp{"__consumer_offsets", i})
	}
	return out
}

// raftGroup is the Raft group of a partition, from a running node's
// metadata (every partition's group id derives from its topic id).
func (s *sim) raftGroup(p tp) (uint64, bool) {
	for _, n := range s.c.Running() {
		if id, ok := n.B.TopicID(p.topic); ok {
			return replica.Group(id, p.part), true
		}
	}
	return 0, false
}

// transfer moves a partition's Raft leadership to another node, as the
// controller's preferred-leader election and controlled shutdown do.
func (s *sim) transfer(pick int, target int32) error {
	gs := s.groups()
	if len(gs) != simRaftGroups {
		return fmt.Errorf("%d raft groups to pick from, want %d", len(gs), simRaftGroups)
	}
	p := gs[pick]
	g, ok := s.raftGroup(p)
	if !ok {
		return fmt.Errorf("no topic id for %s", p.topic)
	}
	for _, n := range s.c.Running() {
		l, err := n.B.RaftHost().Leadership(g)
		if err != nil || !l.Leading {
			continue
		}
		if n.Cfg.NodeID == target || s.c.Node(target).B == nil {
			s.logf("transfer %s-%d to %d: nothing to do (leader %d)", p.topic, p.part, target, n.Cfg.NodeID)
			return nil
		}
		err = n.B.RaftHost().TransferLeader(g, uint64(target))
		s.logf("transfer %s-%d from %d to %d: %v", p.topic, p.part, n.Cfg.NodeID, target, err)
		return nil
	}
	s.logf("transfer %s-%d to %d: no leader to ask", p.topic, p.part, target)
	return nil
}

// failReplica makes node id's disk fail the fsyncs of one partition's
// files while records are produced to it, until its replica fails (an
// fsync error leaves the log's unsynced state unknown: the group stops on
// that node), then heals the disk. The check after it waits for the
// repair loop, which discards the replica and copies it again from the
// others.
func (s *sim) failReplica(id, part int32) error {
	n := s.c.Node(id)
	p := tp{simTopic, part}
	g, ok := s.raftGroup(p)
	if n.B == nil || !ok {
		return nil
	}
	// The failure shows as a leadership event (Failed), however soon the
	// repair loop replaces the replica.
	sub := n.B.RaftHost().Subscribe(raft.EventLeadership)
	defer sub.Close()
	failed := func() bool {
		for _, e := range sub.Take(nil) {
			if e.Group == g && e.Leadership.Failed {
				return true
			}
		}
		return false
	}
	disk := s.disks[id]
	disk.InjectError(storage.OpSync, fmt.Sprintf("/%s-%d/", p.topic, p.part), syscall.EIO)
	defer disk.ClearErrors()
	s.logf("fail node %d's fsyncs of %s-%d", id, p.topic, p.part)
	for range 20 {
		if err := s.produce(p, 1, 3*time.Second); err != nil {
			return err
		}
		select {
		case <-sub.Ready():
		case <-time.After(200 * time.Millisecond): // the fsync may come with the next append
		}
		if failed() {
			s.logf("node %d's replica of %s-%d failed; disk healed", id, p.topic, p.part)
			return nil
		}
	}
	s.logf("node %d's replica of %s-%d did not fail; disk healed", id, p.topic, p.part)
	return nil
}

// reassign moves movedTopic's partition to two nodes drawn from the
// seed (the same two in another order moves only the preferred leader),
// through the controller as kafka-reassign-partitions does; the check
// after it waits for the reassignment to end.
func (s *sim) reassign(to []int32) error {
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(movedTopic, 0, to)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := s.adm.AlterPartitionAssignments(ctx, req)
		if err == nil {
			err = resp.Error()
		}
		switch {
		case err == nil:
			s.reassigning = true
			s.logf("reassign %s-0 to %v", movedTopic, to)
			return nil
		case ctx.Err() != nil || !kerr.IsRetriable(err):
			s.logf("reassign %s-0 to %v: refused: %v", movedTopic, to, err)
			return nil
		}
		time.Sleep(50 * time.Millisecond) // a controller moving: ask again
	}
}

// restart stops a node, checks the others stop naming it, produces
// while it is down, and starts it again. clean: a clean stop (controlled
// shutdown hands its leaderships over and fences it); otherwise a crash:
// its disk loses everything not synced and the broker is closed with the
// disk gone, so the others elect new leaders and the controller fences it
// when its session expires.
func (s *sim) restart(id int32, clean bool, then int32) error {
	n := s.c.Node(id)
	if clean {
		// As serve stops: fenced first, then the leaderships handed
		// over while the listeners still answer, then closed.
		s.logf("restart node %d: clean stop", id)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := n.B.FenceForShutdown(ctx)
		cancel()
		s.logf("node %d fenced for shutdown: %v", id, err)
		n.B.HandOver()
		if err := s.checkFencedLeads(n); err != nil {
			return err
		}
		s.stopNode(n)
	} else {
		s.logf("restart node %d: crash", id)
		s.disks[id].PowerCut()
		if stop := s.collectors[id]; stop != nil {
			stop()
			delete(s.collectors, id)
		}
		n.Kill()
		s.disks[id].Reboot()
	}
	if err := s.checkDown(id); err != nil {
		return err
	}
	if err := s.produce(tp{simTopic, then}, 2, 20*time.Second); err != nil {
		return err
	}
	n.Start()
	s.collect(n)
	s.logf("restart node %d: started", id)
	return nil
}

// checkFencedLeads checks a broker fenced for shutdown whose leaderships
// were handed over (controlled shutdown): it must lead no group that a
// running, unfenced voter could take over now (caught up, reachable:
// cluster.Transferable, the test controlled shutdown itself applies).
// Such a group would be leaderless for clients - a fenced broker is named
// nowhere - until the broker stops and an election runs.
func (s *sim) checkFencedLeads(n *brokertest.Node) error {
	me := n.Cfg.NodeID
	fenced := n.B.FencedBrokers()
	if !slices.Contains(fenced, me) {
		return nil // not fenced (the controller was moving): nothing to check
	}
	h := n.B.RaftHost()
	for _, g := range h.Groups() {
		st, err := h.Status(g)
		if err != nil || st.State != raft.StateLeader {
			continue
		}
		for _, v := range st.Voters {
			other := s.c.Node(int32(v))
			if v == uint64(me) || other == nil || other.B == nil || slices.Contains(fenced, int32(v)) {
				continue
			}
			if cluster.Transferable(st, v) == nil {
				return fmt.Errorf("%w: node %d, fenced for shutdown, still leads raft group %d after handing over, though node %d could take it (term %d)", errInvariant, me, g, v, st.Term)
			}
		}
	}
	s.logf("node %d fenced, leads nothing another node could", me)
	return nil
}

// checkDown waits until every running node has node id fenced and names
// it neither a partition's leader nor a coordinator: a fenced broker is
// never named, clean stop or crash.
func (s *sim) checkDown(id int32) error {
	const settle = 30 * time.Second
	var last error
	for deadline := time.Now().Add(settle); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if last = s.downChecks(id); last == nil {
			s.logf("node %d fenced, named by no one", id)
			return nil
		}
	}
	return fmt.Errorf("%w (after %v, node %d down): %v", errInvariant, settle, id, last)
}

func (s *sim) downChecks(id int32) error {
	for _, n := range s.c.Running() {
		if !slices.Contains(n.B.FencedBrokers(), id) {
			return fmt.Errorf("node %d does not have node %d fenced", n.Cfg.NodeID, id)
		}
		md, err := n.Metadata(simTopic, "__consumer_offsets")
		if err != nil {
			return err
		}
		for _, t := range md.Topics {
			for _, p := range t.Partitions {
				if p.Leader == id || p.Leader < 0 && *t.Topic != movedTopic { // two replicas, one down: no majority
					return fmt.Errorf("node %d names leader %d for %s-%d", n.Cfg.NodeID, p.Leader, *t.Topic, p.Partition)
				}
			}
		}
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.Version = 4
		for g := range simGroups {
			req.CoordinatorKeys = append(req.CoordinatorKeys, fmt.Sprint("g", g))
		}
		resp, err := n.Request(req)
		if err != nil {
			return err
		}
		for _, c := range resp.(*kmsg.FindCoordinatorResponse).Coordinators {
			if c.ErrorCode != 0 || c.NodeID == id {
				return fmt.Errorf("node %d answers coordinator %d (code %d) for %s", n.Cfg.NodeID, c.NodeID, c.ErrorCode, c.Key)
			}
		}
	}
	return nil
}

// isolate cuts a node's Raft links, produces across the cut, waits until
// the others have elected leaders of the groups it led (or a bound
// passes), and heals: the cut-off node comes back to higher terms.
func (s *sim) isolate(id, then int32) error {
	n := s.c.Node(id)
	var led []uint64
	if n.B != nil {
		h := n.B.RaftHost()
		for _, g := range h.Groups() {
			l, err := h.Leadership(g)
			if st, serr := h.Status(g); err == nil && serr == nil && l.Leading && len(st.Voters) >= 3 {
				led = append(led, g) // the other two can elect a leader of it
			}
		}
	}
	s.logf("isolate node %d's raft links (it leads %d groups)", id, len(led))
	s.c.Net.Isolate(uint64(id))
	defer s.c.Net.Rejoin(uint64(id)) // the links' seeded delays and losses stay
	// Cut off, a leader cannot commit: this produce is acknowledged by a
	// new leader on the other side, or not at all.
	if err := s.produce(tp{simTopic, then}, 1, 3*time.Second); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if s.ledElsewhere(id, led) {
			break
		}
	}
	s.logf("heal")
	return nil
}

// ledElsewhere reports whether every group in gs has a settled leader
// other than node id among the running nodes.
func (s *sim) ledElsewhere(id int32, gs []uint64) bool {
	for _, g := range gs {
		found := false
		for _, n := range s.c.Running() {
			if n.Cfg.NodeID == id {
				continue
			}
			if l, err := n.B.RaftHost().Leadership(g); err == nil && l.Settled {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// check waits for the cluster to be quiet and checks what must hold then;
// the two-leaders check holds at all times.
func (s *sim) check() error {
	s.termsMu.Lock()
	err := s.twoLeaders
	s.termsMu.Unlock()
	if err != nil {
		return err
	}
	// The leaders and the metadata settle in a few election timeouts at
	// most; the coordinators then follow within coordGrace, each
	// watcher reacting to one Raft event (milliseconds when it works).
	const settle, coordGrace = 30 * time.Second, 5 * time.Second
	var last, first error
	began := time.Now()
	deadline := began.Add(settle)
	var quietSince time.Time
	for time.Now().Before(deadline) {
		last = s.quietChecks()
		if first == nil {
			first = last
		}
		var coord *coordError
		switch {
		case last == nil:
			if d := time.Since(began); d > 2*time.Second {
				// Slow to settle: what it waited for, for the trace.
				s.logf("quiet after %v; first waiting on: %v", d.Round(time.Millisecond), first)
			}
			return nil
		case errors.As(last, &coord):
			if quietSince.IsZero() {
				quietSince = time.Now()
			} else if time.Since(quietSince) > coordGrace {
				return fmt.Errorf("%w: leadership quiet for %v, but %v", errInvariant, coordGrace, last)
			}
		default:
			quietSince = time.Time{}
		}
		time.Sleep(50 * time.Millisecond) // waiting for the cluster to settle
	}
	return fmt.Errorf("%w (not quiet after %v): %v", errInvariant, settle, last)
}

// coordError is a quiet cluster's coordinator in the wrong place.
type coordError struct{ msg string }

func (e *coordError) Error() string { return e.msg }

// quietChecks is nil once every running node agrees on the metadata and
// the leaders, no broker is fenced, and each coordinator partition is
// loaded by its leader alone.
func (s *sim) quietChecks() error {
	nodes := s.c.Running()
	var applied int64
	var digest string
	for i, n := range nodes {
		a, d := n.B.MetadataFingerprint()
		if i == 0 {
			applied, digest = a, d
		} else if a != applied || d != digest {
			return fmt.Errorf("metadata differs: node %d at %d (%s), node %d at %d (%s)", nodes[0].Cfg.NodeID, applied, digest, n.Cfg.NodeID, a, d)
		}
		if f := n.B.FencedBrokers(); len(f) > 0 {
			return fmt.Errorf("node %d sees brokers %v fenced", n.Cfg.NodeID, f)
		}
	}
	if s.reassigning {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rs, err := s.adm.ListPartitionReassignments(ctx, kadm.TopicsSet{movedTopic: {0: {}}})
		cancel()
		if err != nil {
			return fmt.Errorf("listing reassignments: %w", err)
		}
		if len(rs[movedTopic]) > 0 {
			return fmt.Errorf("%s-0 still being reassigned: %+v", movedTopic, rs[movedTopic][0])
		}
	}
	md, err := nodes[0].Metadata(simTopic, movedTopic, "__consumer_offsets")
	if err != nil {
		return err
	}
	replicas := map[tp][]int32{}
	for _, t := range md.Topics {
		for _, p := range t.Partitions {
			replicas[tp{*t.Topic, p.Partition}] = p.Replicas
		}
	}
	leaders := map[tp]int32{}
	for _, p := range s.groups() {
		g, ok := s.raftGroup(p)
		if !ok {
			return fmt.Errorf("no topic id for %s", p.topic)
		}
		reps, ok := replicas[p]
		if !ok {
			return fmt.Errorf("node %d's metadata lacks %s-%d", nodes[0].Cfg.NodeID, p.topic, p.part)
		}
		var leader int32 = -1
		for _, n := range nodes {
			l, err := n.B.RaftHost().Leadership(g)
			if !slices.Contains(reps, n.Cfg.NodeID) {
				if err == nil {
					return fmt.Errorf("node %d still runs %s-%d's group, not a replica of %v", n.Cfg.NodeID, p.topic, p.part, reps)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("node %d: %s-%d: %v", n.Cfg.NodeID, p.topic, p.part, err)
			}
			if l.Failed {
				return fmt.Errorf("node %d's replica of %s-%d has failed (repair pending)", n.Cfg.NodeID, p.topic, p.part)
			}
			if l.Settled {
				if leader >= 0 {
					return fmt.Errorf("%s-%d: settled leaders %d and %d", p.topic, p.part, leader, n.Cfg.NodeID)
				}
				leader = n.Cfg.NodeID
			}
		}
		if leader < 0 {
			return fmt.Errorf("%s-%d has no settled leader", p.topic, p.part)
		}
		leaders[p] = leader
		for _, n := range nodes {
			if !slices.Contains(reps, n.Cfg.NodeID) {
				continue
			}
			l, _ := n.B.RaftHost().Leadership(g)
			if int32(l.Leader) != leader {
				return fmt.Errorf("node %d names %d the leader of %s-%d, not %d", n.Cfg.NodeID, l.Leader, p.topic, p.part, leader)
			}
		}
	}
	// The coordinators: exactly one loaded copy of each partition, on its
	// leader.
	for p, leader := range leaders {
		if p.topic != "__consumer_offsets" {
			continue
		}
		var on []int32
		for _, n := range nodes {
			if ts := n.B.Coordinators().Loaded(p.topic); int(p.part) < len(ts) && ts[p.part] != 0 {
				on = append(on, n.Cfg.NodeID)
			}
		}
		if !slices.Equal(on, []int32{leader}) {
			return &coordError{fmt.Sprintf("coordinator partition %d is loaded on nodes %v, its leader is %d", p.part, on, leader)}
		}
	}
	s.reassigning = false
	return nil
}

// checkRecords reads every partition back and compares it with what was
// acknowledged, and every group's committed offset.
func (s *sim) checkRecords() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for part, want := range s.acked {
		end := int64(0)
		for off := range want {
			end = max(end, off+1)
		}
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.c.Addrs()...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{part.topic: {part.part: kgo.NewOffset().AtStart()}})}, s.c.Nodes[0].ClientOpts()...)...)
		if err != nil {
			return err
		}
		got := map[int64]string{}
		for len(got) < int(end) && ctx.Err() == nil {
			f := cl.PollFetches(ctx)
			f.EachRecord(func(r *kgo.Record) { got[r.Offset] = string(r.Value) })
			if len(got) > 0 && slices.Max(slices.Collect(maps.Keys(got))) >= end-1 {
				break
			}
		}
		cl.Close()
		for off, v := range want {
			if got[off] != v {
				return fmt.Errorf("%w: acknowledged %s-%d@%d = %q reads back as %q", errInvariant, part.topic, part.part, off, v, got[off])
			}
		}
	}
	for group, off := range s.commits {
		var resp kadm.OffsetResponses
		var err error
		for {
			// A connection to a node the schedule restarted may answer
			// EOF once: the client reconnects on the next try.
			if resp, err = s.adm.FetchOffsets(ctx, group); err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("fetching group %s's offsets: %w", group, err)
		}
		o, ok := resp.Lookup(simTopic, 0)
		if !ok || o.At != off {
			return fmt.Errorf("%w: group %s: acknowledged commit %d reads back as %+v", errInvariant, group, off, o)
		}
	}
	s.logf("checked %d partitions' acknowledged records and %d groups' commits", len(s.acked), len(s.commits))
	return nil
}
