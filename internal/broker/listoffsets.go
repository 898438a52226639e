package broker

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// ListOffsets v1+ (v0's offset arrays are long gone from clients). v9 adds
// -4 (earliest local) and -5 (latest tiered) for tiered storage, v10 a
// timeout for remote lookups (a timestamp below the local log start reads
// the remote segment's .index), v11 -6 (KIP-1023, Kafka 4.2: the earliest
// offset not uploaded yet).

// Special timestamps of ListOffsets.
const (
	offsetLatest         = -1
	offsetEarliest       = -2
	offsetMaxTimestamp   = -3 // KIP-734
	offsetEarliestLocal  = -4 // KIP-405: the local log start
	offsetLatestTiered   = -5 // KIP-1005: the highest offset in the remote log
	offsetPendingUpload  = -6 // KIP-1023: the earliest offset not uploaded yet
	isolationReadCommitd = 1
)

func (b *Broker) handleListOffsets(ctx context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ListOffsetsRequest)
	denied := make([]bool, len(req.Topics))
	remote := false
	for i, rt := range req.Topics {
		denied[i] = !b.authorize(r, auth.OpDescribe, auth.ResourceTopic, rt.Topic)
		for _, rp := range rt.Partitions {
			remote = remote || (b.tiered != nil && rp.Timestamp >= 0)
		}
	}
	answer := func(ctx context.Context) kmsg.Response { return b.listOffsets(ctx, req, denied) }
	if remote {
		// A lookup by timestamp may read the object store (a segment's
		// .index): not on the connection's reader goroutine.
		return answer
	}
	return wire.Respond(answer(ctx))
}

// listOffsets answers req; denied[i]: the client may not describe topic i.
func (b *Broker) listOffsets(ctx context.Context, req *kmsg.ListOffsetsRequest, denied []bool) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for i, rt := range req.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		denied := denied[i]
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, -1
			if denied {
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
			if sp.ErrorCode = leaderEpochCode(p, rp.CurrentLeaderEpoch, false); sp.ErrorCode != 0 {
				st.Partitions = append(st.Partitions, sp)
				continue
			}
			sp.LeaderEpoch = p.LeaderEpoch()
			// What a consumer of this isolation level may read.
			visible := p.HighWatermark()
			if req.IsolationLevel == isolationReadCommitd {
				visible = p.LastStableOffset()
			}
			switch ts := rp.Timestamp; ts {
			case offsetLatest:
				sp.Offset = visible
			case offsetEarliest:
				sp.Offset = b.logStartOffset(p) // the remote log start when tiered
				if b.tiered.RestorePending(p) {
					// Restored, its remote log not committed yet: the
					// earliest offset is not known (retriable).
					sp.ErrorCode, sp.Offset = kerr.OffsetNotAvailable.Code, -1
				}
			case offsetEarliestLocal:
				sp.Offset = p.LogStartOffset()
			case offsetLatestTiered:
				// KIP-1005: the highest offset in the remote log, -1 if
				// nothing is (tiered.go).
				sp.Offset = b.latestTiered(p)
			case offsetPendingUpload:
				if req.Version < 11 {
					// Kafka's check: the sentinel needs the version that
					// brought it.
					sp.ErrorCode = kerr.UnsupportedVersion.Code
					break
				}
				sp.Offset, sp.ErrorCode = b.earliestPendingUpload(p)
			case offsetMaxTimestamp:
				if mts, off := p.Log().MaxTimestamp(); off >= 0 && off < visible {
					sp.Timestamp, sp.Offset = mts, off
				}
			default:
				if ts < 0 {
					sp.ErrorCode = kerr.InvalidRequest.Code
					break
				}
				off, fts, err := b.offsetForTimestamp(ctx, p, ts, req.TimeoutMillis)
				switch {
				case errors.Is(err, context.DeadlineExceeded):
					sp.ErrorCode = kerr.RequestTimedOut.Code
				case err != nil:
					b.log.Error("list offsets: by timestamp", "topic", rt.Topic, "partition", rp.Partition, "timestamp", ts, "err", err)
					sp.ErrorCode = kerr.KafkaStorageError.Code
				case off >= 0 && off < visible:
					sp.Timestamp, sp.Offset = fts, off
				}
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
