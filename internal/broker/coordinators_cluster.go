package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/controller"
	"holdfast/internal/group"
	"holdfast/internal/records"
	"holdfast/internal/txn"
	"holdfast/internal/wire"
)

// Group coordination in cluster mode: the coordinator of group G is the
// Raft leader of __consumer_offsets partition p(G), as in Kafka. Every node
// builds a group coordinator whose partitions all start unowned (requests
// answer NOT_COORDINATOR); a watcher loads a partition's groups when this
// node becomes its leader and drops them when it stops leading.

// leadershipPoll is how often the watcher looks at the leadership of the
// __consumer_offsets partitions. Status reads are cheap and leader changes
// are rare; clients retry NOT_COORDINATOR / LOAD_IN_PROGRESS meanwhile.
const leadershipPoll = 50 * time.Millisecond

func (b *Broker) startGroupsCluster(n int32) error {
	// An existing topic keeps its partition count: placement depends on it.
	if t, ok := b.meta.Topic(offsetsTopic); ok && t.Partitions > 0 {
		n = t.Partitions
	}
	logs := make([]group.Log, n)
	for i := range logs {
		logs[i] = clusterOffsetsLog{b: b, index: int32(i)}
	}
	b.groups = group.New(b.cfg.Groups, logs, group.Options{
		Logger: b.log.With("component", "groups"),
		Partitions: func(topic string) int32 {
			if t, ok := b.meta.Topic(topic); ok {
				return t.Partitions
			}
			return -1
		},
		Unowned: true,
	})
	stop := goLoop(func(stop <-chan struct{}) {
		b.watchLeadership(offsetsTopic, n, b.groups.LoadPartition, b.groups.UnloadPartition, stop)
	})
	b.closers = append(b.closers, func() error {
		stop()
		return b.groups.Close()
	})
	return nil
}

// watchLeadership calls load when this node becomes the leader of a
// partition of topic, and unload when it stops leading it. A partition is
// loaded per term: leading again in a later term reloads it, since another
// leader may have written in between.
func (b *Broker) watchLeadership(topic string, n int32, load, unload func(int32), stop <-chan struct{}) {
	owned := make([]uint64, n) // the term in which partition i was loaded, 0 if not ours
	tick := time.NewTicker(leadershipPoll)
	defer tick.Stop()
	warned := false
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if t, ok := b.meta.Topic(topic); ok && t.Partitions != n {
			if !warned {
				b.log.Error("internal topic's partition count differs from the coordinator's; restart to pick it up", "topic", topic, "partitions", t.Partitions, "coordinator_partitions", n)
				warned = true
			}
			continue
		}
		var loaded, unloaded []int
		for i := range owned {
			term := b.readyLeaderTerm(topic, int32(i), owned[i])
			switch {
			case term == owned[i]:
			case term == 0:
				b.log.Debug("no longer coordinating partition", "topic", topic, "partition", i, "epoch", owned[i])
				unload(int32(i))
				owned[i] = 0
				unloaded = append(unloaded, i)
			default:
				b.log.Debug("coordinating partition", "topic", topic, "partition", i, "epoch", term)
				load(int32(i))
				owned[i] = term
				loaded = append(loaded, i)
			}
		}
		if len(loaded)+len(unloaded) > 0 {
			// One line per change, not one per partition (50 by default).
			coordinating := 0
			for _, term := range owned {
				if term != 0 {
					coordinating++
				}
			}
			b.log.Info("coordinator partitions changed", "topic", topic, "loading", len(loaded), "unloaded", len(unloaded),
				"coordinating", coordinating, "partitions", n)
		}
	}
}

// readyLeaderTerm is the Raft term in which this node leads partition i of
// topic, or 0 if it does not lead it. A new leader counts only once
// everything in its log is committed, so a replay sees every write of the
// earlier terms. cur is the term already loaded (skips the full status).
func (b *Broker) readyLeaderTerm(topic string, i int32, cur uint64) uint64 {
	p := b.replicas.Get(topic, i)
	if p == nil {
		return 0
	}
	l, err := b.cluster.Host().Leadership(p.RaftGroup())
	if err != nil || !l.Proposing {
		return 0
	}
	if l.Term == cur {
		return cur
	}
	st, err := p.RaftStatus()
	if err != nil || st.State != "StateLeader" || st.Term != l.Term || st.CommitOffset < st.EndOffset {
		return cur // not ready yet: keep what we have until it settles
	}
	return st.Term
}

