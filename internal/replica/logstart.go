package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/partition"
	"holdfast/internal/raft"
	"holdfast/internal/storage"
)

// Replicated retention and DeleteRecords. A Raft log's front may move only
// through raft.Host.Compact, and every replica must end up with the same
// log start offset, although segment layouts and clocks differ between
// nodes. So the leader decides the new start (retention: its
// storage.RetentionPoint; DeleteRecords: the request) and proposes it as a
// "log start" command into the partition's own Raft group. A command is a
// Raft side entry: it takes no Kafka offset and never reaches the partition
// log or a client. Once it is committed every replica, the leader included,
// finds it among the group's committed commands and compacts to it. The
// command sits above the offset it names, so it survives the compaction it
// causes, and a replica that was down or restarted finds it again.
//
// The command and its effect on reads are the partition's
// (partition.LogStartCommand): a replica's log start holds as soon as the
// command is committed there; this file deletes the segments below it.

// compactEvery is how often each node looks for newly committed commands:
// the lag of a follower's log start behind the leader's.
const compactEvery = time.Second

// compactFullEvery: compactLoop's walk when no log start was raised.
const compactFullEvery = time.Minute

// ReplicateLogStart moves p's log start to start on every replica: it
// proposes the command on the leader (this node), waits for the commit, and
// compacts the local log. Followers compact when their loop finds the
// command. Errors carry a kerr code.
func (m *Manager) ReplicateLogStart(ctx context.Context, p *partition.Partition, group uint64, start int64) error {
	h := m.host
	prop, err := h.ProposeCommand(ctx, group, partition.LogStartCommand(start))
	if err != nil {
		if errors.Is(err, raft.ErrProposalDropped) {
			return fmt.Errorf("%w: %w", kerr.NotEnoughReplicas, err)
		}
		return fmt.Errorf("%w: %w", kerr.NotLeaderForPartition, err)
	}
	if err := h.WaitCommitted(ctx, prop); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", kerr.RequestTimedOut, err)
		}
		return fmt.Errorf("%w: %w", kerr.NotLeaderForPartition, err)
	}
	if err := m.compactReplica(p, group, start); err != nil {
		return fmt.Errorf("%w: %w", kerr.KafkaStorageError, err)
	}
	return nil
}

// compactReplica cuts the local replica's log below start, if it is not
// already. start must be committed.
func (m *Manager) compactReplica(p *partition.Partition, group uint64, start int64) error {
	m.compactMu.Lock()
	defer m.compactMu.Unlock()
	// Never call Compact at or below the current start: the anchor would
	// be recomputed from an offset the index no longer holds.
	if start <= p.Log().StartOffset() {
		return nil
	}
	if err := m.host.Compact(group, start); err != nil {
		return err
	}
	m.log.Info("log start moved", "topic", p.Topic(), "partition", p.Index(), "log_start_offset", p.LogStartOffset())
	return nil
}

// compactLoop applies committed log-start commands on this node's
// replicas. The partition raises its log start (partition.LogStartOffset)
// as each command commits (and, after a restart, from every command its
// group still holds), without waiting for the segments to go; this loop
// deletes them: a replica whose committed start is above its log's start
// is compacted to it. It walks the replicas only when a log start was
// raised since its last pass (partition.Manager.LogStartRaises) or that
// pass left one to retry, and every compactFullEvery as a backstop (a
// log whose own start moved, as a snapshot install moves it): an idle node
// with 10,000 partitions walked them all every second for nothing.
func (m *Manager) compactLoop(stop <-chan struct{}) {
	tick := m.clk.NewTicker(compactEvery)
	defer tick.Stop()
	var seen uint64
	retry := true // the first pass looks at every replica
	last := m.clk.Now()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		raised := m.parts.LogStartRaises() // before the walk: a raise during it is seen next time
		if raised == seen && !retry && m.clk.Now().Sub(last) < compactFullEvery {
			continue
		}
		seen, retry, last = raised, false, m.clk.Now()
		for _, p := range m.parts.Partitions("") {
			done, err := m.applyLogStart(p)
			switch {
			case err == nil:
				retry = retry || !done
			case errors.Is(err, storage.ErrClosed), errors.Is(err, raft.ErrUnknownGroup):
			default:
				retry = true
				m.log.Warn("applying log start commands", "topic", p.Topic(), "partition", p.Index(), "err", err)
			}
		}
	}
}

// applyLogStart compacts p to the start its committed log-start commands
// name, if its log still begins below it; done is false if that has to
// wait for a later pass.
func (m *Manager) applyLogStart(p *partition.Partition) (done bool, err error) {
	target := p.LogStartOffset() // the commands' start, or the log's own
	if target <= p.Log().StartOffset() {
		return true, nil
	}
	// The partition learns of a command on the Ready loop just before the
	// host counts it committed (raft.GroupConfig.OnCommit): until then
	// Compact would refuse the offset, so wait for the next pass.
	if commit, err := m.host.CommitOffset(p.RaftGroup()); err != nil || target > commit {
		return false, err
	}
	return true, m.compactReplica(p, p.RaftGroup(), target)
}

// leadsGroup reports whether this node leads the Raft group and accepts
// proposals in it.
func (m *Manager) leadsGroup(group uint64) bool {
	l, err := m.host.Leadership(group)
	return err == nil && l.Proposing
}
