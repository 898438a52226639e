package broker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/group"
	"holdfast/internal/records"
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
	stop, done := make(chan struct{}), make(chan struct{})
	go b.watchGroupLeadership(n, stop, done)
	b.closers = append(b.closers, func() error {
		close(stop)
		<-done
		return b.groups.Close()
	})
	return nil
}

// watchGroupLeadership loads and unloads __consumer_offsets partitions as
// this node gains and loses their leadership. A partition is loaded per
// term: leading again in a later term reloads it, since another leader
// may have written in between.
func (b *Broker) watchGroupLeadership(n int32, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
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
		if t, ok := b.meta.Topic(offsetsTopic); ok && t.Partitions != n {
			if !warned {
				b.log.Error("__consumer_offsets partition count differs from the coordinator's; restart to pick it up", "topic", offsetsTopic, "partitions", t.Partitions, "coordinator_partitions", n)
				warned = true
			}
			continue
		}
		for i := range owned {
			term := b.readyLeaderTerm(offsetsTopic, int32(i), owned[i])
			switch {
			case term == owned[i]:
			case term == 0:
				b.log.Info("no longer coordinating groups of partition", "topic", offsetsTopic, "partition", i, "epoch", owned[i])
				b.groups.UnloadPartition(int32(i))
				owned[i] = 0
			default:
				b.log.Info("coordinating groups of partition", "topic", offsetsTopic, "partition", i, "epoch", term)
				b.groups.LoadPartition(int32(i))
				owned[i] = term
			}
		}
	}
}

// readyLeaderTerm is the Raft term in which this node leads partition i of
// topic, or 0 if it does not lead it. A new leader counts only once
// everything in its log is committed, so a replay sees every write of the
// earlier terms. cur is the term already loaded (skips the full status).
func (b *Broker) readyLeaderTerm(topic string, i int32, cur uint64) uint64 {
	p := b.parts.Get(topic, i)
	if p == nil || !p.Replicated() {
		return 0
	}
	l, err := b.cluster.host.Leadership(p.RaftGroup())
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

// clusterOffsetsLog is partition index of __consumer_offsets, looked up at
// each use: the replica opens when the topic's creation is applied here,
// which may be after the coordinator is built.
type clusterOffsetsLog struct {
	b     *Broker
	index int32
}

func (l clusterOffsetsLog) log() (offsetsLog, error) {
	p := l.b.parts.Get(offsetsTopic, l.index)
	if p == nil {
		return offsetsLog{}, fmt.Errorf("%s-%d has no replica here: %w", offsetsTopic, l.index, kerr.NotCoordinator)
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

// offsetsTopicMu serializes this node's creations of __consumer_offsets.
var offsetsTopicMu sync.Mutex

// groupCoordinatorNode is FindCoordinator's answer for a group in cluster
// mode: the leader of the group's __consumer_offsets partition. The topic
// is created through the controller at first need (replication factor
// min(3, brokers), the cluster default); meanwhile the answer is
// COORDINATOR_NOT_AVAILABLE, which clients retry.
func (b *Broker) groupCoordinatorNode(key string) (node int32, host string, port int32, code int16, msg string) {
	t, ok := b.meta.Topic(offsetsTopic)
	if !ok {
		offsetsTopicMu.Lock()
		var err error
		t, err = b.ensureTopic(offsetsTopic, int32(b.groups.NumPartitions()), map[string]string{"cleanup.policy": "compact"}, true)
		offsetsTopicMu.Unlock()
		if err != nil {
			b.log.Warn("creating the offsets topic", "topic", offsetsTopic, "err", err)
			return -1, "", -1, kerr.CoordinatorNotAvailable.Code, "creating " + offsetsTopic + ": " + err.Error()
		}
	}
	if int(t.Partitions) != b.groups.NumPartitions() {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code, offsetsTopic + " partition count changed; restart the broker"
	}
	mp := b.cluster.partitionMetadata(t, group.PartitionFor(key, int(t.Partitions)))
	if mp.ErrorCode != 0 || mp.Leader < 0 {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code, "the group's " + offsetsTopic + " partition has no leader"
	}
	br, ok := b.meta.Broker(mp.Leader)
	if !ok {
		return -1, "", -1, kerr.CoordinatorNotAvailable.Code, "the coordinator is not registered yet"
	}
	return br.ID, br.Host, br.Port, 0, ""
}
