package group

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/records"
)

// Record formats are Kafka's (kafka/coordinator/group/GroupMetadataManager):
// key version 0/1 is an offset commit, key version 2 group metadata; a nil
// value deletes the key (and lets compaction drop it).

func groupKey(name string) []byte {
	k := kmsg.NewGroupMetadataKey()
	k.Version = 2
	k.Group = name
	return k.AppendTo(nil)
}

func offsetKey(group string, tp topicPartition) []byte {
	k := kmsg.NewOffsetCommitKey()
	k.Version = 1
	k.Group, k.Topic, k.Partition = group, tp.topic, tp.partition
	return k.AppendTo(nil)
}

func offsetValue(o offset) []byte {
	v := kmsg.NewOffsetCommitValue()
	v.Version = 3
	v.Offset = o.offset
	v.LeaderEpoch = o.leaderEpoch
	v.Metadata = o.metadata
	v.CommitTimestamp = o.commitTime.UnixMilli()
	return v.AppendTo(nil)
}

func groupValue(g *group) []byte {
	v := kmsg.NewGroupMetadataValue()
	v.Version = 3
	v.ProtocolType = g.protocolType
	v.Generation = g.generation
	if g.protocol != "" {
		p := g.protocol
		v.Protocol = &p
	}
	if g.leader != "" {
		l := g.leader
		v.Leader = &l
	}
	v.CurrentStateTimestamp = g.stateSince.UnixMilli()
	for _, m := range g.members {
		mv := kmsg.NewGroupMetadataValueMember()
		mv.MemberID = m.id
		mv.InstanceID = m.instanceID
		mv.ClientID = m.clientID
		mv.ClientHost = m.clientHost
		mv.RebalanceTimeoutMillis = int32(m.rebalanceTimeout / time.Millisecond)
		mv.SessionTimeoutMillis = int32(m.sessionTimeout / time.Millisecond)
		mv.Subscription = m.metadata(g.protocol)
		mv.Assignment = m.assignment
		if mv.Assignment == nil {
			mv.Assignment = []byte{}
		}
		v.Members = append(v.Members, mv)
	}
	return v.AppendTo(nil)
}

// appendKVs writes kvs as one batch to the group's partition.
func (c *Coordinator) appendKVs(group string, now time.Time, kvs []kv) (int64, error) {
	batch, err := buildBatch(now, kvs)
	if err != nil {
		return 0, err
	}
	return c.logs[c.partition(group)].Append(batch)
}

// persistGroup appends the group's metadata; ok is false if the append
// failed (logged).
func (c *Coordinator) persistGroup(g *group, now time.Time) (end int64, ok bool) {
	end, err := c.appendKVs(g.name, now, []kv{{groupKey(g.name), groupValue(g)}})
	if err != nil {
		c.log.Warn("writing group metadata failed", "group", g.name, "generation", g.generation, "err", err)
		return 0, false
	}
	return end, true
}

