package broker

// PartitionStats is what the broker shows of one partition: the offsets that
// say how much is written, committed and on disk.
type PartitionStats struct {
	Topic         string
	Partition     int32
	LogStart      int64
	LogEnd        int64
	HighWatermark int64
	Durable       int64 // every offset below is fsynced
}

// PartitionStats lists every open partition.
func (b *Broker) PartitionStats() []PartitionStats {
	var out []PartitionStats
	for _, t := range b.meta.Topics() {
		for i := int32(0); i < t.Partitions; i++ {
			p := b.parts.Get(t.Name, i)
			if p == nil {
				continue
			}
			out = append(out, PartitionStats{
				Topic: t.Name, Partition: i,
				LogStart: p.LogStartOffset(), LogEnd: p.LogEndOffset(),
				HighWatermark: p.HighWatermark(), Durable: p.DurableOffset(),
			})
		}
	}
	return out
}

// GroupLag is a consumer group's position in one partition.
type GroupLag struct {
	Group     string
	Topic     string
	Partition int32
	Members   int
	Committed int64
	// Lag is the records between the committed offset and the high
	// watermark (what the group has yet to consume); -1 if the partition is
	// not open here.
	Lag int64
}

// GroupLags lists the committed offsets of every group this node
// coordinates, with their lag.
func (b *Broker) GroupLags() []GroupLag {
	if b.groups == nil {
		return nil
	}
	var out []GroupLag
	for _, o := range b.groups.CommittedOffsets() {
		gl := GroupLag{Group: o.Group, Topic: o.Topic, Partition: o.Partition, Members: o.Members, Committed: o.Offset, Lag: -1}
		if p := b.parts.Get(o.Topic, o.Partition); p != nil {
			gl.Lag = max(p.HighWatermark()-o.Offset, 0)
		}
		out = append(out, gl)
	}
	return out
}

// ReplicationStats is this node's view of its Raft groups (cluster mode).
type ReplicationStats struct {
	Groups       int   // Raft groups on this node (partition replicas and the metadata group)
	FailedGroups int   // groups stopped by a failure, not yet repaired (repair.go)
	Repairs      int64 // replicas discarded after a storage failure and reopened to catch up
}

// ReplicationStats is zero on a single node.
func (b *Broker) ReplicationStats() ReplicationStats {
	c := b.cluster
	if c == nil {
		return ReplicationStats{}
	}
	out := ReplicationStats{Repairs: c.repairs.Load()}
	for _, g := range c.host.Groups() {
		out.Groups++
		if st, err := c.host.Status(g); err == nil && st.Failed != "" {
			out.FailedGroups++
		}
	}
	return out
}
