package group

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/records"
)

// OffsetCommit handles an OffsetCommit request. The offsets are appended to
// the group's partition here, in order; the Reply answers once they are
// committed (fsynced under flush=sync), so an acknowledged commit survives a
// crash.
func (c *Coordinator) OffsetCommit(req *kmsg.OffsetCommitRequest) Reply {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	setAll := func(code int16) {
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				resp.Topics[i].Partitions[j].ErrorCode = code
			}
		}
	}
	if code := c.admit(req.Group); code != 0 {
		setAll(code)
		return respond(resp)
	}
	generation := req.Generation
	if req.Version == 0 {
		generation = -1
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.opts.Now()
	if c.closed {
		setAll(kerr.CoordinatorNotAvailable.Code)
		return respond(resp)
	}
	g := c.groups[req.Group]
	if g == nil {
		if generation >= 0 {
			// A generation for a group we do not know: a stale member.
			setAll(kerr.IllegalGeneration.Code)
			return respond(resp)
		}
		// A simple (non-member) commit creates the group.
		g = newGroup(req.Group, now)
		c.groups[req.Group] = g
	}
	defer c.dropIfUnused(g)
	var stale func(topic string, p int32) bool // KIP-848 groups: per-partition epoch check
	if g.consumer != nil {
		var code int16
		if code, stale = c.validateConsumerCommit(g, req.Version, generation, req.MemberID); code != 0 {
			setAll(code)
			return respond(resp)
		}
	} else if code := c.validateCommit(g, generation, req.MemberID, req.InstanceID); code != 0 {
		setAll(code)
		return respond(resp)
	}
	if m := g.members[req.MemberID]; m != nil {
		m.expires = now.Add(m.sessionTimeout)
		c.arm(g)
	}

	type target struct {
		i, j int
		tp   topicPartition
		o    offset
	}
	var targets []target
	var kvs []kv
	for i, t := range req.Topics {
		n := c.opts.Partitions(t.Topic)
		for j, p := range t.Partitions {
			rp := &resp.Topics[i].Partitions[j]
			epoch := p.LeaderEpoch
			if req.Version < 6 {
				epoch = -1
			}
			o, code := c.commitOffset(n, p.Partition, p.Offset, epoch, p.Metadata, now)
			if code == 0 && stale != nil && stale(t.Topic, p.Partition) {
				code = kerr.StaleMemberEpoch.Code
			}
			if rp.ErrorCode = code; code != 0 {
				continue
			}
			tp := topicPartition{t.Topic, p.Partition}
			targets = append(targets, target{i, j, tp, o})
			kvs = append(kvs, kv{offsetKey(g.name, tp), offsetValue(o)})
		}
	}
	if len(kvs) == 0 {
		return respond(resp)
	}
	end, err := c.appendKVs(g.name, now, kvs)
	if err != nil {
		code := kerr.CoordinatorNotAvailable.Code
		if errors.Is(err, records.ErrTooLarge) {
			code = kerr.InvalidCommitOffsetSize.Code
		}
		c.log.Warn("writing offsets failed", "group", g.name, "err", err)
		for _, t := range targets {
			resp.Topics[t.i].Partitions[t.j].ErrorCode = code
		}
		return respond(resp)
	}
	// Applied now, in log order; a fetch may see it a moment before the
	// fsync, which at worst redelivers records after a power cut.
	for _, t := range targets {
		g.offsets[t.tp] = t.o
	}
	log := c.logs[c.partition(g.name)]
	return func(ctx context.Context) kmsg.Response {
		if err := log.WaitCommitted(ctx, end); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.log.Warn("offset commit not durable", "group", g.name, "err", err)
			for _, t := range targets {
				resp.Topics[t.i].Partitions[t.j].ErrorCode = kerr.CoordinatorNotAvailable.Code
			}
		}
		return resp
	}
}

