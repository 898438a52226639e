package broker

import (
	"fmt"

	"holdfast/internal/partition"
	"holdfast/internal/raft"
)

// KIP-392: consumers may fetch from a follower. Every replica serves a
// consumer's Fetch v11+ up to its own high watermark, which on a follower
// is the commit offset it has learned: only committed records, so a read
// from a follower never sees what a failover could take back. The leader
// sends a consumer to a replica in its own rack (client.rack) when
// replica.selector.class names the rack-aware selector; by default, as in
// Kafka, consumers read from the leader.

// RackAwareReplicaSelector is the replica.selector.class value that turns
// on rack-aware follower fetching (Kafka's class name).
const RackAwareReplicaSelector = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

// checkReplicaSelector validates replica.selector.class.
func checkReplicaSelector(class string) error {
	switch class {
	case "", RackAwareReplicaSelector:
		return nil
	}
	return fmt.Errorf("replica.selector.class %q: Holdfast has %s (or none: consumers read from the leader)", class, RackAwareReplicaSelector)
}

// preferredReadReplica is the replica a consumer in rack should read
// partition p from instead of this leader, or -1 to read here: only with
// the rack-aware selector, when this node is not in the consumer's rack
// and a replica there is in sync (heard from, replicating, not fenced) and
// has the records from offset on.
func (b *Broker) preferredReadReplica(p *partition.Partition, rack string, offset int64) int32 {
	if b.cfg.ReplicaSelector != RackAwareReplicaSelector || rack == "" || rack == b.cfg.Rack {
		return -1
	}
	st, err := p.RaftStatus()
	if err != nil || st.State != raft.StateLeader {
		return -1
	}
	best, bestMatch := int32(-1), int64(-1)
	for _, r := range st.Replicas {
		id := int32(r.ID)
		if r.ID == st.Node || r.Learner || !r.Active || r.State != raft.ProgressReplicate || r.MatchOffset < offset || b.meta.Fenced(id) {
			continue
		}
		br, ok := b.meta.Broker(id)
		if !ok || br.Rack != rack {
			continue
		}
		if r.MatchOffset > bestMatch || r.MatchOffset == bestMatch && id < best {
			best, bestMatch = id, r.MatchOffset
		}
	}
	return best
}

// followerServes reports whether this replica, not the leader, may serve a
// fetch of this version from a consumer: v11+ (KIP-392), while it follows
// a known leader.
func (b *Broker) followerServes(p *partition.Partition, version int16, consumer bool) bool {
	if version < 11 || !consumer {
		return false
	}
	l, err := b.cluster.Host().Leadership(p.RaftGroup())
	return err == nil && l.Leader != 0 && !l.Leading
}
