package broker

import (
	"context"
	"errors"
	"fmt"
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

	"holdfast/internal/auth"
	"holdfast/internal/controller"
	"holdfast/internal/datadir"
	"holdfast/internal/raft"
	"holdfast/internal/records"
	"holdfast/internal/storage"
	"holdfast/internal/wire"
)

// Every node runs one raft.Host that drives the metadata group (the
// controller: broker registrations, topics with their replica sets,
// configs) and one group per partition replica on this node. A single node
// is a cluster of one voter, on the same path.

// metadataGroup is the Raft group id of the controller. Partition groups
// get ids hashed from (topic id, partition) with the top bit set, so they
// never collide with it.
const metadataGroup = 1

// metadataLogDir is where the metadata group's Raft log lives, under the
// data dir (Kafka's KRaft log has the same name).
const metadataLogDir = "__cluster_metadata-0"

func init() {
	onStart(rankStorage-5, "raft", (*Broker).startRaft)
	onStart(rankStorage+5, "cluster metadata", (*Broker).startClusterMeta)
	registerInternal(kmsg.BrokerRegistration, 0, 4, (*Broker).handleBrokerRegistration)
}

type cluster struct {
	b       *Broker
	host    *raft.Host
	metaLog *storage.Log
	voters  []uint64

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

	fwdMu sync.Mutex
	fwd   *kgo.Client // to other brokers: registration, forwarded creates

	live *liveness // heartbeats and fencing (liveness.go)

	stop chan struct{}
	wg   sync.WaitGroup
}

// isVoter reports whether broker id is in the controller quorum (--peers).
func (b *Broker) isVoter(id int32) bool {
	_, ok := b.cfg.Peers[id]
	return ok
}

// brokerOnly reports whether this node is a broker-only node: in a cluster,
// but not one of the metadata voters in --peers.
func (b *Broker) brokerOnly() bool {
	_, voter := b.cfg.Peers[b.cfg.NodeID]
	return len(b.cfg.Peers) > 0 && !voter
}

// raftListenerName names the extra listener in a broker-only node's
// BrokerRegistration that carries its Raft address.
const raftListenerName = "RAFT"

func (b *Broker) startRaft() error {
	listen := b.cfg.RaftListen
	if _, ok := b.cfg.Peers[b.cfg.NodeID]; !ok {
		// A broker-only node: it joins through a running broker and gets
		// the metadata log as a learner.
		if listen == "" || len(b.cfg.Join) == 0 {
			return fmt.Errorf("--node-id %d is not in --peers: a broker-only node needs --raft-listen and --join", b.cfg.NodeID)
		}
		if b.cfg.NodeID <= 0 || b.cfg.NodeID >= 1<<producerIDNodeBits {
			return fmt.Errorf("--node-id %d: must be in 1..%d", b.cfg.NodeID, 1<<producerIDNodeBits-1)
		}
	}
	if listen == "" {
		listen = b.cfg.Peers[b.cfg.NodeID]
	}
	if err := b.cfg.FS.MkdirAll(b.cfg.DataDir, 0o755); err != nil {
		return err
	}
	peers := make(map[uint64]string, len(b.cfg.Peers))
	var voters []uint64
	for id, addr := range b.cfg.Peers {
		if id <= 0 || id >= 1<<producerIDNodeBits {
			return fmt.Errorf("peer id %d: must be in 1..%d", id, 1<<producerIDNodeBits-1)
		}
		peers[uint64(id)] = addr
		voters = append(voters, uint64(id))
	}
	slices.Sort(voters)
	var rtls *raft.TransportTLS
	if sc := b.cfg.Security; sc.RaftTLS {
		// Mutual TLS with this node's certificate: a node without one
		// from the cluster's CA cannot take part (security.go).
		if sc.NodeTLS == nil || !sc.NodeTLS.HasKeystore() || !sc.NodeTLS.HasTruststore() {
			return fmt.Errorf("Raft over TLS needs this node's keystore and the cluster's truststore")
		}
		rtls = &raft.TransportTLS{Server: sc.NodeTLS.MutualServerConfig(), Client: sc.NodeTLS.ClientConfig}
	}
	h, err := raft.NewHost(raft.Config{
		ID: uint64(b.cfg.NodeID), Dir: b.cfg.DataDir, Listen: listen, Peers: peers, Identity: b.raftIdentity(),
		FS: b.cfg.FS, Logger: b.log.With("component", "raft"), TLS: rtls, Faults: b.cfg.RaftFaults,
	})
	if err != nil {
		return err
	}
	if err := b.joinCluster(h); err != nil {
		h.Close()
		return err
	}
	b.cluster = &cluster{b: b, host: h, voters: voters, kick: make(chan struct{}, 1),
		appliedCh: make(chan struct{}), results: map[int64]error{}, stop: make(chan struct{})}
	b.closers = append(b.closers, h.Close) // idempotent; the metadata closer closes it earlier
	b.log.Info("raft host started", "node", b.cfg.NodeID, "raft_listen", h.Addr(), "peers", len(peers), "broker_only", b.brokerOnly(), "tls", rtls != nil)
	return nil
}

