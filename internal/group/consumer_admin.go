package group

import (
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ConsumerGroupDescribe handles a ConsumerGroupDescribe request. A classic
// group or an unknown id answers GROUP_ID_NOT_FOUND, as in Kafka (admin
// clients then fall back to DescribeGroups).
func (c *Coordinator) ConsumerGroupDescribe(req *kmsg.ConsumerGroupDescribeRequest) Reply {
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range req.Groups {
		d := kmsg.NewConsumerGroupDescribeResponseGroup()
		d.Group = name
		if req.IncludeAuthorizedOperations {
			d.AuthorizedOperations = groupOperations
		}
		g := c.groups[name]
		switch {
		case c.admit(name) != 0:
			d.ErrorCode = c.admit(name)
		case g == nil || g.state == Dead:
			d.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "Group " + name + " not found."
			d.ErrorMessage = &msg
		case g.consumer == nil:
			d.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "Group " + name + " is not a consumer group."
			d.ErrorMessage = &msg
		default:
			cg := g.consumer
			d.State = string(g.state)
			d.Epoch = cg.epoch
			d.AssignmentEpoch = cg.assignmentEpoch
			d.AssignorName = c.assignorName(cg)
			for _, m := range cg.members {
				dm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
				dm.MemberID = m.id
				dm.InstanceID = m.instanceID
				dm.RackID = m.rackID
				dm.MemberEpoch = m.epoch
				dm.ClientID = m.clientID
				dm.ClientHost = m.clientHost
				dm.SubscribedTopics = slices.Clone(m.topics)
				if dm.SubscribedTopics == nil {
					dm.SubscribedTopics = []string{}
				}
				dm.SubscribedTopicRegex = m.regex
				dm.Assignment = c.describeAssignment(m.assigned)
				dm.TargetAssignment = c.describeAssignment(m.target)
				dm.MemberType = 1 // consumer protocol (KIP-1099)
				if m.classic != nil {
					dm.MemberType = 0
				}
				d.Members = append(d.Members, dm)
			}
			sort.Slice(d.Members, func(i, j int) bool { return d.Members[i].MemberID < d.Members[j].MemberID })
		}
		resp.Groups = append(resp.Groups, d)
	}
	return respond(resp)
}

// describeAssignment names the topics of a, for ConsumerGroupDescribe.
func (c *Coordinator) describeAssignment(a assignment) kmsg.Assignment {
	var out kmsg.Assignment
	byID := map[[16]byte]string{}
	if len(a) > 0 {
		for _, t := range c.opts.Topics() {
			byID[t.ID] = t.Name
		}
	}
	for _, id := range sortedIDs(a) {
		tp := kmsg.NewAssignmentTopicPartition()
		tp.TopicID = id
		tp.Topic = byID[id]
		tp.Partitions = slices.Clone(a[id])
		out.TopicPartitions = append(out.TopicPartitions, tp)
	}
	return out
}

// validateConsumerCommit is Kafka's check of an OffsetCommit to a consumer
// group: anyone (member epoch < 0, no member id) while the group has no
// members; else a member of the group, with OffsetCommit v9+, whose epoch
// is its current one. A member may also commit with an older epoch for the
// partitions it was given at or before that epoch (KIP-1251, Kafka 4.3),
// which stale reports per partition.
func (c *Coordinator) validateConsumerCommit(g *group, version int16, epoch int32, memberID string) (code int16, stale func(topic string, p int32) bool) {
	cg := g.consumer
	if epoch < 0 && memberID == "" && len(cg.members) == 0 {
		return 0, nil
	}
	m := cg.members[memberID]
	switch {
	case m == nil:
		return kerr.UnknownMemberID.Code, nil
	case m.classic != nil:
		// A classic member commits with its generation, which is its
		// member epoch, at any version (Kafka's rule).
		if epoch != m.epoch {
			return kerr.IllegalGeneration.Code, nil
		}
		return 0, nil
	case version < 9:
		return kerr.UnsupportedVersion.Code, nil
	case epoch > m.epoch || epoch < 0:
		return kerr.StaleMemberEpoch.Code, nil
	case epoch == m.epoch:
		return 0, nil
	}
	return 0, func(topic string, p int32) bool {
		t, ok := c.opts.Topic(topic)
		if !ok {
			return true
		}
		at, ok := m.assignedAt[tpKey{t.ID, p}]
		return !ok || at > epoch
	}
}

// validateConsumerTxnCommit checks a TxnOffsetCommit's member (KIP-447
// fencing) against a consumer group.
func (g *group) validateConsumerTxnCommit(epoch int32, memberID string) int16 {
	if memberID == "" && epoch < 0 {
		return 0
	}
	m := g.consumer.members[memberID]
	switch {
	case m == nil:
		return kerr.UnknownMemberID.Code
	case epoch != m.epoch:
		return kerr.IllegalGeneration.Code
	}
	return 0
}

// validateConsumerFetch checks an OffsetFetch v9+ that names a member.
func (g *group) validateConsumerFetch(memberID *string, epoch int32) int16 {
	if g.consumer == nil || memberID == nil || (*memberID == "" && epoch < 0) {
		return 0
	}
	m := g.consumer.members[*memberID]
	switch {
	case m == nil:
		return kerr.UnknownMemberID.Code
	case epoch != m.epoch:
		return kerr.StaleMemberEpoch.Code
	}
	return 0
}

// consumerSubscribedTopics is the union of a consumer group's subscribed
// topic names and the topics its regular expressions matched last.
func (cg *consumerGroup) subscribedTopics() map[string]bool {
	out := map[string]bool{}
	for _, m := range cg.members {
		for _, t := range m.topics {
			out[t] = true
		}
		if m.regex != nil {
			for _, t := range cg.regexTopics[*m.regex] {
				out[t] = true
			}
		}
	}
	return out
}

func (g *group) memberCount() int {
	if g.consumer != nil {
		return len(g.consumer.members)
	}
	return len(g.members)
}
