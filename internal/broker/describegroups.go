package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// DescribeGroups v0-v6 describes classic groups. v6 (Kafka 4.0) answers an
// unknown group, and a KIP-848 consumer group (ConsumerGroupDescribe
// describes those), GROUP_ID_NOT_FOUND with a message; before v6 both are
// Dead with no members, as Kafka.
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
