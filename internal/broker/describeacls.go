package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// DescribeAcls v0-v3 answers from this node's committed ACLs. Needs
// DESCRIBE on the cluster.
func (b *Broker) handleDescribeACLs(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DescribeACLsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
	switch {
	case b.cfg.Security.Authorizer == nil:
		resp.ErrorCode, resp.ErrorMessage = kerr.SecurityDisabled.Code, kmsg.StringPtr("No Authorizer is configured (authorizer.class.name).")
		return wire.Respond(resp)
	case !b.authorizeCluster(r, auth.OpDescribe):
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return wire.Respond(resp)
	}
	f := auth.Filter{
		ResourceType: auth.ResourceType(req.ResourceType), ResourceName: req.ResourceName,
		PatternType: auth.PatternType(req.ResourcePatternType), Principal: req.Principal, Host: req.Host,
		Operation: auth.Operation(req.Operation), Permission: auth.Permission(req.PermissionType),
	}
	if req.Version == 0 {
		f.PatternType = auth.PatternLiteral
	}
	if err := f.Validate(); err != nil {
		resp.ErrorCode, resp.ErrorMessage = kerr.InvalidRequest.Code, kmsg.StringPtr(err.Error())
		return wire.Respond(resp)
	}
	type resource struct {
		typ  auth.ResourceType
		name string
		pt   auth.PatternType
	}
	idx := map[resource]int{}
	for _, a := range b.meta.ACLs() { // sorted: by resource first
		if !f.Matches(a) {
			continue
		}
		k := resource{a.ResourceType, a.ResourceName, a.PatternType}
		i, ok := idx[k]
		if !ok {
			i = len(resp.Resources)
			idx[k] = i
			rr := kmsg.NewDescribeACLsResponseResource()
			rr.ResourceType, rr.ResourceName = kmsg.ACLResourceType(a.ResourceType), a.ResourceName
			rr.ResourcePatternType = kmsg.ACLResourcePatternType(a.PatternType)
			resp.Resources = append(resp.Resources, rr)
		}
		ra := kmsg.NewDescribeACLsResponseResourceACL()
		ra.Principal, ra.Host = a.Principal, a.Host
		ra.Operation, ra.PermissionType = kmsg.ACLOperation(a.Operation), kmsg.ACLPermissionType(a.Permission)
		resp.Resources[i].ACLs = append(resp.Resources[i].ACLs, ra)
	}
	return wire.Respond(resp)
}
