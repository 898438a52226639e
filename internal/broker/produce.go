package broker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/bufref"
	"holdfast/internal/partition"
	"holdfast/internal/records"
	"holdfast/internal/wire"
)

// Produce v3+ carries record batch v2 only. v12 (KIP-890 part 2): under
// transaction.version 2 a transactional batch adds its partition to the
// producer's transaction (txnverify.go); clients only send v12 for
// transactions when the feature is finalized at 2. v13 names topics by id
// (KIP-516); an id no topic has is UNKNOWN_TOPIC_ID.

// committedWait is one appended batch whose acknowledgement waits for it to
// be committed.
type committedWait struct {
	p      *partition.Partition
	end    int64 // every offset below end must be committed
	ti, pi int   // the response entry
	local  bool  // acks=1: the leader's own disk is enough
	// res is the append's result: a duplicate's original is confirmed
	// once committed (partition.ConfirmStored).
	res partition.AppendResult
}

// handleProduce appends in Handle (so appends from one connection keep
// their order) and waits for durability in the Reply. On a single node
// acks=1 and acks=-1 both wait for the fsync under flush=sync: "on the
// leader's disk" and "on every in-sync replica's disk" are the same disk.
func (b *Broker) handleProduce(ctx context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	c := &produceCall{
		req:       req,
		r:         r,
		unknownID: b.resolveProduceTopicIDs(req),
		acksOK:    req.Acks == -1 || req.Acks == 0 || req.Acks == 1,
		// A transactional producer needs WRITE on its transactional id, and
		// every producer WRITE on the topic (which implies idempotent writes).
		txnDenied: req.TransactionID != nil && !b.authorize(r, auth.OpWrite, auth.ResourceTransactionalID, *req.TransactionID),
	}
	// The batches are proposed to Raft as they lie in the request's frame
	// (no copy): the Raft host holds a reference to the frame for as long
	// as it may read them (raft.Host.ProposeOwned), so the frame goes back
	// to the pool once the reply is written and Raft let go.
	c.frame = r.FrameRef()
	r.RecycleFrame()
	// KIP-890: transactional batches are verified with their transaction
	// coordinator first (txnverify.go).
	c.verify = make([][]int16, len(req.Topics))
	for ti, rt := range req.Topics {
		c.verify[ti] = make([]int16, len(rt.Partitions))
	}
	if c.acksOK {
		b.verifyProduce(ctx, req, c.verify)
	}
	for ti := range req.Topics {
		resp.Topics = append(resp.Topics, b.produceTopic(c, ti))
	}
	if req.Acks == 0 {
		// Nobody reads a response to acks=0, so none is written.
		return func(context.Context) kmsg.Response { return nil }
	}
	listener := b.listenerName(r)
	if len(c.waits) == 0 && len(c.moving) == 0 {
		b.produceLeaderHints(req.Version, resp, listener)
		return wire.Respond(resp)
	}
	return b.awaitProduced(c, resp, listener)
}

// produceCall is one Produce request in handleProduce: what is decided
// once for the whole request, and what its answer waits for.
type produceCall struct {
	req       *kmsg.ProduceRequest
	r         *wire.Request
	frame     *bufref.Ref // the request's frame, which the batches lie in
	unknownID []bool      // v13: by topic index, the id names no topic
	acksOK    bool
	txnDenied bool
	verify    [][]int16 // KIP-890 verification's error, by topic and partition index
	waits     []committedWait
	// moving: partitions answered NOT_LEADER_OR_FOLLOWER, whose hint may
	// wait for a leadership on the move (Produce v10+).
	moving []*partition.Partition
}

// resolveProduceTopicIDs names the topics of a v13+ request (KIP-516) and
// reports, by topic index, the ids that name no topic (nil below v13).
func (b *Broker) resolveProduceTopicIDs(req *kmsg.ProduceRequest) []bool {
	if req.Version < 13 {
		return nil
	}
	unknownID := make([]bool, len(req.Topics))
	for ti := range req.Topics {
		if t, ok := b.meta.TopicHeaderByID(req.Topics[ti].TopicID); ok {
			req.Topics[ti].Topic = t.Name
		} else {
			req.Topics[ti].Topic, unknownID[ti] = "", true
		}
	}
	return unknownID
}

// produceTopic appends the batches of topic ti of c's request and answers
// each partition, adding what must be waited for to c.
func (b *Broker) produceTopic(c *produceCall, ti int) kmsg.ProduceResponseTopic {
	rt := &c.req.Topics[ti]
	st := kmsg.NewProduceResponseTopic()
	st.Topic, st.TopicID = rt.Topic, rt.TopicID
	idKnown := c.unknownID == nil || !c.unknownID[ti]
	t, topicOK := b.meta.TopicHeader(rt.Topic) // its settings only
	topicOK = topicOK && idKnown
	pt := produceTopicState{
		ok:     topicOK,
		denied: !c.txnDenied && idKnown && !b.authorize(c.r, auth.OpWrite, auth.ResourceTopic, rt.Topic),
	}
	// The topic's settings once per topic, not per partition: a request
	// for 1,000 partitions of one topic carries 1,000 batches.
	if topicOK {
		pt.logAppendTime, pt.minInsync = b.topicLogAppendTime(t), b.topicMinInsyncReplicas(t)
	}
	st.Partitions = make([]kmsg.ProduceResponseTopicPartition, 0, len(rt.Partitions))
	for pi := range rt.Partitions {
		st.Partitions = append(st.Partitions, b.producePartition(c, pt, ti, pi))
	}
	return st
}

