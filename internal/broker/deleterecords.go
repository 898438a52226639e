package broker

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/replica"
	"holdfast/internal/wire"
)

// handleDeleteRecords moves log start offsets up. The new start is made
// durable before the answer, so it runs in the Reply.
func (b *Broker) handleDeleteRecords(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DeleteRecordsRequest)
	return func(ctx context.Context) kmsg.Response {
		if req.TimeoutMillis > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMillis)*time.Millisecond)
			defer cancel()
		}
		resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewDeleteRecordsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewDeleteRecordsResponseTopicPartition()
				sp.Partition, sp.LowWatermark = rp.Partition, -1
				if !b.authorize(r, auth.OpDelete, auth.ResourceTopic, rt.Topic) {
					sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
					st.Partitions = append(st.Partitions, sp)
					continue
				}
				p, missing := b.replicas.Lookup(rt.Topic, rp.Partition)
				if p == nil {
					sp.ErrorCode = missing
					st.Partitions = append(st.Partitions, sp)
					continue
				}
				t, ok := b.meta.Topic(rt.Topic)
				if !ok { // deleted meanwhile
					sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
					st.Partitions = append(st.Partitions, sp)
					continue
				}
				group := replica.Group(t.ID, rp.Partition)
				if !b.leadsGroup(group) {
					sp.ErrorCode = kerr.NotLeaderForPartition.Code
					st.Partitions = append(st.Partitions, sp)
					continue
				}
				off, hw := rp.Offset, p.HighWatermark()
				if off == -1 { // "everything so far"
					off = hw
				}
				switch {
				case off < 0 || off > hw:
					sp.ErrorCode = kerr.OffsetOutOfRange.Code
				case b.tiered != nil && b.deleteRemoteRecords(ctx, p, off, &sp):
					// The remote log start could not move: the local one
					// stays too.
				case off > p.LogStartOffset():
					// Through the partition's Raft log, so every replica
					// moves its start (replica/logstart.go); answered once
					// committed and applied here.
					if err := b.replicas.ReplicateLogStart(ctx, p, group, off); err != nil {
						b.log.Warn("delete records", "topic", rt.Topic, "partition", rp.Partition, "offset", off, "err", err)
						sp.ErrorCode = logStartErrorCode(err)
					} else {
						b.log.Info("deleted records", "topic", rt.Topic, "partition", rp.Partition, "offset", off)
					}
				}
				sp.LowWatermark = b.logStartOffset(p)
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	}
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
	l, err := b.cluster.Host().Leadership(group)
	return err == nil && l.Proposing
}
