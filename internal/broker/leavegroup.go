package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

func init() { register(kmsg.LeaveGroup, 0, 5, (*Broker).handleLeaveGroup) }

func (b *Broker) handleLeaveGroup(_ context.Context, r *wire.Request) wire.Reply {
	return b.groups.LeaveGroup(r.Body.(*kmsg.LeaveGroupRequest))
}
