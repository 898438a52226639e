package replica

import (
	"context"
	"errors"
	"strings"
	"time"

	"holdfast/internal/partition"
	"holdfast/internal/storage"
	"holdfast/internal/topicconfig"
)

// retentionLoop applies retention.ms / retention.bytes to every open log
// every log.retention.check.interval.ms, as Kafka's log manager does.
func (m *Manager) retentionLoop(stop <-chan struct{}) {
	every := m.cfg.RetentionCheckInterval
	if every <= 0 {
		every = 5 * time.Minute
	}
	tick := m.clk.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			m.enforceRetention()
		}
	}
}

// enforceRetention runs one retention pass over every open partition of
// every topic whose cleanup.policy includes delete. A compact-only topic
// (__consumer_offsets) keeps its segments whatever their age: the log
// cleaner (cleaner.go) keeps it to the latest record per key instead.
func (m *Manager) enforceRetention() {
	for _, t := range m.meta.Topics() {
		if !cleanupDeletes(topicconfig.Value(m.cfg.LogDefaults, m.Dynamic().Under(t.Configs), "cleanup.policy")) {
			continue
		}
		if m.cfg.RemoteStorage && topicconfig.Value(m.cfg.LogDefaults, m.Dynamic().Under(t.Configs), "remote.storage.enable") == "true" {
			continue // tiered storage's (internal/tiered): never a segment not yet uploaded
		}
		for i := int32(0); i < t.Partitions; i++ {
			p := m.parts.Get(t.Name, i)
			if p == nil {
				continue
			}
			m.replicatedRetention(t.Name, p, Group(t.ID, i))
		}
	}
}

// cleanupDeletes reports whether a cleanup.policy list includes delete.
func cleanupDeletes(policy string) bool {
	for _, p := range strings.Split(policy, ",") {
		if strings.TrimSpace(p) == "delete" {
			return true
		}
	}
	return false
}

// replicatedRetention is retention on a Raft log: only the leader decides,
// from its own segments and clock, and replicates the new log start
// (logstart.go); followers never cut their logs by themselves.
func (m *Manager) replicatedRetention(topic string, p *partition.Partition, group uint64) {
	if !m.leadsGroup(group) {
		return
	}
	point, err := p.Log().RetentionPoint()
	if err != nil {
		if !errors.Is(err, storage.ErrClosed) {
			m.log.Warn("retention", "topic", topic, "partition", p.Index(), "err", err)
		}
		return
	}
	// Only committed offsets may be compacted away.
	commit, err := m.host.CommitOffset(group)
	if err != nil {
		return
	}
	point = min(point, commit)
	if point <= p.LogStartOffset() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.ReplicateLogStart(ctx, p, group, point); err != nil {
		m.log.Warn("retention", "topic", topic, "partition", p.Index(), "offset", point, "err", err)
		return
	}
	m.log.Info("retention moved the log start", "topic", topic, "partition", p.Index(), "log_start_offset", p.LogStartOffset())
}
