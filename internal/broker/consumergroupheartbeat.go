package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// KIP-848's consumer group protocol: v0 (the coordinator names members),
// v1 (Kafka 4.0: members name themselves; regex subscriptions). The Reply
// waits for the group's records to be committed.
func (b *Broker) handleConsumerGroupHeartbeat(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ConsumerGroupHeartbeatRequest)
	if b.featureLevel("group.version") < 1 {
		// UpdateFeatures turned KIP-848 off, as Kafka's group.version 0.
		resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		resp.ErrorMessage = kmsg.StringPtr("The new consumer group protocol is not enabled: group.version is 0.")
		return wire.Respond(resp)
	}
	if !b.authorize(r, auth.OpRead, auth.ResourceGroup, req.Group) {
		resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	if b.isShareGroup(req.Group) {
		resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
		resp.ErrorCode = kerr.GroupIDNotFound.Code
		msg := "Group " + req.Group + " is not a consumer group (it is a share group)."
		resp.ErrorMessage = &msg
		return wire.Respond(resp)
	}
	return b.groups.ConsumerGroupHeartbeat(req, r.ClientID, clientHost(r.Conn))
}
