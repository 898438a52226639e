package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// The Reply waits for the rebalance's join phase.
func (b *Broker) handleJoinGroup(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.JoinGroupRequest)
	if !b.authorize(r, auth.OpRead, auth.ResourceGroup, req.Group) {
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		resp.Generation = -1
		return wire.Respond(resp)
	}
	if b.isShareGroup(req.Group) {
		// One type per group id: a share group's id is not a classic group's.
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		resp.Generation = -1
		return wire.Respond(resp)
	}
	return b.groups.JoinGroup(req, r.ClientID, clientHost(r.Conn))
}
