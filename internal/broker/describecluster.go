package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

func init() { register(kmsg.DescribeCluster, 0, 2, (*Broker).handleDescribeCluster) }

// Endpoint types of DescribeCluster v1+ (KIP-919).
const (
	endpointBrokers    = 1
	endpointController = 2
)

func (b *Broker) handleDescribeCluster(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.DescribeClusterRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.EndpointType = endpointBrokers
	if req.Version >= 1 {
		resp.EndpointType = req.EndpointType
		if req.EndpointType != endpointBrokers {
			// Brokers answer for broker endpoints only; controller
			// endpoints are asked of controllers (KIP-919).
			resp.ErrorCode = kerr.UnsupportedEndpointType.Code
			msg := "The broker only handles the BROKER endpoint type"
			resp.ErrorMessage = &msg
			return wire.Respond(resp)
		}
	}
	resp.ClusterID = b.meta.ClusterID()
	resp.ControllerID = b.cfg.NodeID
	br := kmsg.NewDescribeClusterResponseBroker()
	me := b.brokerEntry()
	br.NodeID, br.Host, br.Port, br.Rack = me.NodeID, me.Host, me.Port, me.Rack
	resp.Brokers = []kmsg.DescribeClusterResponseBroker{br}
	if req.IncludeClusterAuthorizedOperations {
		resp.ClusterAuthorizedOperations = clusterAuthorizedOps
	}
	return wire.Respond(resp)
}
