package broker

import (
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The node's memory limit (Config.MemoryLimit, `holdfast serve
// --memory-limit`; Kafka has none: the JVM's -Xmx plays its part). Go
// collects when the heap has grown by GOGC (100%) over what the last
// collection left live, so a node holding 20,000 idle replicas (~6 KiB of
// live heap each) ran at ~3x its live heap after the first writes to them:
// 18-20 KiB of RSS per replica (docs/benchmarks.md, round 15, h-mem). A
// soft memory limit (runtime/debug.SetMemoryLimit) has the collector run
// earlier as the heap nears it; GOGC stays the floor (below the limit
// nothing changes), and the limit is soft: a heap that needs more than it
// still gets it, the collector then running often (the runtime caps it at
// about half the CPU). So a limit set below what the node needs turns
// into collections back to back; derived, it follows what the node holds:
//
//	MemoryLimitBase + replicas x MemoryLimitPerReplica + held budgets
//
// replicas: those open or opening here (partition.Manager.SetOnCount),
// so the limit grows before an open allocates; held budgets: bounded
// allocations kept once made (the direct-I/O read cache's budget, the log
// cleaner's offset map once a cleaner thread made it). The wire's
// queued-request budget (queued.max.request.bytes, 256 MiB by default) is
// not in it: it is transient, and counting it whole would keep the limit
// above the heap GOGC allows at any replica count that matters; the base's
// working room covers a produce load's requests in flight, and beyond it
// the limit being soft keeps the node going.
//
// and never below the floor of what the last collection left live:
//
//	live + max(live - replicas x MemoryLimitPerReplica, 0) + overhead + MemoryLimitSlack
//
// The live heap above the replicas' share is the node's working set
// (requests in flight, append buffers, Raft messages under a produce
// load): it gets GOGC's own headroom (as much again), so that under load
// the collector runs no more often than without a limit. overhead is what
// the limit counts that is neither heap objects nor free pages the
// scavenger can return (goroutine stacks, the runtime's metadata, the unused
// room of the heap's spans): GOGC's goal does not count it, a limit does,
// so the floor adds it. The replicas' share (what an idle replica holds,
// with its room) gets the slack only:
// that is what the limit is for, and at rest nothing allocates, so a
// tight limit costs nothing. (Round 16's floor was 1.5x the whole live
// heap: at 1,000 partitions RF=3 under a saturating load the collector then
// ran as if GOGC were 50 and cost 1.28x the CPU per record,
// docs/benchmarks.md; with the base alone 1.4-1.9x.) After each
// collection (a finalizer re-armed every cycle: no timer) the live heap is
// read (runtime/metrics) and the limit raised or lowered to match.
//
// An operator's GOMEMLIMIT environment variable wins (Go's own rule:
// `holdfast serve` then leaves the limit alone and says so).

// MemoryLimitDerived, as Config.MemoryLimit, derives the limit from the
// replicas this node holds and follows them (DerivedMemoryLimit).
const MemoryLimitDerived int64 = -1

const (
	// MemoryLimitBase: an empty node (~15-25 MB of heap, stacks and runtime
	// structures) with working room for requests in flight, replication
	// and a /metrics scrape.
	MemoryLimitBase = 64 << 20
	// MemoryLimitPerReplica: an idle replica's live heap (~5 KiB since round 18, ~6 before: its Raft
	// group, log, segment and partition state) with room for the garbage
	// its writes make between collections.
	MemoryLimitPerReplica = 8 << 10
	// MemoryLimitSlack: room above the live heap and the runtime's
	// overhead the limit always leaves, besides the working set's headroom
	// (MemoryLimitFor): a burst's first garbage before the next collection
	// measures it.
	MemoryLimitSlack = 16 << 20
	// memoryStep: the limit moves in steps of this size (a step is ~500
	// replicas), so opening 100,000 replicas sets it ~200 times, not
	// 100,000.
	memoryStep = 4 << 20
)

// DerivedMemoryLimit is the memory limit of a node holding replicas
// partition replicas and held bytes of bounded budgets, rounded up to
// memoryStep.
func DerivedMemoryLimit(replicas int, held int64) int64 {
	n := int64(MemoryLimitBase) + int64(max(replicas, 0))*MemoryLimitPerReplica + max(held, 0)
	return (n + memoryStep - 1) / memoryStep * memoryStep
}

// memoryLimit keeps the process's memory limit at DerivedMemoryLimit of
// what the node holds now.
type memoryLimit struct {
	mu       sync.Mutex
	replicas int
	held     int64
	live     int64 // the heap the last collection left live
	overhead int64 // and the runtime's memory besides objects and free pages then
	closed   bool
	applied  int64
	prev     int64             // the limit before this node set one, restored by close
	set      func(int64) int64 // debug.SetMemoryLimit (tests replace it)
	log      *slog.Logger
}

func newMemoryLimit(held int64, set func(int64) int64, log *slog.Logger) *memoryLimit {
	m := &memoryLimit{held: held, set: set, log: log}
	m.prev = set(-1)
	m.mu.Lock()
	m.applyLocked()
	m.mu.Unlock()
	return m
}

// MemoryLimitFor is the limit of a node holding replicas replicas whose
// derived limit is derived (DerivedMemoryLimit) and whose last collection
// left live bytes live, with overhead bytes of the runtime's own: the
// larger of derived and the live heap's floor (live, GOGC's headroom for
// the part of it above the replicas' share, overhead and
// MemoryLimitSlack), rounded up to memoryStep.
func MemoryLimitFor(derived, live, overhead int64, replicas int) int64 {
	live = max(live, 0)
	share := int64(max(replicas, 0)) * MemoryLimitPerReplica
	floor := live + max(live-share, 0) + max(overhead, 0) + MemoryLimitSlack
	floor = (floor + memoryStep - 1) / memoryStep * memoryStep
	return max(derived, floor)
}

// applyLocked sets the limit if it moved.
func (m *memoryLimit) applyLocked() {
	if m.closed {
		return
	}
	if n := MemoryLimitFor(DerivedMemoryLimit(m.replicas, m.held), m.live, m.overhead, m.replicas); n != m.applied {
		m.set(n)
		m.applied = n
		m.log.Debug("memory limit", "bytes", n, "replicas", m.replicas, "held_bytes", m.held, "live_bytes", m.live, "overhead_bytes", m.overhead)
	}
}

// setLive follows the heap the last collection left live and the
// runtime's overhead then.
func (m *memoryLimit) setLive(live, overhead int64) {
	m.mu.Lock()
	m.live, m.overhead = live, overhead
	m.applyLocked()
	m.mu.Unlock()
}

// gcSentinel is unreachable from its making on: its finalizer runs after
// each collection and arms itself again, until the limit is closed.
type gcSentinel struct{ m *memoryLimit }

// followCollections has setLive told the live heap after every
// collection from now on.
func (m *memoryLimit) followCollections() {
	runtime.SetFinalizer(&gcSentinel{m: m}, afterCollection)
}

func afterCollection(s *gcSentinel) {
	s.m.mu.Lock()
	closed := s.m.closed
	s.m.mu.Unlock()
	if closed {
		return
	}
	s.m.setLive(readCollected())
	runtime.SetFinalizer(s, afterCollection)
}

// collectedMetrics: the live heap, and what the memory limit counts
// besides heap objects and free pages (total - objects - free - released).
var collectedMetrics = []string{"/gc/heap/live:bytes", "/memory/classes/total:bytes",
	"/memory/classes/heap/objects:bytes", "/memory/classes/heap/free:bytes", "/memory/classes/heap/released:bytes"}

// readCollected reads the live heap the last collection left and the
// runtime's overhead (memoryLimit.overhead).
func readCollected() (live, overhead int64) {
	samples := make([]metrics.Sample, len(collectedMetrics))
	for i, n := range collectedMetrics {
		samples[i].Name = n
	}
	metrics.Read(samples)
	v := make([]int64, len(samples))
	for i, sm := range samples {
		if sm.Value.Kind() == metrics.KindUint64 {
			v[i] = int64(sm.Value.Uint64())
		}
	}
	return v[0], max(v[1]-v[2]-v[3]-v[4], 0)
}

// setReplicas follows the replicas open or opening here.
func (m *memoryLimit) setReplicas(n int) {
	m.mu.Lock()
	m.replicas = n
	m.applyLocked()
	m.mu.Unlock()
}

// hold adds bytes of a bounded budget allocated and kept from now on.
func (m *memoryLimit) hold(bytes int64) {
	m.mu.Lock()
	m.held += bytes
	m.applyLocked()
	m.mu.Unlock()
}

// setReplicasFunc and holdFunc are the replica manager's hooks
// (replica.Config.OnReplicas, OnHeld): nil without a derived limit.
func (m *memoryLimit) setReplicasFunc() func(int) {
	if m == nil {
		return nil
	}
	return m.setReplicas
}

func (m *memoryLimit) holdFunc() func(int64) {
	if m == nil {
		return nil
	}
	return m.hold
}

// limit is the limit applied last.
func (m *memoryLimit) limit() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.applied
}