// produceTopicState is what produceTopic settles once for a topic.
type produceTopicState struct {
	ok, denied    bool
	logAppendTime bool
	minInsync     int32
}

// producePartition answers partition pi of topic ti: refused, or appended
// (the wait for its durability added to c).
func (b *Broker) producePartition(c *produceCall, pt produceTopicState, ti, pi int) kmsg.ProduceResponseTopicPartition {
	req, rt := c.req, &c.req.Topics[ti]
	rp := &rt.Partitions[pi]
	sp := kmsg.NewProduceResponseTopicPartition()
	sp.Partition = rp.Partition
	sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = -1, -1, -1
	var p *partition.Partition
	missing := kerr.UnknownTopicOrPartition.Code
	if c.unknownID != nil && c.unknownID[ti] {
		missing = kerr.UnknownTopicID.Code
	}
	if pt.ok {
		p, missing = b.replicas.Lookup(rt.Topic, rp.Partition)
	}
	switch {
	case c.txnDenied:
		sp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
	case pt.denied:
		sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
	case !c.acksOK:
		sp.ErrorCode = kerr.InvalidRequiredAcks.Code
	case p == nil:
		sp.ErrorCode = missing
	case p.Failed() != nil:
		// This replica's storage failed (repair.go brings it back
		// if another replica can supply the data).
		sp.ErrorCode = kerr.KafkaStorageError.Code
	case !p.IsLeader():
		sp.ErrorCode = kerr.NotLeaderForPartition.Code
	case req.Acks == -1 && pt.minInsync > 1 && int32(b.inSyncReplicas(p, pt.minInsync)) < pt.minInsync:
		// Kafka refuses before appending when the ISR is smaller than
		// min.insync.replicas. The leader counts itself, so
		// min.insync.replicas=1 needs no count (which locks the
		// partition's Raft group).
		sp.ErrorCode = kerr.NotEnoughReplicas.Code
	case c.verify[ti][pi] != 0:
		sp.ErrorCode = c.verify[ti][pi]
		msg := "transactional batch refused by the transaction coordinator's verification (KIP-890)"
		sp.ErrorMessage = &msg
	default:
		p.SetLogAppendTime(pt.logAppendTime)
		res, err := b.produceOne(p, rp.Records, c.frame, &sp)
		if err == nil && req.Acks != 0 {
			c.waits = append(c.waits, committedWait{p: p, end: res.LastOffset + 1, ti: ti, pi: pi, local: req.Acks == 1, res: res})
		}
	}
	if p != nil && sp.ErrorCode == kerr.NotLeaderForPartition.Code && req.Version >= 10 {
		c.moving = append(c.moving, p)
	}
	return sp
}

// awaitProduced is the Reply of a Produce request whose answer waits: for
// the leaderships on the move to settle (to name the new leaders) and for
// each appended batch to be durable, within the request's timeout.
func (b *Broker) awaitProduced(c *produceCall, resp *kmsg.ProduceResponse, listener string) wire.Reply {
	timeout := time.Duration(c.req.TimeoutMillis) * time.Millisecond
	return func(ctx context.Context) kmsg.Response {
		wctx := ctx
		if timeout > 0 {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		// Refused for leadership while it moves (a transfer under way: a
		// controlled shutdown, a preferred-leader election) or while
		// nobody leads: the answer waits until this node knows the new
		// leader, to name it (KIP-951), at most two election timeouts.
		var moved sync.WaitGroup
		for _, p := range c.moving {
			moved.Go(func() { b.cluster.Host().AwaitSuccessor(wctx, p.RaftGroup()) })
		}
		moved.Wait()
		for _, w := range c.waits {
			err := w.await(wctx)
			if err == nil {
				continue
			}
			if ctx.Err() != nil {
				return resp // the connection is gone; nothing is written
			}
			sp := &resp.Topics[w.ti].Partitions[w.pi]
			sp.ErrorCode = b.durabilityErrorCode(w, err)
			sp.BaseOffset, sp.LogAppendTime = -1, -1
		}
		b.produceLeaderHints(c.req.Version, resp, listener)
		return resp
	}
}

// await waits until w's batch is durable as its acks ask and confirms it
// stored (a duplicate's original).
func (w committedWait) await(ctx context.Context) error {
	var err error
	if w.local {
		err = w.p.WaitLocal(ctx, w.end)
	} else {
		err = w.p.WaitCommitted(ctx, w.end)
	}
	if err == nil {
		err = w.p.ConfirmStored(w.res)
	}
	return err
}

// durabilityErrorCode is the partition's answer when waiting for w's
// batch to be durable failed with err.
func (b *Broker) durabilityErrorCode(w committedWait, err error) int16 {
	var ke *kerr.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		// Appended but not yet durable: the producer retries, and
		// the idempotent check answers the retry with these offsets.
		return kerr.RequestTimedOut.Code
	case errors.As(err, &ke):
		// Lost leadership before the commit (NOT_LEADER_OR_FOLLOWER):
		// retriable; an idempotent retry is deduplicated.
		return ke.Code
	default:
		b.log.Error("produce: waiting for durability", "topic", w.p.Topic(), "partition", w.p.Index(), "err", err)
		return kerr.KafkaStorageError.Code
	}
}

