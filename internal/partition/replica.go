package partition

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/raft"
	"holdfast/internal/records"
)

// replica is a partition's replicated mode (cluster mode): the log is a
// Raft group's log. Appends on the leader become proposals, the high
// watermark is the Raft commit offset, and the leader epoch is the term.
type replica struct {
	host  *raft.Host
	group uint64

	// readyTerm is the term in which this node leads and has rebuilt its
	// producer and transaction state from the committed log (appendMu).
	readyTerm uint64

	mu      sync.Mutex
	pending map[int64]raft.Proposal // by end offset, until its waiter takes it
}

// maxPending bounds proposals nobody waits for (acks=0).
const maxPending = 4096

// Replicate turns p into a replica of Raft group id with the given voters
// (the partition's replica set). rejoin: this node's data for the
// partition was lost (a replaced disk): it catches up before it votes.
// Idempotent.
func (p *Partition) Replicate(h *raft.Host, group uint64, voters []uint64, rejoin bool) error {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if p.rep.Load() != nil {
		return nil
	}
	rep := &replica{host: h, group: group, pending: map[int64]raft.Proposal{}}
	// Consumers see only what Raft committed: start from the log start
	// and let the commit callback raise the watermark.
	p.hwMu.Lock()
	p.hw = p.log.StartOffset()
	p.hwMu.Unlock()
	if err := h.AddGroup(raft.GroupConfig{ID: group, Log: p.log, Voters: voters, OnCommit: p.onCommit, Rejoin: rejoin}); err != nil {
		return err
	}
	// Log-start commands committed before this start whose compaction may
	// not have happened yet: their start holds at once.
	if cmds, err := h.Commands(group, 0); err == nil {
		for _, c := range cmds {
			if start, ok := ParseLogStartCommand(c.Command); ok {
				p.raiseStart(start)
			}
		}
	}
	p.rep.Store(rep)
	if st, err := h.Status(group); err == nil {
		p.advance(st.CommitOffset)
	}
	return nil
}

// Replicated reports whether p is a Raft replica.
func (p *Partition) Replicated() bool { return p.rep.Load() != nil }

// RaftGroup is the partition's Raft group id (0 on a single node).
func (p *Partition) RaftGroup() uint64 {
	rep := p.rep.Load()
	if rep == nil {
		return 0
	}
	return rep.group
}

// onCommit runs on the Raft Ready loop: raise the log start a committed
// log-start command names (before the watermark, so no read sees the
// records it removed), the watermark and the epoch.
func (p *Partition) onCommit(_ uint64, ents []raft.Committed) {
	if len(ents) == 0 {
		return
	}
	for _, e := range ents {
		if start, ok := ParseLogStartCommand(e.Command); ok {
			p.raiseStart(start)
		}
	}
	last := ents[len(ents)-1]
	if t := int32(last.Term); t > p.epoch.Load() {
		p.epoch.Store(t)
	}
	p.advance(last.EndOffset)
}

// RaftStatus is the partition's Raft status on this node.
func (p *Partition) RaftStatus() (raft.Status, error) {
	rep := p.rep.Load()
	if rep == nil {
		return raft.Status{}, errors.New("partition: not replicated")
	}
	return rep.host.Status(rep.group)
}

// IsLeader reports whether this node may serve the partition: always on a
// single node; in a cluster when it is the Raft leader and has committed an
// entry of its term, so that its watermark and log start are current (a
// new leader learns what its predecessor committed only then).
func (p *Partition) IsLeader() bool {
	rep := p.rep.Load()
	if rep == nil {
		return true
	}
	l, err := rep.host.Leadership(rep.group)
	return err == nil && l.Settled
}

// InSyncReplicas counts the voters the leader currently hears from and
// that are being replicated to (itself included); 0 on a follower.
func (p *Partition) InSyncReplicas() int {
	rep := p.rep.Load()
	if rep == nil {
		return 1
	}
	return rep.host.InSync(rep.group)
}

