package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

func init() { register(kmsg.DeleteGroups, 0, 2, (*Broker).handleDeleteGroups) }

func (b *Broker) handleDeleteGroups(_ context.Context, r *wire.Request) wire.Reply {
	return b.groups.DeleteGroups(r.Body.(*kmsg.DeleteGroupsRequest))
}
