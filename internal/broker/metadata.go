package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/controller"
	"holdfast/internal/wire"
)

// Metadata v13 only adds a top-level error code (REBOOTSTRAP_REQUIRED,
// KIP-1102), which a single node never needs; v10+ carry topic ids and v12
// allows asking by id.
func init() { register(kmsg.Metadata, 0, 13, (*Broker).handleMetadata) }

// handleMetadata answers with the brokers' endpoints on the listener the
// request came in on (Kafka's rule: a client on the SSL listener is sent
// to SSL endpoints) and with the topics the principal may describe: a
// topic it may not is left out of a full listing and answered with
// TOPIC_AUTHORIZATION_FAILED when named, whether it exists or not.
func (b *Broker) handleMetadata(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	v := req.Version
	listener := b.listenerName(r)

	resp.Brokers = []kmsg.MetadataResponseBroker{b.brokerEntry(listener)}
	cid := b.meta.ClusterID()
	resp.ClusterID = &cid
	resp.ControllerID = b.cfg.NodeID
	if b.cluster != nil {
		resp.Brokers, resp.ControllerID = b.cluster.brokers(listener), b.cluster.controllerID()
	}
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
		return wire.Respond(resp)
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
		if err := validateTopicName(name); err != nil {
			resp.Topics = append(resp.Topics, metadataError(name, [16]byte{}, kerr.InvalidTopicException))
			continue
		}
		if !autoCreate || isInternalTopic(name) {
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
	return wire.Respond(resp)
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

func isInternalTopic(name string) bool { return name == offsetsTopic || name == transactionTopic }

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
func (b *Broker) topicMetadata(r *wire.Request, req *kmsg.MetadataRequest, t controller.Topic) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.Name
	mt.Topic = &name
	mt.TopicID = t.ID
	mt.IsInternal = t.Internal
	if req.Version >= 8 && req.IncludeTopicAuthorizedOperations {
		mt.AuthorizedOperations = b.authorizedOps(r, auth.ResourceTopic, t.Name)
	}
	node := b.cfg.NodeID
	mt.Partitions = make([]kmsg.MetadataResponseTopicPartition, 0, t.Partitions)
	for i := int32(0); i < t.Partitions; i++ {
		if b.cluster != nil {
			mt.Partitions = append(mt.Partitions, b.cluster.partitionMetadata(t, i))
			continue
		}
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = i
		mp.Replicas = []int32{node}
		p := b.parts.Get(t.Name, i)
		switch {
		case p == nil:
			// Not open (failed at start-up or mid-create): no leader.
			mp.ErrorCode = kerr.LeaderNotAvailable.Code
			mp.Leader = -1
			mp.LeaderEpoch = -1
			mp.ISR = []int32{}
			mp.OfflineReplicas = []int32{node}
		case p.Failed() != nil:
			mp.ErrorCode = kerr.KafkaStorageError.Code
			mp.Leader = -1
			mp.LeaderEpoch = p.LeaderEpoch()
			mp.ISR = []int32{}
			mp.OfflineReplicas = []int32{node}
		default:
			mp.Leader = node
			mp.LeaderEpoch = p.LeaderEpoch()
			mp.ISR = []int32{node}
			mp.OfflineReplicas = []int32{}
		}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}
