package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

func (b *Broker) handleHeartbeat(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.HeartbeatRequest)
	if !b.authorize(r, auth.OpRead, auth.ResourceGroup, req.Group) {
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	return b.groups.Heartbeat(req)
}
