package group

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/records"
)

// Transactional offset commits (KIP-98, KIP-447). TxnOffsetCommit writes the
// offsets to the group's partition as a transactional batch of the
// producer; they stay pending, invisible to OffsetFetch, until the
// transaction coordinator's marker lands in that partition: a commit marker
// makes them the group's committed offsets, an abort drops them. Replay
// does the same from the log, so a restart neither loses a committed
// transaction's offsets nor applies an aborted one's.

// TxnLog is the optional part of Log that transactional offset commits
// need: an append of a coordinator-written transactional batch.
type TxnLog interface {
	AppendTxn(batch []byte) (end int64, err error)
}

// pendingTxn: producer id -> group -> offsets waiting for the marker.
type pendingTxn map[int64]map[string]map[topicPartition]offset

func (pt pendingTxn) add(pid int64, group string, tp topicPartition, o offset) {
	if pt[pid] == nil {
		pt[pid] = map[string]map[topicPartition]offset{}
	}
	if pt[pid][group] == nil {
		pt[pid][group] = map[topicPartition]offset{}
	}
	pt[pid][group][tp] = o
}

// TxnOffsetCommit handles a TxnOffsetCommit whose producer the transaction
// coordinator has already checked (id, epoch, AddOffsetsToTxn done).
func (c *Coordinator) TxnOffsetCommit(req *kmsg.TxnOffsetCommitRequest) Reply {
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	setAll := func(code int16) Reply {
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				resp.Topics[i].Partitions[j].ErrorCode = code
			}
		}
		return respond(resp)
	}
	if code := c.admit(req.Group); code != 0 {
		return setAll(code)
	}
	log := c.logs[c.partition(req.Group)]
	tl, ok := log.(TxnLog)
	if !ok {
		return setAll(kerr.CoordinatorNotAvailable.Code)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return setAll(kerr.CoordinatorNotAvailable.Code)
	}
	now := c.opts.Now()
	g := c.groups[req.Group]
	if g != nil && g.consumer != nil {
		// KIP-848 groups fence with the member epoch.
		if code := g.validateConsumerTxnCommit(req.Generation, req.MemberID); code != 0 {
			return setAll(code)
		}
	} else if g != nil {
		// KIP-447: a zombie member of an old generation is fenced here.
		switch {
		case g.state == Dead:
			return setAll(kerr.CoordinatorNotAvailable.Code)
		case req.InstanceID != nil && g.fenced(req.InstanceID, req.MemberID):
			return setAll(kerr.FencedInstanceID.Code)
		case req.MemberID != "" && g.members[req.MemberID] == nil:
			return setAll(kerr.UnknownMemberID.Code)
		case req.Generation >= 0 && req.Generation != g.generation:
			return setAll(kerr.IllegalGeneration.Code)
		}
	} else if req.Generation >= 0 {
		return setAll(kerr.IllegalGeneration.Code)
	}

	type target struct {
		i, j int
		tp   topicPartition
		o    offset
	}
	var targets []target
	var recs []records.Record
	for i, t := range req.Topics {
		n := c.opts.Partitions(t.Topic)
		for j, p := range t.Partitions {
			rp := &resp.Topics[i].Partitions[j]
			epoch := p.LeaderEpoch
			if req.Version < 2 {
				epoch = -1
			}
			o, code := c.commitOffset(n, p.Partition, p.Offset, epoch, p.Metadata, now)
			if rp.ErrorCode = code; code != 0 {
				continue
			}
			tp := topicPartition{t.Topic, p.Partition}
			targets = append(targets, target{i, j, tp, o})
			recs = append(recs, records.Record{Timestamp: now.UnixMilli(), Key: offsetKey(req.Group, tp), Value: offsetValue(o)})
		}
	}
	if len(recs) == 0 {
		return respond(resp)
	}
	batch, err := records.Build(records.Batch{ProducerID: req.ProducerID, ProducerEpoch: req.ProducerEpoch,
		BaseSequence: -1, Transactional: true}, recs)
	var end int64
	if err == nil {
		end, err = tl.AppendTxn(batch)
	}
	if err != nil {
		code := kerr.CoordinatorNotAvailable.Code
		var ke *kerr.Error
		switch {
		case errors.Is(err, records.ErrTooLarge):
			code = kerr.InvalidCommitOffsetSize.Code
		case errors.As(err, &ke) && (ke == kerr.ProducerFenced || ke == kerr.InvalidProducerEpoch):
			code = kerr.InvalidProducerEpoch.Code
		case errors.As(err, &ke) && ke == kerr.InvalidTxnState:
			code = ke.Code // the partition's KIP-890 check: not in the transaction (any more)
		}
		c.log.Warn("writing transactional offsets failed", "group", req.Group, "producer_id", req.ProducerID, "err", err)
		for _, t := range targets {
			resp.Topics[t.i].Partitions[t.j].ErrorCode = code
		}
		return respond(resp)
	}
	if c.txn == nil {
		c.txn = pendingTxn{}
	}
	for _, t := range targets {
		c.txn.add(req.ProducerID, req.Group, t.tp, t.o)
	}
	return func(ctx context.Context) kmsg.Response {
		if err := log.WaitCommitted(ctx, end); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			for _, t := range targets {
				resp.Topics[t.i].Partitions[t.j].ErrorCode = kerr.CoordinatorNotAvailable.Code
			}
		}
		return resp
	}
}

