package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/coordinator"
	"holdfast/internal/partition"
	"holdfast/internal/records"
	"holdfast/internal/txn"
)

// KIP-890 (part 1) verification. A transactional batch
// may only be appended to a partition that the producer's transaction
// coordinator has in its ongoing transaction: a batch arriving after the
// transaction's marker (a late retry, a zombie, a client bug) would open a
// transaction nobody ever closes, holding the partition's last stable
// offset - and every read_committed consumer - forever. The coordinator of
// the transactional id is the leader of its __transaction_state
// partition, often another node, so the partition leader asks it first,
// as Kafka does: AddPartitionsToTxn v4+ with VerifyOnly, broker to broker
// (or the local coordinator directly).
//
// The partition takes a guard before asking (BeginTxnVerification) and
// records the answer against it; a marker landing meanwhile drops the
// guard, so the batch is refused rather than appended after the marker. A
// positive answer is kept per producer id and epoch until the next marker
// (Kafka's VerificationStateEntry); the first batch of the transaction
// opens it in the partition, which admits the following batches without
// asking again. So one round trip per partition per transaction.

// verifyTimeout bounds the round trip to the coordinator. It runs on the
// connection's reader (Handle), so that the produce requests of one
// connection keep their order; a stuck coordinator holds this connection
// up for at most this long and the client is told to retry.
const verifyTimeout = 5 * time.Second

// KIP-890 part 2 (transaction.version 2): a transactional Produce v12+
// adds its partition to the transaction instead (the client sends no
// AddPartitionsToTxn), by the same round trip without VerifyOnly; the
// coordinator refuses a producer whose epoch an EndTxn v5 or a fence moved
// on, so a late batch of a finished transaction cannot start a new one.

// toVerify is one partition of a request whose transactional batch needs
// the coordinator's word.
type toVerify struct {
	p     *partition.Partition
	pid   int64
	epoch int16
	guard uint64
	code  *int16 // where the answer goes: 0 to go ahead
}

// verifyTxnCluster is the partitions' Verifier: reached
// only when a transactional batch was neither admitted by the partition's
// own state nor verified beforehand (the verification raced a marker).
func verifyTxnCluster(topic string, p int32, pid int64, epoch int16) error {
	return fmt.Errorf("%s-%d: producer %d epoch %d: the partition is not in the producer's transaction (not verified with the transaction coordinator, or a marker came since): %w",
		topic, p, pid, epoch, kerr.InvalidTxnState)
}

// verifyProduce runs the verification for the transactional batches of a
// produce request, before any of them is appended. codes
// are indexed like the request's topics and partitions; a non-zero code
// refuses that partition's batch.
func (b *Broker) verifyProduce(ctx context.Context, req *kmsg.ProduceRequest, codes [][]int16) {
	add := req.Version >= 12 && b.txnV2()
	var todo []toVerify
	for ti, rt := range req.Topics {
		for pi, rp := range rt.Partitions {
			p := b.replicas.Get(rt.Topic, rp.Partition)
			if p == nil || !p.IsLeader() {
				continue // refused below with the usual codes
			}
			batch, _, err := records.Next(rp.Records)
			if err != nil {
				continue // refused by the append
			}
			h, err := records.ParseHeader(batch)
			if err != nil || !h.IsTransactional() || h.IsControl() || h.ProducerID < 0 {
				continue
			}
			guard, needed, err := p.BeginTxnVerification(h.ProducerID, h.ProducerEpoch)
			if err == nil && needed {
				todo = append(todo, toVerify{p: p, pid: h.ProducerID, epoch: h.ProducerEpoch, guard: guard, code: &codes[ti][pi]})
			}
		}
	}
	if len(todo) == 0 {
		return
	}
	if req.TransactionID == nil || *req.TransactionID == "" {
		for _, v := range todo {
			*v.code = kerr.InvalidTxnState.Code // a transactional batch must name its transaction
		}
		return
	}
	// One producer per request in practice; group anyway.
	type key struct {
		pid   int64
		epoch int16
	}
	groups := map[key][]toVerify{}
	for _, v := range todo {
		k := key{v.pid, v.epoch}
		groups[k] = append(groups[k], v)
	}
	for k, vs := range groups {
		parts := make([]txn.TopicPartition, len(vs))
		for i, v := range vs {
			parts[i] = txn.TopicPartition{Topic: v.p.Topic(), Partition: v.p.Index()}
		}
		res := b.verifyWithCoordinator(ctx, *req.TransactionID, k.pid, k.epoch, add, parts)
		for i, v := range vs {
			code := produceVerifyCode(res[i])
			if code == 0 {
				v.p.CompleteTxnVerification(v.pid, v.guard)
			} else {
				v.p.DropTxnVerification(v.pid, v.guard)
			}
			*v.code = code
		}
	}
}

