package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

func init() { register(kmsg.DeleteGroups, 0, 2, (*Broker).handleDeleteGroups) }

func (b *Broker) handleDeleteGroups(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DeleteGroupsRequest)
	allowed := *req
	var denied []string
	allowed.Groups, denied = b.authorizedGroups(r, auth.OpDelete, req.Groups)
	return thenEdit(b.groups.DeleteGroups(&allowed), func(out kmsg.Response) {
		resp := out.(*kmsg.DeleteGroupsResponse)
		for _, g := range denied {
			dg := kmsg.NewDeleteGroupsResponseGroup()
			dg.Group, dg.ErrorCode = g, kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, dg)
		}
	})
}
