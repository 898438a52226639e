package group

import (
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
)

// Kafka's __consumer_offsets record types for consumer groups
// (group-coordinator/src/main/resources/common/message): the key starts with
// its type as an int16 and is not flexible; the value starts with its
// version (0) and is flexible (compact strings and arrays, tagged fields).
// kmsg has no types for them, so they are written here.
const (
	recConsumerGroupMetadata         = 3
	recConsumerGroupMemberMetadata   = 5
	recConsumerGroupTargetMetadata   = 6
	recConsumerGroupTargetMember     = 7
	recConsumerGroupCurrentAssignmnt = 8
)

func cgKey(typ int16, group string, member ...string) []byte {
	b := kbin.AppendInt16(nil, typ)
	b = kbin.AppendString(b, group)
	for _, m := range member {
		b = kbin.AppendString(b, m)
	}
	return b
}

func cgMetadataKey(group string) []byte { return cgKey(recConsumerGroupMetadata, group) }
func cgMemberKey(group, member string) []byte {
	return cgKey(recConsumerGroupMemberMetadata, group, member)
}
func cgTargetMetaKey(group string) []byte { return cgKey(recConsumerGroupTargetMetadata, group) }
func cgTargetMemberKey(group, member string) []byte {
	return cgKey(recConsumerGroupTargetMember, group, member)
}
func cgCurrentKey(group, member string) []byte {
	return cgKey(recConsumerGroupCurrentAssignmnt, group, member)
}

// tag is one tagged field.
type tag struct {
	n    uint32
	data []byte
}

func appendTags(b []byte, tags ...tag) []byte {
	b = kbin.AppendUvarint(b, uint32(len(tags)))
	for _, t := range tags {
		b = kbin.AppendUvarint(b, t.n)
		b = kbin.AppendUvarint(b, uint32(len(t.data)))
		b = append(b, t.data...)
	}
	return b
}

// readTags reads a tag section, returning the fields by number.
func readTags(r *kbin.Reader) map[uint32][]byte {
	n := r.Uvarint()
	var out map[uint32][]byte
	for i := uint32(0); i < n && r.Ok(); i++ {
		t := r.Uvarint()
		size := r.Uvarint()
		if out == nil {
			out = map[uint32][]byte{}
		}
		out[t] = r.Span(int(size))
	}
	return out
}

// ConsumerGroupMetadataValue: Epoch, tagged MetadataHash (KIP-1101).
func cgMetadataValue(cg *consumerGroup) []byte {
	b := kbin.AppendInt16(nil, 0)
	b = kbin.AppendInt32(b, cg.epoch)
	return appendTags(b, tag{0, kbin.AppendInt64(nil, int64(cg.metaHash))})
}

// ConsumerGroupMemberMetadataValue.
func cgMemberValue(m *cmember) []byte {
	b := kbin.AppendInt16(nil, 0)
	b = kbin.AppendCompactNullableString(b, m.instanceID)
	b = kbin.AppendCompactNullableString(b, m.rackID)
	b = kbin.AppendCompactString(b, m.clientID)
	b = kbin.AppendCompactString(b, m.clientHost)
	b = kbin.AppendCompactArrayLen(b, len(m.topics))
	for _, t := range m.topics {
		b = kbin.AppendCompactString(b, t)
	}
	b = kbin.AppendCompactNullableString(b, m.regex)
	b = kbin.AppendInt32(b, int32(m.rebalanceTimeout/time.Millisecond))
	b = kbin.AppendCompactNullableString(b, m.assignor)
	if m.classic != nil {
		return appendTags(b, tag{0, classicMetadata(m.classic)})
	}
	return appendTags(b)
}

// ConsumerGroupTargetAssignmentMetadataValue.
func cgTargetMetaValue(epoch int32) []byte {
	b := kbin.AppendInt16(nil, 0)
	b = kbin.AppendInt32(b, epoch)
	return appendTags(b)
}

func sortedIDs(a assignment) [][16]byte {
	ids := make([][16]byte, 0, len(a))
	for id := range a {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return string(ids[i][:]) < string(ids[j][:]) })
	return ids
}

