package admin

import (
	"context"
	"time"
)

// NodeUsage is one node's disk use and the records in the partitions it
// holds, at one time.
type NodeUsage struct {
	Node int32
	At   time.Time
	// Size is the bytes of its partitions' logs (DescribeLogDirs); Total
	// and Usable its log directories' volumes (-1 unreported).
	Size, Total, Usable int64
	// Records sums the high watermarks of the partitions it is a replica
	// of: its growth is the records per second those partitions take.
	Records int64
	Err     string // the node did not answer DescribeLogDirs
}

// NodesUsage asks every node for its log directories (DescribeLogDirs)
// and the cluster for its partitions' replicas and high watermarks
// (Metadata, ListOffsets). A node that does not answer has Err set.
func (c *Client) NodesUsage(ctx context.Context) ([]NodeUsage, error) {
	now := time.Now()
	md, err := c.A.Metadata(ctx)
	if err != nil {
		return nil, err
	}
	ends, _ := c.A.ListEndOffsets(ctx) // all topics; a partition without an answer adds nothing
	dirs, derr := c.A.DescribeAllLogDirs(ctx, nil)
	var out []NodeUsage
	for _, b := range md.Brokers.NodeIDs() {
		u := NodeUsage{Node: b, At: now, Total: -1, Usable: -1}
		ds, ok := dirs[b]
		switch {
		case !ok && derr != nil:
			u.Err = derr.Error()
		case !ok:
			u.Err = "no answer"
		case ds.Error() != nil:
			u.Err = ds.Error().Error()
		}
		for _, d := range ds {
			u.Size += d.Size()
			if d.TotalBytes >= 0 {
				u.Total = max(u.Total, 0) + d.TotalBytes
				u.Usable = max(u.Usable, 0) + d.UsableBytes
			}
		}
		for _, t := range md.Topics {
			for _, p := range t.Partitions {
				for _, r := range p.Replicas {
					if r != b {
						continue
					}
					if o, ok := ends.Lookup(t.Topic, p.Partition); ok && o.Err == nil {
						u.Records += o.Offset
					}
				}
			}
		}
		out = append(out, u)
	}
	return out, nil
}
