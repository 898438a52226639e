package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

// handleBrokerHeartbeat is KRaft's broker-to-controller heartbeat: the
// controller renews the broker's session and fences or unfences it as it
// asks (internal/cluster liveness.go).
func (b *Broker) handleBrokerHeartbeat(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.BrokerHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.BrokerHeartbeatResponse)
	resp.ShouldShutdown = req.WantShutdown
	return func(ctx context.Context) kmsg.Response {
		fenced, err := b.cluster.Heartbeat(ctx, req.BrokerID, req.WantFence || req.WantShutdown)
		if ctx.Err() != nil {
			return nil
		}
		resp.ErrorCode, _ = kafkaError(err)
		resp.IsFenced = fenced
		return resp
	}
}