// clusterOffsetsLog is partition index of __consumer_offsets (or of
// __transaction_state), looked up at
// each use: the replica opens when the topic's creation is applied here,
// which may be after the coordinator is built.
type clusterOffsetsLog struct {
	b     *Broker
	topic string // "" is __consumer_offsets
	index int32
}

func (l clusterOffsetsLog) log() (offsetsLog, error) {
	topic := l.topic
	if topic == "" {
		topic = offsetsTopic
	}
	p := l.b.replicas.Get(topic, l.index)
	if p == nil {
		return offsetsLog{}, fmt.Errorf("%s-%d has no replica here: %w", topic, l.index, kerr.NotCoordinator)
	}
	return offsetsLog{p}, nil
}

func (l clusterOffsetsLog) Append(batch []byte) (int64, error) {
	ol, err := l.log()
	if err != nil {
		return 0, err
	}
	return ol.Append(batch)
}

func (l clusterOffsetsLog) WaitCommitted(ctx context.Context, end int64) error {
	ol, err := l.log()
	if err != nil {
		return err
	}
	return ol.WaitCommitted(ctx, end)
}

func (l clusterOffsetsLog) Scan(fn func(batch []byte) error) error {
	ol, err := l.log()
	if err != nil {
		return err
	}
	return ol.p.Scan(ol.p.LogStartOffset(), func(_ records.Header, batch []byte) error { return fn(batch) })
}

// AppendTxn implements group.TxnLog.
func (l clusterOffsetsLog) AppendTxn(batch []byte) (int64, error) {
	ol, err := l.log()
	if err != nil {
		return 0, err
	}
	return ol.AppendTxn(batch)
}

// coordinatorTopicMu serializes this node's creations of the coordinators'
// internal topics.
var coordinatorTopicMu sync.Mutex

// forwarderClientPrefix is the client id of the requests brokers send each
// other (cluster.forwarder).
const forwarderClientPrefix = "holdfast-broker-"

// createCoordinatorTopic creates topic (a coordinator's internal topic)
// through the controller. Only the controller may: CreateTopics refuses
// internal topics from clients. Another node passes the client's
// FindCoordinator on to the controller, which creates the topic as it
// answers, and reports the topic as not there yet (retriable) - once only:
// a forwarded request is not forwarded again.
func (b *Broker) createCoordinatorTopic(topic string, partitions int, typ int8, key string, forwarded bool) (controller.Topic, error) {
	if b.cluster.IsController() {
		coordinatorTopicMu.Lock()
		defer coordinatorTopicMu.Unlock()
		t, err := b.ensureTopic(topic, int32(partitions), b.internalTopicConfigs(topic), true)
		if err != nil {
			b.log.Warn("creating a coordinator topic", "topic", topic, "err", err)
		}
		return t, err
	}
	if forwarded {
		return controller.Topic{}, errors.New("this node is not the controller")
	}
	ctrl := b.cluster.ControllerID()
	cl, err := b.cluster.Forwarder()
	if ctrl < 0 || err != nil {
		return controller.Topic{}, fmt.Errorf("no controller known yet (%v)", err)
	}
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.Version = 4
	req.CoordinatorType = typ
	req.CoordinatorKeys = []string{key}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := req.RequestWith(ctx, cl.Broker(int(ctrl))); err != nil {
		return controller.Topic{}, fmt.Errorf("asking the controller (node %d): %w", ctrl, err)
	}
	if t, ok := b.meta.Topic(topic); ok {
		return t, nil
	}
	return controller.Topic{}, errors.New("created by the controller, not applied here yet")
}

