package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

// v10 addresses topics by id and is not served.
func init() { register(kmsg.OffsetFetch, 0, 9, (*Broker).handleOffsetFetch) }

func (b *Broker) handleOffsetFetch(_ context.Context, r *wire.Request) wire.Reply {
	return b.groups.OffsetFetch(r.Body.(*kmsg.OffsetFetchRequest))
}