// produceOne appends one partition's records and fills sp.
func (b *Broker) produceOne(p *partition.Partition, recs []byte, frame *bufref.Ref, sp *kmsg.ProduceResponseTopicPartition) (partition.AppendResult, error) {
	// v3+ carries exactly one batch per partition (Kafka refuses more, and
	// so do we: one batch is one unit of deduplication and of atomicity).
	batch, rest, err := records.Next(recs)
	if err == nil && len(rest) != 0 {
		err = errInvalidRecord
	}
	if err == nil {
		var res partition.AppendResult
		res, err = p.AppendOwned(batch, frame)
		if err == nil {
			sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = res.BaseOffset, res.LogAppendTime, res.LogStartOffset
			return res, nil
		}
	}
	if len(recs) == 0 {
		err = errInvalidRecord
	}
	code := produceErrorCode(err)
	sp.ErrorCode = code
	msg := err.Error()
	sp.ErrorMessage = &msg
	var ire *partition.InvalidRecordError
	if errors.As(err, &ire) {
		for _, i := range ire.Indexes {
			er := kmsg.NewProduceResponseTopicPartitionErrorRecord()
			er.RelativeOffset, er.ErrorMessage = i, &ire.Reason
			sp.ErrorRecords = append(sp.ErrorRecords, er)
		}
	}
	sp.LogStartOffset = p.LogStartOffset()
	if code == kerr.KafkaStorageError.Code || code == kerr.UnknownServerError.Code {
		b.log.Error("produce failed", "topic", p.Topic(), "partition", p.Index(), "err", err)
	} else {
		b.log.Debug("produce refused", "topic", p.Topic(), "partition", p.Index(), "err", err)
	}
	return partition.AppendResult{}, err
}

var errInvalidRecord = errors.Join(kerr.InvalidRecord, errors.New("produce v3+ needs exactly one record batch per partition"))

// produceErrorCode maps an append error to its Kafka code.
func produceErrorCode(err error) int16 {
	var ke *kerr.Error
	switch {
	case errors.As(err, &ke):
		return ke.Code
	case errors.Is(err, records.ErrUnsupportedMagic):
		return kerr.UnsupportedForMessageFormat.Code
	case errors.Is(err, records.ErrCorrupt), errors.Is(err, records.ErrTruncated):
		return kerr.CorruptMessage.Code
	case errors.Is(err, records.ErrTooLarge):
		return kerr.MessageTooLarge.Code
	case errors.Is(err, partition.ErrStorage):
		return kerr.KafkaStorageError.Code
	}
	return kerr.UnknownServerError.Code
}

// inSyncReplicas is the size of the ISR of p, which this node leads: the
// replicas caught up within replica.lag.time.max.ms (raft.Host.InSyncVoters)
// that the controller has not fenced - Kafka's controller takes a fenced
// broker out of every ISR at once, where the lag would keep a killed
// follower in for 30 s. The leader counts itself.
//
// An acknowledgement waits for the Raft commit, a majority of the voters.
// Kafka's acks=all waits for every ISR member instead, so where
// min.insync.replicas asks for more than a majority (RF=3 with 3) the lag
// alone would let a follower killed a moment ago count for up to the
// fencing timeout while records are acknowledged on a majority. There a
// replica counts only if it was also heard from within an election
// timeout (raft.ReplicaStatus.Active), as before the lag rule: refused
// with NOT_ENOUGH_REPLICAS rather than acknowledged on fewer copies.
func (b *Broker) inSyncReplicas(p *partition.Partition, minInsync int32) int {
	host := b.cluster.Host()
	if minInsync > 2 {
		if st, err := host.Status(p.RaftGroup()); err == nil {
			voters := 0
			for _, r := range st.Replicas {
				if !r.Learner {
					voters++
				}
			}
			if int(minInsync) > voters/2+1 {
				n := 0
				for _, r := range st.Replicas {
					if !r.Learner && r.InSync && r.Active && (int32(r.ID) == b.cfg.NodeID || !b.meta.Fenced(int32(r.ID))) {
						n++
					}
				}
				return n
			}
		}
	}
	var buf [8]uint64
	ids, _ := host.InSyncVoters(p.RaftGroup(), buf[:0])
	n := 0
	for _, id := range ids {
		if int32(id) == b.cfg.NodeID || !b.meta.Fenced(int32(id)) {
			n++
		}
	}
	return n
}