// appendTopicPartitions writes []TopicPartitions; with epochs, each topic
// carries its AssignmentEpochs as tag 0 (KIP-1251).
func appendTopicPartitions(b []byte, a assignment, epochs map[tpKey]int32) []byte {
	ids := sortedIDs(a)
	b = kbin.AppendCompactArrayLen(b, len(ids))
	for _, id := range ids {
		b = kbin.AppendUuid(b, id)
		ps := a[id]
		b = kbin.AppendCompactArrayLen(b, len(ps))
		for _, p := range ps {
			b = kbin.AppendInt32(b, p)
		}
		if epochs == nil {
			b = appendTags(b)
			continue
		}
		e := kbin.AppendCompactArrayLen(nil, len(ps))
		for _, p := range ps {
			e = kbin.AppendInt32(e, epochs[tpKey{id, p}])
		}
		b = appendTags(b, tag{0, e})
	}
	return b
}

func readTopicPartitions(r *kbin.Reader, epochs map[tpKey]int32) assignment {
	a := assignment{}
	n := r.CompactArrayLen()
	for i := int32(0); i < n && r.Ok(); i++ {
		id := r.Uuid()
		np := r.CompactArrayLen()
		var ps []int32
		for j := int32(0); j < np && r.Ok(); j++ {
			p := r.Int32()
			ps = append(ps, p)
			a.add(id, p)
		}
		tags := readTags(r)
		if e, ok := tags[0]; ok && epochs != nil {
			er := kbin.Reader{Src: e}
			ne := er.CompactArrayLen()
			for j := int32(0); j < ne && int(j) < len(ps) && er.Ok(); j++ {
				epochs[tpKey{id, ps[j]}] = er.Int32()
			}
		}
	}
	return a
}

// ConsumerGroupTargetAssignmentMemberValue.
func cgTargetMemberValue(a assignment) []byte {
	b := kbin.AppendInt16(nil, 0)
	b = appendTopicPartitions(b, a, nil)
	return appendTags(b)
}

// ConsumerGroupCurrentMemberAssignmentValue.
func cgCurrentValue(m *cmember) []byte {
	b := kbin.AppendInt16(nil, 0)
	b = kbin.AppendInt32(b, m.epoch)
	b = kbin.AppendInt32(b, m.prevEpoch)
	b = kbin.AppendInt8(b, m.state)
	b = appendTopicPartitions(b, m.assigned, m.assignedAt)
	b = appendTopicPartitions(b, m.revoking, nil)
	return appendTags(b)
}

// cgReplay collects one consumer group's records during a replay.
type cgReplay struct {
	epoch, targetEpoch int32
	hash               uint64
	members            map[string]*cmember
	withMeta           map[string]bool // members whose metadata record is live
	hasMeta            bool
}

func (r *cgReplay) member(id string) *cmember {
	m := r.members[id]
	if m == nil {
		m = &cmember{id: id, epoch: -1, assigned: assignment{}, revoking: assignment{}, target: assignment{}, state: memberStable}
		r.members[id] = m
	}
	return m
}

