// Package cluster is this node's part in the cluster: the Raft host, the
// metadata group (KRaft's __cluster_metadata) and what the controller does
// when this node leads it - placing replicas, creating and deleting topics,
// registering and fencing brokers, moving partitions, handing out producer
// ids - and what every node does: register, heartbeat, apply the committed
// metadata (its replicas follow through internal/replica), balance
// leadership and hand it over on shutdown.
//
// Every node runs one raft.Host that drives the metadata group and one
// group per partition replica on this node. A single node is a cluster of
// one voter, on the same path. The metadata state machine itself is
// internal/metadata; the Kafka APIs that reach it (BrokerRegistration,
// BrokerHeartbeat, AlterPartition, ...) are handled in internal/broker.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/clock"
	"holdfast/internal/datadir"
	"holdfast/internal/kafkaerr"
	"holdfast/internal/metadata"
	"holdfast/internal/raft"
	"holdfast/internal/records"
	"holdfast/internal/replica"
	"holdfast/internal/storage"
	"holdfast/internal/wire"
)

// MetadataGroup is the Raft group id of the controller. Partition groups
// get ids hashed from (topic id, partition) with the top bit set
// (replica.Group), so they never collide with it.
const MetadataGroup = 1

// MetadataTopic names the metadata log as Kafka's KRaft does
// (DescribeQuorum); its Raft log lives in MetadataTopic+"-0" under the
// data dir.
const MetadataTopic = "__cluster_metadata"

const metadataLogDir = MetadataTopic + "-0"

// Config is what the node needs of the broker's configuration.
type Config struct {
	NodeID  int32
	DataDir string
	// Peers maps every metadata voter's node id (this one's too, unless
	// it is a broker-only node) to its Raft address; a single node is
	// {NodeID: ""}, with no Raft listener.
	Peers      map[int32]string
	RaftListen string // default: this node's entry in Peers
	// Join lists Kafka addresses of running brokers a broker-only node
	// registers through.
	Join []string
	// JoinTimeout bounds the wait to form or join a cluster with a new
	// data directory (0: as long as it takes).
	JoinTimeout time.Duration

	DefaultReplicationFactor int16 // 0: min(3, brokers)
	// MaxBrokerPartitions is max.broker.partitions (KIP-578): the
	// partition replicas one broker may hold; a CreateTopics or
	// CreatePartitions that would place more on any broker is refused
	// with POLICY_VIOLATION (internal topics excepted). The controller
	// applies its own value to every broker: configure nodes alike.
	// 0: no limit.
	MaxBrokerPartitions int

	AutoLeaderRebalance          bool
	LeaderImbalanceCheckInterval time.Duration
	LeaderImbalancePerBrokerPct  int
	ControlledShutdown           bool
	ControlledShutdownMaxWait    time.Duration
	// PlantFencedLeader plants a bug for the whole-node simulation's own
	// test (it must find it, or its check proves nothing): a broker fenced
	// for shutdown keeps every leadership it holds (controlledShutdown
	// moves none). Never set outside that test.
	PlantFencedLeader bool
	// PlacementRand, if set, draws where a new topic's replica placement
	// starts (in [0, n)) instead of math/rand: a seeded simulation places
	// the same replicas in every run. It must be safe for concurrent use.
	PlacementRand           func(n int) int
	BrokerHeartbeatInterval time.Duration // 0: the default
	BrokerSessionTimeout    time.Duration // 0: the default
	StartupHold             time.Duration // 0: the default (StartupHold)

	// Self is this broker as it registers (its endpoints and rack);
	// InterBrokerListener names the endpoint nodes reach each other on.
	Self                metadata.BrokerInfo
	InterBrokerListener string
	// RaftTLS, if set, is mutual TLS between Raft hosts; RaftFaults the
	// transport's fault seam (tests, `holdfast lab`).
	RaftTLS    *raft.TransportTLS
	RaftFaults *raft.Faults
	// RaftNetwork, if set, carries the Raft traffic in memory instead of
	// TCP (raft.Config.Network): in-process clusters of tests.
	RaftNetwork *raft.MemNetwork
	// RaftTickInterval is the Raft host's tick (0: raft's default,
	// 100 ms; an election timeout is ten ticks): shorter in tests whose
	// schedule waits for elections.
	RaftTickInterval time.Duration
	// ReplicaLagMax is the Raft host's replica.lag.time.max.ms
	// (raft.Config.ReplicaLagMax; 0: its default, 30 s).
	ReplicaLagMax time.Duration
	// RaftSoloPath: the Raft host's sole-voter path (raft.Config.SoloPath):
	// a partition whose only replica is this node takes its batches
	// without etcd raft's per-entry work.
	RaftSoloPath bool
	// Dial makes a Kafka client that talks to other nodes as this node
	// (the inter-broker listener's TLS and SASL).
	Dial func(seeds []string, opts ...kgo.Opt) (*kgo.Client, error)
	// OnSecurityChange is called after ACLs or SCRAM users changed.
	OnSecurityChange func()
	// OnQuotaChange, if set, is called after client quotas changed.
	OnQuotaChange func()

	FS storage.FS
	// ReadCache is the node's read cache of direct-I/O writes, for the
	// metadata log (storage.Options.ReadCache).
	ReadCache *storage.ReadCache
	Logger    *slog.Logger
	// Clock drives the node's periodic loops (registration, liveness,
	// reassignment, leader balance, the metadata group's repair) and
	// the liveness sessions' times, the quorum discovery and a new
	// directory's wait to join; nil: the wall clock.
	Clock clock.Clock
	// RaftClock drives the Raft host's tick, heartbeats and waits
	// (raft.Config.Clock); nil: the wall clock, not Clock - a test that
	// fakes the control plane's time keeps Raft's elections running.
	RaftClock clock.Clock
}

