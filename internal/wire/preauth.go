package wire

// Before a SASL listener's client has authenticated it is anyone: what it
// may make the server hold is bounded apart from what authenticated
// clients share (docs/security.md, "What an unauthenticated client
// costs"):
//
//   - a frame announcing more than MaxPreAuthBytes
//     (sasl.server.max.receive.size) closes the connection from its 4-byte
//     size, before anything of its body is read or allocated; the same
//     during a re-authentication (KIP-368), as Kafka does;
//   - the frames of unauthenticated connections take their memory from
//     their own budget (MaxPreAuthQueuedBytes), never from the shared
//     queued.max.request.bytes one, so however many there are, an
//     authenticated client's requests never wait for them;
//   - a connection that has not authenticated AuthTimeout after it was
//     accepted is closed;
//   - max.connections and max.connections.per.ip are checked at accept,
//     before any byte is read (connlimit.go).
//
// PLAINTEXT and SSL listeners start authenticated (as User:ANONYMOUS or
// the certificate's principal) and are not affected.

// frameBudget is the budget the next frame is read into, and whether the
// pre-authentication bounds apply to it: before authentication, and
// during a re-authentication (the connection's own principal then, so
// its frames count against the shared budget).
func (c *serverConn) frameBudget() (*budget, bool) {
	if !c.listener.Protocol.UsesSASL() {
		return c.s.budget, false
	}
	if !c.auth.authed {
		return c.s.preauth, true
	}
	return c.s.budget, c.auth.sess != nil
}

// refusePreAuth closes a connection whose frame is above
// sasl.server.max.receive.size before (re-)authentication: Kafka's
// InvalidReceiveException. Nothing is answered, nothing of the body read.
func (c *serverConn) refusePreAuth(size int32) {
	c.s.Stats.PreAuthRefused.Add(1)
	c.s.mu.Lock()
	c.s.logLimited(c.ip, "closing connection: frame above sasl.server.max.receive.size before authentication",
		"peer", c.info.Remote.String(), "listener", c.listener.Name, "size", size, "max", c.s.limits.MaxPreAuthBytes)
	c.s.mu.Unlock()
	c.close()
}

// authTimedOut closes a connection that has not authenticated within
// AuthTimeout (its timer's goroutine).
func (c *serverConn) authTimedOut() {
	if c.authenticated.Load() || c.ctx.Err() != nil {
		return
	}
	c.s.Stats.AuthTimeouts.Add(1)
	c.s.mu.Lock()
	c.s.logLimited(c.ip, "closing connection: not authenticated in time", "peer", c.info.Remote.String(),
		"listener", c.listener.Name, "timeout", c.s.limits.AuthTimeout)
	c.s.mu.Unlock()
	c.close()
}

// MemoryPool is what connections' frames hold now, and the most they
// held at once since the server started, in bytes: Used of the shared
// queued.max.request.bytes budget, PreAuth of the unauthenticated
// connections' own (Kafka's SocketServer MemoryPoolUsed).
type MemoryPool struct {
	Used, UsedPeak, Size                  int64
	PreAuthUsed, PreAuthPeak, PreAuthSize int64
}

// MemoryPool reports the two frame budgets.
func (s *Server) MemoryPool() MemoryPool {
	var m MemoryPool
	m.Used, m.UsedPeak = s.budget.used()
	m.PreAuthUsed, m.PreAuthPeak = s.preauth.used()
	m.Size, m.PreAuthSize = s.limits.MaxQueuedBytes, s.limits.MaxPreAuthQueuedBytes
	return m
}

// Limits are the server's limits, defaults filled in.
func (s *Server) Limits() Limits { return s.limits }
