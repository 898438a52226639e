package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/group"
	"holdfast/internal/metadata"
	"holdfast/internal/raft"
	"holdfast/internal/txn"
)

// Kafka's FindCoordinator key types.
const (
	KeyGroup       int8 = 0
	KeyTransaction int8 = 1
)

// Answer is FindCoordinator's answer for one key: the coordinator's node
// and its address on the asking client's listener, or a Kafka error code
// (COORDINATOR_NOT_AVAILABLE, which clients retry) and why.
type Answer struct {
	Node int32
	Host string
	Port int32
	Code int16
	Msg  string
}

func notAvailable(msg string) Answer {
	return Answer{Node: -1, Port: -1, Code: kerr.CoordinatorNotAvailable.Code, Msg: msg}
}

// Find answers FindCoordinator for key of type typ: the leader of the
// key's partition of the internal topic, created through the controller
// at first need. forwarded: the request came from another node, so it is
// not passed on again.
func (h *Host) Find(typ int8, key string, forwarded bool, listener string) Answer {
	topic, n := h.internalTopic(typ)
	if _, ok := h.meta.Topic(topic); !ok {
		if _, err := h.createTopic(topic, n, typ, key, forwarded); err != nil {
			return notAvailable("creating " + topic + ": " + err.Error())
		}
	}
	return h.Locate(typ, key, listener)
}

// Locate is Find without creating the internal topic.
func (h *Host) Locate(typ int8, key string, listener string) Answer {
	topic, n := h.internalTopic(typ)
	t, ok := h.meta.Topic(topic)
	switch {
	case !ok:
		return notAvailable(topic + " does not exist yet")
	case int(t.Partitions) != n:
		return notAvailable(topic + " partition count changed; restart the broker")
	}
	i := group.PartitionFor(key, n)
	if typ == KeyTransaction {
		i = txn.PartitionFor(key, n)
	}
	return h.leaderOf(t, i, listener)
}

// internalTopic is the internal topic of a key type and the partition
// count its coordinator was built with.
func (h *Host) internalTopic(typ int8) (string, int) {
	if typ == KeyTransaction {
		return metadata.TransactionTopic, h.txn.NumPartitions()
	}
	return metadata.OffsetsTopic, h.groups.NumPartitions()
}

// OffsetsPartitionCreating is OffsetsPartition, creating __consumer_offsets
// first if needed (a transaction may commit offsets before any group
// lookup created it). It may block: not for a connection's reader.
func (h *Host) OffsetsPartitionCreating(g string) int32 {
	if p := h.OffsetsPartition(g); p >= 0 {
		return p
	}
	t, err := h.createTopic(metadata.OffsetsTopic, h.groups.NumPartitions(), KeyGroup, g, false)
	if err != nil {
		return -1
	}
	return group.PartitionFor(g, int(t.Partitions))
}

// leaderOf is the broker leading partition i of the internal topic t. A
// leader that is not registered yet or is fenced is no answer.
func (h *Host) leaderOf(t metadata.Topic, i int32, listener string) Answer {
	st := h.replicas.State(t, i)
	if st.Err != 0 || st.Leader < 0 {
		return notAvailable(fmt.Sprintf("%s-%d has no leader", t.Name, i))
	}
	br, ok := h.meta.Broker(st.Leader)
	switch {
	case !ok:
		return notAvailable("the coordinator is not registered yet")
	case h.meta.Fenced(br.ID):
		return notAvailable("the coordinator's broker is fenced")
	}
	e, ok := br.Endpoint(listener)
	if !ok {
		return notAvailable("the coordinator has no " + listener + " listener")
	}
	return Answer{Node: br.ID, Host: e.Host, Port: e.Port}
}

// createWait bounds the creation of an internal topic, readyWait the part
// of it spent waiting for its partitions' leaders once it is created.
const (
	createWait = 15 * time.Second
	readyWait  = 5 * time.Second
)