// Node is this node's part in the cluster.
type Node struct {
	cfg      Config
	log      *slog.Logger
	clk      clock.Clock
	ident    datadir.Identity
	host     *raft.Host
	voters   []uint64
	meta     *metadata.Store
	replicas *replica.Manager
	metaLog  *storage.Log
	// started is when Start returned: Metadata may wait for elections
	// for a while after it (StartupHold).
	started atomic.Int64 // unix nanoseconds; 0 before

	qmu   sync.Mutex
	queue []raft.Committed
	kick  chan struct{}

	amu       sync.Mutex
	applied   int64 // end offset of the last metadata entry applied (any kind)
	appliedCh chan struct{}
	results   map[int64]error // by entry end offset, for the proposer
	resultQ   []int64

	// gone: this broker-only node applied its own unregistration; it
	// stops re-registering (the operator stops it next).
	gone atomic.Bool

	// pidLock serializes producer-id block proposals on the controller
	// (producerids.go): two at once would name the same start and one
	// would be refused.
	// A channel, not a mutex: a request waiting for it gives up with its
	// context, and in a testing/synctest bubble a goroutine blocked on a
	// mutex held across a proposal stopped the fake clock for good.
	pidLock chan struct{}

	// topicDeleted is OnTopicDeleted's hook (nil: none).
	topicDeleted atomic.Pointer[func(metadata.Topic)]

	peersMu     sync.Mutex
	peers       map[int32]peerClient // Send's client per broker
	peersClosed bool

	live *liveness // heartbeats and fencing (liveness.go)

	// quorumChange admits one change of the metadata group's membership
	// at a time on this node (voters.go; syncMetadataLearners): Raft
	// allows one pending conf change, and a voter change that waits for
	// its learner to catch up must not race a learner added meanwhile.
	quorumChange chan struct{}

	stop    chan struct{} // closed by Close: the goRun goroutines end
	wg      sync.WaitGroup
	stops   []func() // of the goLoop loops, in start order
	balance func()   // stops the leader balancing loop (leaders.go)
	closed  bool
}

// IsVoter reports whether broker id is a voter of the controller quorum:
// of the metadata group's committed membership, which starts as --peers
// and changes with AddRaftVoter / RemoveRaftVoter (voters.go). Before the
// group is open, --peers.
func (n *Node) IsVoter(id int32) bool {
	if n.host != nil {
		if voters, _, err := n.host.Members(MetadataGroup); err == nil {
			return slices.Contains(voters, uint64(id))
		}
	}
	return n.InPeers(id)
}

// InPeers reports whether broker id is in --peers: a node the cluster was
// configured with, whose Raft address every node is given (a node added
// since registers its own).
func (n *Node) InPeers(id int32) bool {
	_, ok := n.cfg.Peers[id]
	return ok
}

// BrokerOnly reports whether this node is a broker-only node: in a
// cluster, but not one of the metadata voters in --peers.
func (n *Node) BrokerOnly() bool {
	_, voter := n.cfg.Peers[n.cfg.NodeID]
	return len(n.cfg.Peers) > 0 && !voter
}

// RaftListenerName names the extra listener in a broker-only node's
// BrokerRegistration that carries its Raft address.
const RaftListenerName = "RAFT"

// Open starts the Raft host and gives the node its identity: the one its
// data directory holds, or the cluster it forms or joins (identity.go).
// Nothing is replicated until Start.
func Open(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.FS == nil {
		cfg.FS = storage.OSFS()
	}
	n := &Node{cfg: cfg, log: cfg.Logger, clk: clock.OrReal(cfg.Clock), kick: make(chan struct{}, 1), quorumChange: make(chan struct{}, 1),
		appliedCh: make(chan struct{}), pidLock: make(chan struct{}, 1), results: map[int64]error{}, stop: make(chan struct{})}
	listen := cfg.RaftListen
	if _, ok := cfg.Peers[cfg.NodeID]; !ok {
		// A broker-only node: it joins through a running broker and gets
		// the metadata log as a learner.
		if listen == "" || len(cfg.Join) == 0 {
			return nil, fmt.Errorf("--node-id %d is not in --peers: a broker-only node needs --raft-listen and --join", cfg.NodeID)
		}
		if cfg.NodeID <= 0 || cfg.NodeID >= 1<<ProducerIDNodeBits {
			return nil, fmt.Errorf("--node-id %d: must be in 1..%d", cfg.NodeID, 1<<ProducerIDNodeBits-1)
		}
	}
	if listen == "" {
		listen = cfg.Peers[cfg.NodeID]
	}
	// Durably: a power cut must not drop a new data directory's name
	// with the identity and the Raft journal written in it.
	if err := storage.MkdirAllDurable(cfg.FS, cfg.DataDir); err != nil {
		return nil, err
	}
	peers := make(map[uint64]string, len(cfg.Peers))
	for id, addr := range cfg.Peers {
		if id <= 0 || id >= 1<<ProducerIDNodeBits {
			return nil, fmt.Errorf("peer id %d: must be in 1..%d", id, 1<<ProducerIDNodeBits-1)
		}
		peers[uint64(id)] = addr
		n.voters = append(n.voters, uint64(id))
	}
	slices.Sort(n.voters)
	if err := n.openIdentity(); err != nil {
		return nil, err
	}
	newHost := func() (*raft.Host, error) {
		return raft.NewHost(raft.Config{
			ID: uint64(cfg.NodeID), Dir: cfg.DataDir, Listen: listen, Peers: peers, Identity: n.raftIdentity(),
			FS: cfg.FS, Logger: n.log.With("component", "raft"), TLS: cfg.RaftTLS, Faults: cfg.RaftFaults,
			Network: cfg.RaftNetwork, TickInterval: cfg.RaftTickInterval, Clock: cfg.RaftClock,
			ReplicaLagMax: cfg.ReplicaLagMax, SoloPath: cfg.RaftSoloPath,
		})
	}
	h, err := newHost()
	if errors.Is(err, raft.ErrJournalCorrupt) && !n.SingleNode() && !n.BrokerOnly() {
		// No group of this node may go on from a journal that lost a
		// record in the middle (a term or vote may be gone): the node
		// rejoins as a replaced disk (identity.go, quarantineDataDir).
		if qerr := n.quarantineDataDir(err); qerr != nil {
			return nil, errors.Join(err, qerr)
		}
		if err := n.openIdentity(); err != nil {
			return nil, err
		}
		h, err = newHost()
	}
	if err != nil {
		return nil, err
	}
	if err := n.joinCluster(h); err != nil {
		h.Close()
		return nil, err
	}
	n.host = h
	n.log.Info("raft host started", "node", cfg.NodeID, "raft_listen", h.Addr(), "peers", len(peers), "broker_only", n.BrokerOnly(), "tls", cfg.RaftTLS != nil)
	return n, nil
}

// Host is the node's Raft host (every group of this node runs on it).
func (n *Node) Host() *raft.Host { return n.host }

// Identity is the node's data directory identity.
func (n *Node) Identity() datadir.Identity { return n.ident }

