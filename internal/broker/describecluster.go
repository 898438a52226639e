package broker

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

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
	resp.ControllerID = b.cluster.ControllerID()
	{
		// Fenced brokers are left out, as from Metadata, unless v2's
		// IncludeFencedBrokers (KIP-1073) asks for them.
		for _, mb := range b.brokers(b.listenerName(r)) {
			resp.Brokers = append(resp.Brokers, describeClusterBroker(mb, false))
		}
		if req.IncludeFencedBrokers {
			for _, id := range b.meta.FencedBrokers() {
				info, ok := b.meta.Broker(id)
				listed := slices.ContainsFunc(resp.Brokers, func(br kmsg.DescribeClusterResponseBroker) bool { return br.NodeID == id })
				if !ok || listed {
					continue
				}
				e, ok := info.Endpoint(b.listenerName(r))
				if !ok {
					continue
				}
				mb := kmsg.NewMetadataResponseBroker()
				mb.NodeID, mb.Host, mb.Port = info.ID, e.Host, e.Port
				if info.Rack != "" {
					mb.Rack = &info.Rack
				}
				resp.Brokers = append(resp.Brokers, describeClusterBroker(mb, true))
			}
		}
	}
	if req.IncludeClusterAuthorizedOperations {
		resp.ClusterAuthorizedOperations = b.authorizedOps(r, auth.ResourceCluster, auth.ClusterName)
	}
	return wire.Respond(resp)
}

func describeClusterBroker(mb kmsg.MetadataResponseBroker, fenced bool) kmsg.DescribeClusterResponseBroker {
	br := kmsg.NewDescribeClusterResponseBroker()
	br.NodeID, br.Host, br.Port, br.Rack, br.IsFenced = mb.NodeID, mb.Host, mb.Port, mb.Rack, fenced
	return br
}
