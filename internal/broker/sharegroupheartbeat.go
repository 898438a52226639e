package broker

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/coordinator"
	"holdfast/internal/share"
	"holdfast/internal/wire"
)

// KIP-932 share-group membership on the group coordinator (share/groups.go).

// shareGroupAdmit is the first check of a request about share group g:
// this node coordinates it, and it is not a group of another type.
func (b *Broker) shareGroupAdmit(g string) (int16, string) {
	if g == "" {
		return kerr.InvalidGroupID.Code, "the group id is empty"
	}
	if code := b.groups.Unavailable(g); code != 0 {
		return code, ""
	}
	if !b.coord.ShareState().Loaded(g) {
		return kerr.CoordinatorLoadInProgress.Code, ""
	}
	if typ := b.groups.GroupType(g); typ != "" {
		return kerr.GroupIDNotFound.Code, "Group " + g + " is not a share group (it is a " + typ + " group)."
	}
	return 0, ""
}

// shareGroupAdmitWait is shareGroupAdmit for the admin APIs, which
// clients do not retry on NOT_COORDINATOR: when this node leads the
// group's __consumer_offsets partition but has not loaded it yet (it was
// just created or moved here), it waits for that, up to 10 s.
func (b *Broker) shareGroupAdmitWait(ctx context.Context, g string) (int16, string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, msg := b.shareGroupAdmit(g)
		if code != kerr.NotCoordinator.Code && code != kerr.CoordinatorLoadInProgress.Code || time.Now().After(deadline) {
			return code, msg
		}
		at := b.coord.Locate(coordinator.KeyGroup, g, b.cfg.Security.InterBrokerListener)
		if at.Code != 0 || at.Node != b.cfg.NodeID {
			return code, msg
		}
		select {
		case <-ctx.Done():
			return code, msg
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func shareGroupError(err error) int16 {
	switch {
	case errors.Is(err, share.ErrUnknownMember):
		return kerr.UnknownMemberID.Code
	case errors.Is(err, share.ErrFencedMemberEpoch):
		return kerr.FencedMemberEpoch.Code
	case errors.Is(err, share.ErrGroupMaxSize):
		return kerr.GroupMaxSizeReached.Code
	case errors.Is(err, share.ErrInvalidHeartbeat):
		return kerr.InvalidRequest.Code
	case errors.Is(err, share.ErrNonEmptyShareGroup):
		return kerr.NonEmptyGroup.Code
	case errors.Is(err, share.ErrGroupNotFound):
		return kerr.GroupIDNotFound.Code
	}
	return shareStateError(err)
}

func (b *Broker) handleShareGroupHeartbeat(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ShareGroupHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
	if b.featureLevel("share.version") < 1 {
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		resp.ErrorMessage = kmsg.StringPtr("Share groups are not enabled: share.version is 0.")
		return wire.Respond(resp)
	}
	if !b.authorize(r, auth.OpRead, auth.ResourceGroup, req.GroupID) {
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	for _, t := range req.SubscribedTopicNames {
		if !b.authorize(r, auth.OpDescribe, auth.ResourceTopic, t) {
			resp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			return wire.Respond(resp)
		}
	}
	if code, msg := b.shareGroupAdmit(req.GroupID); code != 0 {
		resp.ErrorCode = code
		if msg != "" {
			resp.ErrorMessage = &msg
		}
		return wire.Respond(resp)
	}
	res, err := b.coord.ShareGroups().Heartbeat(share.Heartbeat{
		Group: req.GroupID, Member: req.MemberID, Epoch: req.MemberEpoch, Rack: req.RackID,
		Subscribed: req.SubscribedTopicNames, ClientID: r.ClientID, ClientHost: clientHost(r.Conn),
	})
	if err != nil {
		resp.ErrorCode = shareGroupError(err)
		msg := err.Error()
		resp.ErrorMessage = &msg
		return wire.Respond(resp)
	}
	resp.MemberID = &req.MemberID
	resp.MemberEpoch = res.Epoch
	resp.HeartbeatIntervalMillis = int32(b.coord.ShareGroups().HeartbeatInterval().Milliseconds())
	if res.Assignment != nil {
		a := kmsg.NewShareGroupHeartbeatResponseAssignment()
		for _, tp := range sortedAssignment(res.Assignment) {
			at := kmsg.NewShareGroupHeartbeatResponseAssignmentTopicPartition()
			at.TopicID, at.Partitions = tp.id, tp.parts
			a.TopicPartitions = append(a.TopicPartitions, at)
		}
		resp.Assignment = &a
	}
	return wire.Respond(resp)
}

type assignedTopic struct {
	id    [16]byte
	parts []int32
}

func sortedAssignment(a map[[16]byte][]int32) []assignedTopic {
	out := make([]assignedTopic, 0, len(a))
	for id, ps := range a {
		out = append(out, assignedTopic{id, ps})
	}
	sort.Slice(out, func(i, j int) bool { return string(out[i].id[:]) < string(out[j].id[:]) })
	return out
}

func (b *Broker) handleShareGroupDescribe(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ShareGroupDescribeRequest)
	resp := req.ResponseKind().(*kmsg.ShareGroupDescribeResponse)
	for _, id := range req.GroupIDs {
		g := kmsg.NewShareGroupDescribeResponseGroup()
		g.GroupID = id
		resp.Groups = append(resp.Groups, g)
		out := &resp.Groups[len(resp.Groups)-1]
		if !b.authorize(r, auth.OpDescribe, auth.ResourceGroup, id) {
			out.ErrorCode = kerr.GroupAuthorizationFailed.Code
			continue
		}
		if code, msg := b.shareGroupAdmit(id); code != 0 {
			out.ErrorCode = code
			if msg != "" {
				out.ErrorMessage = &msg
			}
			continue
		}
		sg, ok := b.coord.ShareGroups().Describe(id)
		if !ok && !b.coord.ShareState().HasState(id) {
			out.ErrorCode = kerr.GroupIDNotFound.Code
			msg := "Group " + id + " not found."
			out.ErrorMessage = &msg
			continue
		}
		out.GroupState, out.GroupEpoch, out.AssignmentEpoch, out.Assignor = "Empty", sg.Epoch, sg.AssignmentEpoch, "simple"
		if ok {
			out.GroupState = sg.State()
		}
		ids := make([]string, 0, len(sg.Members))
		for mid := range sg.Members {
			ids = append(ids, mid)
		}
		sort.Strings(ids)
		for _, mid := range ids {
			m := sg.Members[mid]
			dm := kmsg.NewShareGroupDescribeResponseGroupMember()
			dm.MemberID, dm.RackID, dm.MemberEpoch, dm.ClientID, dm.ClientHost = m.ID, m.Rack, m.Epoch, m.ClientID, m.ClientHost
			dm.SubscribedTopicNames = m.Subscribed
			for _, tp := range sortedAssignment(m.Assignment) {
				at := kmsg.NewShareGroupDescribeResponseGroupMemberAssignmentTopicPartition()
				at.TopicID, at.Partitions = tp.id, tp.parts
				if t, ok := b.meta.TopicByID(tp.id); ok {
					at.Topic = t.Name
				}
				dm.Assignment.TopicPartitions = append(dm.Assignment.TopicPartitions, at)
			}
			out.Members = append(out.Members, dm)
		}
		if req.IncludeAuthorizedOperations {
			out.AuthorizedOperations = b.authorizedOps(r, auth.ResourceGroup, id)
		}
	}
	return wire.Respond(resp)
}