// startClusterMeta opens the metadata group, replays what the metadata
// file has not applied yet, and starts registering this broker.
func (b *Broker) startClusterMeta() error {
	c := b.cluster
	cfg := storage.DefaultConfig()
	cfg.RetentionMs, cfg.RetentionBytes = -1, -1
	cfg.Flush = storage.FlushPolicy{Mode: storage.FlushSync}
	dir := filepath.Join(b.cfg.DataDir, metadataLogDir)
	if err := b.cfg.FS.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	l, err := storage.Open(dir, cfg, storage.Options{FS: b.cfg.FS, Syncer: b.syncer, Logger: b.log})
	if err != nil {
		return err
	}
	c.metaLog = l
	// A directory the cluster was not formed with has lost whatever this
	// node acknowledged before: it catches up before it votes.
	rejoin := !b.ident.BootstrapMember()
	if err := c.host.AddGroup(raft.GroupConfig{ID: metadataGroup, Log: l, Voters: c.voters, OnCommit: c.onMetaCommit, Rejoin: rejoin}); err != nil {
		l.Close()
		return err
	}
	// Broker-only nodes are not in --peers: their Raft addresses come
	// from their registrations.
	for _, br := range b.meta.Brokers() {
		if br.RaftAddr != "" && br.ID != b.cfg.NodeID {
			c.host.SetPeer(uint64(br.ID), br.RaftAddr)
		}
	}
	c.wg.Add(1)
	go c.applyLoop()
	if b.singleNode() {
		// The only voter leads its metadata at once: be registered (and
		// so able to place topics) before serving anyone.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := c.host.WaitSettled(ctx, metadataGroup)
		cancel()
		if err == nil {
			err = c.register(c.registration())
		}
		if err == nil {
			// Bootstrap users exist before anyone can try them.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err = b.bootstrapScram(ctx)
			cancel()
		}
		if err != nil {
			return fmt.Errorf("registering this node in its metadata: %w", err)
		}
	}
	c.wg.Add(2)
	go c.registerLoop()
	go c.reassignLoop()
	stopRepair := goLoop(c.metaRepairLoop)
	b.closers = append(b.closers, func() error {
		stopRepair()
		close(c.stop)
		c.wg.Wait()
		c.fwdMu.Lock()
		if c.fwd != nil {
			c.fwd.Close()
		}
		c.fwdMu.Unlock()
		err := c.host.Close()
		return errors.Join(err, l.Close())
	})
	return nil
}

// onMetaCommit runs on the Ready loop: it only queues.
func (c *cluster) onMetaCommit(_ uint64, ents []raft.Committed) {
	c.qmu.Lock()
	c.queue = append(c.queue, ents...)
	c.qmu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

var errStopScan = errors.New("stop")

func (c *cluster) applyLoop() {
	defer c.wg.Done()
	// Entries committed before this start whose effect the metadata file
	// does not have yet (a crash between commit and apply): Raft does not
	// deliver them again, so read them from the log.
	if st, err := c.host.Status(metadataGroup); err == nil {
		from := c.b.meta.Applied()
		if from < st.CommitOffset && from < c.metaLog.EndOffset() {
			err := c.metaLog.Scan(max(from, c.metaLog.StartOffset()), func(h records.Header, batch []byte) error {
				end := h.LastOffset() + 1
				if end > st.CommitOffset {
					return errStopScan
				}
				if !h.IsControl() {
					c.applyBatch(end, batch)
				}
				c.setApplied(end, nil)
				return nil
			})
			if err != nil && !errors.Is(err, errStopScan) {
				c.b.log.Error("replaying the metadata log", "err", err)
			}
		}
	}
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		c.qmu.Lock()
		q := c.queue
		c.queue = nil
		c.qmu.Unlock()
		for _, e := range q {
			var err error
			if e.Data != nil {
				err = c.applyBatch(e.EndOffset, e.Data)
			}
			c.setApplied(e.EndOffset, err)
		}
	}
}

