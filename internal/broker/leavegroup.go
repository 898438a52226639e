package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

func (b *Broker) handleLeaveGroup(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.LeaveGroupRequest)
	if !b.authorize(r, auth.OpRead, auth.ResourceGroup, req.Group) {
		resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	return b.groups.LeaveGroup(req)
}
