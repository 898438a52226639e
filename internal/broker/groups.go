package broker

import (
	"context"
	"net"

	"holdfast/internal/partition"
	"holdfast/internal/records"
	"holdfast/internal/wire"
)

// startGroups builds the group coordinator over __consumer_offsets: the
// partitions this node leads are replayed as it comes to lead them
// (coordinators_cluster.go); until then their groups answer
// NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS, which clients retry.
func (b *Broker) startGroups() error {
	n := b.cfg.OffsetsTopicPartitions
	if n <= 0 {
		n = 50
	}
	return b.startGroupsCluster(n)
}

// offsetsLog adapts a partition of __consumer_offsets to group.Log.
type offsetsLog struct{ p *partition.Partition }

func (l offsetsLog) Append(batch []byte) (int64, error) {
	res, err := l.p.Append(batch)
	if err != nil {
		return 0, err
	}
	return res.LastOffset + 1, nil
}

func (l offsetsLog) WaitCommitted(ctx context.Context, end int64) error {
	return l.p.WaitCommitted(ctx, end)
}

func (l offsetsLog) Scan(fn func(batch []byte) error) error {
	return l.p.Scan(l.p.LogStartOffset(), func(_ records.Header, batch []byte) error { return fn(batch) })
}

// clientHost is the member's host as Kafka reports it ("/1.2.3.4").
func clientHost(c *wire.Conn) string {
	if c == nil || c.Remote == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(c.Remote.String())
	if err != nil {
		host = c.Remote.String()
	}
	return "/" + host
}

// GroupsLoaded reports whether the group coordinator has replayed every
// __consumer_offsets partition this node hosts (readiness; start-up
// replay measurements).
func (b *Broker) GroupsLoaded() bool {
	if b.groups == nil {
		return false
	}
	for p := 0; p < b.groups.NumPartitions(); p++ {
		if lg := b.replicas.Get(offsetsTopic, int32(p)); lg != nil && lg.IsLeader() && !b.groups.Loaded(int32(p)) {
			return false
		}
	}
	return true
}
