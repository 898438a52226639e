package broker

import (
	"context"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// AlterReplicaLogDirs v1-v2 (API 34; v0 is gone in Kafka 4, KIP-896) asks
// this broker to move replicas to another of its log directories. A
// Holdfast node has one log directory (its data directory, the one
// DescribeLogDirs reports), so the only valid destination is that
// directory, where every replica here already is: nothing moves and the
// answer is NONE. As Kafka's ReplicaManager answers: a directory that is
// not one of this broker's is LOG_DIR_NOT_FOUND, a partition the metadata
// does not have UNKNOWN_TOPIC_OR_PARTITION, one with no replica on this
// broker REPLICA_NOT_AVAILABLE, a replica whose storage failed
// KAFKA_STORAGE_ERROR. Needs ALTER on the cluster.
func (b *Broker) handleAlterReplicaLogDirs(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AlterReplicaLogDirsRequest)
	resp := req.ResponseKind().(*kmsg.AlterReplicaLogDirsResponse)
	allowed := b.authorizeCluster(r, auth.OpAlter)
	ours, err := filepath.Abs(b.cfg.DataDir)
	if err != nil {
		ours = filepath.Clean(b.cfg.DataDir)
	}
	for _, d := range req.Dirs {
		// Kafka resolves the path as File.getAbsolutePath does.
		dest, err := filepath.Abs(d.Dir)
		known := err == nil && d.Dir != "" && dest == ours
		for _, t := range d.Topics {
			rt := kmsg.NewAlterReplicaLogDirsResponseTopic()
			rt.Topic = t.Topic
			meta, topicOK := b.meta.Topic(t.Topic)
			for _, p := range t.Partitions {
				rp := kmsg.NewAlterReplicaLogDirsResponseTopicPartition()
				rp.Partition = p
				switch {
				case !allowed:
					rp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
				case !known:
					rp.ErrorCode = kerr.LogDirNotFound.Code
				case !topicOK || p < 0 || p >= meta.Partitions:
					rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				default:
					switch rep := b.replicas.Get(t.Topic, p); {
					case rep == nil:
						rp.ErrorCode = kerr.ReplicaNotAvailable.Code
					case rep.Failed() != nil:
						rp.ErrorCode = kerr.KafkaStorageError.Code
					}
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
	}
	return wire.Respond(resp)
}
