package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

func (b *Broker) handleConsumerGroupDescribe(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ConsumerGroupDescribeRequest)
	allowed := *req
	var denied []string
	allowed.Groups, denied = b.authorizedGroups(r, auth.OpDescribe, req.Groups)
	return thenEdit(b.groups.ConsumerGroupDescribe(&allowed), func(out kmsg.Response) {
		resp := out.(*kmsg.ConsumerGroupDescribeResponse)
		for i := range resp.Groups {
			if req.IncludeAuthorizedOperations {
				resp.Groups[i].AuthorizedOperations = b.authorizedOps(r, auth.ResourceGroup, resp.Groups[i].Group)
			}
		}
		for _, g := range denied {
			dg := kmsg.NewConsumerGroupDescribeResponseGroup()
			dg.Group, dg.ErrorCode = g, kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, dg)
		}
	})
}
