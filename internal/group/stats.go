package group

import "sort"

// CommittedOffset is one group's committed offset for one partition, for
// metrics and tools.
type CommittedOffset struct {
	Group     string
	State     State
	Members   int
	Topic     string
	Partition int32
	Offset    int64
}

// CommittedOffsets lists every committed offset of every loaded group,
// sorted by group, topic and partition.
func (c *Coordinator) CommittedOffsets() []CommittedOffset {
	c.mu.Lock()
	var out []CommittedOffset
	for _, g := range c.groups {
		for tp, o := range g.offsets {
			out = append(out, CommittedOffset{Group: g.name, State: g.state, Members: g.memberCount(), Topic: tp.topic, Partition: tp.partition, Offset: o.offset})
		}
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	return out
}
