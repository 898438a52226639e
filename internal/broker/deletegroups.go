package broker

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

func (b *Broker) handleDeleteGroups(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DeleteGroupsRequest)
	allowed := *req
	var denied []string
	allowed.Groups, denied = b.authorizedGroups(r, auth.OpDelete, req.Groups)
	// Share groups (share/groups.go) are deleted here, the others by the
	// group coordinator.
	var shared []string
	allowed.Groups = slices.DeleteFunc(slices.Clone(allowed.Groups), func(g string) bool {
		if b.isShareGroup(g) {
			shared = append(shared, g)
			return true
		}
		return false
	})
	return thenEditCtx(b.groups.DeleteGroups(&allowed), func(ctx context.Context, out kmsg.Response) {
		resp := out.(*kmsg.DeleteGroupsResponse)
		for _, g := range shared {
			dg := kmsg.NewDeleteGroupsResponseGroup()
			dg.Group, dg.ErrorCode = g, b.deleteShareGroup(ctx, g)
			resp.Groups = append(resp.Groups, dg)
		}
		for _, g := range denied {
			dg := kmsg.NewDeleteGroupsResponseGroup()
			dg.Group, dg.ErrorCode = g, kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, dg)
		}
	})
}

// thenEditCtx is thenEdit whose edit may wait (with the reply's context).
func thenEditCtx(reply wire.Reply, edit func(context.Context, kmsg.Response)) wire.Reply {
	return func(ctx context.Context) kmsg.Response {
		resp := reply(ctx)
		if resp != nil {
			edit(ctx, resp)
		}
		return resp
	}
}