// validateCommit is Kafka's check of who may commit: members of the current
// generation, or anyone with generation -1 while the group has no members.
func (c *Coordinator) validateCommit(g *group, generation int32, memberID string, instanceID *string) int16 {
	if g.state == Dead {
		return kerr.CoordinatorNotAvailable.Code
	}
	if generation >= 0 || memberID != "" || instanceID != nil {
		switch {
		case g.fenced(instanceID, memberID):
			return kerr.FencedInstanceID.Code
		case g.members[memberID] == nil:
			return kerr.UnknownMemberID.Code
		case generation != g.generation:
			return kerr.IllegalGeneration.Code
		case g.state == CompletingRebalance:
			// The member has the new generation but not its assignment yet.
			return kerr.RebalanceInProgress.Code
		}
		return 0
	}
	if g.state != Empty {
		return kerr.UnknownMemberID.Code // only members commit to a live group
	}
	return 0
}

type fetchTopic struct {
	topic      string
	partitions []int32
}

type fetchedPartition struct {
	partition int32
	o         offset
	found     bool
}

type fetchedTopic struct {
	topic      string
	partitions []fetchedPartition
}

// fetchOffsets returns a group's committed offsets for topics (all of them
// when topics is nil), or a group-level error code.
func (c *Coordinator) fetchOffsets(name string, topics []fetchTopic, all bool, memberID *string, memberEpoch int32) (int16, []fetchedTopic) {
	if code := c.admit(name); code != 0 {
		return code, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[name]
	if g != nil {
		if code := g.validateConsumerFetch(memberID, memberEpoch); code != 0 {
			return code, nil // KIP-848: only the member's current epoch reads
		}
	}
	var out []fetchedTopic
	if all {
		if g == nil {
			return 0, nil
		}
		byTopic := map[string]int{}
		for tp, o := range g.offsets {
			i, ok := byTopic[tp.topic]
			if !ok {
				i = len(out)
				byTopic[tp.topic] = i
				out = append(out, fetchedTopic{topic: tp.topic})
			}
			out[i].partitions = append(out[i].partitions, fetchedPartition{tp.partition, o, true})
		}
		return 0, out
	}
	for _, t := range topics {
		ft := fetchedTopic{topic: t.topic}
		for _, p := range t.partitions {
			fp := fetchedPartition{partition: p}
			if g != nil {
				fp.o, fp.found = g.offsets[topicPartition{t.topic, p}]
			}
			ft.partitions = append(ft.partitions, fp)
		}
		out = append(out, ft)
	}
	return 0, out
}

func (fp fetchedPartition) values() (off int64, epoch int32, md *string) {
	if !fp.found {
		empty := ""
		return -1, -1, &empty
	}
	m := fp.o.metadata
	return fp.o.offset, fp.o.leaderEpoch, &m
}

// OffsetFetch handles an OffsetFetch request (one group before v8, many
// from v8). With RequireStable (KIP-447) a partition with transactional
// offsets awaiting their marker answers UNSTABLE_OFFSET_COMMIT (offset -1),
// as Kafka: per partition, so clients retry that partition (franz-go fails
// a group-level one), and the others are answered.
func (c *Coordinator) OffsetFetch(req *kmsg.OffsetFetchRequest) Reply {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	if req.Version >= 8 {
		for _, rg := range req.Groups {
			var topics []fetchTopic
			for _, t := range rg.Topics {
				topics = append(topics, fetchTopic{t.Topic, t.Partitions})
			}
			code, fts := c.fetchOffsets(rg.Group, topics, rg.Topics == nil, rg.MemberID, rg.MemberEpoch)
			var unstable map[topicPartition]bool
			if code == 0 && req.RequireStable {
				unstable = c.pendingTxnPartitions(rg.Group)
			}
			out := kmsg.NewOffsetFetchResponseGroup()
			out.Group = rg.Group
			out.ErrorCode = code
			for _, ft := range fts {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic = ft.topic
				for _, fp := range ft.partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition = fp.partition
					rp.Offset, rp.LeaderEpoch, rp.Metadata = fp.values()
					if unstable[topicPartition{ft.topic, fp.partition}] {
						rp.ErrorCode, rp.Offset, rp.LeaderEpoch = kerr.UnstableOffsetCommit.Code, -1, -1
					}
					rt.Partitions = append(rt.Partitions, rp)
				}
				out.Topics = append(out.Topics, rt)
			}
			resp.Groups = append(resp.Groups, out)
		}
		return respond(resp)
	}
	var topics []fetchTopic
	for _, t := range req.Topics {
		topics = append(topics, fetchTopic{t.Topic, t.Partitions})
	}
	all := req.Topics == nil && req.Version >= 2
	code, fts := c.fetchOffsets(req.Group, topics, all, nil, -1)
	var unstable map[topicPartition]bool
	if code == 0 && req.Version >= 7 && req.RequireStable {
		unstable = c.pendingTxnPartitions(req.Group)
	}
	if code != 0 {
		if req.Version >= 2 {
			resp.ErrorCode = code
			return respond(resp)
		}
		// v0-v1 have no group-level error: every partition carries it.
		fts = nil
		for _, t := range topics {
			ft := fetchedTopic{topic: t.topic}
			for _, p := range t.partitions {
				ft.partitions = append(ft.partitions, fetchedPartition{partition: p})
			}
			fts = append(fts, ft)
		}
	}
	for _, ft := range fts {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = ft.topic
		for _, fp := range ft.partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition = fp.partition
			rp.Offset, rp.LeaderEpoch, rp.Metadata = fp.values()
			rp.ErrorCode = code
			if unstable[topicPartition{ft.topic, fp.partition}] {
				rp.ErrorCode, rp.Offset, rp.LeaderEpoch = kerr.UnstableOffsetCommit.Code, -1, -1
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return respond(resp)
}

// OffsetDelete handles an OffsetDelete request (KIP-496): offsets of topics
// the group no longer consumes can be removed while it runs.
func (c *Coordinator) OffsetDelete(req *kmsg.OffsetDeleteRequest) Reply {
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	top := func(code int16) Reply {
		resp.ErrorCode = code
		return respond(resp)
	}
	if code := c.admit(req.Group); code != 0 {
		return top(code)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[req.Group]
	if c.closed {
		return top(kerr.CoordinatorNotAvailable.Code)
	}
	if g == nil || g.state == Dead {
		return top(kerr.GroupIDNotFound.Code)
	}
	var subscribed map[string]bool
	if g.state != Empty {
		if g.protocolType != "consumer" {
			return top(kerr.NonEmptyGroup.Code)
		}
		if g.consumer != nil {
			subscribed = g.consumer.subscribedTopics()
		} else {
			subscribed = g.subscribedTopics()
		}
	}
	now := c.opts.Now()
	var kvs []kv
	var gone []topicPartition
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		n := c.opts.Partitions(t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			tp := topicPartition{t.Topic, p.Partition}
			switch {
			case subscribed != nil && subscribed[t.Topic]:
				rp.ErrorCode = kerr.GroupSubscribedToTopic.Code
			case n < 0 || p.Partition < 0 || p.Partition >= n:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			default:
				if _, ok := g.offsets[tp]; ok {
					kvs = append(kvs, kv{offsetKey(g.name, tp), nil})
					gone = append(gone, tp)
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(kvs) == 0 {
		return respond(resp)
	}
	end, err := c.appendKVs(g.name, now, kvs)
	if err != nil {
		c.log.Warn("writing offset tombstones failed", "group", g.name, "err", err)
		return top(kerr.CoordinatorNotAvailable.Code)
	}
	for _, tp := range gone {
		delete(g.offsets, tp)
	}
	log := c.logs[c.partition(g.name)]
	return func(ctx context.Context) kmsg.Response {
		if err := log.WaitCommitted(ctx, end); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		}
		return resp
	}
}

// subscribedTopics is the union of the topics in every member's consumer
// protocol metadata (an unreadable one, from a non-Java-like client,
// contributes nothing).
func (g *group) subscribedTopics() map[string]bool {
	out := map[string]bool{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			var md kmsg.ConsumerMemberMetadata
			if err := md.ReadFrom(p.Metadata); err != nil {
				continue
			}
			for _, t := range md.Topics {
				out[t] = true
			}
		}
	}
	return out
}

func (c *Coordinator) expireLoop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.expireOffsets(c.opts.Now())
	c.expiry.Reset(c.cfg.RetentionCheckInterval)
}

// expireOffsets drops offsets older than offsets.retention.minutes (KIP-211):
// for a group with no members, counted from when it became empty (or the
// commit, if later); a simple group (no protocol type) counts from the commit.
// Groups left with nothing are removed.
func (c *Coordinator) expireOffsets(now time.Time) {
	for name, g := range c.groups {
		if g.state != Empty || len(g.pending) > 0 || !c.loaded[c.partition(name)].Load() {
			continue
		}
		var gone []topicPartition
		for tp, o := range g.offsets {
			base := o.commitTime
			if g.protocolType != "" && g.stateSince.After(base) {
				base = g.stateSince
			}
			if !now.Before(base.Add(c.cfg.OffsetRetention)) {
				gone = append(gone, tp)
			}
		}
		c.dropOffsetsLocked(name, g, gone, len(gone) == len(g.offsets), now, "expired offsets", "expiring offsets failed")
	}
}

// dropOffsetsLocked writes tombstones for g's offsets in gone and, if
// dead, for the group itself, then forgets them (c.mu held): a group
// removed so no longer shows in ListGroups. done and failed are the log
// lines; a failed append leaves everything as it was.
func (c *Coordinator) dropOffsetsLocked(name string, g *group, gone []topicPartition, dead bool, now time.Time, done, failed string) {
	var kvs []kv
	for _, tp := range gone {
		kvs = append(kvs, kv{offsetKey(name, tp), nil})
	}
	if dead && g.consumer != nil {
		kvs = append(kvs, consumerTombstones(g)...)
	} else if dead {
		kvs = append(kvs, kv{groupKey(name), nil})
	}
	if len(kvs) == 0 {
		return
	}
	if _, err := c.appendKVs(name, now, kvs); err != nil {
		c.log.Warn(failed, "group", name, "err", err)
		return
	}
	for _, tp := range gone {
		delete(g.offsets, tp)
	}
	c.log.Info(done, "group", name, "offsets", len(gone), "removed", dead)
	if dead {
		g.setState(Dead, now)
		if g.timer != nil {
			g.timer.Stop()
		}
		delete(c.groups, name)
	}
}

// ExpireNow runs offset expiry immediately (for tests and admin tools).
func (c *Coordinator) ExpireNow() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireOffsets(c.opts.Now())
}

// commitOffset checks one partition of an offset commit (plain or
// transactional) against its topic's partition count n (-1: no such topic)
// and builds the offset to store; code is the partition's error, 0 if the
// commit may go ahead. epoch is -1 for versions without leader epochs.
func (c *Coordinator) commitOffset(n, partition int32, off int64, epoch int32, metadata *string, now time.Time) (offset, int16) {
	switch {
	case n < 0 || partition < 0 || partition >= n:
		return offset{}, kerr.UnknownTopicOrPartition.Code
	case metadata != nil && len(*metadata) > c.cfg.MaxMetadataBytes:
		return offset{}, kerr.OffsetMetadataTooLarge.Code
	}
	o := offset{offset: off, leaderEpoch: epoch, commitTime: now}
	if metadata != nil {
		o.metadata = *metadata
	}
	return o, 0
}
