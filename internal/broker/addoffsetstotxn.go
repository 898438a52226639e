package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/txn"
	"holdfast/internal/wire"
)

// AddOffsetsToTxn v0-v4 (v4 may answer TRANSACTION_ABORTABLE, KIP-890): the
// group's __consumer_offsets partition joins the transaction, so it gets
// the marker that applies the offsets committed by TxnOffsetCommit. Under
// transaction.version 2 clients skip it (TxnOffsetCommit v5 adds the
// partition); it still works for those that send it.
func (b *Broker) handleAddOffsetsToTxn(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AddOffsetsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	c := b.coord.Txn()
	switch {
	case !b.authorizeTxnID(r, req.TransactionalID):
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
	case !b.authorize(r, auth.OpRead, auth.ResourceGroup, req.Group):
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
	case req.Group == "":
		resp.ErrorCode = kerr.InvalidGroupID.Code
	}
	if resp.ErrorCode != 0 {
		return wire.Respond(resp)
	}
	if p := b.coord.OffsetsPartition(req.Group); p >= 0 {
		return b.addOffsetsPartition(c, req, resp, p)
	}
	return func(ctx context.Context) kmsg.Response {
		// A transaction may commit offsets before any group lookup
		// created __consumer_offsets: create it as FindCoordinator does
		// (through the controller; that may block, so not on the reader).
		return b.addOffsetsPartition(c, req, resp, b.coord.OffsetsPartitionCreating(req.Group))(ctx)
	}
}

// addOffsetsPartition adds __consumer_offsets partition p (-1: not known
// yet) to the transaction. The add is registered when this is called - on
// the reader when the topic exists - so it is ordered before the
// connection's next request.
func (b *Broker) addOffsetsPartition(c *txn.Coordinator, req *kmsg.AddOffsetsToTxnRequest, resp *kmsg.AddOffsetsToTxnResponse, p int32) wire.Reply {
	if p < 0 {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return wire.Respond(resp)
	}
	wait := c.AddPartitions(req.TransactionalID, req.ProducerID, req.ProducerEpoch,
		[]txn.TopicPartition{{Topic: offsetsTopic, Partition: p}})
	return func(ctx context.Context) kmsg.Response {
		err := wait(ctx)
		if ctx.Err() != nil {
			return nil
		}
		resp.ErrorCode = txnErrorCode(err)
		return resp
	}
}
