package broker

import (
	"net"

	"holdfast/internal/wire"
)

// clientHost is the member's host as Kafka reports it ("/1.2.3.4").
func clientHost(c *wire.Conn) string {
	if c == nil || c.Remote == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(c.Remote.String())
	if err != nil {
		host = c.Remote.String()
	}
	return "/" + host
}

// GroupsLoaded reports whether the group coordinator has replayed every
// __consumer_offsets partition this node leads (readiness; start-up
// replay measurements).
func (b *Broker) GroupsLoaded() bool { return b.coord != nil && b.coord.GroupsLoaded() }