// Start opens the metadata group over meta (the applied state) and starts
// following it: committed commands change meta and then replicas; this
// node registers itself (a single node synchronously, so that it can place
// topics before it serves anyone) and runs the controller's loops.
func (n *Node) Start(meta *metadata.Store, replicas *replica.Manager, syncer *storage.Syncer) error {
	n.replicas = replicas
	if err := n.OpenMetadata(meta, syncer); err != nil {
		return err
	}
	// Broker-only nodes are not in --peers: their Raft addresses come
	// from their registrations.
	for _, br := range n.meta.Brokers() {
		if br.RaftAddr != "" && br.ID != n.cfg.NodeID {
			n.host.SetPeer(uint64(br.ID), br.RaftAddr)
		}
	}
	n.goRun(n.applyLoop)
	if n.SingleNode() {
		// The only voter leads its metadata at once: be registered (and
		// so able to place topics) before serving anyone.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := n.host.WaitSettled(ctx, MetadataGroup)
		cancel()
		if err == nil {
			err = n.register(n.registration())
		}
		if err != nil {
			return fmt.Errorf("registering this node in its metadata: %w", err)
		}
	}
	n.goRun(n.registerLoop)
	n.goRun(n.reassignLoop)
	n.goLoop(n.metaRepairLoop)
	if !n.SingleNode() {
		n.goLoop(n.discoverLoop)
	}
	n.startLiveness()
	n.started.Store(time.Now().UnixNano())
	n.awaitMetadataCaughtUp()
	return nil
}

// A node whose metadata log was lost waits up to metadataLeaderWait to
// hear from a metadata leader, then up to metadataCatchUpWait to catch up
// with it, before it serves anyway.
const (
	metadataLeaderWait  = 5 * time.Second
	metadataCatchUpWait = 30 * time.Second
)

