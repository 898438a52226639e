package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

// handleAllocateProducerIDs (broker to controller) gives a registered
// broker a block of producer ids.
func (b *Broker) handleAllocateProducerIDs(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AllocateProducerIDsRequest)
	resp := req.ResponseKind().(*kmsg.AllocateProducerIDsResponse)
	if code := b.cluster.ControllerOnly(); code != 0 {
		resp.ErrorCode = code
		return wire.Respond(resp)
	}
	if _, ok := b.meta.Broker(req.BrokerID); !ok {
		resp.ErrorCode = kerr.BrokerIDNotRegistered.Code
		return wire.Respond(resp)
	}
	return func(ctx context.Context) kmsg.Response {
		start, n, err := b.cluster.AllocateProducerIDs(ctx, req.BrokerID)
		if err != nil {
			b.log.Warn("allocating producer ids", "broker", req.BrokerID, "err", err)
			resp.ErrorCode, _ = kafkaError(err)
			return resp
		}
		resp.ProducerIDStart, resp.ProducerIDLen = start, int32(n)
		return resp
	}
}
