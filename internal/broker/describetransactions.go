package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// DescribeTransactions v0 (KIP-664).
func (b *Broker) handleDescribeTransactions(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DescribeTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	c := b.coord.Txn()
	for _, id := range req.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID = id
		st.ProducerID, st.ProducerEpoch, st.StartTimestamp = -1, -1, -1
		if !b.authorize(r, auth.OpDescribe, auth.ResourceTransactionalID, id) {
			st.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
			resp.TransactionStates = append(resp.TransactionStates, st)
			continue
		}
		in, ok := c.Describe(id)
		if !ok {
			st.ErrorCode = kerr.TransactionalIDNotFound.Code
			resp.TransactionStates = append(resp.TransactionStates, st)
			continue
		}
		st.State = in.State.String()
		st.TimeoutMillis = int32(in.Timeout.Milliseconds())
		st.ProducerID, st.ProducerEpoch = in.ProducerID, in.Epoch
		if !in.Start.IsZero() {
			st.StartTimestamp = in.Start.UnixMilli()
		}
		for _, tp := range in.Partitions {
			if n := len(st.Topics); n == 0 || st.Topics[n-1].Topic != tp.Topic {
				t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
				t.Topic = tp.Topic
				st.Topics = append(st.Topics, t)
			}
			t := &st.Topics[len(st.Topics)-1]
			t.Partitions = append(t.Partitions, tp.Partition)
		}
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return wire.Respond(resp)
}