func (c *cluster) setApplied(end int64, res error) {
	c.amu.Lock()
	defer c.amu.Unlock()
	if end <= c.applied {
		return
	}
	c.applied = end
	c.results[end] = res
	c.resultQ = append(c.resultQ, end)
	if len(c.resultQ) > 1024 { // nobody waits that long for a result
		delete(c.results, c.resultQ[0])
		c.resultQ = c.resultQ[1:]
	}
	close(c.appliedCh)
	c.appliedCh = make(chan struct{})
}

// applyBatch applies the command in one committed metadata batch.
func (c *cluster) applyBatch(end int64, batch []byte) error {
	recs, err := records.Records(batch)
	if err != nil || len(recs) != 1 {
		c.b.log.Error("undecodable metadata entry", "offset", end-1, "err", err)
		return fmt.Errorf("bad metadata entry: %w", kerr.UnknownServerError)
	}
	cmd, err := controller.DecodeCommand(recs[0].Value)
	if err != nil {
		c.b.log.Error("undecodable metadata command", "offset", end-1, "err", err)
		return fmt.Errorf("%w: %w", kerr.UnknownServerError, err)
	}
	return c.apply(end, cmd)
}

// apply changes the metadata and then this node's replicas to match.
func (c *cluster) apply(end int64, cmd controller.Command) error {
	b := c.b
	b.replicas.Lock()
	defer b.replicas.Unlock()
	if cmd.Op == controller.OpCreateTopic && cmd.Topic != nil {
		// Node-local: data of a deleted topic of that name goes first.
		if err := b.replicas.FinishPendingDelete(cmd.Topic.Name); err != nil {
			b.log.Warn("removing deleted topic's data", "topic", cmd.Topic.Name, "err", err)
		}
	}
	var old controller.Topic
	if cmd.Op == controller.OpAddPartitions {
		old, _ = b.meta.Topic(cmd.Name)
	}
	t, err := b.meta.Apply(end, cmd)
	if err != nil {
		b.log.Debug("metadata command refused", "op", cmd.Op, "topic", cmd.Name, "err", err)
		return err
	}
	switch cmd.Op {
	case controller.OpCreateTopic:
		b.log.Info("created topic", "topic", t.Name, "partitions", t.Partitions, "topic_id", t.IDString(), "replicas", t.Replicas)
		if err := b.replicas.OpenTopic(t, 0); err != nil {
			b.log.Error("opening replicas", "topic", t.Name, "err", err)
		}
	case controller.OpAddPartitions:
		b.log.Info("added partitions", "topic", t.Name, "from", old.Partitions, "to", t.Partitions)
		if err := b.replicas.OpenTopic(t, old.Partitions); err != nil {
			b.log.Error("opening replicas", "topic", t.Name, "err", err)
		}
	case controller.OpDeleteTopic:
		b.log.Info("deleted topic", "topic", t.Name, "topic_id", t.IDString())
		if err := b.replicas.RemoveTopic(t); err != nil {
			b.log.Warn("removing deleted topic's data", "topic", t.Name, "err", err)
		}
	case controller.OpTopicConfigs:
		b.replicas.ApplyConfigs(t)
	case controller.OpRegister:
		b.log.Info("broker registered", "broker", cmd.Broker.ID, "host", cmd.Broker.Host, "port", cmd.Broker.Port, "rack", cmd.Broker.Rack, "raft_addr", cmd.Broker.RaftAddr)
		if cmd.Broker.RaftAddr != "" && cmd.Broker.ID != b.cfg.NodeID {
			c.host.SetPeer(uint64(cmd.Broker.ID), cmd.Broker.RaftAddr)
		}
	case controller.OpCreateACLs, controller.OpDeleteACLs, controller.OpScram:
		b.securityApplied()
	case controller.OpUnregister:
		b.log.Info("broker unregistered", "broker", cmd.BrokerID)
		if cmd.BrokerID == b.cfg.NodeID {
			c.gone.Store(true)
			b.log.Warn("this broker was unregistered from the cluster: stop it (restarting it registers it again)")
		}
	case controller.OpReassign, controller.OpReassignDone:
		if t.Name == "" {
			break // applied before (a redelivered entry); start-up opened and cleaned up
		}
		if cmd.Op == controller.OpReassignDone {
			b.log.Info("reassignment complete", "topic", t.Name, "partition", cmd.Partition, "replicas", t.Replicas[cmd.Partition])
			if err := b.replicas.DropMoved(t); err != nil {
				b.log.Error("removing moved replicas", "topic", t.Name, "err", err)
			}
			break
		}
		if r, ok := t.Reassignment(cmd.Partition); ok {
			b.log.Info("reassigning partition", "topic", t.Name, "partition", cmd.Partition, "target", r.Target, "replicas", t.Replicas[cmd.Partition])
		}
		if err := b.replicas.OpenTopic(t, 0); err != nil {
			b.log.Error("opening replicas", "topic", t.Name, "err", err)
		}
	}
	return nil
}