// awaitMetadataCaughtUp holds a node whose metadata log was lost (a
// replaced or quarantined disk, a node joining) until it has applied the
// cluster's committed metadata. Serving before that, it answered Metadata
// with no topics, and a producer that asked it gave up with
// UNKNOWN_TOPIC_OR_PARTITION; Kafka's broker too catches up with the
// metadata log before it serves. A node that kept its log is not held (it
// replayed what it had, and follows from there); nor, for long, is one
// with no leader to catch up from (the others down: nothing to wait for).
func (n *Node) awaitMetadataCaughtUp() {
	st, err := n.host.Status(MetadataGroup)
	if err != nil || !st.Rejoining {
		return
	}
	n.log.Info("catching up with the cluster's metadata before serving (new data directory)")
	start := time.Now()
	for {
		st, err := n.host.Status(MetadataGroup)
		if err != nil {
			return
		}
		if !st.Rejoining && n.meta.Applied() >= st.CommitOffset {
			n.log.Info("caught up with the cluster's metadata", "offset", st.CommitOffset, "elapsed", time.Since(start).Round(time.Millisecond))
			return
		}
		if wait := time.Since(start); st.Leader == 0 && wait > metadataLeaderWait || wait > metadataCatchUpWait {
			n.log.Warn("serving before catching up with the cluster's metadata", "leader", st.Leader, "waited", wait.Round(time.Millisecond), "applied", n.meta.Applied())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// OpenMetadata opens the metadata log and its Raft group, and brings meta
// up to the log's commit offset: the store holds its last snapshot, and
// the committed entries after the snapshot's applied offset are applied
// here, to the metadata alone, before anything reads it (the replicas open
// what it lists, as they would after those entries). Entries committed
// later reach the apply loop, which Start starts. Start calls it if the
// broker did not.
func (n *Node) OpenMetadata(meta *metadata.Store, syncer *storage.Syncer) error {
	if n.metaLog != nil {
		return nil
	}
	n.meta = meta
	cfg := storage.DefaultConfig()
	// Never compacted: a follower below a compacted start would get a
	// log-start snapshot, which carries no metadata image, and a restart
	// replays from the last metadata snapshot's offset.
	cfg.RetentionMs, cfg.RetentionBytes = -1, -1
	cfg.Flush = storage.FlushPolicy{Mode: storage.FlushSync}
	dir := filepath.Join(n.cfg.DataDir, metadataLogDir)
	// Durably: the metadata log's directory is an entry of the data
	// directory, dropped by a power cut unless that is fsynced.
	if err := storage.MkdirAllDurable(n.cfg.FS, dir); err != nil {
		return err
	}
	l, err := storage.Open(dir, cfg, storage.Options{FS: n.cfg.FS, Syncer: syncer, Logger: n.log, ReadCache: n.cfg.ReadCache})
	if err != nil {
		return err
	}
	// A directory the cluster was not formed with has lost whatever this
	// node acknowledged before: it catches up before it votes.
	rejoin := !n.ident.BootstrapMember()
	if err := n.host.AddGroup(raft.GroupConfig{ID: MetadataGroup, Log: l, Voters: n.voters, OnCommit: n.onMetaCommit, Rejoin: rejoin}); err != nil {
		l.Close()
		return err
	}
	n.metaLog = l
	st, err := n.host.Status(MetadataGroup)
	if err != nil {
		return err
	}
	from := meta.Applied()
	if from >= st.CommitOffset || from >= l.EndOffset() {
		return nil
	}
	if from < l.StartOffset() {
		n.log.Error("the metadata log starts after the metadata snapshot", "snapshot_offset", from, "log_start", l.StartOffset())
	}
	began, entries := time.Now(), 0
	err = l.Scan(max(from, l.StartOffset()), func(h records.Header, batch []byte) error {
		end := h.LastOffset() + 1
		if end > st.CommitOffset {
			return errStopScan
		}
		entries++
		if h.IsControl() {
			return nil
		}
		recs, err := records.Records(batch)
		if err != nil || len(recs) != 1 {
			n.log.Error("undecodable metadata entry", "offset", end-1, "err", err)
			return nil
		}
		cmd, err := metadata.DecodeCommand(recs[0].Value)
		if err != nil {
			n.log.Error("undecodable metadata command", "offset", end-1, "err", err)
			return nil
		}
		meta.Apply(end, cmd) // a refused command fails again, as it did
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return fmt.Errorf("replaying the metadata log: %w", err)
	}
	n.log.Info("replayed the metadata log after its snapshot", "from", from, "to", meta.Applied(), "entries", entries, "took", time.Since(began))
	return nil
}

// Metadata's wait for leaders after a start (StartupHold).
const (
	// startupWindow is how long after Start a Metadata answer may be
	// held: the time for every group to elect once all nodes of a
	// cluster restarted together (their opens end at different times).
	startupWindow = 10 * time.Second
	// startupHoldMax bounds one held answer: an election timeout (the
	// preferred replica campaigns at once; the others after 1-2 s).
	startupHoldMax = time.Second
)

// StartupHold is how long a Metadata answer that names no leader for some
// partition may wait for one, this soon after Start: 0 outside the
// window, on a single node, and before Start. Right after a whole-cluster
// restart the Raft groups are still electing (and the brokers unfencing)
// when the nodes listen: an answer of LEADER_NOT_AVAILABLE then made
// franz-go wait out its metadata min age (5 s) before asking again, where
// a Kafka broker, whose controller keeps leaders across restarts, would
// have named the leader. The leaders named after the wait are Raft's, as
// always; only the answer waits.
func (n *Node) StartupHold() time.Duration {
	at := n.started.Load()
	if at == 0 || n.SingleNode() {
		return 0
	}
	hold := startupHoldMax
	if n.cfg.StartupHold > 0 {
		hold = n.cfg.StartupHold
	}
	left := max(startupWindow, 10*hold) - time.Since(time.Unix(0, at))
	if left <= 0 {
		return 0
	}
	return min(left, hold)
}

// Close stops the node's loops, then the Raft host (every group of this
// node) and the metadata log. Leadership is handed over first by
// HandOver, which the broker calls while its coordinators still run.
func (n *Node) Close() error {
	if n.closed || n.host == nil {
		return nil
	}
	n.closed = true
	n.stopBalancing()
	for i := len(n.stops) - 1; i >= 0; i-- {
		n.stops[i]()
	}
	close(n.stop)
	n.wg.Wait()
	n.peersMu.Lock()
	for _, pc := range n.peers {
		pc.cl.Close()
	}
	n.peers, n.peersClosed = nil, true
	n.peersMu.Unlock()
	if n.live != nil && n.live.hb != nil {
		n.live.hb.Close()
	}
	err := n.host.Close()
	if n.metaLog != nil {
		err = errors.Join(err, n.metaLog.Close())
	}
	return err
}

// goRun runs fn in its own goroutine; fn returns once n.stop is closed.
func (n *Node) goRun(fn func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		fn()
	}()
}

// goLoop runs loop in its own goroutine until Close.
func (n *Node) goLoop(loop func(stop <-chan struct{})) {
	stopCh, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		loop(stopCh)
	}()
	n.stops = append(n.stops, func() {
		close(stopCh)
		<-done
	})
}

// onMetaCommit runs on the Ready loop: it only queues.
func (n *Node) onMetaCommit(_ uint64, ents []raft.Committed) {
	n.qmu.Lock()
	n.queue = append(n.queue, ents...)
	n.qmu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

var errStopScan = errors.New("stop")

func (n *Node) applyLoop() {
	// Entries committed before this start whose effect the metadata file
	// does not have yet (a crash between commit and apply): Raft does not
	// deliver them again, so read them from the log.
	if st, err := n.host.Status(MetadataGroup); err == nil {
		from := n.meta.Applied()
		if from < st.CommitOffset && from < n.metaLog.EndOffset() {
			err := n.metaLog.Scan(max(from, n.metaLog.StartOffset()), func(h records.Header, batch []byte) error {
				end := h.LastOffset() + 1
				if end > st.CommitOffset {
					return errStopScan
				}
				var err error
				if !h.IsControl() {
					err = n.applyBatch(end, batch)
				}
				n.setApplied(end, err)
				return nil
			})
			if err != nil && !errors.Is(err, errStopScan) {
				n.log.Error("replaying the metadata log", "err", err)
			}
		}
	}
	for {
		select {
		case <-n.stop:
			return
		case <-n.kick:
		}
		n.qmu.Lock()
		q := n.queue
		n.queue = nil
		n.qmu.Unlock()
		for _, e := range q {
			var err error
			if e.Data != nil {
				err = n.applyBatch(e.EndOffset, e.Data)
			}
			n.setApplied(e.EndOffset, err)
		}
	}
}

func (n *Node) setApplied(end int64, res error) {
	n.amu.Lock()
	defer n.amu.Unlock()
	if end <= n.applied {
		return
	}
	n.applied = end
	n.results[end] = res
	n.resultQ = append(n.resultQ, end)
	if len(n.resultQ) > 1024 { // nobody waits that long for a result
		delete(n.results, n.resultQ[0])
		n.resultQ = n.resultQ[1:]
	}
	close(n.appliedCh)
	n.appliedCh = make(chan struct{})
}

// applyBatch applies the command in one committed metadata batch.
func (n *Node) applyBatch(end int64, batch []byte) error {
	recs, err := records.Records(batch)
	if err != nil || len(recs) != 1 {
		n.log.Error("undecodable metadata entry", "offset", end-1, "err", err)
		return fmt.Errorf("bad metadata entry: %w", kerr.UnknownServerError)
	}
	cmd, err := metadata.DecodeCommand(recs[0].Value)
	if err != nil {
		n.log.Error("undecodable metadata command", "offset", end-1, "err", err)
		return fmt.Errorf("%w: %w", kerr.UnknownServerError, err)
	}
	return n.apply(end, cmd)
}

// apply changes the metadata and then this node's replicas to match.
func (n *Node) apply(end int64, cmd metadata.Command) error {
	n.replicas.Lock()
	defer n.replicas.Unlock()
	// Raft delivers again entries the metadata already has (replayed at
	// start by OpenMetadata, or applied before a restart): they were
	// applied, effects and all, so nothing happens and nothing is
	// logged. Store.Apply would skip them too, returning an empty topic
	// the cases below would log and hand to the replicas.
	if end <= n.meta.Applied() {
		return nil
	}
	if cmd.Op == metadata.OpCreateTopic && cmd.Topic != nil {
		// Node-local: data of a deleted topic of that name goes first.
		if err := n.replicas.FinishPendingDelete(cmd.Topic.Name); err != nil {
			n.log.Warn("removing deleted topic's data", "topic", cmd.Topic.Name, "err", err)
		}
	}
	var old metadata.Topic
	if cmd.Op == metadata.OpAddPartitions {
		old, _ = n.meta.Topic(cmd.Name)
	}
	// This broker-only node's own unregistration: gone is set before the
	// metadata forgets the broker, not after. registerLoop runs without
	// the lifecycle lock and re-registers a broker it finds missing
	// unless gone is set: in between, it registered the node again and
	// the unregistration did not stick.
	leaving := cmd.Op == metadata.OpUnregister && cmd.BrokerID == n.cfg.NodeID && !n.gone.Load()
	if leaving {
		n.gone.Store(true)
	}
	t, err := n.meta.Apply(end, cmd)
	if err != nil {
		if leaving {
			n.gone.Store(false) // refused: still registered
		}
		n.log.Debug("metadata command refused", "op", cmd.Op, "topic", cmd.Name, "err", err)
		return err
	}
	switch cmd.Op {
	// The replicas a change brings here are queued to open, not opened
	// here: opening 10,000 took longer than the proposer (a CreateTopics
	// reply) may wait, and held every later metadata change back
	// (internal/replica/opens.go keeps a later delete or move winning).
	case metadata.OpCreateTopic:
		n.log.Info("created topic", "topic", t.Name, "partitions", t.Partitions, "topic_id", t.IDString(), "replicas", t.Replicas)
		n.replicas.QueueOpenTopic(t, 0)
	case metadata.OpAddPartitions:
		n.log.Info("added partitions", "topic", t.Name, "from", old.Partitions, "to", t.Partitions)
		n.replicas.QueueOpenTopic(t, old.Partitions)
	case metadata.OpDeleteTopic:
		n.log.Info("deleted topic", "topic", t.Name, "topic_id", t.IDString())
		if err := n.replicas.RemoveTopic(t); err != nil {
			n.log.Warn("removing deleted topic's data", "topic", t.Name, "err", err)
		}
		if fn := n.topicDeleted.Load(); fn != nil {
			(*fn)(t)
		}
	case metadata.OpTopicConfigs:
		n.replicas.ApplyConfigs(t)
	case metadata.OpBrokerConfigs:
		n.log.Info("dynamic broker configs changed", "scope", brokerScope(cmd.Name), "configs", cmd.Configs)
		n.replicas.RefreshDynamic()
	case metadata.OpRegister:
		n.log.Info("broker registered", "broker", cmd.Broker.ID, "host", cmd.Broker.Host, "port", cmd.Broker.Port, "rack", cmd.Broker.Rack, "raft_addr", cmd.Broker.RaftAddr)
		if cmd.Broker.RaftAddr != "" && cmd.Broker.ID != n.cfg.NodeID {
			n.host.SetPeer(uint64(cmd.Broker.ID), cmd.Broker.RaftAddr)
		}
	case metadata.OpCreateACLs, metadata.OpDeleteACLs, metadata.OpScram:
		n.cfg.OnSecurityChange()
	case metadata.OpClientQuotas:
		if n.cfg.OnQuotaChange != nil {
			n.cfg.OnQuotaChange()
		}
	case metadata.OpUnregister:
		n.log.Info("broker unregistered", "broker", cmd.BrokerID)
		if cmd.BrokerID == n.cfg.NodeID {
			n.log.Warn("this broker was unregistered from the cluster: stop it (restarting it registers it again)")
		}
	case metadata.OpReassign, metadata.OpReassignDone:
		if t.Name == "" {
			break // applied before (a redelivered entry); start-up opened and cleaned up
		}
		if cmd.Op == metadata.OpReassignDone {
			n.log.Info("reassignment complete", "topic", t.Name, "partition", cmd.Partition, "replicas", t.Replicas[cmd.Partition])
			if err := n.replicas.DropMoved(t); err != nil {
				n.log.Error("removing moved replicas", "topic", t.Name, "err", err)
			}
			break
		}
		if r, ok := t.Reassignment(cmd.Partition); ok {
			n.log.Info("reassigning partition", "topic", t.Name, "partition", cmd.Partition, "target", r.Target, "replicas", t.Replicas[cmd.Partition])
		}
		n.replicas.QueueOpenTopic(t, 0)
	}
	return nil
}

// OnTopicDeleted sets fn to run on this node each time it applies a topic
// deletion, inside the apply: before any later metadata change (a
// re-creation of the name) applies. Entries applied before (a replay at
// start, a redelivery) do not run it. The group coordinator removes the
// topic's committed offsets with it (internal/coordinator).
func (n *Node) OnTopicDeleted(fn func(metadata.Topic)) { n.topicDeleted.Store(&fn) }

// ControllerID is the metadata group's leader (-1 if unknown).
func (n *Node) ControllerID() int32 {
	st, err := n.host.Status(MetadataGroup)
	if err != nil || st.Leader == 0 {
		return -1
	}
	return int32(st.Leader)
}

func (n *Node) IsController() bool {
	st, err := n.host.Status(MetadataGroup)
	return err == nil && st.State == raft.StateLeader
}

// Propose commits cmd through the metadata group (this node must lead it)
// and waits until it is applied here; the error is the command's.
func (n *Node) Propose(ctx context.Context, cmd metadata.Command) error {
	val, err := metadata.EncodeCommand(cmd)
	if err != nil {
		return err
	}
	batch, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]records.Record{{Timestamp: time.Now().UnixMilli(), Value: val}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	p, err := n.host.Propose(ctx, MetadataGroup, batch)
	if err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return kafkaerr.New(kerr.NotController, "this node is not the controller")
		}
		return kafkaerr.New(kerr.RequestTimedOut, "metadata proposal: %v", err)
	}
	if err := n.host.WaitCommitted(ctx, p); err != nil {
		if errors.Is(err, raft.ErrProposalLost) || errors.Is(err, raft.ErrNotLeader) {
			return kafkaerr.New(kerr.NotController, "lost the controller role before the change committed")
		}
		return kafkaerr.New(kerr.RequestTimedOut, "metadata commit: %v", err)
	}
	for {
		n.amu.Lock()
		applied, ch := n.applied, n.appliedCh
		res, ok := n.results[p.EndOffset]
		n.amu.Unlock()
		if applied >= p.EndOffset {
			if !ok {
				return nil
			}
			return res
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return kafkaerr.New(kerr.RequestTimedOut, "metadata apply: %v", ctx.Err())
		}
	}
}

// ControllerOnly is the error code of a broker-to-controller request
// (registration, AlterPartition) arriving here: only the controller serves
// them.
func (n *Node) ControllerOnly() int16 {
	if !n.IsController() {
		return kerr.NotController.Code
	}
	return 0
}

// notController is the answer of a node that cannot change metadata.
func notController() error {
	return kafkaerr.New(kerr.NotController, "this node is not the controller")
}

// placeReplicas assigns rf replicas to each of n partitions over the
// registered brokers: round-robin from a random start over a list that
// alternates racks, so a partition's replicas land on different racks when
// there are enough (Kafka's rack-aware assignment, simplified).
//
// Fenced brokers count, as in Kafka's StripedReplicaPlacer: a partition's
// first replica (its preferred leader) is always an unfenced broker, the
// others are unfenced ones while there are enough, then fenced ones. So
// with one broker of three down (fenced after its session), a topic of
// replication factor 3 is still created, its partitions led by the live
// brokers and under-replicated until the fenced one comes back and catches
// up. Refused (INVALID_REPLICATION_FACTOR): a factor larger than the
// registered brokers, no unfenced broker at all (as Kafka), and fewer
// unfenced brokers than a majority of the factor (Holdfast's own: a Raft
// group needs a majority to elect a leader).
func (n *Node) placeReplicas(count int32, rf int16) ([][]int32, error) {
	unfenced := n.UnfencedBrokers()
	all := n.meta.Brokers()
	if rf <= 0 {
		rf = n.DefaultReplicationFactor()
	}
	if int(rf) > len(all) {
		return nil, kafkaerr.New(kerr.InvalidReplicationFactor, "Unable to replicate the partition %d time(s): The target replication factor of %d cannot be reached because only %d broker(s) are registered.", rf, rf, len(all))
	}
	if len(unfenced) == 0 {
		return nil, kafkaerr.New(kerr.InvalidReplicationFactor, "Unable to replicate the partition %d time(s): All brokers are currently fenced.", rf)
	}
	// Unlike Kafka's (a leader and an ISR of one), a partition here is a
	// Raft group: it has no leader until a majority of its replicas runs.
	// A topic that could not take a write is refused instead.
	if need := int(rf)/2 + 1; len(unfenced) < need {
		return nil, kafkaerr.New(kerr.InvalidReplicationFactor, "Unable to replicate the partition %d time(s): only %d broker(s) are unfenced, and a partition needs a majority (%d) of its replicas running to elect a leader.", rf, len(unfenced), need)
	}
	order := rackOrder(unfenced)
	var fenced []int32
	for _, br := range all {
		if !slices.ContainsFunc(unfenced, func(u metadata.BrokerInfo) bool { return u.ID == br.ID }) {
			fenced = append(fenced, br.ID)
		}
	}
	slices.Sort(fenced)
	intN := rand.IntN
	if n.cfg.PlacementRand != nil {
		intN = n.cfg.PlacementRand
	}
	start := intN(len(order))
	out := make([][]int32, count)
	for i := range out {
		rs := make([]int32, 0, rf)
		for j := 0; j < int(rf) && j < len(order); j++ {
			rs = append(rs, order[(start+i+j)%len(order)])
		}
		for j := 0; len(rs) < int(rf); j++ {
			rs = append(rs, fenced[(start+i+j)%len(fenced)])
		}
		out[i] = rs
	}
	return out, nil
}

// rackOrder lists brokers alternating racks (racks sorted by name, each
// rack's brokers in registration order).
func rackOrder(brokers []metadata.BrokerInfo) []int32 {
	byRack := map[string][]int32{}
	var racks []string
	for _, br := range brokers {
		if _, ok := byRack[br.Rack]; !ok {
			racks = append(racks, br.Rack)
		}
		byRack[br.Rack] = append(byRack[br.Rack], br.ID)
	}
	sort.Strings(racks)
	var order []int32
	for len(order) < len(brokers) {
		for _, r := range racks {
			if len(byRack[r]) > 0 {
				order = append(order, byRack[r][0])
				byRack[r] = byRack[r][1:]
			}
		}
	}
	return order
}

// DefaultReplicationFactor is default.replication.factor: 1 on a single
// node, min(3, nodes) in a cluster unless configured.
func (n *Node) DefaultReplicationFactor() int16 {
	if n.cfg.DefaultReplicationFactor > 0 {
		return n.cfg.DefaultReplicationFactor
	}
	return int16(min(3, len(n.cfg.Peers)))
}

// createTopicCluster creates a topic through the controller. On the
// controller it proposes; elsewhere it refuses with NOT_CONTROLLER
// (CreateTopics: the client goes to the controller) or, for topics the
// broker creates itself (auto-creation, internal topics), forwards a
// CreateTopics request to the controller and waits to apply the result.
//
// assign, if set, is the replicas of each partition (a manual assignment,
// checked by the caller); otherwise they are placed here.
//
// ctx bounds the wait (a CreateTopics request's timeout_ms): if it ends
// before the creation is committed and applied here, the error is
// REQUEST_TIMED_OUT (the creation may still happen, as in Kafka). Once it
// is applied, the topic is created: the replicas open after, in the
// background. The answer waits for this node's replicas to open for at
// most half of what is left of ctx's deadline (none without one), so a
// small topic is ready to use when this returns and a large one is
// answered in time.
func (n *Node) CreateTopic(ctx context.Context, name string, partitions int32, rf int16, assign [][]int32, configs map[string]string, internal, mustBeNew bool) (metadata.Topic, error) {
	if t, ok := n.meta.Topic(name); ok {
		if mustBeNew {
			return metadata.Topic{}, kafkaerr.New(kerr.TopicAlreadyExists, "Topic '%s' already exists.", name)
		}
		return t, nil
	}
	if err := metadata.ValidateTopicName(name); err != nil {
		return metadata.Topic{}, kafkaerr.New(kerr.InvalidTopicException, "%v", err)
	}
	if other, ok := n.meta.Collision(name); ok {
		return metadata.Topic{}, kafkaerr.New(kerr.InvalidTopicException, "Topic '%s' collides with existing topic: %s", name, other)
	}
	if partitions <= 0 {
		return metadata.Topic{}, metadata.ErrInvalidCount
	}
	if !n.IsController() {
		if mustBeNew {
			return metadata.Topic{}, notController()
		}
		if err := n.forwardCreate(name, partitions, configs); err != nil {
			return metadata.Topic{}, err
		}
		if t, ok := n.meta.Topic(name); ok {
			return t, nil
		}
		return metadata.Topic{}, kafkaerr.New(kerr.LeaderNotAvailable, "topic %s is being created", name)
	}
	reps := assign
	if reps == nil {
		var err error
		if reps, err = n.placeReplicas(partitions, rf); err != nil {
			return metadata.Topic{}, err
		}
	}
	t := metadata.Topic{Name: name, ID: metadata.NewTopicID(), Partitions: partitions, Configs: configs, Internal: internal || metadata.IsInternalTopic(name), Replicas: reps}
	if !t.Internal {
		if err := n.checkBrokerPartitions(reps); err != nil {
			return metadata.Topic{}, err
		}
	}
	if err := n.Propose(ctx, metadata.Command{Op: metadata.OpCreateTopic, Topic: &t}); err != nil {
		return metadata.Topic{}, err
	}
	if deadline, ok := ctx.Deadline(); ok {
		wctx, cancel := context.WithTimeout(ctx, time.Until(deadline)/2)
		n.replicas.WaitOpened(wctx, name)
		cancel()
	}
	t, _ = n.meta.Topic(name)
	return t, nil
}

// checkBrokerPartitions refuses new replicas reps that would take a
// broker past max.broker.partitions (KIP-578; none by default: data files'
// descriptors are bounded by their own cache, log.max.open.files). Two
// requests at once may both pass: the limit can be passed by one
// request's replicas.
func (n *Node) checkBrokerPartitions(reps [][]int32) error {
	limit := n.cfg.MaxBrokerPartitions
	if limit <= 0 {
		return nil
	}
	adds := map[int32]int{}
	for _, rs := range reps {
		for _, r := range rs {
			adds[r]++
		}
	}
	img := n.meta.Image()
	ids := slices.Sorted(maps.Keys(adds))
	for _, id := range ids {
		if have := img.ReplicaCount(id); have+adds[id] > limit {
			return kafkaerr.New(kerr.PolicyViolation, "Broker %d would hold %d partition replicas, more than max.broker.partitions (%d): it holds %d and this request adds %d. Raise max.broker.partitions (docs/storage.md).", id, have+adds[id], limit, have, adds[id])
		}
	}
	return nil
}

// forwardCreate asks the controller to create a topic and waits until the
// result is applied on this node.
func (n *Node) forwardCreate(name string, partitions int32, configs map[string]string) error {
	ctrl := n.ControllerID()
	if ctrl < 0 {
		return kafkaerr.New(kerr.LeaderNotAvailable, "no controller known yet")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 10000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, -1
	for k, v := range configs {
		cfg := kmsg.NewCreateTopicsRequestTopicConfig()
		cfg.Name, cfg.Value = k, &v
		rt.Configs = append(rt.Configs, cfg)
	}
	req.Topics = append(req.Topics, rt)
	kresp, err := n.Send(ctx, ctrl, req)
	if err != nil {
		return kafkaerr.New(kerr.LeaderNotAvailable, "forwarding topic creation: %v", err)
	}
	resp := kresp.(*kmsg.CreateTopicsResponse)
	if len(resp.Topics) == 1 && resp.Topics[0].ErrorCode != 0 && resp.Topics[0].ErrorCode != kerr.TopicAlreadyExists.Code {
		ke := kerr.ErrorForCode(resp.Topics[0].ErrorCode)
		return fmt.Errorf("forwarded topic creation: %w", ke)
	}
	// Wait to apply it here too.
	for ctx.Err() == nil {
		if _, ok := n.meta.Topic(name); ok {
			return nil
		}
		n.amu.Lock()
		ch := n.appliedCh
		n.amu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	return kafkaerr.New(kerr.LeaderNotAvailable, "topic %s not applied here yet", name)
}

// peerClient is Send's client to one broker, and the address it dials.
type peerClient struct {
	addr string
	cl   *kgo.Client
}

// Send sends req to broker id at its inter-broker address, as this node
// (its client id marks the request as one a node sent: it is not
// forwarded again). Each broker has its own client, made at first use and
// made anew when the broker's address changes: a client that found the
// others through Metadata kept dialing a stopped seed to look them up.
func (n *Node) Send(ctx context.Context, id int32, req kmsg.Request) (kmsg.Response, error) {
	br, ok := n.meta.Broker(id)
	if !ok {
		return nil, fmt.Errorf("broker %d is not registered", id)
	}
	addr, ok := n.BrokerAddr(br)
	if !ok {
		return nil, fmt.Errorf("broker %d has no %s listener", id, n.cfg.InterBrokerListener)
	}
	n.peersMu.Lock()
	if n.peersClosed {
		n.peersMu.Unlock()
		return nil, errors.New("this node is shutting down")
	}
	pc, ok := n.peers[id]
	if !ok || pc.addr != addr {
		if ok {
			pc.cl.Close()
		}
		cl, err := n.cfg.Dial([]string{addr}, kgo.ClientID(n.ClientID()))
		if err != nil {
			n.peersMu.Unlock()
			return nil, err
		}
		if n.peers == nil {
			n.peers = map[int32]peerClient{}
		}
		pc = peerClient{addr, cl}
		n.peers[id] = pc
	}
	n.peersMu.Unlock()
	return pc.cl.SeedBrokers()[0].Request(ctx, req)
}

// registerLoop makes sure the metadata knows this broker: the controller
// proposes its own registration (and, in a new cluster, the cluster id);
// other nodes send BrokerRegistration to the controller once its address
// is known.
func (n *Node) registerLoop() {
	me := n.registration()
	tick := n.clk.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-tick.C:
		}
		if err := n.register(me); err != nil {
			n.log.Debug("broker registration", "err", err)
		}
	}
}

// registration is what this broker registers.
func (n *Node) registration() metadata.BrokerInfo {
	me := n.cfg.Self
	me.DirID = n.ident.DirectoryID.String()
	if n.BrokerOnly() {
		me.RaftAddr = n.host.Addr() // the bound address: --raft-listen may say port 0
		if host, port, err := net.SplitHostPort(me.RaftAddr); err == nil {
			if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
				me.RaftAddr = net.JoinHostPort(me.Host, port)
			}
		}
	}
	return me
}