// CompleteTxn applies the marker the transaction coordinator wrote to
// __consumer_offsets partition p for producerID: on commit the producer's
// pending offsets of every group in p become committed, on abort they go.
// Call it after the marker is appended.
func (c *Coordinator) CompleteTxn(p int32, producerID int64, commit bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.applyTxnMarker(c.txn, p, producerID, commit, func(group string) map[topicPartition]offset {
		g := c.groups[group]
		if g == nil {
			g = newGroup(group, c.opts.Now())
			c.groups[group] = g
		}
		return g.offsets
	})
}

// applyTxnMarker moves or drops pending offsets of pid for the groups owned
// by partition p; dst returns a group's committed-offset map.
func (c *Coordinator) applyTxnMarker(pt pendingTxn, p int32, pid int64, commit bool, dst func(group string) map[topicPartition]offset) {
	groups := pt[pid]
	for name, offs := range groups {
		if c.partition(name) != p {
			continue
		}
		if commit {
			m := dst(name)
			for tp, o := range offs {
				m[tp] = o
			}
		}
		delete(groups, name)
	}
	if len(groups) == 0 {
		delete(pt, pid)
	}
}

// Loaded reports whether __consumer_offsets partition p has been replayed.
func (c *Coordinator) Loaded(p int32) bool { return c.loaded[p].Load() }

// HasPendingTxn reports whether group has transactional offsets waiting for
// a marker (OffsetFetch RequireStable answers UNSTABLE_OFFSET_COMMIT then).
func (c *Coordinator) HasPendingTxn(group string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, groups := range c.txn {
		if len(groups[group]) > 0 {
			return true
		}
	}
	return false
}

// pendingTxnPartitions returns the partitions of group with transactional
// offsets awaiting their marker (nil if none).
func (c *Coordinator) pendingTxnPartitions(group string) map[topicPartition]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out map[topicPartition]bool
	for _, groups := range c.txn {
		for tp := range groups[group] {
			if out == nil {
				out = map[topicPartition]bool{}
			}
			out[tp] = true
		}
	}
	return out
}

// replayTxnBatch applies a transactional or control batch of partition p
// during replay: offsets into pending, markers from pending into offsets.
func (c *Coordinator) replayTxnBatch(p int32, h records.Header, batch []byte, pending pendingTxn, offsets map[string]map[topicPartition]offset) error {
	recs, err := records.Records(batch)
	if err != nil {
		return err
	}
	if h.IsControl() {
		if len(recs) == 0 || len(recs[0].Key) < 4 {
			return nil
		}
		switch kmsg.ControlRecordKeyType(binary.BigEndian.Uint16(recs[0].Key[2:])) {
		case kmsg.ControlRecordKeyTypeCommit:
			c.applyTxnMarker(pending, p, h.ProducerID, true, func(group string) map[topicPartition]offset {
				if offsets[group] == nil {
					offsets[group] = map[topicPartition]offset{}
				}
				return offsets[group]
			})
		case kmsg.ControlRecordKeyTypeAbort:
			c.applyTxnMarker(pending, p, h.ProducerID, false, nil)
		}
		return nil
	}
	for _, r := range recs {
		if len(r.Key) < 2 {
			return fmt.Errorf("offset %d: key of %d bytes", r.Offset, len(r.Key))
		}
		if v := int16(binary.BigEndian.Uint16(r.Key)); v != 0 && v != 1 {
			continue // only offset commits are transactional
		}
		var k kmsg.OffsetCommitKey
		if err := k.ReadFrom(r.Key); err != nil {
			return fmt.Errorf("offset %d: offset key: %w", r.Offset, err)
		}
		var v kmsg.OffsetCommitValue
		if r.Value == nil || v.ReadFrom(r.Value) != nil {
			continue
		}
		epoch := v.LeaderEpoch
		if v.Version < 3 {
			epoch = -1
		}
		pending.add(h.ProducerID, k.Group, topicPartition{k.Topic, k.Partition},
			offset{offset: v.Offset, leaderEpoch: epoch, metadata: v.Metadata, commitTime: time.UnixMilli(v.CommitTimestamp)})
	}
	return nil
}

// keepPending stores what replay left pending (open transactions) for the
// markers still to come. Called with mu held.
func (c *Coordinator) keepPending(pending pendingTxn) {
	if len(pending) == 0 {
		return
	}
	if c.txn == nil {
		c.txn = pendingTxn{}
	}
	for pid, groups := range pending {
		for name, offs := range groups {
			for tp, o := range offs {
				c.txn.add(pid, name, tp, o)
			}
		}
	}
}
