package raft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"holdfast/internal/records"
	"holdfast/internal/storage"
	"holdfast/internal/testwait"
)

// A test cluster: real Hosts over loopback TCP, real storage.Logs in
// t.TempDir(), one shared Faults for cutting links.
type testNode struct {
	id     uint64
	dir    string
	addr   string
	syncer *storage.Syncer
	host   *Host
	logs   map[uint64]*storage.Log
	fs     *storage.CrashFS // nil: the real filesystem
	// published: each group's last OnLeadership event.
	published sync.Map // group -> Leadership
}

type cluster struct {
	tb     testing.TB
	faults *Faults
	nodes  map[uint64]*testNode
	ids    []uint64
	voters []uint64 // the initial membership every node starts a group with
	groups []uint64
	logger *slog.Logger
	tick   time.Duration
	root   string
	// ackOnQuorum: every group is added with AckOnQuorum (BenchmarkCommit).
	ackOnQuorum bool
	// lazyCommit: every group is added with LazyCommit.
	lazyCommit bool
	// borrow: groups are added with BorrowCommitData (on unless an option
	// turns it off): followers read batches into pooled buffers, poisoned
	// when given back in this package's tests (recvpool_test.go).
	borrow bool
	// onCommit, if set, is every group's OnCommit.
	onCommit func(node, group uint64, ents []Committed)
	// electionTicks, quiesceTicks: every node's (0: 10 and the Host's
	// default).
	electionTicks, quiesceTicks int
	// net, if set, carries the Raft traffic instead of TCP (withMemNetwork).
	net *MemNetwork
	// logCfg, if set, is every log's config (withLogConfig); else the default.
	logCfg *storage.Config
	// queueLen: every transport's per-peer queue (withQueueLen; 0: the default).
	queueLen int
	// replicaLag: every host's ReplicaLagMax (withReplicaLag; 0: the default).
	replicaLag time.Duration
	// solo: every host runs with SoloPath (withSolo; also on for all with
	// HOLDFAST_TEST_RAFT_SOLO=1).
	solo, noSolo bool
}

// withLogConfig opens every node's logs with cfg (small segments, say).
func withLogConfig(cfg storage.Config) func(*cluster) { return func(c *cluster) { c.logCfg = &cfg } }

// withSolo runs every host with Config.SoloPath (solo.go).
// withSolo(false) keeps it off also under HOLDFAST_TEST_RAFT_SOLO=1.
func withSolo(on bool) func(*cluster) { return func(c *cluster) { c.solo, c.noSolo = on, !on } }

// withMemNetwork runs the cluster's hosts on an in-memory network.
func withMemNetwork(n *MemNetwork) func(*cluster) { return func(c *cluster) { c.net = n } }

