package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/txn"
	"holdfast/internal/wire"
)

// AddOffsetsToTxn v0-v3: the group's __consumer_offsets partition joins the
// transaction, so it gets the marker that applies the offsets committed by
// TxnOffsetCommit.
func init() { register(kmsg.AddOffsetsToTxn, 0, 3, (*Broker).handleAddOffsetsToTxn) }

func (b *Broker) handleAddOffsetsToTxn(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AddOffsetsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	c := b.coordinator()
	p := b.offsetsPartition(req.Group)
	switch {
	case req.Group == "":
		resp.ErrorCode = kerr.InvalidGroupID.Code
	case c == nil:
		resp.ErrorCode = kerr.InvalidProducerIDMapping.Code
	case p < 0:
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
	}
	if resp.ErrorCode != 0 {
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
