package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// Metadata v13 only adds a top-level error code (REBOOTSTRAP_REQUIRED,
// KIP-1102), which a single node never needs; v10+ carry topic ids and v12
// allows asking by id.

// handleMetadata answers with the brokers' endpoints on the listener the
// request came in on (Kafka's rule: a client on the SSL listener is sent
// to SSL endpoints) and with the topics the principal may describe: a
// topic it may not is left out of a full listing and answered with
// TOPIC_AUTHORIZATION_FAILED when named, whether it exists or not.
func (b *Broker) handleMetadata(ctx context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	v := req.Version
	listener := b.listenerName(r)

	cid := b.meta.ClusterID()
	resp.ClusterID = &cid
	resp.Brokers, resp.ControllerID = b.brokers(listener), b.cluster.ControllerID()
	if v >= 8 && v <= 10 && req.IncludeClusterAuthorizedOperations {
		resp.AuthorizedOperations = b.authorizedOps(r, auth.ResourceCluster, auth.ClusterName)
	}

	// A null list (v1+), or an empty one in v0, asks for every topic.
	if req.Topics == nil || v == 0 && len(req.Topics) == 0 {
		for _, t := range b.meta.Topics() {
			if b.topicVisible(r, t.Name) {
				resp.Topics = append(resp.Topics, b.topicMetadata(r, req, t))
			}
		}
		return b.respondMetadata(ctx, r, resp)
	}

	// Before v4 there is no flag: the broker's setting alone decides.
	autoCreate := b.cfg.AutoCreateTopics && (v < 4 || req.AllowAutoTopicCreation)
	seen := make(map[string]bool, len(req.Topics))
	for _, rt := range req.Topics {
		// An id, when given, is the question (Kafka ignores the name then).
		if rt.Topic == nil || rt.TopicID != ([16]byte{}) {
			resp.Topics = append(resp.Topics, b.topicMetadataByID(r, req, rt.TopicID))
			continue
		}
		name := *rt.Topic
		if seen[name] {
			continue
		}
		seen[name] = true
		if !b.topicVisible(r, name) {
			resp.Topics = append(resp.Topics, metadataError(name, [16]byte{}, kerr.TopicAuthorizationFailed))
			continue
		}
		if t, ok := b.meta.Topic(name); ok {
			resp.Topics = append(resp.Topics, b.topicMetadata(r, req, t))
			continue
		}
		if err := metadata.ValidateTopicName(name); err != nil {
			resp.Topics = append(resp.Topics, metadataError(name, [16]byte{}, kerr.InvalidTopicException))
			continue
		}
		if !autoCreate || metadata.IsInternalTopic(name) {
			resp.Topics = append(resp.Topics, metadataError(name, [16]byte{}, kerr.UnknownTopicOrPartition))
			continue
		}
		if !b.authorizeCluster(r, auth.OpCreate) && !b.authorize(r, auth.OpCreate, auth.ResourceTopic, name) {
			resp.Topics = append(resp.Topics, metadataError(name, [16]byte{}, kerr.TopicAuthorizationFailed))
			continue
		}
		t, err := b.ensureTopic(name, b.cfg.NumPartitions, nil, false)
		if err != nil {
			b.log.Warn("auto-creating topic", "topic", name, "err", err)
			mt := metadataError(name, [16]byte{}, kerr.LeaderNotAvailable) // retriable: the client asks again
			if code, _ := kafkaError(err); code == kerr.InvalidTopicException.Code {
				mt.ErrorCode = code // a name colliding with another topic's
			}
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		resp.Topics = append(resp.Topics, b.topicMetadata(r, req, t))
	}
	return b.respondMetadata(ctx, r, resp)
}

// respondMetadata answers resp, first waiting (StartupHold: only soon
// after this node started, and bounded by an election timeout) while some
// partition in it has no leader. After a whole-cluster restart the nodes
// listen before their Raft groups have elected and before the controller
// has unfenced them; answering LEADER_NOT_AVAILABLE then cost a franz-go
// producer its metadata min age (5 s) before it asked again. Kafka's
// brokers name the leaders their metadata log kept; here the answer waits
// for Raft to name them - leadership stays Raft's.
// The wait runs in the Reply, on the connection's writer goroutine: the
// reader must not block.
func (b *Broker) respondMetadata(_ context.Context, r *wire.Request, resp *kmsg.MetadataResponse) wire.Reply {
	if !leaderless(resp) {
		return wire.Respond(resp)
	}
	hold := b.cluster.StartupHold()
	if hold <= 0 {
		return wire.Respond(resp)
	}
	listener := b.listenerName(r)
	return func(ctx context.Context) kmsg.Response {
		b.awaitLeaders(ctx, listener, resp, hold)
		return resp
	}
}

// metadataHoldPoll is how often a held Metadata answer looks again (only
// when the metadata or some Raft group changed).
const metadataHoldPoll = 20 * time.Millisecond

// awaitLeaders refreshes resp's brokers and its leaderless partitions
// until every partition has a leader, for at most hold.
func (b *Broker) awaitLeaders(ctx context.Context, listener string, resp *kmsg.MetadataResponse, hold time.Duration) {
	deadline := time.NewTimer(hold)
	defer deadline.Stop()
	next := time.NewTimer(metadataHoldPoll)
	defer next.Stop()
	changes, gen := b.replicas.AllRaftChanges(), b.meta.Generation()
	for {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-next.C:
		}
		c, g := b.replicas.AllRaftChanges(), b.meta.Generation()
		if c == changes && g == gen {
			next.Reset(metadataHoldPoll)
			continue
		}
		changes, gen = c, g
		began := time.Now()
		resp.Brokers, resp.ControllerID = b.brokers(listener), b.cluster.ControllerID()
		for ti := range resp.Topics {
			mt := &resp.Topics[ti]
			if mt.ErrorCode != 0 {
				continue
			}
			t, ok := b.meta.TopicByID(mt.TopicID)
			if !ok {
				continue
			}
			for pi := range mt.Partitions {
				if mp := &mt.Partitions[pi]; mp.ErrorCode == kerr.LeaderNotAvailable.Code {
					*mp = b.partitionMetadata(t, mp.Partition)
				}
			}
		}
		if !leaderless(resp) {
			return
		}
		// A pass over thousands of leaderless partitions (a start with
		// 10,000) is not free: at most a third of the time goes to it.
		next.Reset(max(metadataHoldPoll, 2*time.Since(began)))
	}
}