// controllerID is the metadata group's leader (-1 if unknown).
func (c *cluster) controllerID() int32 {
	st, err := c.host.Status(metadataGroup)
	if err != nil || st.Leader == 0 {
		return -1
	}
	return int32(st.Leader)
}

func (c *cluster) isController() bool {
	st, err := c.host.Status(metadataGroup)
	return err == nil && st.State == "StateLeader"
}

// propose commits cmd through the metadata group (this node must lead it)
// and waits until it is applied here; the error is the command's.
func (c *cluster) propose(ctx context.Context, cmd controller.Command) error {
	val, err := controller.EncodeCommand(cmd)
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
	p, err := c.host.Propose(ctx, metadataGroup, batch)
	if err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return errCode(kerr.NotController, "this node is not the controller")
		}
		return errCode(kerr.RequestTimedOut, "metadata proposal: %v", err)
	}
	if err := c.host.WaitCommitted(ctx, p); err != nil {
		if errors.Is(err, raft.ErrProposalLost) {
			return errCode(kerr.NotController, "lost the controller role before the change committed")
		}
		return errCode(kerr.RequestTimedOut, "metadata commit: %v", err)
	}
	for {
		c.amu.Lock()
		applied, ch := c.applied, c.appliedCh
		res, ok := c.results[p.EndOffset]
		c.amu.Unlock()
		if applied >= p.EndOffset {
			if !ok {
				return nil
			}
			return res
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return errCode(kerr.RequestTimedOut, "metadata apply: %v", ctx.Err())
		}
	}
}

// controllerOnly is the error code of a broker-to-controller request
// (registration, AlterPartition) arriving here: only the controller serves
// them.
func (c *cluster) controllerOnly() int16 {
	if !c.isController() {
		return kerr.NotController.Code
	}
	return 0
}

// notController is the answer of a node that cannot change metadata.
func notController() error {
	return errCode(kerr.NotController, "this node is not the controller")
}

// placeReplicas assigns rf replicas to each of n partitions over the
// registered brokers that are not fenced: round-robin from a random start over a list that
// alternates racks, so a partition's replicas land on different racks when
// there are enough (Kafka's rack-aware assignment, simplified).
func (c *cluster) placeReplicas(n int32, rf int16) ([][]int32, error) {
	brokers := c.b.unfencedBrokers()
	if rf <= 0 {
		rf = c.b.defaultReplicationFactor()
	}
	if int(rf) > len(brokers) {
		return nil, errCode(kerr.InvalidReplicationFactor, "Replication factor: %d larger than available brokers: %d.", rf, len(brokers))
	}
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
	start := rand.IntN(len(order))
	out := make([][]int32, n)
	for i := range out {
		rs := make([]int32, rf)
		for j := range rs {
			rs[j] = order[(start+i+j)%len(order)]
		}
		out[i] = rs
	}
	return out, nil
}

// defaultReplicationFactor is default.replication.factor: 1 on a single
// node, min(3, nodes) in a cluster unless configured.
func (b *Broker) defaultReplicationFactor() int16 {
	if b.cfg.DefaultReplicationFactor > 0 {
		return b.cfg.DefaultReplicationFactor
	}
	return int16(min(3, len(b.cfg.Peers)))
}

