package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

// The Reply waits for the rebalance's join phase.
func init() { register(kmsg.JoinGroup, 0, 9, (*Broker).handleJoinGroup) }

func (b *Broker) handleJoinGroup(_ context.Context, r *wire.Request) wire.Reply {
	return b.groups.JoinGroup(r.Body.(*kmsg.JoinGroupRequest), r.ClientID, clientHost(r.Conn))
}
