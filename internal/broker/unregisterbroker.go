package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// handleUnregisterBroker (KIP-500) removes a broker-only node from the
// cluster: from the registered brokers and, as a learner, from the
// metadata group. Its replicas must have been moved away first (else
// INVALID_REQUEST); a voter of the controller quorum cannot be
// unregistered (RemoveRaftVoter first). Any broker accepts it and forwards it to the controller.
func (b *Broker) handleUnregisterBroker(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.UnregisterBrokerRequest)
	resp := req.ResponseKind().(*kmsg.UnregisterBrokerResponse)
	switch {
	case !b.forwardedBy(r) && !b.authorizeCluster(r, auth.OpAlter):
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return wire.Respond(resp)
	case b.cluster.IsVoter(req.BrokerID):
		resp.ErrorCode = kerr.InvalidRequest.Code
		resp.ErrorMessage = kmsg.StringPtr("a voter of the controller quorum cannot be unregistered: remove it from the quorum first (holdfast cluster remove-controller)")
		return wire.Respond(resp)
	}
	if _, ok := b.meta.Broker(req.BrokerID); !ok {
		resp.ErrorCode = kerr.BrokerIDNotRegistered.Code
		return wire.Respond(resp)
	}
	return func(ctx context.Context) kmsg.Response {
		if !b.cluster.IsController() {
			id := b.cluster.ControllerID()
			if id < 0 {
				b.log.Debug("forwarding UnregisterBroker: no controller")
				resp.ErrorCode = kerr.NotController.Code
				return resp
			}
			kresp, err := b.cluster.Send(ctx, id, req)
			if err != nil {
				b.log.Debug("forwarding UnregisterBroker", "controller", id, "err", err)
				resp.ErrorCode = kerr.NotController.Code
				return resp
			}
			return kresp
		}
		resp.ErrorCode, resp.ErrorMessage = kafkaError(b.cluster.Propose(ctx, metadata.Command{Op: metadata.OpUnregister, BrokerID: req.BrokerID}))
		return resp
	}
}