// groupCoordinatorNode is FindCoordinator's answer for a group in cluster
// mode: the leader of the group's __consumer_offsets partition. The topic
// is created through the controller at first need (replication factor
// min(3, brokers), the cluster default); meanwhile the answer is
// COORDINATOR_NOT_AVAILABLE, which clients retry.
func (b *Broker) groupCoordinatorNode(key string, forwarded bool, listener string) (node int32, host string, port int32, code int16, msg string) {
	t, ok := b.meta.Topic(offsetsTopic)
	if !ok {
		var err error
		if t, err = b.createCoordinatorTopic(offsetsTopic, b.groups.NumPartitions(), coordinatorGroup, key, forwarded); err != nil {
			return -1, "", -1, kerr.CoordinatorNotAvailable.Code, "creating " + offsetsTopic + ": " + err.Error()
		}
	}
	if int(t.Partitions) != b.groups.NumPartitions() {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code, offsetsTopic + " partition count changed; restart the broker"
	}
	return b.coordinatorAt(t, group.PartitionFor(key, int(t.Partitions)), listener)
}

// txnCoordinatorNode is FindCoordinator's answer for a transactional id in
// cluster mode: the leader of its __transaction_state partition, which is
// created through the controller at first need.
func (b *Broker) txnCoordinatorNode(key string, forwarded bool, listener string) (node int32, host string, port int32, code int16, msg string) {
	c, err := b.txnCoordinator()
	if err != nil {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code, err.Error()
	}
	t, ok := b.meta.Topic(transactionTopic)
	if !ok {
		if t, err = b.createCoordinatorTopic(transactionTopic, c.NumPartitions(), coordinatorTransaction, key, forwarded); err != nil {
			return -1, "", -1, kerr.CoordinatorNotAvailable.Code, "creating " + transactionTopic + ": " + err.Error()
		}
	}
	if int(t.Partitions) != c.NumPartitions() {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code, transactionTopic + " partition count changed; restart the broker"
	}
	return b.coordinatorAt(t, txn.PartitionFor(key, int(t.Partitions)), listener)
}

// coordinatorAt is the broker leading partition i of the coordinator topic
// t, as FindCoordinator answers it. A leader that is not registered yet or
// is fenced is no answer: COORDINATOR_NOT_AVAILABLE, which clients retry.
func (b *Broker) coordinatorAt(t controller.Topic, i int32, listener string) (node int32, host string, port int32, code int16, msg string) {
	mp := b.partitionMetadata(t, i)
	if mp.ErrorCode != 0 || mp.Leader < 0 {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code, fmt.Sprintf("%s-%d has no leader", t.Name, i)
	}
	br, ok := b.meta.Broker(mp.Leader)
	switch {
	case !ok:
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code, "the coordinator is not registered yet"
	case b.meta.Fenced(br.ID):
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code, "the coordinator's broker is fenced"
	}
	e, ok := br.Endpoint(listener)
	if !ok {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code, "the coordinator has no " + listener + " listener"
	}
	return br.ID, e.Host, e.Port, 0, ""
}

// newClusterTxnCoordinator builds the transaction coordinator of a cluster
// node over lazily looked-up __transaction_state partitions, all unowned
// until this node leads them; b.txn.mu is held.
func (b *Broker) newClusterTxnCoordinator(n int32) *txn.Coordinator {
	if t, ok := b.meta.Topic(transactionTopic); ok && t.Partitions > 0 {
		n = t.Partitions
	}
	logs := make([]txn.Log, n)
	for i := range logs {
		logs[i] = clusterOffsetsLog{b: b, topic: transactionTopic, index: int32(i)}
	}
	c := txn.New(b.cfg.Txn, logs, txn.Options{
		Logger: b.log.With("component", "transactions"),
		// From blocks committed through the metadata log, as for
		// idempotent producers (producerids.go).
		NextID:  b.txn.blocks.Next,
		Markers: b.writeMarkersCluster,
		Unowned: true,
	})
	b.txn.stopWatch = goLoop(func(stop <-chan struct{}) {
		b.watchLeadership(transactionTopic, n, c.LoadPartition, c.UnloadPartition, stop)
	})
	return c
}

