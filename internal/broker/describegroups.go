package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

// v6 (KIP-1043 error for unknown groups) is not served.
func init() { register(kmsg.DescribeGroups, 0, 5, (*Broker).handleDescribeGroups) }

func (b *Broker) handleDescribeGroups(_ context.Context, r *wire.Request) wire.Reply {
	return b.groups.DescribeGroups(r.Body.(*kmsg.DescribeGroupsRequest))
}