// close puts back the limit the process had before (two brokers in one
// process, tests: the last one closed leaves it as it found it).
func (m *memoryLimit) close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.set(m.prev)
	return nil
}

// startMemoryLimit sets the process's memory limit as Config.MemoryLimit
// asks: a fixed number of bytes, or derived (the replica manager then
// reports its replicas and held budgets, startStorage). 0: left alone.
func (b *Broker) startMemoryLimit(readCacheBytes int64) {
	switch {
	case b.cfg.MemoryLimit == MemoryLimitDerived:
		b.memLimit = newMemoryLimit(readCacheBytes, debug.SetMemoryLimit, b.log)
		b.memLimit.followCollections()
		b.closers = append(b.closers, b.memLimit.close)
	case b.cfg.MemoryLimit > 0:
		prev := debug.SetMemoryLimit(b.cfg.MemoryLimit)
		b.closers = append(b.closers, func() error { debug.SetMemoryLimit(prev); return nil })
	}
}

// MemoryLimitState is the memory limit a broker set: Bytes (0: none, it
// left the process's alone); with Derived, what it was derived from.
type MemoryLimitState struct {
	Bytes   int64
	Derived bool
	// Replicas open or opening, Held budgets' bytes, the Live heap the
	// last collection left and the runtime's Overhead then: Bytes is
	// MemoryLimitFor(DerivedMemoryLimit(Replicas, Held), Live, Overhead, Replicas).
	Replicas             int
	Held, Live, Overhead int64
}

// MemoryLimit reports the memory limit this broker set.
func (b *Broker) MemoryLimit() MemoryLimitState {
	m := b.memLimit
	if m == nil {
		return MemoryLimitState{Bytes: max(b.cfg.MemoryLimit, 0)}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return MemoryLimitState{Bytes: m.applied, Derived: true, Replicas: m.replicas, Held: m.held, Live: m.live, Overhead: m.overhead}
}
