package group

import "time"

// TopicDeleted removes the committed offsets of a deleted topic from every
// group this node coordinates, as Kafka's GroupCoordinator.onPartitionsDeleted
// does: tombstones in the groups' partitions, and a group left with no
// members and no offsets is removed (it no longer shows in ListGroups).
//
// The caller runs it while it applies the deletion, before any later
// metadata change: a topic re-created with the same name is not in the
// metadata yet, so every offset removed here was committed against the
// deleted topic, and a commit for the new one waits for c.mu and finds it.
//
// A partition this node leads but has not loaded yet (replaying, or
// elected and about to load) gets the topic on its list; its replay
// removes those offsets once it has rebuilt the groups. A partition led
// elsewhere is that node's to clean (UnloadPartition clears the list).
func (c *Coordinator) TopicDeleted(topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	for p := range c.logs {
		// Replaying here, or led here and about to be loaded.
		if !c.loaded[p].Load() && (!c.unowned[p].Load() || c.leading(int32(p))) {
			c.deletedWhileLoading[p] = append(c.deletedWhileLoading[p], topic)
		}
	}
	c.dropTopicOffsetsLocked(func(p int32) bool { return c.loaded[p].Load() && !c.unowned[p].Load() }, map[string]bool{topic: true}, c.opts.Now())
}

// dropTopicOffsetsLocked writes tombstones for the offsets of topics in the
// groups of the partitions in (c.mu held), and removes a group left with
// no members and no offsets.
func (c *Coordinator) dropTopicOffsetsLocked(in func(p int32) bool, topics map[string]bool, now time.Time) {
	for name, g := range c.groups {
		if !in(c.partition(name)) {
			continue
		}
		var gone []topicPartition
		for tp := range g.offsets {
			if topics[tp.topic] {
				gone = append(gone, tp)
			}
		}
		if len(gone) == 0 {
			continue
		}
		// Left as they were if the append fails: offsets.retention.minutes
		// expires them.
		dead := g.state == Empty && len(g.pending) == 0 && len(gone) == len(g.offsets)
		c.dropOffsetsLocked(name, g, gone, dead, now, "removed a deleted topic's offsets", "removing a deleted topic's offsets failed")
	}
}

// dropDeletedWhileLoading removes, at the end of partition p's replay
// (c.mu held), the offsets of the topics deleted while it replayed. A
// topic that exists again by now is left alone: this node's metadata may
// have applied the deletion late, after another node re-created the topic
// and took commits for it, and a committed offset of a live topic must not
// go; the deleted one's offsets then stay until offsets.retention.minutes.
func (c *Coordinator) dropDeletedWhileLoading(p int32, now time.Time) {
	topics := map[string]bool{}
	for _, t := range c.deletedWhileLoading[p] {
		if c.opts.Partitions(t) < 0 {
			topics[t] = true
		}
	}
	c.deletedWhileLoading[p] = nil
	if len(topics) > 0 {
		c.dropTopicOffsetsLocked(func(q int32) bool { return q == p }, topics, now)
	}
}