// createTopicCluster creates a topic through the controller. On the
// controller it proposes; elsewhere it refuses with NOT_CONTROLLER
// (CreateTopics: the client goes to the controller) or, for topics the
// broker creates itself (auto-creation, internal topics), forwards a
// CreateTopics request to the controller and waits to apply the result.
//
// assign, if set, is the replicas of each partition (a manual assignment,
// checked by the caller); otherwise they are placed here.
func (c *cluster) createTopic(name string, partitions int32, rf int16, assign [][]int32, configs map[string]string, internal, mustBeNew bool) (controller.Topic, error) {
	b := c.b
	if t, ok := b.meta.Topic(name); ok {
		if mustBeNew {
			return controller.Topic{}, errCode(kerr.TopicAlreadyExists, "Topic '%s' already exists.", name)
		}
		return t, nil
	}
	if err := validateTopicName(name); err != nil {
		return controller.Topic{}, errCode(kerr.InvalidTopicException, "%v", err)
	}
	if other, ok := b.topicCollision(name); ok {
		return controller.Topic{}, errCode(kerr.InvalidTopicException, "Topic '%s' collides with existing topic: %s", name, other)
	}
	if partitions <= 0 {
		return controller.Topic{}, controller.ErrInvalidCount
	}
	if !c.isController() {
		if mustBeNew {
			return controller.Topic{}, notController()
		}
		if err := c.forwardCreate(name, partitions, configs); err != nil {
			return controller.Topic{}, err
		}
		if t, ok := b.meta.Topic(name); ok {
			return t, nil
		}
		return controller.Topic{}, errCode(kerr.LeaderNotAvailable, "topic %s is being created", name)
	}
	reps := assign
	if reps == nil {
		var err error
		if reps, err = c.placeReplicas(partitions, rf); err != nil {
			return controller.Topic{}, err
		}
	}
	t := controller.Topic{Name: name, ID: controller.NewTopicID(), Partitions: partitions, Configs: configs, Internal: internal || isInternalTopic(name), Replicas: reps}
	if err := c.propose(context.Background(), controller.Command{Op: controller.OpCreateTopic, Topic: &t}); err != nil {
		return controller.Topic{}, err
	}
	t, _ = b.meta.Topic(name)
	return t, nil
}

// forwardCreate asks the controller to create a topic and waits until the
// result is applied on this node.
func (c *cluster) forwardCreate(name string, partitions int32, configs map[string]string) error {
	cl, err := c.forwarder()
	if err != nil {
		return errCode(kerr.LeaderNotAvailable, "no controller known yet: %v", err)
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
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return errCode(kerr.LeaderNotAvailable, "forwarding topic creation: %v", err)
	}
	if len(resp.Topics) == 1 && resp.Topics[0].ErrorCode != 0 && resp.Topics[0].ErrorCode != kerr.TopicAlreadyExists.Code {
		ke := kerr.ErrorForCode(resp.Topics[0].ErrorCode)
		return fmt.Errorf("forwarded topic creation: %w", ke)
	}
	// Wait to apply it here too.
	for ctx.Err() == nil {
		if _, ok := c.b.meta.Topic(name); ok {
			return nil
		}
		c.amu.Lock()
		ch := c.appliedCh
		c.amu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	return errCode(kerr.LeaderNotAvailable, "topic %s not applied here yet", name)
}

// forwarder is a Kafka client over the registered brokers, for the
// requests this node sends to the controller.
func (c *cluster) forwarder() (*kgo.Client, error) {
	c.fwdMu.Lock()
	defer c.fwdMu.Unlock()
	if c.fwd != nil {
		return c.fwd, nil
	}
	var seeds []string
	for _, br := range c.b.meta.Brokers() {
		if addr, ok := c.b.brokerAddr(br); ok && br.ID != c.b.cfg.NodeID {
			seeds = append(seeds, addr)
		}
	}
	if len(seeds) == 0 {
		return nil, errors.New("no other broker registered")
	}
	cl, err := c.b.nodeClient(seeds, kgo.ClientID(c.b.brokerClientID()))
	if err != nil {
		return nil, err
	}
	c.fwd = cl
	return cl, nil
}

// registerLoop makes sure the metadata knows this broker: the controller
// proposes its own registration (and, in a new cluster, the cluster id);
// other nodes send BrokerRegistration to the controller once its address
// is known.
func (c *cluster) registerLoop() {
	defer c.wg.Done()
	me := c.registration()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		if err := c.register(me); err != nil {
			c.b.log.Debug("broker registration", "err", err)
		}
	}
}