// register registers me unless the metadata has it already: proposed on
// the controller, sent to it elsewhere. Checked again and again: a
// re-registration by an old config must not stick.
func (n *Node) register(me metadata.BrokerInfo) error {
	if cur, ok := n.meta.Broker(me.ID); ok && cur.Equal(me) || n.gone.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n.IsController() {
		if len(n.meta.Brokers()) == 0 {
			// A new cluster: every node adopts the first controller's id.
			if err := n.Propose(ctx, metadata.Command{Op: metadata.OpInit, ClusterID: n.meta.ClusterID()}); err != nil {
				return err
			}
		}
		return n.Propose(ctx, metadata.Command{Op: metadata.OpRegister, Broker: &me})
	}
	if li, ok := n.meta.Broker(n.ControllerID()); ok {
		addr, _ := n.BrokerAddr(li)
		return n.sendRegistration(ctx, []string{addr}, me)
	}
	if len(n.cfg.Join) > 0 {
		// A broker-only node that has no metadata yet: the join
		// addresses lead it to the controller.
		return n.sendRegistration(ctx, n.cfg.Join, me)
	}
	return nil
}

// sendRegistration sends BrokerRegistration to the controller, found
// through seeds.
func (n *Node) sendRegistration(ctx context.Context, seeds []string, me metadata.BrokerInfo) error {
	cl, err := n.cfg.Dial(seeds, kgo.ClientID(n.ClientID()))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrBrokerRegistrationRequest()
	req.BrokerID = me.ID
	req.ClusterID = n.meta.ClusterID()
	eps := me.Listeners
	if len(eps) == 0 {
		eps = []metadata.Endpoint{{Name: string(wire.Plaintext), Host: me.Host, Port: me.Port, Protocol: string(wire.Plaintext)}}
	}
	for _, e := range eps {
		l := kmsg.NewBrokerRegistrationRequestListener()
		l.Name, l.Host, l.Port, l.SecurityProtocol = e.Name, e.Host, uint16(e.Port), wire.SecurityProtocol(e.Protocol).Code()
		req.Listeners = append(req.Listeners, l)
	}
	if me.RaftAddr != "" {
		host, port, err := net.SplitHostPort(me.RaftAddr)
		if err != nil {
			return err
		}
		pn, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return err
		}
		rl := kmsg.NewBrokerRegistrationRequestListener()
		rl.Name, rl.Host, rl.Port = RaftListenerName, host, uint16(pn)
		req.Listeners = append(req.Listeners, rl)
	}
	if me.Rack != "" {
		req.Rack = &me.Rack
	}
	if d, err := datadir.ParseUUID(me.DirID); err == nil {
		req.LogDirs = [][16]byte{d}
	}
	// BrokerRegistration is not an admin request to kgo: find the
	// controller with Metadata and send it there.
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if md.ControllerID < 0 {
		return errors.New("no controller known yet")
	}
	kresp, err := req.RequestWith(ctx, cl.Broker(int(md.ControllerID)))
	if err != nil {
		return err
	}
	if code := kresp.ErrorCode; code != 0 {
		return kerr.ErrorForCode(code)
	}
	return nil
}

