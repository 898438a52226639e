package broker

import (
	"context"
	"net"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/cluster"
	"holdfast/internal/datadir"
	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// handleBrokerRegistration (KRaft's broker-to-controller API) records a
// broker's Kafka listener in the metadata. Only the controller accepts it.
func (b *Broker) handleBrokerRegistration(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.BrokerRegistrationRequest)
	resp := req.ResponseKind().(*kmsg.BrokerRegistrationResponse)
	switch {
	case b.cluster.ControllerOnly() != 0:
		resp.ErrorCode = b.cluster.ControllerOnly()
		return wire.Respond(resp)
	case len(req.Listeners) == 0 || req.BrokerID <= 0 || req.BrokerID >= 1<<cluster.ProducerIDNodeBits:
		resp.ErrorCode = kerr.InvalidRequest.Code
		return wire.Respond(resp)
	}
	if req.ClusterID != b.meta.ClusterID() {
		resp.ErrorCode = kerr.InconsistentClusterID.Code
		return wire.Respond(resp)
	}
	info := metadata.BrokerInfo{ID: req.BrokerID, Host: req.Listeners[0].Host, Port: int32(req.Listeners[0].Port)}
	for _, l := range req.Listeners {
		if l.Name != cluster.RaftListenerName {
			info.Listeners = append(info.Listeners, metadata.Endpoint{Name: l.Name, Host: l.Host, Port: int32(l.Port), Protocol: string(wire.ProtocolForCode(l.SecurityProtocol))})
		}
	}
	if len(info.Listeners) == 1 && info.Listeners[0].Name == string(wire.Plaintext) && info.Listeners[0].Protocol == string(wire.Plaintext) {
		info.Listeners = nil // the zero-config form, as selfInfo registers it
	}
	if len(req.LogDirs) > 0 {
		info.DirID = datadir.UUID(req.LogDirs[0]).String()
	}
	if req.Rack != nil {
		info.Rack = *req.Rack
	}
	// A node that is not in --peers (one that joined, broker-only or since
	// made a voter of the controller quorum) must say where its Raft host
	// listens: every node learns that address from its registration.
	i := slices.IndexFunc(req.Listeners, func(l kmsg.BrokerRegistrationRequestListener) bool { return l.Name == cluster.RaftListenerName })
	if i >= 0 && req.Listeners[i].Host != "" && req.Listeners[i].Port != 0 {
		info.RaftAddr = net.JoinHostPort(req.Listeners[i].Host, strconv.Itoa(int(req.Listeners[i].Port)))
	} else if !b.cluster.InPeers(req.BrokerID) {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return wire.Respond(resp)
	}
	if cur, ok := b.meta.Broker(info.ID); ok && cur.Equal(info) {
		// A node repeats its registration until its metadata shows it
		// (a new broker-only node: once it has the metadata log).
		resp.BrokerEpoch = 1
		return wire.Respond(resp)
	}
	return func(ctx context.Context) kmsg.Response {
		err := b.cluster.Propose(ctx, metadata.Command{Op: metadata.OpRegister, Broker: &info})
		resp.ErrorCode, _ = kafkaError(err)
		resp.BrokerEpoch = 1
		return resp
	}
}