// leaderless reports whether some partition in resp has no leader yet.
func leaderless(resp *kmsg.MetadataResponse) bool {
	for _, mt := range resp.Topics {
		for _, mp := range mt.Partitions {
			if mp.ErrorCode == kerr.LeaderNotAvailable.Code {
				return true
			}
		}
	}
	return false
}

// brokerEntry is this node as Metadata lists it to a client of listener.
func (b *Broker) brokerEntry(listener string) kmsg.MetadataResponseBroker {
	br := kmsg.NewMetadataResponseBroker()
	br.NodeID = b.cfg.NodeID
	br.Host = b.cfg.AdvertisedHost
	br.Port = b.cfg.AdvertisedPort
	if e, ok := b.selfEndpoint(listener); ok {
		br.Host, br.Port = e.Host, e.Port
	}
	if b.cfg.Rack != "" {
		rack := b.cfg.Rack
		br.Rack = &rack
	}
	return br
}

func metadataError(name string, id [16]byte, code *kerr.Error) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	if name != "" {
		mt.Topic = &name
	}
	mt.TopicID = id
	mt.ErrorCode = code.Code
	return mt
}

func (b *Broker) topicMetadataByID(r *wire.Request, req *kmsg.MetadataRequest, id [16]byte) kmsg.MetadataResponseTopic {
	if req.Version < 12 || id == ([16]byte{}) {
		// Before v12 a name is required and ids are not accepted.
		return metadataError("", id, kerr.InvalidRequest)
	}
	t, ok := b.meta.TopicByID(id)
	if !ok {
		return metadataError("", id, kerr.UnknownTopicID)
	}
	if !b.topicVisible(r, t.Name) {
		return metadataError("", id, kerr.TopicAuthorizationFailed)
	}
	return b.topicMetadata(r, req, t)
}

// topicMetadata describes every partition of t as led by this node.
func (b *Broker) topicMetadata(r *wire.Request, req *kmsg.MetadataRequest, t metadata.Topic) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.Name
	mt.Topic = &name
	mt.TopicID = t.ID
	mt.IsInternal = t.Internal
	if req.Version >= 8 && req.IncludeTopicAuthorizedOperations {
		mt.AuthorizedOperations = b.authorizedOps(r, auth.ResourceTopic, t.Name)
	}
	mt.Partitions = make([]kmsg.MetadataResponseTopicPartition, 0, t.Partitions)
	for i := int32(0); i < t.Partitions; i++ {
		mt.Partitions = append(mt.Partitions, b.answerPartition(r, t, i))
	}
	return mt
}

// brokers lists the registered brokers that are not fenced for Metadata
// (this one at least, before its registration is applied, or when every
// broker is fenced: a client must be able to reach somebody).
func (b *Broker) brokers(listener string) []kmsg.MetadataResponseBroker {
	var out []kmsg.MetadataResponseBroker
	self := false
	for _, br := range b.cluster.UnfencedBrokers() {
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
		self = self || br.ID == b.cfg.NodeID
		out = append(out, mb)
	}
	if _, registered := b.meta.Broker(b.cfg.NodeID); !self && (!registered || len(out) == 0) {
		out = append(out, b.brokerEntry(listener))
	}
	return out
}

// partitionMetadata describes partition i of t from this node's view: its
// Raft leader and term when this node is a replica. A node that holds no
// replica does not know the leader; it names the first replica, and a
// client sent to the wrong one gets NOT_LEADER_OR_FOLLOWER and asks again.
func (b *Broker) partitionMetadata(t metadata.Topic, i int32) kmsg.MetadataResponseTopicPartition {
	st := b.replicas.State(t, i)
	mp := kmsg.NewMetadataResponseTopicPartition()
	mp.Partition, mp.ErrorCode = i, st.Err
	mp.Leader, mp.LeaderEpoch = st.Leader, st.LeaderEpoch
	mp.Replicas, mp.ISR, mp.OfflineReplicas = st.Replicas, st.ISR, st.Offline
	return mp
}

// RegisteredBrokers is how many brokers this node's metadata knows.
func (b *Broker) RegisteredBrokers() int { return len(b.meta.Brokers()) }
