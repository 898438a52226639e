package broker

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/metadata"
	"holdfast/internal/topicconfig"
	"holdfast/internal/wire"
)

// maxPartitionsPerTopic bounds what one request can make the node open:
// every partition holds files and goroutines. Kafka has no such limit; a
// request beyond it is refused as a policy violation.
const maxPartitionsPerTopic = 10000

func (b *Broker) handleCreateTopics(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	// timeout_ms bounds the whole request, as Kafka's controller does: a
	// topic not committed by then answers REQUEST_TIMED_OUT. Once it is
	// committed it is created, and its partitions come online after (the
	// answer does not wait for 10,000 replicas to open). Without a
	// timeout, the metadata proposal's own bound applies.
	ctx := context.Background()
	if req.TimeoutMillis > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMillis)*time.Millisecond)
		defer cancel()
	}

	count := map[string]int{}
	for _, rt := range req.Topics {
		count[rt.Topic]++
	}
	var dups []string
	for n, c := range count {
		if c > 1 {
			dups = append(dups, n)
		}
	}
	sort.Strings(dups)
	mq := b.mutationQuota(r, req.Version >= 6) // KIP-599

	for _, rt := range req.Topics {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		st.NumPartitions, st.ReplicationFactor = -1, -1
		if count[rt.Topic] > 1 {
			st.ErrorCode = kerr.InvalidRequest.Code
			msg := fmt.Sprintf("Create topics request from client `%s` contains multiple entries for the following topics: %s", r.ClientID, joinNames(dups))
			st.ErrorMessage = &msg
			resp.Topics = append(resp.Topics, st)
			continue
		}
		// CREATE on the cluster, or on the topic.
		if !b.authorizeCluster(r, auth.OpCreate) && !b.authorize(r, auth.OpCreate, auth.ResourceTopic, rt.Topic) {
			st.ErrorCode = kerr.TopicAuthorizationFailed.Code
			resp.Topics = append(resp.Topics, st)
			continue
		}
		if !mq.Admit() {
			st.ErrorCode, st.ErrorMessage = kerr.ThrottlingQuotaExceeded.Code, kmsg.StringPtr(kerr.ThrottlingQuotaExceeded.Description)
			resp.Topics = append(resp.Topics, st)
			continue
		}
		t, err := b.createTopic(ctx, rt, req.ValidateOnly)
		if err == nil && !req.ValidateOnly {
			mq.Record(int(t.Partitions))
		}
		if err != nil {
			st.ErrorCode, st.ErrorMessage = kafkaError(err)
			if req.Version == 0 {
				st.ErrorMessage = nil
			}
			b.log.Info("create topic refused", "topic", rt.Topic, "err", err)
			resp.Topics = append(resp.Topics, st)
			continue
		}
		st.TopicID = t.ID // zero when validate-only, as Kafka answers
		st.NumPartitions = t.Partitions
		st.ReplicationFactor = 1
		if len(t.Replicas) > 0 && len(t.Replicas[0]) > 0 {
			st.ReplicationFactor = int16(len(t.Replicas[0]))
		}
		if req.Version >= 5 && b.authorize(r, auth.OpDescribeConfigs, auth.ResourceTopic, t.Name) {
			for _, c := range b.describeTopicConfigs(t, nil, false, false) {
				rc := kmsg.NewCreateTopicsResponseTopicConfig()
				rc.Name = c.Name
				rc.Value = c.Value
				rc.ReadOnly = c.ReadOnly
				rc.Source = int8(c.Source)
				rc.IsSensitive = c.IsSensitive
				st.Configs = append(st.Configs, rc)
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	throttleMutation(r, mq, &resp.ThrottleMillis)
	return wire.Respond(resp)
}

func joinNames(names []string) string {
	out := ""
	for i, n := range names {
		if i > 0 {
			out += ", "
		}
		out += n
	}
	return out
}

// createTopic validates one topic of a CreateTopics request in Kafka's
// order and creates it unless validateOnly. The returned topic has a zero
// id when validateOnly.
func (b *Broker) createTopic(ctx context.Context, rt kmsg.CreateTopicsRequestTopic, validateOnly bool) (metadata.Topic, error) {
	name := rt.Topic
	if err := metadata.ValidateTopicName(name); err != nil {
		return metadata.Topic{}, errCode(kerr.InvalidTopicException, "%v", err)
	}
	if _, ok := b.meta.Topic(name); ok {
		return metadata.Topic{}, errCode(kerr.TopicAlreadyExists, "Topic '%s' already exists.", name)
	}
	if other, ok := b.meta.Collision(name); ok {
		return metadata.Topic{}, errCode(kerr.InvalidTopicException, "Topic '%s' collides with existing topic: %s", name, other)
	}
	if metadata.IsInternalTopic(name) {
		// Their coordinators create them with the partition count and
		// configs they depend on.
		return metadata.Topic{}, errCode(kerr.InvalidRequest, "Topic '%s' is an internal topic; it is created by the broker", name)
	}

	configs := make(map[string]string, len(rt.Configs))
	for _, c := range rt.Configs {
		if c.Value == nil {
			return metadata.Topic{}, errCode(kerr.InvalidConfig, "Null value not supported for topic configs: %s", c.Name)
		}
		configs[c.Name] = *c.Value
	}
	if err := topicconfig.Validate(configs); err != nil {
		return metadata.Topic{}, errCode(kerr.InvalidConfig, "%v", err)
	}
	if err := b.checkRemoteStorage(configs); err != nil {
		return metadata.Topic{}, err
	}
	restoreParts, restorePID, err := b.planRestore(ctx, configs)
	if err != nil {
		return metadata.Topic{}, err
	}

	partitions := rt.NumPartitions
	var assign [][]int32
	if len(rt.ReplicaAssignment) > 0 {
		if rt.ReplicationFactor != -1 {
			return metadata.Topic{}, errCode(kerr.InvalidRequest, "A manual partition assignment was specified, but replication factor was not set to -1.")
		}
		if rt.NumPartitions != -1 {
			return metadata.Topic{}, errCode(kerr.InvalidRequest, "A manual partition assignment was specified, but numPartitions was not set to -1.")
		}
		seen := map[int32]bool{}
		for _, a := range rt.ReplicaAssignment {
			if seen[a.Partition] {
				return metadata.Topic{}, errCode(kerr.InvalidReplicaAssignment, "Found multiple manual partition assignments for partition %d", a.Partition)
			}
			seen[a.Partition] = true
			if err := b.validateAssignment(a.Replicas); err != nil {
				return metadata.Topic{}, err
			}
		}
		n := int32(len(rt.ReplicaAssignment))
		for i := int32(0); i < n; i++ {
			if !seen[i] {
				return metadata.Topic{}, errCode(kerr.InvalidReplicaAssignment, "Partitions must be numbered 0 to %d with no gaps; partition %d has no assignment", n-1, i)
			}
		}
		assign = make([][]int32, n)
		for _, a := range rt.ReplicaAssignment {
			assign[a.Partition] = slices.Clone(a.Replicas)
		}
		for _, rs := range assign[1:] {
			if len(rs) != len(assign[0]) {
				return metadata.Topic{}, errCode(kerr.InvalidReplicaAssignment, "All partitions should have the same number of replicas")
			}
		}
		partitions = n
	} else {
		if rt.ReplicationFactor < -1 || rt.ReplicationFactor == 0 {
			return metadata.Topic{}, errCode(kerr.InvalidReplicationFactor, "Replication factor was set to an invalid non-positive value.")
		}
		if rt.NumPartitions < -1 || rt.NumPartitions == 0 {
			return metadata.Topic{}, errCode(kerr.InvalidPartitions, "Number of partitions was set to an invalid non-positive value.")
		}
		if partitions == -1 {
			partitions = b.cfg.NumPartitions
			if restoreParts > 0 {
				partitions = restoreParts // as many as the objects have
			}
		}
		// Fenced brokers count, as in Kafka (KRaft's replica placer): a
		// broker down for longer than its session still takes replicas
		// (never the leader), so creating a topic does not fail while
		// one node restarts. The controller places them (placeReplicas).
		if n := b.RegisteredBrokers(); int(rt.ReplicationFactor) > n {
			return metadata.Topic{}, errCode(kerr.InvalidReplicationFactor, "Unable to replicate the partition %d time(s): The target replication factor of %d cannot be reached because only %d broker(s) are registered.", rt.ReplicationFactor, rt.ReplicationFactor, n)
		}
		if n, need := len(b.cluster.UnfencedBrokers()), int(rt.ReplicationFactor)/2+1; n == 0 {
			return metadata.Topic{}, errCode(kerr.InvalidReplicationFactor, "Unable to replicate the partition %d time(s): All brokers are currently fenced.", rt.ReplicationFactor)
		} else if rt.ReplicationFactor > 0 && n < need {
			return metadata.Topic{}, errCode(kerr.InvalidReplicationFactor, "Unable to replicate the partition %d time(s): only %d broker(s) are unfenced, and a partition needs a majority (%d) of its replicas running to elect a leader.", rt.ReplicationFactor, n, need)
		}
	}
	if partitions < restoreParts {
		return metadata.Topic{}, errCode(kerr.InvalidPartitions, "The object store holds %d partitions of %s; a restored topic needs at least as many, %d were requested", restoreParts, configs["remote.storage.restore.from"], partitions)
	}
	if partitions > maxPartitionsPerTopic {
		return metadata.Topic{}, errCode(kerr.PolicyViolation, "Holdfast allows at most %d partitions per topic; %d were requested", maxPartitionsPerTopic, partitions)
	}

	if validateOnly {
		return metadata.Topic{Name: name, Partitions: partitions, Configs: configs}, nil
	}
	if restorePID >= 0 {
		// The restored producers keep their ids: no new producer may get
		// one (a new cluster hands them out from 0 again).
		if err := b.cluster.SkipProducerIDsBelow(ctx, restorePID+1); err != nil {
			return metadata.Topic{}, err
		}
	}
	return b.createClusterTopic(ctx, name, partitions, rt.ReplicationFactor, assign, configs)
}

// validateAssignment checks a manual replica list: registered brokers,
// each once.
func (b *Broker) validateAssignment(replicas []int32) error {
	if len(replicas) == 0 {
		return errCode(kerr.InvalidReplicaAssignment, "The manual partition assignment includes an empty replica list.")
	}
	for i, r := range replicas {
		if _, ok := b.meta.Broker(r); !ok || b.meta.Fenced(r) {
			return errCode(kerr.InvalidReplicaAssignment, "The manual partition assignment includes broker %d, but no broker with that ID is registered.", r)
		}
		if slices.Contains(replicas[:i], r) {
			return errCode(kerr.InvalidReplicaAssignment, "The manual partition assignment includes the partition replica %d more than once.", r)
		}
	}
	return nil
}

// createClusterTopic commits the topic through the metadata group
// (cluster.Node.CreateTopic).
func (b *Broker) createClusterTopic(ctx context.Context, name string, partitions int32, rf int16, assign [][]int32, configs map[string]string) (metadata.Topic, error) {
	return b.cluster.CreateTopic(ctx, name, partitions, rf, assign, configs, false, true)
}
