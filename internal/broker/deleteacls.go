package broker

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// DeleteAcls v0-v3. The controller resolves the filters against the
// committed ACLs and commits the removal of exactly those it matched, so
// the answer lists what was deleted. Needs ALTER on the cluster.
func (b *Broker) handleDeleteACLs(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DeleteACLsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
	resp.Results = make([]kmsg.DeleteACLsResponseResult, len(req.Filters))
	fail := func(code int16, msg string) kmsg.Response {
		for i := range resp.Results {
			resp.Results[i].ErrorCode = code
			if msg != "" {
				resp.Results[i].ErrorMessage = kmsg.StringPtr(msg)
			}
		}
		return resp
	}
	switch {
	case b.cfg.Security.Authorizer == nil:
		return wire.Respond(fail(kerr.SecurityDisabled.Code, "No Authorizer is configured (authorizer.class.name)."))
	case !b.forwardedBy(r) && !b.authorizeCluster(r, auth.OpAlter):
		return wire.Respond(fail(kerr.ClusterAuthorizationFailed.Code, ""))
	}
	filters := make([]*auth.Filter, len(req.Filters))
	for i, rf := range req.Filters {
		f := auth.Filter{
			ResourceType: auth.ResourceType(rf.ResourceType), ResourceName: rf.ResourceName,
			PatternType: auth.PatternType(rf.ResourcePatternType), Principal: rf.Principal, Host: rf.Host,
			Operation: auth.Operation(rf.Operation), Permission: auth.Permission(rf.PermissionType),
		}
		if req.Version == 0 {
			f.PatternType = auth.PatternLiteral
		}
		if err := f.Validate(); err != nil {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = kerr.InvalidRequest.Code, kmsg.StringPtr(err.Error())
			continue
		}
		filters[i] = &f
	}
	return func(ctx context.Context) kmsg.Response {
		if fresp, forwarded, err := b.cluster.ForwardToController(ctx, req); forwarded {
			if err != nil {
				code, _ := kafkaError(err)
				return fail(code, err.Error())
			}
			return fresp
		}
		var doomed []auth.ACL
		matched := make([][]auth.ACL, len(filters))
		for _, a := range b.meta.ACLs() {
			for i, f := range filters {
				if f != nil && f.Matches(a) {
					matched[i] = append(matched[i], a)
					if !slices.Contains(doomed, a) {
						doomed = append(doomed, a)
					}
				}
			}
		}
		var code int16
		var msg *string
		if len(doomed) > 0 {
			code, msg = kafkaError(b.commitSecurity(ctx, metadata.Command{Op: metadata.OpDeleteACLs, ACLs: doomed}))
		}
		for i, f := range filters {
			if f == nil {
				continue
			}
			res := &resp.Results[i]
			res.ErrorCode, res.ErrorMessage = code, msg
			if code != 0 {
				continue
			}
			for _, a := range matched[i] {
				m := kmsg.NewDeleteACLsResponseResultMatchingACL()
				m.ResourceType, m.ResourceName = kmsg.ACLResourceType(a.ResourceType), a.ResourceName
				m.ResourcePatternType = kmsg.ACLResourcePatternType(a.PatternType)
				m.Principal, m.Host = a.Principal, a.Host
				m.Operation, m.PermissionType = kmsg.ACLOperation(a.Operation), kmsg.ACLPermissionType(a.Permission)
				res.MatchingACLs = append(res.MatchingACLs, m)
			}
		}
		if code == 0 {
			for _, a := range doomed {
				b.log.Info("ACL deleted", "acl", a.String(), "by", r.Principal.String())
			}
		}
		return resp
	}
}
