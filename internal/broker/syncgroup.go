package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// The Reply waits for the leader's assignment.
func (b *Broker) handleSyncGroup(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.SyncGroupRequest)
	if !b.authorize(r, auth.OpRead, auth.ResourceGroup, req.Group) {
		resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	return b.groups.SyncGroup(req)
}
