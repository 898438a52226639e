package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

// EndTxn v0-v5. The Prepare record is appended in Handle (so the decision
// is ordered with this connection's other requests); the Reply waits for
// it, writes the markers and answers once they are committed, so a
// read_committed consumer sees a committed transaction as soon as the
// producer is told. v4 may answer TRANSACTION_ABORTABLE. v5 (KIP-890 part
// 2) under transaction.version 2 bumps the producer epoch on every commit
// and abort and answers the producer id and epoch of the next transaction
// (txn.Coordinator.EndTxnV2); below transaction.version 2, v5 behaves as
// v4 and answers the unchanged id and epoch.
func (b *Broker) handleEndTxn(ctx context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.EndTxnRequest)
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if !b.authorizeTxnID(r, req.TransactionalID) {
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	if req.Version >= 5 && b.txnV2() {
		wait := b.coord.Txn().EndTxnV2(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit)
		return func(ctx context.Context) kmsg.Response {
			pid, epoch, err := wait(ctx)
			if ctx.Err() != nil {
				return nil
			}
			resp.ErrorCode = txnErrorCode(err)
			if err == nil {
				resp.ProducerID, resp.ProducerEpoch = pid, epoch
			}
			return resp
		}
	}
	wait := b.coord.Txn().EndTxn(req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit)
	return func(ctx context.Context) kmsg.Response {
		err := wait(ctx)
		if ctx.Err() != nil {
			return nil
		}
		resp.ErrorCode = txnErrorCode(err)
		if err == nil && req.Version >= 5 {
			resp.ProducerID, resp.ProducerEpoch = req.ProducerID, req.ProducerEpoch
		}
		return resp
	}
}
