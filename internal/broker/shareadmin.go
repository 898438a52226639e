package broker

import (
	"context"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/share"
	"holdfast/internal/wire"
)

// Share groups in the group admin APIs: ListGroups lists them (type
// "share"), DeleteGroups deletes an empty one with its share-partition
// state, and the share-group offset APIs (KIP-932) read and change a
// share partition's start offset (SPSO) on the group's coordinator.

// isShareGroup reports whether this node coordinates share group g (it
// has members or share-partition state).
func (b *Broker) isShareGroup(g string) bool {
	if g == "" || b.groups.Unavailable(g) != 0 {
		return false
	}
	return b.coord.ShareGroups().Exists(g) || b.coord.ShareState().HasState(g)
}

// shareGroupsListed is ListGroups' share groups, with its filters.
func (b *Broker) shareGroupsListed(req *kmsg.ListGroupsRequest) []kmsg.ListGroupsResponseGroup {
	types := map[string]bool{}
	for _, t := range req.TypesFilter {
		types[strings.ToLower(t)] = true
	}
	if len(types) > 0 && !types["share"] {
		return nil
	}
	states := map[string]bool{}
	for _, s := range req.StatesFilter {
		states[strings.ToLower(s)] = true
	}
	seen := map[string]string{}
	for _, g := range b.coord.ShareGroups().List() {
		seen[g.ID] = g.State()
	}
	for _, g := range b.coord.ShareState().Groups() {
		if _, ok := seen[g]; !ok {
			seen[g] = "Empty"
		}
	}
	var out []kmsg.ListGroupsResponseGroup
	for _, name := range sortedKeys(seen) {
		if b.groups.Unavailable(name) != 0 || len(states) > 0 && !states[strings.ToLower(seen[name])] {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = name, "share", seen[name], "share"
		out = append(out, lg)
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// deleteShareGroup deletes empty share group g and its state.
func (b *Broker) deleteShareGroup(ctx context.Context, g string) int16 {
	if err := b.coord.ShareGroups().Delete(g); err != nil {
		return shareGroupError(err)
	}
	if err := b.coord.ShareState().Delete(ctx, g, nil); err != nil {
		return shareStateError(err)
	}
	b.share.Forget(g)
	return 0
}

func (b *Broker) handleDescribeShareGroupOffsets(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DescribeShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeShareGroupOffsetsResponse)
	return func(ctx context.Context) kmsg.Response {
		b.describeShareGroupOffsets(ctx, r, req, resp)
		return resp
	}
}

func (b *Broker) describeShareGroupOffsets(ctx context.Context, r *wire.Request, req *kmsg.DescribeShareGroupOffsetsRequest, resp *kmsg.DescribeShareGroupOffsetsResponse) {
	for _, rg := range req.Groups {
		g := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
		g.GroupID = rg.GroupID
		if !b.authorize(r, auth.OpDescribe, auth.ResourceGroup, rg.GroupID) {
			g.ErrorCode = kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, g)
			continue
		}
		if code, msg := b.shareGroupAdmitWait(ctx, rg.GroupID); code != 0 {
			g.ErrorCode = code
			if msg != "" {
				g.ErrorMessage = &msg
			}
			resp.Groups = append(resp.Groups, g)
			continue
		}
		states, err := b.coord.ShareState().List(rg.GroupID)
		if err != nil {
			g.ErrorCode = shareStateError(err)
			resp.Groups = append(resp.Groups, g)
			continue
		}
		have := map[share.TP]share.GroupState{}
		for _, s := range states {
			have[share.TP{TopicID: s.TopicID, Partition: s.Partition}] = s
		}
		part := func(s share.GroupState, ok bool, p int32) kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition {
			rp := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
			rp.Partition, rp.StartOffset, rp.LeaderEpoch, rp.Lag = p, -1, -1, -1
			if ok {
				rp.StartOffset, rp.LeaderEpoch = s.StartOffset, s.LeaderEpoch
			}
			return rp
		}
		if rg.Topics == nil { // every partition with state
			byTopic := map[[16]byte]int{}
			for _, s := range states {
				t, ok := b.meta.TopicByID(s.TopicID)
				if !ok || !b.authorize(r, auth.OpDescribe, auth.ResourceTopic, t.Name) {
					continue
				}
				ti, seen := byTopic[s.TopicID]
				if !seen {
					ti = len(g.Topics)
					byTopic[s.TopicID] = ti
					rt := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopic()
					rt.Topic, rt.TopicID = t.Name, t.ID
					g.Topics = append(g.Topics, rt)
				}
				g.Topics[ti].Partitions = append(g.Topics[ti].Partitions, part(s, true, s.Partition))
			}
		}
		for _, rt := range rg.Topics {
			st := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopic()
			st.Topic = rt.Topic
			t, ok := b.meta.Topic(rt.Topic)
			authorized := b.authorize(r, auth.OpDescribe, auth.ResourceTopic, rt.Topic)
			if ok {
				st.TopicID = t.ID
			}
			for _, p := range rt.Partitions {
				s, found := have[share.TP{TopicID: t.ID, Partition: p}]
				rp := part(s, found && ok && authorized, p)
				switch {
				case !authorized:
					rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				case !ok || p < 0 || p >= t.Partitions:
					rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				}
				st.Partitions = append(st.Partitions, rp)
			}
			g.Topics = append(g.Topics, st)
		}
		resp.Groups = append(resp.Groups, g)
	}
}

func (b *Broker) handleAlterShareGroupOffsets(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AlterShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.AlterShareGroupOffsetsResponse)
	if !b.authorize(r, auth.OpRead, auth.ResourceGroup, req.GroupID) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	return func(ctx context.Context) kmsg.Response {
		if code, msg := b.shareGroupAdmitWait(ctx, req.GroupID); code != 0 {
			resp.ErrorCode = code
			if msg != "" {
				resp.ErrorMessage = &msg
			}
			return resp
		}
		if g, ok := b.coord.ShareGroups().Describe(req.GroupID); ok && len(g.Members) > 0 {
			resp.ErrorCode = kerr.NonEmptyGroup.Code
			msg := "the share group has members; offsets of an empty group only may be altered"
			resp.ErrorMessage = &msg
			return resp
		}
		for _, rt := range req.Topics {
			st := kmsg.NewAlterShareGroupOffsetsResponseTopic()
			st.Topic = rt.Topic
			t, ok := b.meta.Topic(rt.Topic)
			authorized := b.authorize(r, auth.OpRead, auth.ResourceTopic, rt.Topic)
			if ok {
				st.TopicID = t.ID
			}
			for _, rp := range rt.Partitions {
				sp := kmsg.NewAlterShareGroupOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				switch {
				case !authorized:
					sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				case !ok || rp.Partition < 0 || rp.Partition >= t.Partitions:
					sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				case rp.StartOffset < 0:
					sp.ErrorCode = kerr.InvalidRequest.Code
				default:
					err := b.coord.ShareState().Reset(ctx, share.Key{Group: req.GroupID, TopicID: t.ID, Partition: rp.Partition}, rp.StartOffset)
					sp.ErrorCode = shareStateError(err)
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		b.coord.ShareGroups().Mark(req.GroupID)
		b.share.Forget(req.GroupID)
		return resp
	}
}

func (b *Broker) handleDeleteShareGroupOffsets(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DeleteShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteShareGroupOffsetsResponse)
	if !b.authorize(r, auth.OpDelete, auth.ResourceGroup, req.GroupID) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	return func(ctx context.Context) kmsg.Response {
		if code, msg := b.shareGroupAdmitWait(ctx, req.GroupID); code != 0 {
			resp.ErrorCode = code
			if msg != "" {
				resp.ErrorMessage = &msg
			}
			return resp
		}
		if g, ok := b.coord.ShareGroups().Describe(req.GroupID); ok && len(g.Members) > 0 {
			resp.ErrorCode = kerr.NonEmptyGroup.Code
			return resp
		}
		for _, rt := range req.Topics {
			st := kmsg.NewDeleteShareGroupOffsetsResponseTopic()
			st.Topic = rt.Topic
			t, ok := b.meta.Topic(rt.Topic)
			switch {
			case !b.authorize(r, auth.OpRead, auth.ResourceTopic, rt.Topic):
				st.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case !ok:
				st.ErrorCode = kerr.UnknownTopicOrPartition.Code
			default:
				st.TopicID = t.ID
				err := b.coord.ShareState().Delete(ctx, req.GroupID, func(k share.Key) bool { return k.TopicID == t.ID })
				st.ErrorCode = shareStateError(err)
			}
			resp.Topics = append(resp.Topics, st)
		}
		b.share.Forget(req.GroupID)
		return resp
	}
}