// registration is what this broker registers.
func (c *cluster) registration() controller.BrokerInfo {
	b := c.b
	me := b.selfInfo()
	me.DirID = b.ident.DirectoryID.String()
	if b.brokerOnly() {
		me.RaftAddr = c.host.Addr() // the bound address: --raft-listen may say port 0
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
func (c *cluster) register(me controller.BrokerInfo) error {
	b := c.b
	if cur, ok := b.meta.Broker(me.ID); ok && cur.Equal(me) || c.gone.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c.isController() {
		if len(b.meta.Brokers()) == 0 {
			// A new cluster: every node adopts the first controller's id.
			if err := c.propose(ctx, controller.Command{Op: controller.OpInit, ClusterID: b.meta.ClusterID()}); err != nil {
				return err
			}
		}
		return c.propose(ctx, controller.Command{Op: controller.OpRegister, Broker: &me})
	}
	if li, ok := b.meta.Broker(c.controllerID()); ok {
		addr, _ := b.brokerAddr(li)
		return c.sendRegistration(ctx, []string{addr}, me)
	}
	if len(b.cfg.Join) > 0 {
		// A broker-only node that has no metadata yet: the join
		// addresses lead it to the controller.
		return c.sendRegistration(ctx, b.cfg.Join, me)
	}
	return nil
}

// sendRegistration sends BrokerRegistration to the controller, found
// through seeds.
func (c *cluster) sendRegistration(ctx context.Context, seeds []string, me controller.BrokerInfo) error {
	cl, err := c.b.nodeClient(seeds, kgo.ClientID(c.b.brokerClientID()))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrBrokerRegistrationRequest()
	req.BrokerID = me.ID
	req.ClusterID = c.b.meta.ClusterID()
	eps := me.Listeners
	if len(eps) == 0 {
		eps = []controller.Endpoint{{Name: string(wire.Plaintext), Host: me.Host, Port: me.Port, Protocol: string(wire.Plaintext)}}
	}
	for _, e := range eps {
		l := kmsg.NewBrokerRegistrationRequestListener()
		l.Name, l.Host, l.Port, l.SecurityProtocol = e.Name, e.Host, uint16(e.Port), securityProtocolCode(e.Protocol)
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
		rl.Name, rl.Host, rl.Port = raftListenerName, host, uint16(pn)
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

// handleBrokerRegistration (KRaft's broker-to-controller API) records a
// broker's Kafka listener in the metadata. Only the controller accepts it.
func (b *Broker) handleBrokerRegistration(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.BrokerRegistrationRequest)
	resp := req.ResponseKind().(*kmsg.BrokerRegistrationResponse)
	c := b.cluster
	switch {
	case c.controllerOnly() != 0:
		resp.ErrorCode = c.controllerOnly()
		return wire.Respond(resp)
	case len(req.Listeners) == 0 || req.BrokerID <= 0 || req.BrokerID >= 1<<producerIDNodeBits:
		resp.ErrorCode = kerr.InvalidRequest.Code
		return wire.Respond(resp)
	}
	if req.ClusterID != b.meta.ClusterID() {
		resp.ErrorCode = kerr.InconsistentClusterID.Code
		return wire.Respond(resp)
	}
	info := controller.BrokerInfo{ID: req.BrokerID, Host: req.Listeners[0].Host, Port: int32(req.Listeners[0].Port)}
	for _, l := range req.Listeners {
		if l.Name != raftListenerName {
			info.Listeners = append(info.Listeners, controller.Endpoint{Name: l.Name, Host: l.Host, Port: int32(l.Port), Protocol: securityProtocolName(l.SecurityProtocol)})
		}
	}
	if len(info.Listeners) == 1 && info.Listeners[0].Name == string(wire.Plaintext) && info.Listeners[0].Protocol == string(wire.Plaintext) {
		info.Listeners = nil // the zero-config form, as selfInfo registers it
	}
	if len(req.LogDirs) > 0 {
		info.DirID = datadir.UUID(req.LogDirs[0]).String()
	}
	if req.Rack != nil {
		info.Rack = *req.Rack
	}
	if !b.isVoter(req.BrokerID) {
		// A broker-only node must say where its Raft host listens.
		i := slices.IndexFunc(req.Listeners, func(l kmsg.BrokerRegistrationRequestListener) bool { return l.Name == raftListenerName })
		if i < 0 || req.Listeners[i].Host == "" || req.Listeners[i].Port == 0 {
			resp.ErrorCode = kerr.InvalidRequest.Code
			return wire.Respond(resp)
		}
		info.RaftAddr = net.JoinHostPort(req.Listeners[i].Host, strconv.Itoa(int(req.Listeners[i].Port)))
	}
	if cur, ok := b.meta.Broker(info.ID); ok && cur.Equal(info) {
		// A node repeats its registration until its metadata shows it
		// (a new broker-only node: once it has the metadata log).
		resp.BrokerEpoch = 1
		return wire.Respond(resp)
	}
	return func(ctx context.Context) kmsg.Response {
		err := c.propose(ctx, controller.Command{Op: controller.OpRegister, Broker: &info})
		resp.ErrorCode, _ = kafkaError(err)
		resp.BrokerEpoch = 1
		return resp
	}
}

// createClusterTopic is CreateTopics in cluster mode.
func (b *Broker) createClusterTopic(name string, partitions int32, rf int16, assign [][]int32, configs map[string]string) (controller.Topic, error) {
	return b.cluster.createTopic(name, partitions, rf, assign, configs, false, true)
}

func (c *cluster) deleteTopic(name string) (controller.Topic, error) {
	t, ok := c.b.meta.Topic(name)
	if !ok {
		return t, controller.ErrUnknownTopic
	}
	if !c.isController() {
		return t, notController()
	}
	return t, c.propose(context.Background(), controller.Command{Op: controller.OpDeleteTopic, Name: name})
}

func (c *cluster) addPartitions(name string, total int32) (controller.Topic, error) {
	t, ok := c.b.meta.Topic(name)
	if !ok {
		return t, controller.ErrUnknownTopic
	}
	if !c.isController() {
		return t, notController()
	}
	if total <= t.Partitions {
		return t, controller.ErrInvalidCount
	}
	rf := int16(len(c.b.cfg.Peers))
	if len(t.Replicas) > 0 {
		rf = int16(len(t.Replicas[0]))
	}
	reps, err := c.placeReplicas(total-t.Partitions, rf)
	if err != nil {
		return t, err
	}
	if err := c.propose(context.Background(), controller.Command{Op: controller.OpAddPartitions, Name: name, Partitions: total, Replicas: reps}); err != nil {
		return t, err
	}
	t, _ = c.b.meta.Topic(name)
	return t, nil
}

func (c *cluster) setTopicConfigs(name string, configs map[string]string) (controller.Topic, error) {
	t, ok := c.b.meta.Topic(name)
	if !ok {
		return t, controller.ErrUnknownTopic
	}
	if !c.isController() {
		return t, notController()
	}
	if err := c.propose(context.Background(), controller.Command{Op: controller.OpTopicConfigs, Name: name, Configs: configs}); err != nil {
		return t, err
	}
	t, _ = c.b.meta.Topic(name)
	return t, nil
}

// producerIDNodeBits: node ids are 1..1023 (once the low bits of
// per-node producer ids; those now come from the metadata log,
// producerids.go).
const producerIDNodeBits = 10

// brokers lists the registered brokers that are not fenced for Metadata
// (this one at least, before its registration is applied, or when every
// broker is fenced: a client must be able to reach somebody).
func (c *cluster) brokers(listener string) []kmsg.MetadataResponseBroker {
	var out []kmsg.MetadataResponseBroker
	self := false
	for _, br := range c.b.unfencedBrokers() {
		e, ok := br.Endpoint(listener)
		if !ok {
			continue // no such listener on that broker: Kafka leaves it out
		}
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port = br.ID, e.Host, e.Port
		if br.Rack != "" {
			rack := br.Rack
			mb.Rack = &rack
		}
		self = self || br.ID == c.b.cfg.NodeID
		out = append(out, mb)
	}
	if _, registered := c.b.meta.Broker(c.b.cfg.NodeID); !self && (!registered || len(out) == 0) {
		out = append(out, c.b.brokerEntry(listener))
	}
	return out
}

// partitionMetadata describes partition i of t from this node's view: its
// Raft leader and term when this node is a replica. A node that holds no
// replica does not know the leader; it names the first replica, and a
// client sent to the wrong one gets NOT_LEADER_OR_FOLLOWER and asks again.
func (c *cluster) partitionMetadata(t controller.Topic, i int32) kmsg.MetadataResponseTopicPartition {
	mp := kmsg.NewMetadataResponseTopicPartition()
	mp.Partition = i
	mp.Leader, mp.LeaderEpoch = -1, -1
	mp.OfflineReplicas = []int32{}
	if int(i) < len(t.Replicas) {
		mp.Replicas = slices.Clone(t.Replicas[i])
	} else {
		mp.Replicas = []int32{}
	}
	mp.ISR = []int32{}
	for _, r := range mp.Replicas {
		if c.b.fenced(r) {
			mp.OfflineReplicas = append(mp.OfflineReplicas, r)
		}
	}
	live := slices.DeleteFunc(slices.Clone(mp.Replicas), c.b.fenced)
	p := c.b.replicas.Get(t.Name, i)
	if p == nil {
		if len(live) == 0 {
			mp.ErrorCode = kerr.LeaderNotAvailable.Code
			return mp
		}
		mp.Leader, mp.ISR = live[0], live
		return mp
	}
	st, err := p.RaftStatus()
	switch {
	case err != nil || st.Failed != "":
		mp.ErrorCode = kerr.KafkaStorageError.Code
		mp.OfflineReplicas = []int32{c.b.cfg.NodeID}
		return mp
	case st.Leader == 0 || c.b.fenced(int32(st.Leader)):
		// An election is running, or the leader we last heard of is
		// fenced: clients must not be sent to it.
		mp.ErrorCode = kerr.LeaderNotAvailable.Code
		return mp
	}
	mp.Leader = int32(st.Leader)
	mp.LeaderEpoch = p.LeaderEpoch()
	if st.State != "StateLeader" {
		// Followers do not track the others' progress.
		mp.ISR = live
		return mp
	}
	for _, r := range st.Replicas {
		id := int32(r.ID)
		switch {
		case r.Learner:
			// A replica being added by a reassignment: not in sync
			// until it votes.
		case c.b.fenced(id):
		case r.ID == st.Node || r.Active && r.State == "StateReplicate":
			mp.ISR = append(mp.ISR, id)
		case !r.Active:
			mp.OfflineReplicas = append(mp.OfflineReplicas, id)
		}
	}
	slices.Sort(mp.ISR)
	slices.Sort(mp.OfflineReplicas)
	return mp
}

// RegisteredBrokers is how many brokers this node's metadata knows.
func (b *Broker) RegisteredBrokers() int { return len(b.meta.Brokers()) }

func init() { register(kmsg.DescribeQuorum, 0, 1, (*Broker).handleDescribeQuorum) }

// handleDescribeQuorum (KIP-595) describes the Raft group of any partition
// (Kafka serves only __cluster_metadata; "__cluster_metadata" partition 0
// here is the controller group): leader, epoch, high watermark and, per
// voter, the end of what it acknowledged - followers acknowledge after
// fsync, so that is the replica's fsynced offset. The leader's own entry is
// its durable (fsynced) offset. Only the leader knows the others' progress;
// other nodes answer NOT_LEADER_OR_FOLLOWER. `holdfast cluster status`
// reads it.
func (b *Broker) handleDescribeQuorum(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DescribeQuorumRequest)
	resp := req.ResponseKind().(*kmsg.DescribeQuorumResponse)
	if !b.authorizeCluster(r, auth.OpDescribe) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	for _, rt := range req.Topics {
		st := kmsg.NewDescribeQuorumResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewDescribeQuorumResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.LeaderID, sp.LeaderEpoch, sp.HighWatermark = -1, -1, -1
			var gid uint64
			if rt.Topic == metadataLogDir[:len(metadataLogDir)-2] && rp.Partition == 0 {
				gid = metadataGroup
			} else if p := b.replicas.Get(rt.Topic, rp.Partition); p != nil {
				gid = p.RaftGroup()
			}
			if gid == 0 {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			rs, err := b.cluster.host.Status(gid)
			switch {
			case err != nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case rs.State != "StateLeader":
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
				sp.LeaderID = int32(rs.Leader)
			default:
				sp.LeaderID, sp.LeaderEpoch, sp.HighWatermark = int32(rs.Leader), int32(rs.Term), rs.CommitOffset
				for _, rep := range rs.Replicas {
					v := kmsg.NewDescribeQuorumResponseTopicPartitionReplicaState()
					v.ReplicaID, v.LogEndOffset = int32(rep.ID), rep.MatchOffset
					v.LastFetchTimestamp, v.LastCaughtUpTimestamp = -1, -1
					if rep.ID == rs.Node {
						v.LogEndOffset = rs.DurableOffset
					}
					if rep.Active {
						v.LastFetchTimestamp = time.Now().UnixMilli()
					}
					if rep.Learner {
						sp.Observers = append(sp.Observers, v) // a replica being added
					} else {
						sp.CurrentVoters = append(sp.CurrentVoters, v)
					}
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return wire.Respond(resp)
}

// metaRepairLoop restarts the metadata group if it failed (etcd raft
// panicked on a broken invariant, or its log could not be read), with a
// growing pause, as a restart of the broker would. A group whose log
// failed stays down until the broker restarts with a working disk.
func (c *cluster) metaRepairLoop(stop <-chan struct{}) {
	const every, maxPause = 2 * time.Second, 5 * time.Minute
	pause, next := every, time.Time{}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		st, err := c.host.Status(metadataGroup)
		if err != nil || st.Failed == "" {
			pause = every
			continue
		}
		if time.Now().Before(next) {
			continue
		}
		next, pause = time.Now().Add(pause), min(2*pause, maxPause)
		if err := c.host.RetryGroup(metadataGroup); err != nil {
			c.b.log.Error("the metadata Raft group failed and cannot be restarted here; restart the broker once its disk works", "err", err)
		}
	}
}