func testLogger(tb testing.TB) *slog.Logger {
	if os.Getenv("RAFT_TEST_LOG") == "" {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func newCluster(tb testing.TB, n int, groups int, opts ...func(*cluster)) *cluster {
	return newClusterOpts(tb, n, groups, 20*time.Millisecond, false, opts...)
}

func newClusterTick(tb testing.TB, n int, groups int, tick time.Duration) *cluster {
	return newClusterOpts(tb, n, groups, tick, false)
}

// newClusterOpts: crash gives every node its own in-memory CrashFS (its
// disk), so a test can cut the power.
func newClusterOpts(tb testing.TB, n int, groups int, tick time.Duration, crash bool, opts ...func(*cluster)) *cluster {
	c := &cluster{tb: tb, faults: NewFaults(), nodes: map[uint64]*testNode{}, logger: testLogger(tb), tick: tick, borrow: true}
	for _, o := range opts {
		o(c)
	}
	for i := 1; i <= n; i++ {
		c.ids = append(c.ids, uint64(i))
	}
	for g := 1; g <= groups; g++ {
		c.groups = append(c.groups, uint64(g))
	}
	c.voters = slices.Clone(c.ids)
	root := tb.TempDir()
	c.root = root
	for _, id := range c.ids {
		c.nodes[id] = &testNode{id: id, dir: filepath.Join(root, fmt.Sprint("node", id)), addr: "127.0.0.1:0"}
		if c.net != nil {
			c.nodes[id].addr = fmt.Sprint("mem-", id) // a name only
		}
		if crash {
			c.nodes[id].fs = storage.NewCrashFS(int64(id))
		}
	}
	for _, id := range c.ids {
		c.start(id)
	}
	tb.Cleanup(func() {
		for _, id := range c.ids {
			c.stop(id)
		}
	})
	return c
}

// start (re)opens a node from its data dir on its old address.
func (c *cluster) start(id uint64) {
	c.tb.Helper()
	nd := c.nodes[id]
	if nd.host != nil {
		c.tb.Fatalf("node %d already running", id)
	}
	nd.syncer = storage.NewSyncer(c.logger)
	if os.Getenv("RAFT_NO_SYNCFS") != "" {
		nd.syncer.DisableSyncfs()
	}
	peers := map[uint64]string{}
	for _, o := range c.nodes {
		if o.id != id && o.addr != "127.0.0.1:0" {
			peers[o.id] = o.addr
		}
	}
	var fsys storage.FS = storage.OSFS()
	if nd.fs != nil {
		fsys = nd.fs
	}
	electionTicks := c.electionTicks
	if electionTicks == 0 {
		electionTicks = 10
	}
	var h *Host
	var err error
	// The old port may linger briefly after a stop: retry.
	testwait.Poll(5*time.Second, func() bool {
		h, err = NewHost(Config{
			ID: id, Dir: nd.dir, Listen: nd.addr, Peers: peers, TickInterval: c.tick,
			ElectionTicks: electionTicks, QuiesceTicks: c.quiesceTicks, Faults: c.faults, Logger: c.logger.With("test_node", id), FS: fsys,
			Network: c.net, QueueLen: c.queueLen, ReplicaLagMax: c.replicaLag, SoloPath: c.solo, raftPathOnly: c.noSolo,
		})
		return err == nil
	})
	if err != nil {
		c.tb.Fatalf("start node %d: %v", id, err)
	}
	nd.host = h
	nd.addr = h.Addr()
	for _, o := range c.nodes {
		if o.id != id && o.host != nil {
			o.host.SetPeer(id, nd.addr)
		}
	}
	if os.Getenv("HOLDFAST_TEST_LOG_JOURNAL") == "1" {
		// The data journal (storage/datajournal.go), replayed first.
		j, err := storage.OpenDataJournal(nd.dir, storage.JournalOptions{FS: fsys, Logger: c.logger, FileBytes: 1 << 20})
		if err != nil {
			c.tb.Fatalf("node %d: data journal: %v", id, err)
		}
		nd.syncer.SetJournal(j)
	}
	nd.logs = map[uint64]*storage.Log{}
	logCfg := storage.DefaultConfig()
	if c.logCfg != nil {
		logCfg = *c.logCfg
	}
	for _, g := range c.groups {
		l, err := storage.Open(filepath.Join(nd.dir, "logs", fmt.Sprint(g)), logCfg, storage.Options{FS: fsys, Syncer: nd.syncer, Logger: c.logger})
		if err != nil {
			c.tb.Fatalf("open log: %v", err)
		}
		nd.logs[g] = l
		onLead := func(g uint64, l Leadership) { nd.published.Store(g, l) }
		var onCommit func(uint64, []Committed)
		if c.onCommit != nil {
			onCommit = func(g uint64, ents []Committed) { c.onCommit(id, g, ents) }
		}
		if err := h.AddGroup(GroupConfig{ID: g, Log: l, Voters: c.voters, OnLeadership: onLead, AckOnQuorum: c.ackOnQuorum,
			LazyCommit: c.lazyCommit, OnCommit: onCommit, BorrowCommitData: c.borrow}); err != nil {
			c.tb.Fatalf("node %d add group %d: %v", id, g, err)
		}
	}
}

// addNode starts a new, empty node that is not a member of any group yet.
func (c *cluster) addNode(id uint64) {
	c.tb.Helper()
	c.nodes[id] = &testNode{id: id, dir: filepath.Join(c.root, fmt.Sprint("node", id)), addr: "127.0.0.1:0"}
	if c.nodes[c.ids[0]].fs != nil {
		c.nodes[id].fs = storage.NewCrashFS(int64(id))
	}
	c.ids = append(c.ids, id)
	c.start(id)
}

// stop closes a node's host and logs (like a clean kill: page cache kept).
func (c *cluster) stop(id uint64) {
	nd := c.nodes[id]
	if nd.host == nil {
		return
	}
	nd.host.Close()
	for _, l := range nd.logs {
		l.Close()
	}
	nd.syncer.Journal().Close()
	nd.syncer.Close()
	nd.host = nil
}

// wipe deletes a stopped node's data dir.
func (c *cluster) wipe(id uint64) {
	if fs := c.nodes[id].fs; fs != nil {
		if err := fs.RemoveAll(c.nodes[id].dir); err != nil {
			c.tb.Fatal(err)
		}
		return
	}
	if err := os.RemoveAll(c.nodes[id].dir); err != nil {
		c.tb.Fatal(err)
	}
}

func (c *cluster) running() []*testNode {
	var out []*testNode
	for _, id := range c.ids {
		if nd := c.nodes[id]; nd.host != nil {
			out = append(out, nd)
		}
	}
	return out
}

// waitFor polls cond until it holds; the timeout is generous (a loaded
// machine, -race): a failure means it never happened, not that it was slow.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	testwait.Until(tb, 30*time.Second, what, cond)
}

// leader returns the node leading g among the given nodes (0 if none).
func (c *cluster) leader(g uint64, among ...uint64) (uint64, uint64) {
	if len(among) == 0 {
		among = c.ids
	}
	for _, id := range among {
		nd := c.nodes[id]
		if nd.host == nil {
			continue
		}
		if st, err := nd.host.Status(g); err == nil && st.State == StateLeader {
			return id, st.Term
		}
	}
	return 0, 0
}

func (c *cluster) waitLeader(g uint64, among ...uint64) (uint64, uint64) {
	c.tb.Helper()
	var id, term uint64
	waitFor(c.tb, fmt.Sprintf("a leader of group %d among %v", g, among), func() bool {
		id, term = c.leader(g, among...)
		return id != 0
	})
	return id, term
}

func batch(tb testing.TB, value string) []byte {
	tb.Helper()
	b, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]records.Record{{Timestamp: time.Now().UnixMilli(), Value: []byte(value)}})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// propose retries on a node that is not (yet) the leader until the batch is
