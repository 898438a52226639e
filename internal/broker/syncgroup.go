package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

// The Reply waits for the leader's assignment.
func init() { register(kmsg.SyncGroup, 0, 5, (*Broker).handleSyncGroup) }

func (b *Broker) handleSyncGroup(_ context.Context, r *wire.Request) wire.Reply {
	return b.groups.SyncGroup(r.Body.(*kmsg.SyncGroupRequest))
}
