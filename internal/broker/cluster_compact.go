package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/partition"
	"holdfast/internal/raft"
	"holdfast/internal/records"
	"holdfast/internal/storage"
)

// Replicated retention and DeleteRecords. A Raft log's front may move only
// through raft.Host.Compact, and every replica must end up with the same
// log start offset, although segment layouts and clocks differ between
// nodes. So the leader decides the new start (retention: its
// storage.RetentionPoint; DeleteRecords: the request) and proposes it as a
// "log start" marker batch into the partition's own Raft log. Once the
// marker is committed every replica, the leader included, finds it in its
// committed log and compacts to it. The marker sits above the offset it
// names, so it survives the compaction it causes, and a replica that was
// down or restarted finds it again.
//
// The marker is a non-transactional control batch (producer id -1) with a
// control record of type logStartControlType, version 0, value = the new
// start offset (int64, big endian). Kafka consumers skip control batches;
// Raft treats this type as data (its own types are 2, 0x4801, 0x4802);
// producer and transaction state ignore non-transactional control batches.

const logStartControlType = 0x4803

// compactEvery is how often each node looks for newly committed markers:
// the lag of a follower's log start behind the leader's.
const compactEvery = time.Second

// compactMu serializes Host.Compact calls (the DeleteRecords reply and the
// marker loop may both compact a group, and the anchors they journal must
// not interleave). Compaction is rare, so one lock for the process is fine.
var compactMu sync.Mutex

func init() { onStart(rankStorage+6, "replicated log start", (*Broker).startClusterCompact) }

func (b *Broker) startClusterCompact() error {
	if !b.clusterMode() {
		return nil
	}
	stop := goLoop(b.compactLoop)
	b.closers = append(b.closers, func() error { stop(); return nil })
	return nil
}

// logStartMarker builds the marker batch naming start.
func logStartMarker(start int64) ([]byte, error) {
	key := make([]byte, 4)
	binary.BigEndian.PutUint16(key[2:], logStartControlType)
	val := binary.BigEndian.AppendUint64(nil, uint64(start))
	return records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Control: true},
		[]records.Record{{Timestamp: time.Now().UnixMilli(), Key: key, Value: val}})
}

// markerTarget returns the start a marker batch names, ok=false if batch is
// not a marker.
func markerTarget(h records.Header, batch []byte) (int64, bool) {
	if !h.IsControl() || h.IsTransactional() || h.ProducerID != -1 || h.NumRecords != 1 {
		return 0, false
	}
	recs, err := records.Records(batch)
	if err != nil || len(recs) != 1 || len(recs[0].Key) < 4 || len(recs[0].Value) != 8 {
		return 0, false
	}
	if binary.BigEndian.Uint16(recs[0].Key[2:]) != logStartControlType {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(recs[0].Value)), true
}

// replicateLogStart moves p's log start to start on every replica: it
// proposes the marker on the leader (this node), waits for the commit, and
// compacts the local log. Followers compact when their loop finds the
// marker. Errors carry a kerr code.
func (b *Broker) replicateLogStart(ctx context.Context, p *partition.Partition, group uint64, start int64) error {
	batch, err := logStartMarker(start)
	if err != nil {
		return fmt.Errorf("%w: %w", kerr.UnknownServerError, err)
	}
	h := b.cluster.host
	prop, err := h.Propose(ctx, group, batch)
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
	if err := b.compactReplica(p, group, start); err != nil {
		return fmt.Errorf("%w: %w", kerr.KafkaStorageError, err)
	}
	return nil
}

// compactReplica cuts the local replica's log below start, if it is not
// already. start must be committed.
func (b *Broker) compactReplica(p *partition.Partition, group uint64, start int64) error {
	compactMu.Lock()
	defer compactMu.Unlock()
	// Never call Compact at or below the current start: the anchor would
	// be recomputed from an offset the index no longer holds.
	if start <= p.LogStartOffset() {
		return nil
	}
	if err := b.cluster.host.Compact(group, start); err != nil {
		return err
	}
	b.log.Info("log start moved", "topic", p.Topic(), "partition", p.Index(), "log_start_offset", p.LogStartOffset())
	return nil
}

// compactLoop applies committed markers on this node's replicas. cursors
// is the offset up to which each group's committed log was searched; after
// a restart each log is searched once from its start (headers only, apart
// from the markers themselves).
func (b *Broker) compactLoop(stop <-chan struct{}) {
	cursors := map[uint64]int64{}
	tick := time.NewTicker(compactEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		seen := map[uint64]bool{}
		for _, t := range b.meta.Topics() {
			for i := int32(0); i < t.Partitions; i++ {
				// In cluster mode every open partition is a replica. Its
				// group is named by the metadata, not read from the
				// partition, which may not have joined it yet.
				p := b.parts.Get(t.Name, i)
				if p == nil {
					continue
				}
				g := partitionGroup(t.ID, i)
				seen[g] = true
				next, err := b.applyMarkers(p, g, cursors[g])
				switch {
				case errors.Is(err, storage.ErrClosed), errors.Is(err, raft.ErrUnknownGroup):
				case err != nil:
					b.log.Warn("applying log start markers", "topic", t.Name, "partition", i, "err", err)
				}
				cursors[g] = next
			}
		}
		for g := range cursors {
			if !seen[g] {
				delete(cursors, g)
			}
		}
	}
}

// applyMarkers searches p's committed log in [from, commit) for markers and
// compacts to the highest start they name; it returns where it got to.
func (b *Broker) applyMarkers(p *partition.Partition, group uint64, from int64) (int64, error) {
	l := p.Log()
	hw, err := b.cluster.host.CommitOffset(group)
	if err != nil {
		return from, err
	}
	from = max(from, l.StartOffset())
	target := int64(-1)
	var hdr [records.HeaderSize]byte
	for from < hw {
		s, err := l.Read(from, hw, 1<<20)
		if errors.Is(err, storage.ErrOffsetOutOfRange) {
			// Compacted meanwhile (a snapshot install): start over at the start.
			if st := l.StartOffset(); st > from {
				from = st
				continue
			}
		}
		if err != nil {
			return from, err
		}
		if s.Size == 0 {
			s.Release()
			break
		}
		pos, end := s.Pos, s.Pos+int64(s.Size)
		for pos < end {
			if _, err := s.File.ReadAt(hdr[:], pos); err != nil {
				s.Release()
				return from, err
			}
			h, err := records.ParseHeader(hdr[:])
			if err != nil {
				s.Release()
				return from, err
			}
			if h.BaseOffset >= hw {
				break
			}
			if h.IsControl() && !h.IsTransactional() && h.ProducerID == -1 {
				batch := make([]byte, h.Size())
				if _, err := s.File.ReadAt(batch, pos); err != nil {
					s.Release()
					return from, err
				}
				if off, ok := markerTarget(h, batch); ok {
					target = max(target, off)
				}
			}
			pos += int64(h.Size())
			from = h.LastOffset() + 1
		}
		s.Release()
		if pos < end { // stopped at the watermark
			break
		}
	}
	if target > l.StartOffset() {
		if err := b.compactReplica(p, group, target); err != nil {
			return from, err
		}
	}
	return from, nil
}

// logStartErrorCode is the Kafka code an error of replicateLogStart
// carries (KAFKA_STORAGE_ERROR if none).
func logStartErrorCode(err error) int16 {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return kerr.KafkaStorageError.Code
}

// leadsGroup reports whether this node leads the Raft group and accepts
// proposals in it.
func (b *Broker) leadsGroup(group uint64) bool {
	l, err := b.cluster.host.Leadership(group)
	return err == nil && l.Proposing
}
