package broker

import (
	"context"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

// InitProducerId v0-v5 (v6 is KIP-939's two-phase commit). The producer id
// allocator opens in txn.go's start hook.

// handleInitProducerID gives idempotent producers (no transactional id) a
// fresh producer id at epoch 0. With KIP-360 (v3+), a producer that names
// its current id and epoch - after UNKNOWN_PRODUCER_ID or a timed-out batch
// - gets the same id with the epoch bumped, which resets its sequences on
// every partition; a new id once the epoch is exhausted.
//
// A transactional id goes to the transaction coordinator, which keeps one
// producer id per transactional id and bumps its epoch on every call,
// fencing the previous producer (and aborting its open transaction).
func (b *Broker) handleInitProducerID(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.InitProducerIDRequest)
	switch {
	case req.TransactionalID != nil && *req.TransactionalID != "" && !b.authorizeTxnID(r, *req.TransactionalID):
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return wire.Respond(resp)
	case req.TransactionalID == nil && !b.authorizeIdempotent(r):
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	return func(ctx context.Context) kmsg.Response {
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		if req.TransactionalID != nil {
			if *req.TransactionalID == "" {
				resp.ErrorCode = kerr.InvalidRequest.Code
				return resp
			}
			pid, epoch, err := b.coord.Txn().InitProducerID(ctx, *req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch)
			if ctx.Err() != nil {
				return nil // the connection is gone
			}
			resp.ErrorCode = txnErrorCode(err)
			if resp.ErrorCode == kerr.ProducerFenced.Code && req.Version < 4 {
				resp.ErrorCode = kerr.InvalidProducerEpoch.Code // PRODUCER_FENCED is v4+ (KIP-588)
			}
			if err == nil {
				resp.ProducerID, resp.ProducerEpoch = pid, epoch
			}
			return resp
		}
		return b.clusterProducerID(ctx, req, resp)
	}
}

// clusterProducerID is InitProducerId for an idempotent producer in a
// cluster. A producer naming an id that some block covers and its epoch
// (KIP-360) keeps the id with the epoch bumped; otherwise it gets a new id.
func (b *Broker) clusterProducerID(ctx context.Context, req *kmsg.InitProducerIDRequest, resp *kmsg.InitProducerIDResponse) kmsg.Response {
	if req.ProducerID >= 0 && req.ProducerEpoch >= 0 && req.ProducerEpoch < math.MaxInt16-1 && b.meta.ProducerIDIssued(req.ProducerID) {
		resp.ProducerID, resp.ProducerEpoch = req.ProducerID, req.ProducerEpoch+1
		return resp
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	id, err := b.coord.NextProducerID(ctx)
	if err != nil {
		b.log.Warn("allocating a producer id", "err", err)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code // retriable: the controller may be electing
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp
}