var errNotLeader = fmt.Errorf("not the partition leader: %w", kerr.NotLeaderForPartition)

// leaderCheckLocked refuses appends on a follower, and on a new leader
// until everything earlier terms left in its log is committed: only then
// is the producer state (rebuilt here from the committed log) complete, so
// a retry of a batch written under the old leader is found as a duplicate.
// Called with appendMu held.
func (p *Partition) leaderCheckLocked() error {
	rep := p.rep.Load()
	l, err := rep.host.Leadership(rep.group)
	if err != nil {
		return fmt.Errorf("%w: %v", errNotLeader, err)
	}
	if !l.Leading {
		return errNotLeader
	}
	if rep.readyTerm == l.Term {
		return nil
	}
	commit, err := rep.host.CommitOffset(rep.group)
	if err != nil {
		return fmt.Errorf("%w: %v", errNotLeader, err)
	}
	end := p.log.EndOffset()
	if commit < end {
		return fmt.Errorf("new leader still committing earlier entries: %w", kerr.NotLeaderForPartition)
	}
	if err := p.rebuildLocked(); err != nil {
		return p.fail(err)
	}
	rep.readyTerm = l.Term
	p.lg.Debug("leading partition", "epoch", l.Term, "log_end_offset", end)
	return nil
}

// rebuildLocked recomputes producer and transaction state from the whole
// log. Cost: one scan per leadership change (follow-up: followers keep it
// up to date from committed entries and snapshots).
func (p *Partition) rebuildLocked() error {
	start := time.Now()
	p.producers = map[int64]*producer{}
	p.txnMu.Lock()
	p.txn = txnState{open: map[int64]int64{}}
	p.txnMu.Unlock()
	n := 0
	err := p.log.Scan(p.log.StartOffset(), func(h records.Header, batch []byte) error {
		n++
		if err := p.replayTxn(h, batch); err != nil {
			return err
		}
		lat := int64(-1)
		if h.LogAppendTime() {
			lat = h.MaxTimestamp
		}
		p.recordProducer(h, lat, h.MaxTimestamp)
		return nil
	})
	p.lg.Debug("rebuilt producer state for leadership", "batches", n, "producers", len(p.producers), "took", time.Since(start))
	return err
}

// proposeLocked is appendLocked in replicated mode.
func (p *Partition) proposeLocked(batch []byte) (int64, error) {
	rep := p.rep.Load()
	prop, err := rep.host.Propose(context.Background(), rep.group, batch)
	if err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return 0, errNotLeader
		}
		if errors.Is(err, raft.ErrProposalDropped) {
			return 0, fmt.Errorf("%v: %w", err, kerr.NotEnoughReplicas)
		}
		if verr := validationError(err); verr != err {
			return 0, verr
		}
		return 0, fmt.Errorf("%w: %w", kerr.NotLeaderForPartition, err)
	}
	// The host proposed a copy with offsets and epoch stamped; make the
	// caller's batch match, as a local append would.
	records.SetBaseOffset(batch, prop.BaseOffset)
	records.SetLeaderEpoch(batch, int32(prop.Term))
	rep.mu.Lock()
	rep.pending[prop.EndOffset] = prop
	if len(rep.pending) > maxPending {
		commit := p.HighWatermark()
		for end := range rep.pending {
			if end <= commit {
				delete(rep.pending, end)
			}
		}
	}
	rep.mu.Unlock()
	return prop.BaseOffset, nil
}

