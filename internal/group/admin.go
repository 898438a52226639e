package group

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupOperations are the ACL operations that apply to a group (READ,
// DELETE, DESCRIBE) as a KIP-430 bit field; with no authorizer all are
// allowed.
const groupOperations = 1<<3 | 1<<6 | 1<<8

// DescribeGroups handles a DescribeGroups request.
func (c *Coordinator) DescribeGroups(req *kmsg.DescribeGroupsRequest) Reply {
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range req.Groups {
		d := kmsg.NewDescribeGroupsResponseGroup()
		d.Group = name
		if req.IncludeAuthorizedOperations {
			d.AuthorizedOperations = groupOperations
		}
		g := c.groups[name]
		switch {
		case c.admit(name) != 0:
			d.ErrorCode = c.admit(name)
		case g == nil || g.consumer != nil:
			// Kafka's answer for an unknown group, and for a consumer
			// group (not a classic one: ConsumerGroupDescribe describes
			// it): Dead before v6, GROUP_ID_NOT_FOUND with why from v6.
			d.State = string(Dead)
			if req.Version >= 6 {
				d.ErrorCode = kerr.GroupIDNotFound.Code
				msg := fmt.Sprintf("Group %s not found.", name)
				if g != nil {
					msg = fmt.Sprintf("Group %s is not a classic group.", name)
				}
				d.ErrorMessage = &msg
			}
		default:
			d.State = string(g.state)
			d.ProtocolType = g.protocolType
			stable := g.state == Stable
			if stable {
				d.Protocol = g.protocol
			}
			for _, m := range g.members {
				dm := kmsg.NewDescribeGroupsResponseGroupMember()
				dm.MemberID = m.id
				dm.InstanceID = m.instanceID
				dm.ClientID = m.clientID
				dm.ClientHost = m.clientHost
				if stable {
					dm.ProtocolMetadata = m.metadata(g.protocol)
					dm.MemberAssignment = m.assignment
				}
				d.Members = append(d.Members, dm)
			}
			sort.Slice(d.Members, func(i, j int) bool { return d.Members[i].MemberID < d.Members[j].MemberID })
		}
		resp.Groups = append(resp.Groups, d)
	}
	return respond(resp)
}

// ListGroups handles a ListGroups request (state filter v4+, type filter
// v5+: "classic" or "consumer").
func (c *Coordinator) ListGroups(req *kmsg.ListGroupsRequest) Reply {
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	for i := range c.loaded {
		// Partitions another node leads are not ours to list.
		if c.loading(int32(i)) {
			resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		}
	}
	states := map[string]bool{}
	for _, s := range req.StatesFilter {
		states[strings.ToLower(s)] = true
	}
	types := map[string]bool{}
	for _, t := range req.TypesFilter {
		types[strings.ToLower(t)] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, g := range c.groups {
		typ := "classic"
		if g.consumer != nil {
			typ = "consumer"
		}
		if len(states) > 0 && !states[strings.ToLower(string(g.state))] || len(types) > 0 && !types[typ] {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group = name
		lg.ProtocolType = g.protocolType
		lg.GroupState = string(g.state)
		lg.GroupType = typ
		resp.Groups = append(resp.Groups, lg)
	}
	sort.Slice(resp.Groups, func(i, j int) bool { return resp.Groups[i].Group < resp.Groups[j].Group })
	return respond(resp)
}

// DeleteGroups handles a DeleteGroups request: empty groups are removed with
// their offsets (tombstones for every key), answered once durable.
func (c *Coordinator) DeleteGroups(req *kmsg.DeleteGroupsRequest) Reply {
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	type wait struct {
		i   int
		log Log
		end int64
	}
	var waits []wait
	c.mu.Lock()
	now := c.opts.Now()
	for _, name := range req.Groups {
		d := kmsg.NewDeleteGroupsResponseGroup()
		d.Group = name
		g := c.groups[name]
		switch {
		case c.admit(name) != 0:
			d.ErrorCode = c.admit(name)
		case c.closed:
			d.ErrorCode = kerr.CoordinatorNotAvailable.Code
		case g == nil || g.state == Dead:
			d.ErrorCode = kerr.GroupIDNotFound.Code
		case g.state != Empty || len(g.pending) > 0:
			d.ErrorCode = kerr.NonEmptyGroup.Code
		default:
			kvs := []kv{{groupKey(name), nil}}
			if g.consumer != nil {
				kvs = consumerTombstones(g)
			}
			for tp := range g.offsets {
				kvs = append(kvs, kv{offsetKey(name, tp), nil})
			}
			end, err := c.appendKVs(name, now, kvs)
			if err != nil {
				c.log.Warn("deleting group failed", "group", name, "err", err)
				d.ErrorCode = kerr.CoordinatorNotAvailable.Code
				break
			}
			g.setState(Dead, now)
			if g.timer != nil {
				g.timer.Stop()
			}
			delete(c.groups, name)
			c.log.Info("group deleted", "group", name, "offsets", len(g.offsets))
			waits = append(waits, wait{len(resp.Groups), c.logs[c.partition(name)], end})
		}
		resp.Groups = append(resp.Groups, d)
	}
	c.mu.Unlock()
	if len(waits) == 0 {
		return respond(resp)
	}
	return func(ctx context.Context) kmsg.Response {
		for _, w := range waits {
			if err := w.log.WaitCommitted(ctx, w.end); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				resp.Groups[w.i].ErrorCode = kerr.CoordinatorNotAvailable.Code
			}
		}
		return resp
	}
}

// GroupType is the type of group name here, "classic" or "consumer", or
// "" if this node coordinates no such group (share groups, in
// internal/share, use it to keep one type per group id).
func (c *Coordinator) GroupType(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[name]
	switch {
	case g == nil || g.state == Dead:
		return ""
	case g.consumer != nil:
		return "consumer"
	}
	return "classic"
}