// writeMarkersCluster writes a transaction's markers on each partition's
// leader: locally for the partitions this node leads, with WriteTxnMarkers
// to the others' leaders (as Kafka's coordinator does).
func (b *Broker) writeMarkersCluster(ctx context.Context, pid int64, epoch int16, commit bool, parts []txn.TopicPartition) error {
	byLeader := map[int32][]txn.TopicPartition{}
	for _, tp := range parts {
		t, ok := b.meta.Topic(tp.Topic)
		if !ok {
			b.log.Warn("transaction marker skipped: topic gone", "topic", tp.Topic, "partition", tp.Partition, "producer_id", pid)
			continue
		}
		mp := b.partitionMetadata(t, tp.Partition)
		if mp.ErrorCode != 0 || mp.Leader < 0 {
			return fmt.Errorf("marker to %s-%d: no leader: %w", tp.Topic, tp.Partition, kerr.ErrorForCode(mp.ErrorCode))
		}
		byLeader[mp.Leader] = append(byLeader[mp.Leader], tp)
	}
	var errs []error
	for leader, tps := range byLeader {
		if leader == b.cfg.NodeID {
			errs = append(errs, b.writeMarkers(ctx, pid, epoch, commit, tps))
			continue
		}
		errs = append(errs, b.sendMarkers(ctx, leader, pid, epoch, commit, tps))
	}
	return errors.Join(errs...)
}

// sendMarkers asks node to write markers to its partitions tps.
func (b *Broker) sendMarkers(ctx context.Context, node int32, pid int64, epoch int16, commit bool, tps []txn.TopicPartition) error {
	cl, err := b.cluster.Forwarder()
	if err != nil {
		return err
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed = pid, epoch, commit
	byTopic := map[string]int{}
	for _, tp := range tps {
		i, ok := byTopic[tp.Topic]
		if !ok {
			i = len(m.Topics)
			byTopic[tp.Topic] = i
			mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
			mt.Topic = tp.Topic
			m.Topics = append(m.Topics, mt)
		}
		m.Topics[i].Partitions = append(m.Topics[i].Partitions, tp.Partition)
	}
	req.Markers = append(req.Markers, m)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(cctx, cl.Broker(int(node)))
	if err != nil {
		return fmt.Errorf("markers to node %d: %w", node, err)
	}
	var errs []error
	for _, rm := range resp.Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					errs = append(errs, fmt.Errorf("marker to %s-%d on node %d: %w", rt.Topic, rp.Partition, node, kerr.ErrorForCode(rp.ErrorCode)))
				}
			}
		}
	}
	b.log.Debug("transaction markers written by the partitions' leader", "node", node, "producer_id", pid, "commit", commit, "partitions", len(tps), "errors", len(errs))
	return errors.Join(errs...)
}

// WriteTxnMarkers v0-v1 (coordinator to partition leader): this node writes
// the markers to the partitions it leads and answers once they are
// committed. Only cluster nodes take it.
func init() { registerInternal(kmsg.WriteTxnMarkers, 0, 1, (*Broker).handleWriteTxnMarkers) }

func (b *Broker) handleWriteTxnMarkers(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.WriteTxnMarkersRequest)
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
		for _, m := range req.Markers {
			rm := kmsg.NewWriteTxnMarkersResponseMarker()
			rm.ProducerID = m.ProducerID
			for _, t := range m.Topics {
				rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
				rt.Topic = t.Topic
				for _, i := range t.Partitions {
					rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
					rp.Partition = i
					p := b.replicas.Get(t.Topic, i)
					switch {
					case p == nil:
						rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
					case !p.IsLeader():
						rp.ErrorCode = kerr.NotLeaderForPartition.Code
					default:
						err := b.writeMarkers(ctx, m.ProducerID, m.ProducerEpoch, m.Committed, []txn.TopicPartition{{Topic: t.Topic, Partition: i}})
						if ctx.Err() != nil {
							return nil
						}
						if err != nil {
							b.log.Warn("writing transaction marker", "topic", t.Topic, "partition", i, "producer_id", m.ProducerID, "err", err)
						}
						rp.ErrorCode, _ = kafkaError(err)
					}
					rt.Partitions = append(rt.Partitions, rp)
				}
				rm.Topics = append(rm.Topics, rt)
			}
			resp.Markers = append(resp.Markers, rm)
		}
		return resp
	}
}
