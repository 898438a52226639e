package broker

import (
	"context"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sys/unix"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// DescribeLogDirs v1-v4: this broker's log directory (a node has one, its
// data directory) with the size of every partition replica it holds, the
// replica's offset lag, and (v4) the directory's total and usable bytes;
// what kafka-log-dirs.sh --describe and kadm.DescribeAllLogDirs show. v0
// is gone in Kafka 4.0; v5 (KIP-1066's cordoned directories) is not served.
// Needs DESCRIBE on the cluster.
func (b *Broker) handleDescribeLogDirs(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DescribeLogDirsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	if !b.authorizeCluster(r, auth.OpDescribe) {
		// Kafka: no directories; from v3 the error says why.
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	// nil Topics: every partition here; otherwise those asked for.
	var want map[string]map[int32]bool
	if req.Topics != nil {
		want = map[string]map[int32]bool{}
		for _, t := range req.Topics {
			if want[t.Topic] == nil {
				want[t.Topic] = map[int32]bool{}
			}
			for _, p := range t.Partitions {
				want[t.Topic][p] = true
			}
		}
	}
	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir = b.cfg.DataDir
	if abs, err := filepath.Abs(b.cfg.DataDir); err == nil {
		dir.Dir = abs
	}
	if req.Version >= 4 {
		var st unix.Statfs_t
		if err := unix.Statfs(b.cfg.DataDir, &st); err == nil {
			dir.TotalBytes = int64(st.Blocks) * int64(st.Bsize)
			dir.UsableBytes = int64(st.Bavail) * int64(st.Bsize)
		}
	}
	for _, t := range b.meta.Topics() { // sorted by name
		if want != nil && want[t.Name] == nil {
			continue
		}
		dt := kmsg.NewDescribeLogDirsResponseDirTopic()
		dt.Topic = t.Name
		for i := int32(0); i < t.Partitions; i++ {
			if want != nil && !want[t.Name][i] {
				continue
			}
			p := b.replicas.Get(t.Name, i)
			if p == nil {
				continue // no replica here
			}
			dp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
			dp.Partition = i
			dp.Size = p.Log().Size()
			// Kafka's lag: how far the replica's log end is behind the
			// high watermark it knows; -1 when the replica is offline.
			dp.OffsetLag = max(p.HighWatermark()-p.LogEndOffset(), 0)
			if p.Failed() != nil {
				dp.OffsetLag = -1
			}
			dt.Partitions = append(dt.Partitions, dp)
		}
		if len(dt.Partitions) > 0 {
			dir.Topics = append(dir.Topics, dt)
		}
	}
	resp.Dirs = append(resp.Dirs, dir)
	return wire.Respond(resp)
}
