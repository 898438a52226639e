package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

func init() { register(kmsg.ListGroups, 0, 5, (*Broker).handleListGroups) }

func (b *Broker) handleListGroups(_ context.Context, r *wire.Request) wire.Reply {
	return b.groups.ListGroups(r.Body.(*kmsg.ListGroupsRequest))
}
