package broker

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// CreateAcls v0-v3 (v1 adds pattern types). The ACLs go into the metadata
// (the metadata log in a cluster, through the controller), so every node
// enforces them. Needs ALTER on the cluster.
func (b *Broker) handleCreateACLs(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.CreateACLsRequest)
	resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
	resp.Results = make([]kmsg.CreateACLsResponseResult, len(req.Creations))
	fail := func(code int16, msg string) wire.Reply {
		for i := range resp.Results {
			resp.Results[i].ErrorCode = code
			if msg != "" {
				resp.Results[i].ErrorMessage = kmsg.StringPtr(msg)
			}
		}
		return wire.Respond(resp)
	}
	switch {
	case b.cfg.Security.Authorizer == nil:
		return fail(kerr.SecurityDisabled.Code, "No Authorizer is configured (authorizer.class.name).")
	case !b.forwardedBy(r) && !b.authorizeCluster(r, auth.OpAlter):
		return fail(kerr.ClusterAuthorizationFailed.Code, "")
	}
	var valid []auth.ACL
	var at []int
	for i, c := range req.Creations {
		a := auth.ACL{
			ResourceType: auth.ResourceType(c.ResourceType), ResourceName: c.ResourceName,
			PatternType: auth.PatternType(c.ResourcePatternType), Principal: c.Principal, Host: c.Host,
			Operation: auth.Operation(c.Operation), Permission: auth.Permission(c.PermissionType),
		}
		if req.Version == 0 {
			a.PatternType = auth.PatternLiteral
		}
		if err := a.Validate(); err != nil {
			resp.Results[i].ErrorCode = kerr.InvalidRequest.Code
			resp.Results[i].ErrorMessage = kmsg.StringPtr(err.Error())
			continue
		}
		valid, at = append(valid, a), append(at, i)
	}
	if len(valid) == 0 {
		return wire.Respond(resp)
	}
	return func(ctx context.Context) kmsg.Response {
		if fresp, forwarded, err := b.cluster.ForwardToController(ctx, req); forwarded {
			if err != nil {
				code, _ := kafkaError(err)
				return fail(code, err.Error())(ctx)
			}
			return fresp
		}
		err := b.commitSecurity(ctx, metadata.Command{Op: metadata.OpCreateACLs, ACLs: valid})
		code, msg := kafkaError(err)
		if errors.Is(err, auth.ErrInvalidACL) {
			code = kerr.InvalidRequest.Code
		}
		for _, i := range at {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = code, msg
		}
		if err == nil {
			for _, a := range valid {
				b.log.Info("ACL created", "acl", a.String(), "by", r.Principal.String())
			}
		}
		return resp
	}
}
