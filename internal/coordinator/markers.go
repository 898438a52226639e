package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/metadata"
	"holdfast/internal/partition"
	"holdfast/internal/txn"
)

// writeMarkersEverywhere writes a transaction's markers on each
// partition's leader: locally for the partitions this node leads, with
// WriteTxnMarkers to the others' leaders (as Kafka's coordinator does).
func (h *Host) writeMarkersEverywhere(ctx context.Context, pid int64, epoch int16, commit bool, parts []txn.TopicPartition) error {
	byLeader := map[int32][]txn.TopicPartition{}
	for _, tp := range parts {
		t, ok := h.meta.Topic(tp.Topic)
		if !ok {
			h.log.Warn("transaction marker skipped: topic gone", "topic", tp.Topic, "partition", tp.Partition, "producer_id", pid)
			continue
		}
		st := h.replicas.State(t, tp.Partition)
		if st.Err != 0 || st.Leader < 0 {
			return fmt.Errorf("marker to %s-%d: no leader: %w", tp.Topic, tp.Partition, kerr.ErrorForCode(st.Err))
		}
		byLeader[st.Leader] = append(byLeader[st.Leader], tp)
	}
	var errs []error
	for leader, tps := range byLeader {
		if leader == h.cfg.NodeID {
			errs = append(errs, h.WriteMarkers(ctx, pid, epoch, commit, tps))
			continue
		}
		errs = append(errs, h.sendMarkers(ctx, leader, pid, epoch, commit, tps))
	}
	return errors.Join(errs...)
}

// WriteMarkers appends a transaction's markers to each of its partitions
// on this node and waits until they are committed. A partition of
// __consumer_offsets also gets the group coordinator to apply or drop the
// pending offsets.
func (h *Host) WriteMarkers(ctx context.Context, pid int64, epoch int16, commit bool, parts []txn.TopicPartition) error {
	type wait struct {
		p   *partition.Partition
		end int64
	}
	var waits []wait
	for _, tp := range parts {
		p := h.replicas.Get(tp.Topic, tp.Partition)
		if p == nil {
			// Deleted since it joined the transaction: nothing to mark.
			h.log.Warn("transaction marker skipped: partition gone", "topic", tp.Topic, "partition", tp.Partition, "producer_id", pid)
			continue
		}
		offsets := tp.Topic == metadata.OffsetsTopic
		if offsets {
			// The group's pending offsets must be known (replayed) before
			// the marker is applied to them.
			for !h.groups.Loaded(tp.Partition) {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-h.clk.After(10 * time.Millisecond):
				}
			}
		}
		end, err := p.AppendMarker(pid, epoch, commit, 0)
		if errors.Is(err, kerr.InvalidProducerEpoch) {
			// A newer epoch already wrote here, so this transaction was
			// closed long ago; the marker is stale.
			h.log.Warn("stale transaction marker skipped", "topic", tp.Topic, "partition", tp.Partition, "producer_id", pid, "err", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("marker to %s-%d: %w", tp.Topic, tp.Partition, err)
		}
		if offsets {
			h.groups.CompleteTxn(tp.Partition, pid, commit)
		}
		waits = append(waits, wait{p, end})
	}
	for _, w := range waits {
		if err := w.p.WaitCommitted(ctx, w.end); err != nil {
			return fmt.Errorf("marker to %s-%d: %w", w.p.Topic(), w.p.Index(), err)
		}
	}
	return nil
}

// sendMarkers asks node to write markers to its partitions tps.
func (h *Host) sendMarkers(ctx context.Context, node int32, pid int64, epoch int16, commit bool, tps []txn.TopicPartition) error {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed = pid, epoch, commit
	byTopic := map[string]int{}
	for _, tp := range tps {
		i, ok := byTopic[tp.Topic]
		if !ok {
			i = len(m.Topics)
			byTopic[tp.Topic] = i
			mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
			mt.Topic = tp.Topic
			m.Topics = append(m.Topics, mt)
		}
		m.Topics[i].Partitions = append(m.Topics[i].Partitions, tp.Partition)
	}
	req.Markers = append(req.Markers, m)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kresp, err := h.node.Send(cctx, node, req)
	if err != nil {
		return fmt.Errorf("markers to node %d: %w", node, err)
	}
	resp := kresp.(*kmsg.WriteTxnMarkersResponse)
	var errs []error
	for _, rm := range resp.Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					errs = append(errs, fmt.Errorf("marker to %s-%d on node %d: %w", rt.Topic, rp.Partition, node, kerr.ErrorForCode(rp.ErrorCode)))
				}
			}
		}
	}
	h.log.Debug("transaction markers written by the partitions' leader", "node", node, "producer_id", pid, "commit", commit, "partitions", len(tps), "errors", len(errs))
	return errors.Join(errs...)
}
