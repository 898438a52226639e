package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/txn"
	"holdfast/internal/wire"
)

// AddPartitionsToTxn v0-v3 is the client path. v4+ is KIP-890's
// broker-side form: several transactions per request, VerifyOnly to ask
// whether partitions are already in a transaction (part 1), or, without
// it, to add them on behalf of a Produce v12+ or TxnOffsetCommit v5 (part
// 2: the partition leader or group coordinator adds implicitly). A
// partition leader that is also the coordinator asks it directly; clients
// are pinned to v3 (franz-go, Java).
func (b *Broker) handleAddPartitionsToTxn(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AddPartitionsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	if req.Version < 4 {
		var topics []kmsg.AddPartitionsToTxnRequestTransactionTopic
		for _, rt := range req.Topics {
			topics = append(topics, kmsg.AddPartitionsToTxnRequestTransactionTopic{Topic: rt.Topic, Partitions: rt.Partitions})
		}
		if denied := b.txnPartitionsDenied(r, req.TransactionalID, topics); denied != nil {
			return wire.Respond(denied)
		}
		res, wait := b.addPartitionsOne(req.TransactionalID, req.ProducerID, req.ProducerEpoch, false, false, topics)
		return func(ctx context.Context) kmsg.Response {
			if !wait(ctx) {
				return nil
			}
			for _, t := range res.Topics {
				st := kmsg.NewAddPartitionsToTxnResponseTopic()
				st.Topic = t.Topic
				for _, p := range t.Partitions {
					sp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
					sp.Partition, sp.ErrorCode = p.Partition, p.ErrorCode
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp
		}
	}
	// v4+ batches transactions: a broker verifying for its producers
	// (KIP-890), never a client.
	if !b.authorizeCluster(r, auth.OpClusterAction) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	var results []*kmsg.AddPartitionsToTxnResponseTransaction
	var waits []func(context.Context) bool
	for _, t := range req.Transactions {
		res, wait := b.addPartitionsOne(t.TransactionalID, t.ProducerID, t.ProducerEpoch, t.VerifyOnly, true, t.Topics)
		results = append(results, res)
		waits = append(waits, wait)
	}
	return func(ctx context.Context) kmsg.Response {
		for i, w := range waits {
			if !w(ctx) {
				return nil
			}
			resp.Transactions = append(resp.Transactions, *results[i])
		}
		return resp
	}
}

// addPartitionsOne adds (or, with verifyOnly, checks) one transaction's
// partitions. The returned result is complete once wait returns true;
// false means the connection is gone.
func (b *Broker) addPartitionsOne(id string, pid int64, epoch int16, verifyOnly, byBroker bool, topics []kmsg.AddPartitionsToTxnRequestTransactionTopic) (*kmsg.AddPartitionsToTxnResponseTransaction, func(context.Context) bool) {
	res := &kmsg.AddPartitionsToTxnResponseTransaction{TransactionalID: id}
	var parts []txn.TopicPartition
	unknown := false
	for _, rt := range topics {
		st := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
		st.Topic = rt.Topic
		t, ok := b.meta.Topic(rt.Topic)
		for _, p := range rt.Partitions {
			sp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
			sp.Partition = p
			// A broker may name __consumer_offsets (a TxnOffsetCommit's
			// partition: verified, or added for TxnOffsetCommit v5); clients
			// may not add internal topics.
			if !ok || p < 0 || p >= t.Partitions || t.Internal && !(byBroker && rt.Topic == offsetsTopic) {
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				unknown = true
			}
			st.Partitions = append(st.Partitions, sp)
			parts = append(parts, txn.TopicPartition{Topic: rt.Topic, Partition: p})
		}
		res.Topics = append(res.Topics, st)
	}
	each := func(fn func(sp *kmsg.AddPartitionsToTxnResponseTransactionTopicPartition, i int)) {
		i := 0
		for ti := range res.Topics {
			for pi := range res.Topics[ti].Partitions {
				fn(&res.Topics[ti].Partitions[pi], i)
				i++
			}
		}
	}
	setAll := func(code int16) {
		each(func(sp *kmsg.AddPartitionsToTxnResponseTransactionTopicPartition, _ int) {
			if sp.ErrorCode == 0 {
				sp.ErrorCode = code
			}
		})
	}
	done := func(context.Context) bool { return true }
	c := b.coord.Txn()
	switch {
	case unknown:
		// All or nothing, as Kafka: the rest were not attempted.
		setAll(kerr.OperationNotAttempted.Code)
		return res, done
	case verifyOnly:
		per, err := c.VerifyPartitions(id, pid, epoch, parts)
		if err != nil {
			setAll(txnErrorCode(err))
		} else {
			each(func(sp *kmsg.AddPartitionsToTxnResponseTransactionTopicPartition, i int) {
				sp.ErrorCode = txnErrorCode(per[i])
			})
		}
		return res, done
	}
	wait := c.AddPartitions(id, pid, epoch, parts)
	return res, func(ctx context.Context) bool {
		err := wait(ctx)
		if ctx.Err() != nil {
			return false
		}
		setAll(txnErrorCode(err))
		return true
	}
}

// txnPartitionsDenied answers a client's AddPartitionsToTxn it may not
// make: TRANSACTIONAL_ID_AUTHORIZATION_FAILED everywhere without WRITE on
// the transactional id; else TOPIC_AUTHORIZATION_FAILED on the topics it
// may not write and OPERATION_NOT_ATTEMPTED on the rest (nothing is added).
// nil: allowed.
func (b *Broker) txnPartitionsDenied(r *wire.Request, id string, topics []kmsg.AddPartitionsToTxnRequestTransactionTopic) *kmsg.AddPartitionsToTxnResponse {
	txnOK := b.authorizeTxnID(r, id)
	deniedTopics := map[string]bool{}
	for _, t := range topics {
		if txnOK && !b.authorize(r, auth.OpWrite, auth.ResourceTopic, t.Topic) {
			deniedTopics[t.Topic] = true
		}
	}
	if txnOK && len(deniedTopics) == 0 {
		return nil
	}
	resp := kmsg.NewPtrAddPartitionsToTxnResponse()
	resp.Version = r.Version
	for _, t := range topics {
		code := kerr.OperationNotAttempted.Code
		switch {
		case !txnOK:
			code = kerr.TransactionalIDAuthorizationFailed.Code
		case deniedTopics[t.Topic]:
			code = kerr.TopicAuthorizationFailed.Code
		}
		st := kmsg.NewAddPartitionsToTxnResponseTopic()
		st.Topic = t.Topic
		for _, p := range t.Partitions {
			sp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			sp.Partition, sp.ErrorCode = p, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
