package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/coordinator"
	"holdfast/internal/wire"
)

// v6 adds share-group keys (KIP-932): share groups are not served, so
// such a key is answered INVALID_REQUEST, as any unknown type.

// handleFindCoordinator answers with the leader of the key's partition of
// __consumer_offsets or __transaction_state (internal/coordinator).
// Finding it may create that topic first, so the answer is built in the
// Reply, off the reader.
func (b *Broker) handleFindCoordinator(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.FindCoordinatorRequest)
	// DESCRIBE on each group or transactional id; the refused keys are
	// answered without a lookup (which could create a coordinator topic).
	keys := req.CoordinatorKeys
	if req.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	typ, code := auth.ResourceGroup, kerr.GroupAuthorizationFailed.Code
	if req.CoordinatorType == coordinator.KeyTransaction {
		typ, code = auth.ResourceTransactionalID, kerr.TransactionalIDAuthorizationFailed.Code
	}
	denied := map[string]bool{}
	for _, k := range keys {
		if !b.authorize(r, auth.OpDescribe, typ, k) {
			denied[k] = true
		}
	}
	listener := b.listenerName(r)
	forwarded := b.forwardedBy(r)
	return func(context.Context) kmsg.Response { return b.findCoordinators(req, forwarded, listener, denied, code) }
}

// findCoordinators answers req; forwarded is set when another broker asks
// (internal/coordinator).
func (b *Broker) findCoordinators(req *kmsg.FindCoordinatorRequest, forwarded bool, listener string, denied map[string]bool, deniedCode int16) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := req.CoordinatorKeys
	if req.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	for _, key := range keys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key = key
		c.NodeID, c.Host, c.Port = -1, "", -1
		var msg string
		switch {
		case denied[key]:
			c.ErrorCode = deniedCode
		case req.CoordinatorType != coordinator.KeyGroup && req.CoordinatorType != coordinator.KeyTransaction:
			c.ErrorCode, msg = kerr.InvalidRequest.Code, "unknown coordinator type"
		case req.CoordinatorType == coordinator.KeyTransaction && key == "":
			c.ErrorCode, msg = kerr.InvalidRequest.Code, "empty transactional id"
		default:
			at := b.coord.Find(req.CoordinatorType, key, forwarded, listener)
			c.NodeID, c.Host, c.Port, c.ErrorCode, msg = at.Node, at.Host, at.Port, at.Code, at.Msg
		}
		if msg != "" {
			c.ErrorMessage = &msg
		}
		resp.Coordinators = append(resp.Coordinators, c)
	}
	if req.Version < 4 {
		c := resp.Coordinators[0]
		resp.Coordinators = nil
		resp.ErrorCode, resp.ErrorMessage = c.ErrorCode, c.ErrorMessage
		resp.NodeID, resp.Host, resp.Port = c.NodeID, c.Host, c.Port
	}
	return resp
}