func (n *Node) DeleteTopic(name string) (metadata.Topic, error) {
	t, ok := n.meta.Topic(name)
	if !ok {
		return t, metadata.ErrUnknownTopic
	}
	if !n.IsController() {
		return t, notController()
	}
	return t, n.Propose(context.Background(), metadata.Command{Op: metadata.OpDeleteTopic, Name: name})
}

// AddPartitions grows topic name to total partitions through the
// controller, the new ones placed on assign's replicas (one list per new
// partition, already validated) or, without assign, like a new topic's.
func (n *Node) AddPartitions(name string, total int32, assign [][]int32) (metadata.Topic, error) {
	t, ok := n.meta.Topic(name)
	if !ok {
		return t, metadata.ErrUnknownTopic
	}
	if !n.IsController() {
		return t, notController()
	}
	if total <= t.Partitions {
		return t, metadata.ErrInvalidCount
	}
	reps := assign
	if reps == nil {
		rf := int16(len(n.cfg.Peers))
		if len(t.Replicas) > 0 {
			rf = int16(len(t.Replicas[0]))
		}
		var err error
		if reps, err = n.placeReplicas(total-t.Partitions, rf); err != nil {
			return t, err
		}
	}
	if err := n.checkBrokerPartitions(reps); err != nil {
		return t, err
	}
	if err := n.Propose(context.Background(), metadata.Command{Op: metadata.OpAddPartitions, Name: name, Partitions: total, Replicas: reps}); err != nil {
		return t, err
	}
	t, _ = n.meta.Topic(name)
	return t, nil
}