// verifyOffsetsPartition verifies that __consumer_offsets partition p is
// in the transaction before a TxnOffsetCommit writes there.
// It returns the TxnOffsetCommit error code, 0 to go ahead.
//
// With add (TxnOffsetCommit v5 under transaction.version 2) the partition
// is added to the transaction instead, as AddOffsetsToTxn would have.
func (b *Broker) verifyOffsetsPartition(ctx context.Context, id string, pid int64, epoch int16, index int32, add bool) int16 {
	p := b.replicas.Get(offsetsTopic, index)
	if p == nil || !p.IsLeader() {
		return kerr.NotCoordinator.Code // the group coordinator moved
	}
	guard, needed, err := p.BeginTxnVerification(pid, epoch)
	if err != nil {
		return kerr.NotCoordinator.Code // not leading the group's partition (yet)
	}
	if !needed {
		return 0
	}
	res := b.verifyWithCoordinator(ctx, id, pid, epoch, add, []txn.TopicPartition{{Topic: offsetsTopic, Partition: index}})
	code := produceVerifyCode(res[0])
	if code == 0 {
		p.CompleteTxnVerification(pid, guard)
		return 0
	}
	p.DropTxnVerification(pid, guard)
	if code == kerr.NotEnoughReplicas.Code {
		code = kerr.CoordinatorNotAvailable.Code // retriable for TxnOffsetCommit clients
	}
	return code
}

// produceVerifyCode is the produce error for the coordinator's answer
// about one partition (Kafka's mapping): retriable coordinator trouble
// becomes NOT_ENOUGH_REPLICAS, which every producer retries without a
// metadata refresh; PRODUCER_FENCED is INVALID_PRODUCER_EPOCH on produce.
func produceVerifyCode(code int16) int16 {
	switch code {
	case kerr.CoordinatorNotAvailable.Code, kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code,
		kerr.ConcurrentTransactions.Code, kerr.NetworkException.Code, kerr.RequestTimedOut.Code:
		return kerr.NotEnoughReplicas.Code
	case kerr.ProducerFenced.Code:
		return kerr.InvalidProducerEpoch.Code
	case kerr.InvalidProducerIDMapping.Code:
		// The coordinator does not know this producer for the id (expired,
		// or never added): as Kafka, not in a transaction.
		return kerr.InvalidProducerIDMapping.Code
	}
	return code
}

// verifyWithCoordinator asks the transaction coordinator of id whether
// each of parts is in pid/epoch's ongoing transaction, or with add has it
// add them (starting the transaction if none is ongoing): one code per
// part.
func (b *Broker) verifyWithCoordinator(ctx context.Context, id string, pid int64, epoch int16, add bool, parts []txn.TopicPartition) []int16 {
	out := make([]int16, len(parts))
	fill := func(code int16) []int16 {
		for i := range out {
			out[i] = code
		}
		return out
	}
	// No __transaction_state means no transaction was ever started.
	at := b.coord.Locate(coordinator.KeyTransaction, id, b.cfg.Security.InterBrokerListener)
	if at.Code != 0 {
		return fill(at.Code)
	}
	c := b.coord.Txn()
	if at.Node == b.cfg.NodeID && add {
		rctx, cancel := context.WithTimeout(ctx, verifyTimeout)
		defer cancel()
		if err := c.AddPartitions(id, pid, epoch, parts)(rctx); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fill(kerr.RequestTimedOut.Code)
			}
			return fill(txnErrorCode(err))
		}
		return out
	}
	if at.Node == b.cfg.NodeID {
		per, err := c.VerifyPartitions(id, pid, epoch, parts)
		if err != nil {
			return fill(txnErrorCode(err))
		}
		for i, e := range per {
			out[i] = txnErrorCode(e)
		}
		return out
	}
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 4
	if add {
		req.Version = 5
	}
	tr := kmsg.NewAddPartitionsToTxnRequestTransaction()
	tr.TransactionalID, tr.ProducerID, tr.ProducerEpoch, tr.VerifyOnly = id, pid, epoch, !add
	idx := map[string]int{}
	for _, tp := range parts {
		i, ok := idx[tp.Topic]
		if !ok {
			i = len(tr.Topics)
			idx[tp.Topic] = i
			tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
			tt.Topic = tp.Topic
			tr.Topics = append(tr.Topics, tt)
		}
		tr.Topics[i].Partitions = append(tr.Topics[i].Partitions, tp.Partition)
	}
	req.Transactions = append(req.Transactions, tr)
	rctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	kresp, err := b.cluster.Send(rctx, at.Node, req)
	if err != nil {
		b.log.Debug("transaction verification: coordinator unreachable", "node", at.Node, "transactional_id", id, "err", err)
		if errors.Is(err, context.DeadlineExceeded) {
			return fill(kerr.RequestTimedOut.Code)
		}
		return fill(kerr.NetworkException.Code)
	}
	resp := kresp.(*kmsg.AddPartitionsToTxnResponse)
	if resp.ErrorCode != 0 {
		if resp.ErrorCode == kerr.ClusterAuthorizationFailed.Code {
			return fill(kerr.InvalidTxnState.Code) // as Kafka: not the client's business
		}
		return fill(resp.ErrorCode)
	}
	byTP := map[txn.TopicPartition]int16{}
	for _, rt := range resp.Transactions {
		if rt.TransactionalID != id {
			continue
		}
		for _, t := range rt.Topics {
			for _, p := range t.Partitions {
				byTP[txn.TopicPartition{Topic: t.Topic, Partition: p.Partition}] = p.ErrorCode
			}
		}
	}
	for i, tp := range parts {
		code, ok := byTP[tp]
		if !ok {
			code = kerr.InvalidTxnState.Code // not answered: not verified
		}
		out[i] = code
	}
	return out
}
