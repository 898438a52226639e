package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/cluster"
	"holdfast/internal/datadir"
	"holdfast/internal/wire"
)

// AddRaftVoter (API 80) and RemoveRaftVoter (API 81), KIP-853: change the
// controller quorum - the metadata Raft group's voters - while it runs
// (internal/cluster/voters.go; kafka-metadata-quorum add-controller and
// remove-controller, `holdfast cluster add-controller` and
// `remove-controller`). Both need ALTER on the cluster; any broker accepts
// them and forwards them to the controller, which answers once the change
// is committed. A voter is named by node id and, optionally (zeros: any),
// the directory id it registered. AddRaftVoter's listeners are not used:
// the new voter's Raft address is the one it registered when it joined
// (`serve --join`). UpdateRaftVoter (82) is not served: a node's endpoints
// change by registering again.

// defaultVoterChangeTimeout is AddRaftVoter's wait when the request gives
// none.
const defaultVoterChangeTimeout = 30 * time.Second

func (b *Broker) handleAddRaftVoter(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AddRaftVoterRequest)
	resp := req.ResponseKind().(*kmsg.AddRaftVoterResponse)
	if code, msg := b.checkVoterRequest(r, req.ClusterID); code != 0 {
		resp.ErrorCode, resp.ErrorMessage = code, msg
		return wire.Respond(resp)
	}
	timeout := defaultVoterChangeTimeout
	if req.TimeoutMillis > 0 {
		timeout = min(time.Duration(req.TimeoutMillis)*time.Millisecond, cluster.MaxQuorumChangeWait)
	}
	return func(ctx context.Context) kmsg.Response {
		if !b.cluster.IsController() {
			return b.forwardVoterRequest(ctx, req, resp, &resp.ErrorCode)
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp.ErrorCode, resp.ErrorMessage = kafkaError(b.cluster.AddVoter(ctx, req.VoterID, datadir.UUID(req.VoterDirectoryID)))
		return resp
	}
}

func (b *Broker) handleRemoveRaftVoter(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.RemoveRaftVoterRequest)
	resp := req.ResponseKind().(*kmsg.RemoveRaftVoterResponse)
	if code, msg := b.checkVoterRequest(r, req.ClusterID); code != 0 {
		resp.ErrorCode, resp.ErrorMessage = code, msg
		return wire.Respond(resp)
	}
	return func(ctx context.Context) kmsg.Response {
		if !b.cluster.IsController() {
			return b.forwardVoterRequest(ctx, req, resp, &resp.ErrorCode)
		}
		ctx, cancel := context.WithTimeout(ctx, defaultVoterChangeTimeout)
		defer cancel()
		resp.ErrorCode, resp.ErrorMessage = kafkaError(b.cluster.RemoveVoter(ctx, req.VoterID, datadir.UUID(req.VoterDirectoryID)))
		return resp
	}
}

// checkVoterRequest: authorization (a forwarded request was authorized by
// the node that forwarded it) and the cluster id, when the request names
// one.
func (b *Broker) checkVoterRequest(r *wire.Request, clusterID *string) (int16, *string) {
	if !b.forwardedBy(r) && !b.authorizeCluster(r, auth.OpAlter) {
		return kerr.ClusterAuthorizationFailed.Code, nil
	}
	if clusterID != nil && *clusterID != "" && *clusterID != b.meta.ClusterID() {
		return kerr.InconsistentClusterID.Code, kmsg.StringPtr("the request names cluster " + *clusterID + ", this is " + b.meta.ClusterID())
	}
	return 0, nil
}

// forwardVoterRequest sends req to the controller and returns its answer;
// NOT_CONTROLLER in resp when there is none or it cannot be reached (the
// client retries).
func (b *Broker) forwardVoterRequest(ctx context.Context, req kmsg.Request, resp kmsg.Response, code *int16) kmsg.Response {
	id := b.cluster.ControllerID()
	if id < 0 || id == b.cfg.NodeID {
		*code = kerr.NotController.Code
		return resp
	}
	kresp, err := b.cluster.Send(ctx, id, req)
	if err != nil {
		b.log.Debug("forwarding a quorum change", "api", kmsg.NameForKey(req.Key()), "controller", id, "err", err)
		*code = kerr.NotController.Code
		return resp
	}
	return kresp
}