// SetBrokerConfigs replaces the dynamic broker configs of scope ("" the
// cluster-wide default, else a broker id) through the controller.
func (n *Node) SetBrokerConfigs(scope string, configs map[string]string) error {
	if !n.IsController() {
		return notController()
	}
	return n.Propose(context.Background(), metadata.Command{Op: metadata.OpBrokerConfigs, Name: scope, Configs: configs})
}

func (n *Node) SetTopicConfigs(name string, configs map[string]string) (metadata.Topic, error) {
	t, ok := n.meta.Topic(name)
	if !ok {
		return t, metadata.ErrUnknownTopic
	}
	if !n.IsController() {
		return t, notController()
	}
	if err := n.Propose(context.Background(), metadata.Command{Op: metadata.OpTopicConfigs, Name: name, Configs: configs}); err != nil {
		return t, err
	}
	t, _ = n.meta.Topic(name)
	return t, nil
}

// ProducerIDNodeBits: node ids are 1..1023 (once the low bits of
// per-node producer ids; those now come from the metadata log,
// producerids.go).
const ProducerIDNodeBits = 10

// metaRepairLoop restarts the metadata group if it failed (etcd raft
// panicked on a broken invariant, or its log could not be read), with a
// growing pause, as a restart of the broker would. A group whose log
// failed stays down until the broker restarts with a working disk.
func (n *Node) metaRepairLoop(stop <-chan struct{}) {
	const every, maxPause = 2 * time.Second, 5 * time.Minute
	pause, next := every, time.Time{}
	tick := n.clk.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		st, err := n.host.Status(MetadataGroup)
		if err != nil || st.Failed == "" {
			pause = every
			continue
		}
		if n.clk.Now().Before(next) {
			continue
		}
		next, pause = n.clk.Now().Add(pause), min(2*pause, maxPause)
		if err := n.host.RetryGroup(MetadataGroup); err != nil {
			n.log.Error("the metadata Raft group failed and cannot be restarted here; restart the broker once its disk works", "err", err)
		}
	}
}