// committed; it never proposes the same value twice after a success.
func (c *cluster) propose(g uint64, value string, among ...uint64) Proposal {
	c.tb.Helper()
	b := batch(c.tb, value)
	var committed Proposal
	ok := testwait.Poll(30*time.Second, func() bool {
		id, _ := c.leader(g, among...)
		if id == 0 {
			return false
		}
		h := c.nodes[id].host
		p, err := h.Propose(context.Background(), g, b)
		if err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// The node may step down: whether p commits is then up to the
		// next leader, and it shows here once the commit passes p.
		testwait.PollContext(ctx, 10*time.Second, func() bool {
			err = h.WaitCommitted(ctx, p)
			return !errors.Is(err, ErrNotLeader)
		})
		if err == nil {
			committed = p
			return true
		}
		if errors.Is(err, ErrProposalLost) {
			return false // a new leader overwrote it: not in the log, safe to retry
		}
		c.tb.Fatalf("proposal %q on node %d not committed: %v", value, id, err)
		return false
	})
	if !ok {
		c.tb.Fatalf("could not propose %q", value)
	}
	return committed
}

// logBytes is the whole stored content of a log from offset from.
func logBytes(tb testing.TB, l *storage.Log, from int64) []byte {
	tb.Helper()
	var out []byte
	if err := l.Scan(from, func(_ records.Header, b []byte) error {
		out = append(out, b...)
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// values returns the record values of a log's data batches, in order, and
// checks that every batch's epoch is a Raft term (> 0).
func values(tb testing.TB, l *storage.Log) []string {
	tb.Helper()
	var out []string
	if err := l.Scan(0, func(h records.Header, b []byte) error {
		if h.PartitionLeaderEpoch <= 0 {
			return fmt.Errorf("batch at %d has epoch %d", h.BaseOffset, h.PartitionLeaderEpoch)
		}
		if h.IsControl() {
			return nil
		}
		recs, err := records.Records(b)
		if err != nil {
			return err
		}
		for _, r := range recs {
			out = append(out, string(r.Value))
		}
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// waitConverged waits until every running node has the same log end,
// committed to the end, and then checks the logs are byte-identical from the
// highest log start.
func (c *cluster) waitConverged(g uint64) {
	c.tb.Helper()
	waitFor(c.tb, fmt.Sprintf("group %d to converge", g), func() bool {
		nodes := c.running()
		var end int64 = -1
		for _, nd := range nodes {
			st, err := nd.host.Status(g)
			if err != nil {
				return false
			}
			if end == -1 {
				end = st.EndOffset
			}
			if st.EndOffset != end || st.CommitOffset != end || st.DurableOffset != end {
				return false
			}
		}
		return end >= 0
	})
	nodes := c.running()
	c.checkIndexes(g, nodes)
	c.checkSameBytes(g, nodes)
}

// checkSameBytes: the nodes' logs are byte-identical from the highest log
// start.
func (c *cluster) checkSameBytes(g uint64, nodes []*testNode) {
	c.tb.Helper()
	var from int64
	for _, nd := range nodes {
		from = max(from, nd.logs[g].StartOffset())
	}
	want := logBytes(c.tb, nodes[0].logs[g], from)
	for _, nd := range nodes[1:] {
		if got := logBytes(c.tb, nd.logs[g], from); !bytes.Equal(got, want) {
			c.tb.Fatalf("group %d: node %d's log (%d bytes) differs from node %d's (%d bytes)", g, nd.id, len(got), nodes[0].id, len(want))
		}
	}
}

func isNotLeader(err error) bool { return errors.Is(err, ErrNotLeader) }

// acked is a proposal that WaitCommitted confirmed.
type acked struct {
	v string
	p Proposal
}

// proposeLoop proposes "<prefix>g<group>-<i>" on the current leader of g until stop
// is closed, recording what was acknowledged (committed). hosts is held
// while looking up the leader, so nodes can be stopped concurrently.
func (c *cluster) proposeLoop(prefix string, g uint64, hosts *sync.Mutex, stop <-chan struct{}, out *[]acked, outMu *sync.Mutex) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		v := fmt.Sprintf("%sg%d-%d", prefix, g, i)
		hosts.Lock()
		id, _ := c.leader(g)
		var h *Host
		if id != 0 {
			h = c.nodes[id].host
		}
		hosts.Unlock()
		var p Proposal
		var err error
		if h != nil {
			p, err = h.Propose(context.Background(), g, batch(c.tb, v))
		}
		if h == nil || err != nil {
			// No leader, or it just stepped down: the next one is
			// elected within an election timeout: ask again shortly.
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = h.WaitCommitted(ctx, p)
		cancel()
		if err == nil {
			outMu.Lock()
			*out = append(*out, acked{v, p})
			outMu.Unlock()
		}
	}
}

// checkAcked: on every running node, every acknowledged batch at or above
// the node's log start (compaction drops a prefix, differently per node) is
// there, at the offset it was acknowledged at; no value is stored twice; and
// acknowledgements came in offset order.
func (c *cluster) checkAcked(g uint64, a []acked) {
	c.tb.Helper()
	if len(a) == 0 {
		c.tb.Fatalf("group %d: nothing was acknowledged", g)
	}
	for _, nd := range c.running() {
		start := nd.logs[g].StartOffset()
		at := map[int64]string{}
		seen := map[string]bool{}
		if err := nd.logs[g].Scan(start, func(h records.Header, b []byte) error {
			if h.IsControl() {
				return nil
			}
			recs, err := records.Records(b)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if seen[string(r.Value)] {
					return fmt.Errorf("%q twice", r.Value)
				}
				seen[string(r.Value)] = true
				at[r.Offset] = string(r.Value)
			}
			return nil
		}); err != nil {
			c.tb.Fatalf("node %d group %d: %v", nd.id, g, err)
		}
		var prev int64 = -1
		for _, k := range a {
			if k.p.BaseOffset <= prev {
				c.tb.Fatalf("group %d: %q acknowledged at %d after %d", g, k.v, k.p.BaseOffset, prev)
			}
			prev = k.p.BaseOffset
			if k.p.BaseOffset < start {
				continue
			}
			if got := at[k.p.BaseOffset]; got != k.v {
				c.tb.Fatalf("node %d group %d: acknowledged %q at %d, log has %q there", nd.id, g, k.v, k.p.BaseOffset, got)
			}
		}
	}
}

// changeConf retries a membership change on the current leader.
func (c *cluster) changeConf(g uint64, fn func(h *Host) error, among ...uint64) {
	c.tb.Helper()
	ok := testwait.Poll(30*time.Second, func() bool {
		id, _ := c.leader(g, among...)
		if id == 0 {
			return false
		}
		err := fn(c.nodes[id].host)
		if err != nil && !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrProposalLost) && !errors.Is(err, ErrConfChangeInProgress) {
			c.tb.Fatalf("membership change on node %d: %v", id, err)
		}
		return err == nil
	})
	if !ok {
		c.tb.Fatal("membership change did not go through")
	}
}

// checkIndexes: every node holds the same Raft entries (term, offset, and
// for side entries type and data) at every index they all hold, and the log
// holds only data batches, contiguous from its start.
func (c *cluster) checkIndexes(g uint64, nodes []*testNode) {
	c.tb.Helper()
	var lo, hi uint64 = 0, ^uint64(0)
	for _, nd := range nodes {
		gr := nd.host.group(g)
		first, _ := gr.st.FirstIndex()
		last, _ := gr.st.LastIndex()
		lo, hi = max(lo, first), min(hi, last)
	}
	type ent struct {
		term uint64
		off  int64
		side bool
		typ  string
		data string
	}
	var want []ent
	for k, nd := range nodes {
		st := nd.host.group(g).st
		var got []ent
		for i := lo; i <= hi; i++ {
			term, err := st.Term(i)
			if err != nil {
				c.tb.Fatalf("node %d group %d: term %d: %v", nd.id, g, i, err)
			}
			off, _ := st.offsetOf(i)
			e := ent{term: term, off: off}
			if se, ok := st.sideEntry(i); ok {
				e.side, e.typ, e.data = true, se.Type.String(), string(se.Data)
			}
			got = append(got, e)
		}
		if k == 0 {
			want = got
		} else if !slices.Equal(got, want) {
			c.tb.Fatalf("group %d: node %d's entries [%d, %d] differ from node %d's", g, nd.id, lo, hi, nodes[0].id)
		}
		next := nd.logs[g].StartOffset()
		if err := nd.logs[g].Scan(next, func(h records.Header, _ []byte) error {
			if h.IsControl() {
				return fmt.Errorf("control batch at %d: Raft entries must not be in the log", h.BaseOffset)
			}
			if h.LastOffset() >= next && h.BaseOffset > next {
				return fmt.Errorf("gap before the batch at %d (expected %d)", h.BaseOffset, next)
			}
			next = h.LastOffset() + 1
			return nil
		}); err != nil {
			c.tb.Fatalf("node %d group %d: %v", nd.id, g, err)
		}
	}
}
