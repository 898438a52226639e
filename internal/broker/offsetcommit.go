package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

// v10 addresses topics by id (KIP-848 era) and is not served. The Reply
// waits for the commit to be durable.
func init() { register(kmsg.OffsetCommit, 0, 9, (*Broker).handleOffsetCommit) }

func (b *Broker) handleOffsetCommit(_ context.Context, r *wire.Request) wire.Reply {
	return b.groups.OffsetCommit(r.Body.(*kmsg.OffsetCommitRequest))
}