// waitReplicated is WaitCommitted in replicated mode: the batch ending at
// end is committed by a majority (each fsynced under flush=sync).
func (p *Partition) waitReplicated(ctx context.Context, end int64) error {
	rep := p.rep.Load()
	rep.mu.Lock()
	prop, ok := rep.pending[end]
	delete(rep.pending, end)
	rep.mu.Unlock()
	var err error
	if ok {
		err = rep.host.WaitCommitted(ctx, prop)
	} else {
		// A deduplicated retry: its original is in the log.
		err = rep.host.WaitCommitOffset(ctx, rep.group, end)
	}
	switch {
	case err == nil:
		p.advance(end)
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, raft.ErrProposalLost), errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrUnknownGroup), errors.Is(err, raft.ErrClosed):
		return fmt.Errorf("%v: %w", err, kerr.NotLeaderForPartition)
	}
	return p.fail(err)
}

// WaitLocal waits until every offset below end is on this node's disk
// (acks=1 in a cluster: the leader's local durability only). It waits for
// the Raft host to store the proposal (an event, not a poll); a retry whose
// original is already in the log waits for the log's durable offset.
func (p *Partition) WaitLocal(ctx context.Context, end int64) error {
	rep := p.rep.Load()
	if rep == nil || !p.syncMode() {
		return p.WaitCommitted(ctx, end)
	}
	rep.mu.Lock()
	prop, ok := rep.pending[end]
	delete(rep.pending, end)
	rep.mu.Unlock()
	var err error
	if ok {
		err = rep.host.WaitLocal(ctx, prop)
	} else {
		err = p.log.WaitDurable(ctx, end)
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("%v: %w", err, kerr.NotLeaderForPartition)
}

// A log-start command moves the start of every replica's log to one
// offset (retention, DeleteRecords): u8 kind 1 | i64 start, big endian. It
// is a Raft command (a side entry), so it takes no Kafka offset. Each
// replica's log start holds from the moment the command is committed
// there; the segments below it are deleted after (the broker's compaction
// loop).
const cmdLogStart = 1

// LogStartCommand is the command naming start.
func LogStartCommand(start int64) []byte {
	return binary.BigEndian.AppendUint64([]byte{cmdLogStart}, uint64(start))
}

// ParseLogStartCommand returns the start a command names, ok=false if cmd
// is not a log-start command.
func ParseLogStartCommand(cmd []byte) (int64, bool) {
	if len(cmd) != 9 || cmd[0] != cmdLogStart {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(cmd[1:])), true
}

// raiseStart moves the partition's log start to start (no lower).
func (p *Partition) raiseStart(start int64) {
	for {
		cur := p.minStart.Load()
		if start <= cur || p.minStart.CompareAndSwap(cur, start) {
			return
		}
	}
}

// CleanLimits bounds a log cleaning pass on p (storage.CleanOptions):
// committed is the high watermark (only committed batches change; a Raft
// log's uncommitted suffix may still be truncated); keepEmpty says every
// batch must stay (a Raft log: batch i is entry i); tombstones and
// transaction markers may be removed below removeBelow only. On a Raft
// leader that is the least offset every replica has stored: a replica
// still missing a tombstone may hold an older value of its key, and must
// get the tombstone before it can be gone anywhere (a replica caught up
// from the leader later gets neither). A follower removes none: it cannot
// know what the others have.
func (p *Partition) CleanLimits() (committed int64, keepEmpty bool, removeBelow int64) {
	committed = p.HighWatermark()
	rep := p.rep.Load()
	if rep == nil {
		return committed, false, math.MaxInt64
	}
	st, err := rep.host.Status(rep.group)
	if err != nil || st.State != "StateLeader" {
		return committed, true, 0
	}
	matched := map[uint64]int64{}
	for _, r := range st.Replicas {
		matched[r.ID] = r.MatchOffset
	}
	if st.Node != 0 {
		matched[st.Node] = min(st.DurableOffset, committed)
	}
	removeBelow = committed
	for _, ids := range [][]uint64{st.Voters, st.Learners} {
		for _, id := range ids {
			m, ok := matched[id]
			if !ok {
				return committed, true, 0
			}
			removeBelow = min(removeBelow, m)
		}
	}
	return committed, true, removeBelow
}