// createTopic creates an internal topic through the controller. Only the
// controller may: CreateTopics refuses internal topics from clients.
// Another node passes the client's FindCoordinator on to the controller,
// which creates the topic as it answers, and reports the topic as not
// there yet (retriable) - once only: a forwarded request is not forwarded
// again.
//
// Either way it returns once every partition has a leader (awaitLeaders,
// at most readyWait), not only once the topic is committed and this
// node's replicas are open: the FindCoordinator that follows then names a
// coordinator for every key, and one that serves it.
func (h *Host) createTopic(topic string, partitions int, typ int8, key string, forwarded bool) (metadata.Topic, error) {
	ctx, cancel := context.WithTimeout(context.Background(), createWait)
	defer cancel()
	if h.node.IsController() {
		h.topicMu.Lock()
		defer h.topicMu.Unlock()
		if t, ok := h.meta.Topic(topic); ok && h.replicas.AllOpen(t) {
			h.awaitLeaders(ctx, topic)
			return t, nil
		}
		t, err := h.node.CreateTopic(ctx, topic, int32(partitions), -1, nil, h.internalConfigs(topic), true, false)
		if err != nil {
			h.log.Warn("creating a coordinator topic", "topic", topic, "err", err)
			return t, err
		}
		h.awaitLeaders(ctx, topic)
		return t, nil
	}
	if forwarded {
		return metadata.Topic{}, errors.New("this node is not the controller")
	}
	ctrl := h.node.ControllerID()
	if ctrl < 0 {
		return metadata.Topic{}, errors.New("no controller known yet")
	}
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.Version = 4
	req.CoordinatorType = typ
	req.CoordinatorKeys = []string{key}
	resp, err := h.node.Send(ctx, ctrl, req)
	if err != nil {
		return metadata.Topic{}, fmt.Errorf("asking the controller (node %d): %w", ctrl, err)
	}
	_, known := h.meta.Topic(topic)
	if cs := resp.(*kmsg.FindCoordinatorResponse).Coordinators; known || len(cs) == 1 && cs[0].ErrorCode == 0 {
		// The controller created the topic and answered once its
		// partitions had leaders; this node applies the creation, opens
		// its replicas and hears of the leaders a little later.
		h.awaitLeaders(ctx, topic)
	}
	if t, ok := h.meta.Topic(topic); ok {
		return t, nil
	}
	return metadata.Topic{}, errors.New("created by the controller, not applied here yet")
}

// awaitLeaders waits, for at most readyWait (and until ctx ends), until
// every partition of the internal topic has a leader this node knows of,
// registered and not fenced, and this node's coordinator has loaded the
// partitions it leads. It reports whether they got there; if not, the
// coordinators not ready yet answer COORDINATOR_NOT_AVAILABLE
// (FindCoordinator) or COORDINATOR_LOAD_IN_PROGRESS, which clients retry.
func (h *Host) awaitLeaders(ctx context.Context, topic string) bool {
	ctx, cancel := context.WithTimeout(ctx, readyWait)
	defer cancel()
	// Leadership events wake it; the replicas' opens, the leaders'
	// registrations and the loads' ends do not, hence the poll.
	sub := h.node.Host().Subscribe(raft.EventLeadership)
	defer sub.Close()
	poll := h.clk.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		if h.led(topic) {
			return true
		}
		select {
		case <-ctx.Done():
			h.log.Debug("coordinator topic's partitions not all led yet", "topic", topic)
			return false
		case <-sub.Ready():
			sub.Take(nil)
		case <-poll.C:
		}
	}
}

// led reports whether every partition of the internal topic has a leader
// that the metadata knows and that serves its keys: loaded, if it is this
// node.
func (h *Host) led(topic string) bool {
	t, ok := h.meta.Topic(topic)
	if !ok {
		return false
	}
	_, n := h.internalTopic(KeyGroup)
	loaded := h.groups.Loaded
	if topic == metadata.TransactionTopic {
		_, n = h.internalTopic(KeyTransaction)
		loaded = h.txn.Loaded
	}
	if int(t.Partitions) != n {
		return true // Locate answers why; nothing to wait for
	}
	for i := range t.Partitions {
		st := h.replicas.State(t, i)
		if st.Err != 0 || st.Leader < 0 {
			return false
		}
		if _, ok := h.meta.Broker(st.Leader); !ok || h.meta.Fenced(st.Leader) {
			return false
		}
		if st.Leader == h.cfg.NodeID && !loaded(i) {
			return false
		}
	}
	return true
}
