package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// v6 (KIP-1043 error for unknown groups) is not served.
func init() { register(kmsg.DescribeGroups, 0, 5, (*Broker).handleDescribeGroups) }

func (b *Broker) handleDescribeGroups(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DescribeGroupsRequest)
	allowed := *req
	var denied []string
	allowed.Groups, denied = b.authorizedGroups(r, auth.OpDescribe, req.Groups)
	return thenEdit(b.groups.DescribeGroups(&allowed), func(out kmsg.Response) {
		resp := out.(*kmsg.DescribeGroupsResponse)
		for i := range resp.Groups {
			if req.IncludeAuthorizedOperations {
				resp.Groups[i].AuthorizedOperations = b.authorizedOps(r, auth.ResourceGroup, resp.Groups[i].Group)
			}
		}
		for _, g := range denied {
			dg := kmsg.NewDescribeGroupsResponseGroup()
			dg.Group, dg.ErrorCode = g, kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, dg)
		}
	})
}
