package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

func (b *Broker) handleApiVersions(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ApiVersionsRequest)
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	var l *wire.Listener
	if r.Conn != nil {
		l = r.Conn.Listener
	}
	resp.ApiKeys = wire.SupportedKeys(b, l)
	b.addFeatures(resp) // features.go
	return wire.Respond(resp)
}
