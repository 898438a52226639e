package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

func init() { register(kmsg.OffsetDelete, 0, 0, (*Broker).handleOffsetDelete) }

func (b *Broker) handleOffsetDelete(_ context.Context, r *wire.Request) wire.Reply {
	return b.groups.OffsetDelete(r.Body.(*kmsg.OffsetDeleteRequest))
}