// BrokerClientPrefix starts the client id of the requests nodes send each
// other (ClientID): a forwarded request is not forwarded again.
const BrokerClientPrefix = "holdfast-broker-"

// BrokerAddr is broker br's host:port on the inter-broker listener.
func (n *Node) BrokerAddr(br metadata.BrokerInfo) (string, bool) {
	e, ok := br.Endpoint(n.cfg.InterBrokerListener)
	if !ok {
		return "", false
	}
	return net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port))), true
}

// brokerClientID is the client id of the requests this node sends others.
func (n *Node) ClientID() string {
	return BrokerClientPrefix + strconv.Itoa(int(n.cfg.NodeID))
}

// ForwardToController sends req to the controller when this node is not
// it (Kafka forwards such admin requests from any broker): forwarded
// reports that resp is the controller's answer. This node authorized the
// client already; the controller trusts a node's forwarded request.
func (n *Node) ForwardToController(ctx context.Context, req kmsg.Request) (resp kmsg.Response, forwarded bool, err error) {
	if n.IsController() {
		return nil, false, nil
	}
	id := n.ControllerID()
	before := n.appliedOffset()
	if id < 0 {
		return nil, true, kafkaerr.New(kerr.NotController, "no controller known yet")
	}
	resp, err = n.Send(ctx, id, req)
	if err != nil {
		return nil, true, kafkaerr.New(kerr.RequestTimedOut, "forwarding to the controller: %v", err)
	}
	// Wait until this node applied what the controller committed, so a
	// client that reads back here sees its change.
	n.waitAppliedPast(ctx, before)
	return resp, true, nil
}

// appliedOffset is the end of the last metadata entry applied here.
func (n *Node) appliedOffset() int64 {
	n.amu.Lock()
	defer n.amu.Unlock()
	return n.applied
}

// waitAppliedPast waits (a few seconds at most) until this node applied a
// metadata entry past before.
func (n *Node) waitAppliedPast(ctx context.Context, before int64) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		n.amu.Lock()
		applied, ch := n.applied, n.appliedCh
		n.amu.Unlock()
		if applied > before {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// brokerScope names a dynamic broker config scope for the log.
func brokerScope(name string) string {
	if name == "" {
		return "cluster default"
	}
	return "broker " + name
}
