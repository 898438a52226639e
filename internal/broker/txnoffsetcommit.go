package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// TxnOffsetCommit v0-v5 (v3 carries the member and generation, KIP-447;
// v4 may answer TRANSACTION_ABORTABLE; v5, KIP-890 part 2: under
// transaction.version 2 the group's __consumer_offsets partition is added
// to the transaction here, the client sends no AddOffsetsToTxn): offsets
// committed inside a transaction, applied by its commit marker.
func (b *Broker) handleTxnOffsetCommit(ctx context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.TxnOffsetCommitRequest)
	p := b.coord.OffsetsPartition(req.Group)
	var code int16
	switch {
	case !b.authorizeTxnID(r, req.TransactionalID):
		code = kerr.TransactionalIDAuthorizationFailed.Code
	case !b.authorize(r, auth.OpRead, auth.ResourceGroup, req.Group):
		code = kerr.GroupAuthorizationFailed.Code
	case req.Group == "":
		code = kerr.InvalidGroupID.Code
	case p < 0:
		code = kerr.CoordinatorNotAvailable.Code
	default:
		// KIP-890: the transaction's coordinator (often another node)
		// must have the group's partition in the transaction.
		code = b.verifyOffsetsPartition(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, p, req.Version >= 5 && b.txnV2())
	}
	if code == 0 {
		// READ on each topic; the others' partitions are refused.
		allowed := *req
		allowed.Topics = nil
		var denied []kmsg.TxnOffsetCommitRequestTopic
		for _, t := range req.Topics {
			if b.authorize(r, auth.OpRead, auth.ResourceTopic, t.Topic) {
				allowed.Topics = append(allowed.Topics, t)
			} else {
				denied = append(denied, t)
			}
		}
		if len(denied) == 0 {
			return b.groups.TxnOffsetCommit(req)
		}
		return thenEdit(b.groups.TxnOffsetCommit(&allowed), func(out kmsg.Response) {
			resp := out.(*kmsg.TxnOffsetCommitResponse)
			for _, t := range denied {
				rt := kmsg.NewTxnOffsetCommitResponseTopic()
				rt.Topic = t.Topic
				for _, pp := range t.Partitions {
					rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
					rp.Partition, rp.ErrorCode = pp.Partition, kerr.TopicAuthorizationFailed.Code
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
		})
	}
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, pp := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = pp.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return wire.Respond(resp)
}
