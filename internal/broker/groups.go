package broker

import (
	"context"
	"fmt"
	"net"

	"holdfast/internal/group"
	"holdfast/internal/partition"
	"holdfast/internal/records"
	"holdfast/internal/wire"
)

func init() { onStart(rankCoordinator, "groups", (*Broker).startGroups) }

// startGroups ensures __consumer_offsets, builds the group coordinator over
// its partitions and replays them in the background: until a partition is
// loaded its groups answer COORDINATOR_LOAD_IN_PROGRESS, which clients retry.
func (b *Broker) startGroups() error {
	n := b.cfg.OffsetsTopicPartitions
	if n <= 0 {
		n = 50
	}
	if b.clusterMode() {
		return b.startGroupsCluster(n) // coordinators_cluster.go
	}
	t, err := b.ensureTopic(offsetsTopic, n, b.internalTopicConfigs(offsetsTopic), true)
	if err != nil {
		return fmt.Errorf("%s: %w", offsetsTopic, err)
	}
	// An existing topic keeps its partition count: group placement is a
	// function of it.
	logs := make([]group.Log, t.Partitions)
	for i := range logs {
		p := b.parts.Get(offsetsTopic, int32(i))
		if p == nil {
			return fmt.Errorf("%s-%d is not open", offsetsTopic, i)
		}
		logs[i] = offsetsLog{p}
	}
	b.groups = group.New(b.cfg.Groups, logs, group.Options{
		Logger: b.log.With("component", "groups"),
		Partitions: func(topic string) int32 {
			if t, ok := b.meta.Topic(topic); ok {
				return t.Partitions
			}
			return -1
		},
	})
	b.closers = append(b.closers, b.groups.Close)
	return b.groups.Load(true)
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
		if lg := b.parts.Get(offsetsTopic, int32(p)); lg != nil && (!lg.Replicated() || lg.IsLeader()) && !b.groups.Loaded(int32(p)) {
			return false
		}
	}
	return true
}
