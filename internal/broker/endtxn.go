package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

// EndTxn v0-v3. The Prepare record is appended in Handle (so the decision
// is ordered with this connection's other requests); the Reply waits for
// it, writes the markers and answers once they are committed, so a
// read_committed consumer sees a committed transaction as soon as the
// producer is told.
func init() { register(kmsg.EndTxn, 0, 3, (*Broker).handleEndTxn) }

func (b *Broker) handleEndTxn(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.EndTxnRequest)
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	if !b.authorizeTxnID(r, req.TransactionalID) {
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	wait := b.coord.Txn().EndTxn(req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit)
	return func(ctx context.Context) kmsg.Response {
		err := wait(ctx)
		if ctx.Err() != nil {
			return nil
		}
		resp.ErrorCode = txnErrorCode(err)
		return resp
	}
}
