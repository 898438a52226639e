package broker

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// DescribeUserScramCredentials v0 (KIP-554): which users have SCRAM
// credentials, for which mechanisms and with how many iterations - never
// the keys. Needs DESCRIBE on the cluster.
func (b *Broker) handleDescribeUserSCRAMCredentials(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DescribeUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	if !b.authorizeCluster(r, auth.OpDescribe) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	byUser := map[string][]kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo{}
	var users []string
	for _, c := range b.meta.ScramCredentials() { // sorted by user
		if _, ok := byUser[c.User]; !ok {
			users = append(users, c.User)
		}
		ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
		ci.Mechanism, ci.Iterations = auth.ScramMechanismCode(c.Mechanism), int32(c.Iterations)
		byUser[c.User] = append(byUser[c.User], ci)
	}
	if len(req.Users) > 0 {
		users = users[:0]
		counts := map[string]int{}
		for _, u := range req.Users {
			counts[u.Name]++
			if counts[u.Name] == 1 {
				users = append(users, u.Name)
			}
		}
		for _, u := range users {
			res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
			res.User = u
			switch {
			case counts[u] > 1:
				res.ErrorCode, res.ErrorMessage = kerr.DuplicateResource.Code, kmsg.StringPtr("Cannot describe SCRAM credentials for the same user twice in a single request: "+u)
			case len(byUser[u]) == 0:
				res.ErrorCode, res.ErrorMessage = kerr.ResourceNotFound.Code, kmsg.StringPtr("Attempt to describe a user credential that does not exist: "+u)
			default:
				res.CredentialInfos = byUser[u]
			}
			resp.Results = append(resp.Results, res)
		}
		return wire.Respond(resp)
	}
	slices.Sort(users)
	for _, u := range users {
		res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		res.User, res.CredentialInfos = u, byUser[u]
		resp.Results = append(resp.Results, res)
	}
	return wire.Respond(resp)
}