// replayConsumerRecord applies one consumer group record (key type typ) to
// the replay state; a nil value deletes.
func replayConsumerRecord(groups map[string]*cgReplay, typ int16, key, value []byte) error {
	kr := kbin.Reader{Src: key[2:]}
	name := kr.String()
	member := ""
	if typ != recConsumerGroupMetadata && typ != recConsumerGroupTargetMetadata {
		member = kr.String()
	}
	if err := kr.Complete(); err != nil {
		return fmt.Errorf("consumer group record key %d: %w", typ, err)
	}
	g := groups[name]
	if value == nil {
		if g == nil {
			return nil
		}
		switch typ {
		case recConsumerGroupMetadata:
			delete(groups, name)
		case recConsumerGroupMemberMetadata:
			delete(g.members, member)
			delete(g.withMeta, member)
		case recConsumerGroupTargetMember:
			if m := g.members[member]; m != nil {
				m.target = assignment{}
			}
		case recConsumerGroupCurrentAssignmnt:
			if m := g.members[member]; m != nil {
				m.assigned, m.revoking, m.assignedAt = assignment{}, assignment{}, nil
			}
		}
		return nil
	}
	if g == nil {
		g = &cgReplay{members: map[string]*cmember{}, withMeta: map[string]bool{}}
		groups[name] = g
	}
	r := kbin.Reader{Src: value}
	if v := r.Int16(); v != 0 {
		return fmt.Errorf("consumer group record %d of %q: value version %d", typ, name, v)
	}
	switch typ {
	case recConsumerGroupMetadata:
		g.hasMeta = true
		g.epoch = r.Int32()
		if h, ok := readTags(&r)[0]; ok && len(h) == 8 {
			hr := kbin.Reader{Src: h}
			g.hash = uint64(hr.Int64())
		}
	case recConsumerGroupTargetMetadata:
		g.targetEpoch = r.Int32()
		readTags(&r)
	case recConsumerGroupMemberMetadata:
		m := g.member(member)
		m.instanceID = r.CompactNullableString()
		m.rackID = r.CompactNullableString()
		m.clientID = r.CompactString()
		m.clientHost = r.CompactString()
		n := r.CompactArrayLen()
		m.topics = nil
		for i := int32(0); i < n && r.Ok(); i++ {
			m.topics = append(m.topics, r.CompactString())
		}
		m.regex = r.CompactNullableString()
		m.rebalanceTimeout = ms(r.Int32())
		m.assignor = r.CompactNullableString()
		m.classic = nil
		if cm, ok := readTags(&r)[0]; ok {
			classic, err := readClassicMetadata(cm)
			if err != nil {
				return fmt.Errorf("consumer group member %q of %q: classic metadata: %w", member, name, err)
			}
			m.classic = classic
		}
		g.withMeta[member] = true
	case recConsumerGroupTargetMember:
		m := g.member(member)
		m.target = readTopicPartitions(&r, nil)
		readTags(&r)
	case recConsumerGroupCurrentAssignmnt:
		m := g.member(member)
		m.epoch = r.Int32()
		m.prevEpoch = r.Int32()
		m.state = r.Int8()
		m.assignedAt = map[tpKey]int32{}
		m.assigned = readTopicPartitions(&r, m.assignedAt)
		m.revoking = readTopicPartitions(&r, nil)
		readTags(&r)
	}
	if err := r.Complete(); err != nil {
		return fmt.Errorf("consumer group record %d of %q: %w", typ, name, err)
	}
	return nil
}

// restoreConsumerGroups builds the replayed consumer groups; members get a
// fresh session (live ones keep heartbeating, the rest expire). Called
// with c.mu held; returns how many groups it restored.
func (c *Coordinator) restoreConsumerGroups(groups map[string]*cgReplay, now time.Time) int {
	n := 0
	for name, r := range groups {
		if !r.hasMeta {
			continue
		}
		if old := c.groups[name]; old != nil && old.consumer == nil && len(old.members) > 0 {
			c.log.Warn("group has both classic and consumer records; keeping the consumer group", "group", name)
		}
		g := newGroup(name, now)
		g.protocolType = "consumer"
		cg := newConsumerGroup()
		cg.epoch, cg.assignmentEpoch, cg.metaHash = r.epoch, r.targetEpoch, r.hash
		for id, m := range r.members {
			if !r.withMeta[id] {
				continue // assignment records of a member already removed
			}
			if m.assignedAt == nil {
				m.assignedAt = map[tpKey]int32{}
			}
			if m.rebalanceTimeout <= 0 {
				m.rebalanceTimeout = c.cfg.ConsumerSessionTimeout
			}
			if m.epoch < 0 && m.epoch != staticLeaveEpoch {
				m.epoch = 0
			}
			m.expires = now.Add(c.cfg.ConsumerSessionTimeout)
			if m.classic != nil {
				m.expires = now.Add(m.classic.sessionTimeout)
			}
			if m.state == memberUnrevoked {
				m.revokeBy = now.Add(m.rebalanceTimeout)
			}
			cg.members[id] = m
			if m.instanceID != nil {
				cg.static[*m.instanceID] = id
			}
			cg.hold(m)
		}
		g.consumer = cg
		cg.updateState(g, now)
		if old := c.groups[name]; old != nil {
			g.offsets = old.offsets
		}
		c.groups[name] = g
		c.arm(g)
		n++
	}
	return n
}
