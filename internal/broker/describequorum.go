package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/cluster"
	"holdfast/internal/wire"
)

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
			if rt.Topic == cluster.MetadataTopic && rp.Partition == 0 {
				gid = cluster.MetadataGroup
			} else if p := b.replicas.Get(rt.Topic, rp.Partition); p != nil {
				gid = p.RaftGroup()
			}
			if gid == 0 {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			rs, err := b.cluster.Host().Status(gid)
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
