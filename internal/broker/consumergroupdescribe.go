package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

func init() {
	register(kmsg.ConsumerGroupDescribe, 0, 1, (*Broker).handleConsumerGroupDescribe)
}

func (b *Broker) handleConsumerGroupDescribe(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ConsumerGroupDescribeRequest)
	// DESCRIBE on each group; the others are answered
	// GROUP_AUTHORIZATION_FAILED without being looked at.
	var denied []string
	allowed := *req
	allowed.Groups = nil
	for _, g := range req.Groups {
		if b.authorize(r, auth.OpDescribe, auth.ResourceGroup, g) {
			allowed.Groups = append(allowed.Groups, g)
		} else {
			denied = append(denied, g)
		}
	}
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
