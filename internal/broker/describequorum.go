package broker

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/cluster"
	"holdfast/internal/datadir"
	"holdfast/internal/metadata"
	"holdfast/internal/raft"
	"holdfast/internal/wire"
)

// handleDescribeQuorum (KIP-595) describes the Raft group of any partition
// (Kafka serves only __cluster_metadata; "__cluster_metadata" partition 0
// here is the controller group): leader, epoch, high watermark and, per
// voter, the end of what it acknowledged - followers acknowledge after
// fsync, so that is the replica's fsynced offset. The leader's own entry is
// its durable (fsynced) offset. Only the leader knows the others' progress;
// other nodes answer NOT_LEADER_OR_FOLLOWER. `holdfast cluster status`
// reads it.
//
// v2 (KIP-853) adds, per replica, its directory id (KIP-858: the data
// directory id the broker registered; a node has one), error messages, and
// the nodes named in the answer with their listeners (the endpoints each
// broker registered, and RAFT: its Raft address as this node knows it; a
// node the metadata does not know is left out).
func (b *Broker) handleDescribeQuorum(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DescribeQuorumRequest)
	resp := req.ResponseKind().(*kmsg.DescribeQuorumResponse)
	if !b.authorizeCluster(r, auth.OpDescribe) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	dirs := map[int32][16]byte{}
	for _, bi := range b.meta.Brokers() {
		if d, err := datadir.ParseUUID(bi.DirID); err == nil {
			dirs[bi.ID] = d
		}
	}
	named := map[int32]bool{}
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
				sp.ErrorMessage = kmsg.StringPtr(kerr.UnknownTopicOrPartition.Description)
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			rs, err := b.cluster.Host().Status(gid)
			switch {
			case err != nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				sp.ErrorMessage = kmsg.StringPtr(err.Error())
			case rs.State != raft.StateLeader:
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
				sp.ErrorMessage = kmsg.StringPtr("this node does not lead the group; its leader knows the voters' progress")
				sp.LeaderID = int32(rs.Leader)
			default:
				sp.LeaderID, sp.LeaderEpoch, sp.HighWatermark = int32(rs.Leader), int32(rs.Term), rs.CommitOffset
				for _, rep := range rs.Replicas {
					v := kmsg.NewDescribeQuorumResponseTopicPartitionReplicaState()
					v.ReplicaID, v.LogEndOffset = int32(rep.ID), rep.MatchOffset
					v.ReplicaDirectoryID = dirs[v.ReplicaID]
					named[v.ReplicaID] = true
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
	if resp.Version >= 2 {
		for _, bi := range b.meta.Brokers() {
			if !named[bi.ID] {
				continue
			}
			nd := kmsg.NewDescribeQuorumResponseNode()
			nd.NodeID = bi.ID
			eps := bi.Listeners
			if len(eps) == 0 {
				eps = []metadata.Endpoint{{Name: b.listenerName(r), Host: bi.Host, Port: bi.Port}}
			}
			for _, e := range eps {
				l := kmsg.NewDescribeQuorumResponseNodeListener()
				l.Name, l.Host, l.Port = e.Name, e.Host, uint16(e.Port)
				nd.Listeners = append(nd.Listeners, l)
			}
			// Its Raft endpoint, as Kafka lists a controller's
			// CONTROLLER listener: how a node that missed a member's
			// registration learns where to reach it.
			if addr, ok := b.cluster.RaftAddrOf(bi.ID); ok {
				if host, port, err := net.SplitHostPort(addr); err == nil {
					if p, err := strconv.Atoi(port); err == nil && p > 0 && p < 1<<16 {
						l := kmsg.NewDescribeQuorumResponseNodeListener()
						l.Name, l.Host, l.Port = cluster.RaftListenerName, host, uint16(p)
						nd.Listeners = append(nd.Listeners, l)
					}
				}
			}
			resp.Nodes = append(resp.Nodes, nd)
		}
	}
	return wire.Respond(resp)
}