// replay rebuilds the groups owned by partition p from its log: the last
// value per key wins, tombstones delete. The result is dropped if the
// partition was loaded or unloaded again since gen.
func (c *Coordinator) replay(p int32, gen uint64) error {
	start := time.Now()
	type meta struct {
		v   kmsg.GroupMetadataValue
		set bool
	}
	metas := map[string]*meta{}
	offsets := map[string]map[topicPartition]offset{}
	pending := pendingTxn{}
	consumers := map[string]*cgReplay{}
	n := 0
	err := c.logs[p].Scan(func(batch []byte) error {
		h, err := records.ParseHeader(batch)
		if err != nil {
			return err
		}
		if h.IsControl() || h.IsTransactional() {
			return c.replayTxnBatch(p, h, batch, pending, offsets) // txn.go
		}
		recs, err := records.Records(batch)
		if err != nil {
			return err
		}
		for _, r := range recs {
			n++
			if len(r.Key) < 2 {
				return fmt.Errorf("offset %d: key of %d bytes", r.Offset, len(r.Key))
			}
			switch ver := int16(binary.BigEndian.Uint16(r.Key)); ver {
			case 0, 1:
				var k kmsg.OffsetCommitKey
				if err := k.ReadFrom(r.Key); err != nil {
					return fmt.Errorf("offset %d: offset key: %w", r.Offset, err)
				}
				tp := topicPartition{k.Topic, k.Partition}
				if r.Value == nil {
					delete(offsets[k.Group], tp)
					continue
				}
				var v kmsg.OffsetCommitValue
				if err := v.ReadFrom(r.Value); err != nil {
					return fmt.Errorf("offset %d: offset value: %w", r.Offset, err)
				}
				if offsets[k.Group] == nil {
					offsets[k.Group] = map[topicPartition]offset{}
				}
				epoch := v.LeaderEpoch
				if v.Version < 3 {
					epoch = -1
				}
				offsets[k.Group][tp] = offset{offset: v.Offset, leaderEpoch: epoch, metadata: v.Metadata, commitTime: time.UnixMilli(v.CommitTimestamp)}
			case 2:
				var k kmsg.GroupMetadataKey
				if err := k.ReadFrom(r.Key); err != nil {
					return fmt.Errorf("offset %d: group key: %w", r.Offset, err)
				}
				if r.Value == nil {
					delete(metas, k.Group)
					continue
				}
				m := &meta{set: true}
				if err := m.v.ReadFrom(r.Value); err != nil {
					return fmt.Errorf("offset %d: group value: %w", r.Offset, err)
				}
				metas[k.Group] = m
			case recConsumerGroupMetadata, recConsumerGroupMemberMetadata, recConsumerGroupTargetMetadata,
				recConsumerGroupTargetMember, recConsumerGroupCurrentAssignmnt:
				if err := replayConsumerRecord(consumers, ver, r.Key, r.Value); err != nil {
					return fmt.Errorf("offset %d: %w", r.Offset, err)
				}
			default:
				// Other Kafka record types (share and streams groups) are
				// not ours to read.
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("replay __consumer_offsets-%d: %w", p, err)
	}
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gens[p].Load() != gen || c.closed {
		return nil
	}
	c.keepPending(pending)
	restored := 0
	for name, m := range metas {
		g := restoreClassicGroup(name, m.v, now)
		c.groups[name] = g
		restored++
	}
	restored += c.restoreConsumerGroups(consumers, now) // consumer_persist.go
	for name, offs := range offsets {
		if len(offs) == 0 {
			continue
		}
		g := c.groups[name]
		if g == nil {
			g = newGroup(name, now)
			c.groups[name] = g
			restored++
		}
		g.offsets = offs
	}
	for name := range metas {
		c.arm(c.groups[name])
	}
	c.dropDeletedWhileLoading(p, now) // deleted.go
	c.loaded[p].Store(true)
	// One line per partition only at debug level: Load logs the totals.
	c.log.Debug("loaded __consumer_offsets partition", "partition", p, "records", n, "groups", restored, "took", time.Since(start))
	c.replayedRecords.Add(int64(n))
	c.replayedGroups.Add(int64(restored))
	return nil
}

// restoreClassicGroup rebuilds a classic group from its last metadata
// record (replay).
func restoreClassicGroup(name string, v kmsg.GroupMetadataValue, now time.Time) *group {
	g := newGroup(name, now)
	g.protocolType = v.ProtocolType
	g.generation = v.Generation
	if v.Protocol != nil {
		g.protocol = *v.Protocol
	}
	if v.Leader != nil {
		g.leader = *v.Leader
	}
	if v.CurrentStateTimestamp > 0 {
		g.stateSince = time.UnixMilli(v.CurrentStateTimestamp)
	}
	for _, mv := range v.Members {
		mm := &member{
			id:               mv.MemberID,
			instanceID:       mv.InstanceID,
			clientID:         mv.ClientID,
			clientHost:       mv.ClientHost,
			sessionTimeout:   ms(mv.SessionTimeoutMillis),
			rebalanceTimeout: ms(mv.RebalanceTimeoutMillis),
			protocolType:     v.ProtocolType,
			protocols:        []kmsg.JoinGroupRequestProtocol{{Name: g.protocol, Metadata: mv.Subscription}},
			assignment:       mv.Assignment,
		}
		if mm.rebalanceTimeout <= 0 {
			mm.rebalanceTimeout = mm.sessionTimeout
		}
		// Members get a fresh session: those still alive keep
		// heartbeating with their ids, the rest expire and rebalance.
		mm.expires = now.Add(mm.sessionTimeout)
		g.members[mm.id] = mm
		if mm.instanceID != nil {
			g.static[*mm.instanceID] = mm.id
		}
	}
	if len(g.members) > 0 {
		g.state = Stable
	}
	return g
}
