package broker

import (
	"context"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

func (b *Broker) handleListGroups(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ListGroupsRequest)
	withShare := func(out kmsg.Response) {
		resp := out.(*kmsg.ListGroupsResponse)
		resp.Groups = append(resp.Groups, b.shareGroupsListed(req)...)
		slices.SortFunc(resp.Groups, func(a, b kmsg.ListGroupsResponseGroup) int { return strings.Compare(a.Group, b.Group) })
	}
	if b.authorizeCluster(r, auth.OpDescribe) {
		return thenEdit(b.groups.ListGroups(req), withShare)
	}
	// Without DESCRIBE on the cluster, only the groups one may describe.
	return thenEdit(b.groups.ListGroups(req), func(out kmsg.Response) {
		withShare(out)
		resp := out.(*kmsg.ListGroupsResponse)
		resp.Groups = slices.DeleteFunc(resp.Groups, func(g kmsg.ListGroupsResponseGroup) bool {
			return !b.authorize(r, auth.OpDescribe, auth.ResourceGroup, g.Group)
		})
	})
}
