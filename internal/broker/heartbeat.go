package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

func init() { register(kmsg.Heartbeat, 0, 4, (*Broker).handleHeartbeat) }

func (b *Broker) handleHeartbeat(_ context.Context, r *wire.Request) wire.Reply {
	return b.groups.Heartbeat(r.Body.(*kmsg.HeartbeatRequest))
}
