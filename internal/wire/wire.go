// Package wire runs the Kafka connection loop: it reads length-prefixed
// frames, decodes the request header and body with kmsg, hands each request
// to a Handler in arrival order, and writes the replies back in that same
// order. It knows nothing about what the requests mean.
//
// Per connection there are two goroutines. The reader decodes a request and
// calls Handler.Handle, which does the part of the work that must happen in
// order (an append, say) and returns a Reply. The writer calls the Replies in
// order and writes what they return, so a reply that waits (an fsync, a
// long-poll fetch) delays only the responses queued behind it on the same
// connection - which is what Kafka clients expect.
package wire

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/time/rate"

	"holdfast/internal/auth"
	"holdfast/internal/bufref"
)

// Limits bound what one client can make the server hold. Names in comments
// are Kafka's broker config names.
type Limits struct {
	MaxRequestBytes int32 // socket.request.max.bytes: a larger frame closes the connection
	MaxConnections  int   // max.connections: further connections are closed at accept
	// MaxConnectionsPerIP is max.connections.per.ip: connections one
	// client address may hold; further ones are closed at accept
	// (connlimit.go). 0: DefaultLimits' value; UnlimitedPerIP: no limit
	// (Kafka's default); negative: none but the overrides' (Kafka's 0).
	MaxConnectionsPerIP int
	// MaxConnectionsPerIPOverrides is max.connections.per.ip.overrides,
	// its host names resolved: addresses with their own limit.
	MaxConnectionsPerIPOverrides map[netip.Addr]int
	// MaxConnectionCreationRate is max.connection.creation.rate: new
	// connections per second across the server, a second's worth at
	// once; past it a listener waits before it takes the next connection
	// (Kafka blocks its acceptor). 0 or UnlimitedPerIP: no limit.
	MaxConnectionCreationRate int
	MaxInFlight               int           // requests decoded but not yet answered, per connection
	MaxQueuedBytes            int64         // queued.max.request.bytes: request bytes held across all connections
	IdleTimeout               time.Duration // connections.max.idle.ms: no request for this long closes the connection
	// MaxPreAuthBytes is sasl.server.max.receive.size: on a SASL
	// listener, before the client has authenticated and during a
	// re-authentication, a frame announcing more than this closes the
	// connection from its 4-byte size alone (Kafka's
	// InvalidReceiveException), nothing of it read or allocated.
	MaxPreAuthBytes int32
	// MaxPreAuthQueuedBytes is what the frames of unauthenticated
	// connections may hold, all together: a budget of their own, apart
	// from MaxQueuedBytes, so no number of them delays an authenticated
	// client (preauth.go).
	MaxPreAuthQueuedBytes int64
	// AuthTimeout: a SASL listener's connection that has not
	// authenticated this long after it was accepted is closed (TLS
	// handshake included). Kafka has no such bound; without one a
	// connection that never authenticates lasts until IdleTimeout.
	AuthTimeout  time.Duration
	ReadTimeout  time.Duration // a started frame must arrive completely within this
	WriteTimeout time.Duration // a response must be written within this
}

// DefaultLimits are Kafka's defaults where Kafka has one, and bounds that keep
// a single node inside a few hundred MiB otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxRequestBytes: 100 << 20,
		MaxConnections:  10000,
		// Kafka has no limit per address; 1000 keeps one client (a
		// connection leak, a reconnect loop) from taking all 10000.
		MaxConnectionsPerIP: 1000,
		MaxInFlight:         64,
		MaxQueuedBytes:      256 << 20,
		IdleTimeout:         10 * time.Minute,
		// Kafka's sasl.server.max.receive.size default.
		MaxPreAuthBytes:       512 << 10,
		MaxPreAuthQueuedBytes: 16 << 20,
		AuthTimeout:           30 * time.Second,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
	}
}

// Request is one decoded request.
type Request struct {
	Key           int16
	Version       int16
	CorrelationID int32
	ClientID      string
	Body          kmsg.Request // version already set
	Conn          *Conn
	// Principal is who sent the request: the SASL identity, the TLS
	// client certificate's mapped name, or User:ANONYMOUS.
	Principal auth.Principal
	// Size is the request's size in bytes (header and body), what Kafka's
	// produce quota counts.
	Size int

	frame   []byte      // the bytes the body was decoded from (frames.go)
	recycle atomic.Bool // RecycleFrame was called
	ref     *bufref.Ref // FrameRef's count of the frame's holders, nil until asked
}

// Reply produces the response for a request. It runs on the connection's
// writer goroutine, in request order, and may block (fsync, long poll); ctx
// is cancelled when the connection closes. A nil response sends nothing
// (acks=0 produce).
type Reply func(ctx context.Context) kmsg.Response

// Respond is a Reply that is already known.
func Respond(resp kmsg.Response) Reply {
	return func(context.Context) kmsg.Response { return resp }
}

// Handler is what the server serves.
type Handler interface {
	// Versions reports the versions served for an API key on a listener;
	// ok is false for keys not served there. ApiVersions advertises
	// exactly this, and nothing else is decoded.
	Versions(l *Listener, key int16) (min, max int16, ok bool)
	// Handle is called on the connection's reader goroutine in arrival
	// order. It must not wait for anything slow; the slow part goes in the
	// returned Reply.
	Handle(ctx context.Context, req *Request) Reply
}

// Conn is what a handler may know about the connection a request came on.
type Conn struct {
	ID       uint64
	Remote   net.Addr
	Local    net.Addr
	Listener *Listener
	// Host is the client's IP address, as ACLs name hosts.
	Host string

	muteUntil atomic.Int64 // monotonic nanoseconds since born; see Throttle
	// born is when the connection was accepted: the origin of muteUntil.
	// Per connection, not per process: a package-level start time read at
	// init is another clock than a testing/synctest bubble's, and there
	// every request looked muted for decades.
	born time.Time
}

// Throttle mutes the connection for d (KIP-219): the response already
// decided is sent, but no further request of this connection is handled
// until d has passed. A client over its quota is slowed down this way even
// if it ignores the throttle_time_ms of its responses. Safe to call from a
// Handle or a Reply; overlapping throttles end at the latest end.
func (c *Conn) Throttle(d time.Duration) {
	if c == nil || d <= 0 {
		return
	}
	until := int64(time.Since(c.born) + d)
	for {
		old := c.muteUntil.Load()
		if old >= until || c.muteUntil.CompareAndSwap(old, until) {
			return
		}
	}
}

// muted is how long the connection stays muted.
func (c *Conn) muted() time.Duration {
	return time.Duration(c.muteUntil.Load()) - time.Since(c.born)
}

// Stats are the server's counters, read by metrics.
type Stats struct {
	Accepted, Rejected, Open atomic.Int64
	// RejectedPerIP counts connections closed at accept by
	// max.connections.per.ip; Throttled those held and closed by a
	// connection_creation_rate quota (KIP-612).
	RejectedPerIP, Throttled atomic.Int64
	// AcceptDelayed counts connections that waited for
	// max.connection.creation.rate, AcceptDelay their total wait (ns).
	AcceptDelayed, AcceptDelay atomic.Int64
	Requests, BadFrames        atomic.Int64
	BytesIn, BytesOut          atomic.Int64
	// Authentication outcomes: TLS handshakes and SASL exchanges that
	// failed, SASL exchanges that succeeded (re-authentications excluded).
	AuthFailures, AuthSuccesses atomic.Int64
	// Panics counts handlers that panicked: each closed its connection,
	// nothing else.
	Panics atomic.Int64
	// PreAuthRefused counts connections closed for a frame above
	// sasl.server.max.receive.size before (or while re-)authenticating;
	// AuthTimeouts those closed for not authenticating within
	// AuthTimeout (preauth.go).
	PreAuthRefused, AuthTimeouts atomic.Int64
}

// Server accepts Kafka connections.
type Server struct {
	h      Handler
	limits Limits
	log    *slog.Logger
	budget *budget
	// preauth is the budget of unauthenticated connections' frames
	// (MaxPreAuthQueuedBytes, preauth.go).
	preauth *budget

	Stats Stats
	// OnReply, if set before Serve, is told of each answered request: the
	// request, the response written (a *Spliced for fetches sent with
	// sendfile) and how long it took from decode to written response. It
	// runs on the connection's writer goroutine: it must be quick.
	OnReply func(req *Request, resp kmsg.Response, took time.Duration)

	mu    sync.Mutex
	lns   []net.Listener
	conns map[*serverConn]struct{}
	perIP map[netip.Addr]int // open connections by client address
	// refusals rate-limits the refusal log lines; held are the throttled
	// connections waiting for their close (connlimit.go).
	refusals map[refusalKey]refusalLog
	held     map[net.Conn]*time.Timer
	// creation is max.connection.creation.rate (nil: none); stop ends its
	// waits on Close.
	creation *rate.Limiter
	stop     context.Context
	stopped  context.CancelFunc
	nextID   atomic.Uint64
	closed   bool
	wg       sync.WaitGroup
}

// NewServer returns a server that dispatches to h.
func NewServer(h Handler, limits Limits, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	def := DefaultLimits()
	if limits.MaxRequestBytes <= 0 {
		limits.MaxRequestBytes = def.MaxRequestBytes
	}
	if limits.MaxConnections <= 0 {
		limits.MaxConnections = def.MaxConnections
	}
	if limits.MaxConnectionsPerIP == 0 {
		limits.MaxConnectionsPerIP = def.MaxConnectionsPerIP
	}
	if limits.MaxInFlight <= 0 {
		limits.MaxInFlight = def.MaxInFlight
	}
	if limits.MaxQueuedBytes <= 0 {
		limits.MaxQueuedBytes = def.MaxQueuedBytes
	}
	if limits.MaxQueuedBytes < int64(limits.MaxRequestBytes) {
		// One maximal request must always fit, or it would wait forever.
		limits.MaxQueuedBytes = int64(limits.MaxRequestBytes)
	}
	if limits.IdleTimeout <= 0 {
		limits.IdleTimeout = def.IdleTimeout
	}
	if limits.MaxPreAuthBytes <= 0 {
		limits.MaxPreAuthBytes = def.MaxPreAuthBytes
	}
	if limits.MaxPreAuthBytes > limits.MaxRequestBytes {
		limits.MaxPreAuthBytes = limits.MaxRequestBytes
	}
	if limits.MaxPreAuthQueuedBytes <= 0 {
		limits.MaxPreAuthQueuedBytes = def.MaxPreAuthQueuedBytes
	}
	if limits.MaxPreAuthQueuedBytes < int64(limits.MaxPreAuthBytes) {
		limits.MaxPreAuthQueuedBytes = int64(limits.MaxPreAuthBytes)
	}
	if limits.AuthTimeout <= 0 {
		limits.AuthTimeout = def.AuthTimeout
	}
	if limits.ReadTimeout <= 0 {
		limits.ReadTimeout = def.ReadTimeout
	}
	if limits.WriteTimeout <= 0 {
		limits.WriteTimeout = def.WriteTimeout
	}
	s := &Server{h: h, limits: limits, log: log, budget: newBudget(limits.MaxQueuedBytes), preauth: newBudget(limits.MaxPreAuthQueuedBytes), conns: map[*serverConn]struct{}{},
		perIP: map[netip.Addr]int{}, refusals: map[refusalKey]refusalLog{}, held: map[net.Conn]*time.Timer{}}
	if r := limits.MaxConnectionCreationRate; r > 0 && r < UnlimitedPerIP {
		s.creation = rate.NewLimiter(rate.Limit(r), r)
	}
	s.stop, s.stopped = context.WithCancel(context.Background())
	return s
}

// Serve accepts connections on ln as the default listener (PLAINTEXT,
// node-to-node APIs included) until Close. It returns nil after Close.
func (s *Server) Serve(ln net.Listener) error { return s.ServeListener(ln, DefaultListener()) }

// ServeListener accepts connections on ln with l's security until Close.
// It returns nil after Close.
func (s *Server) ServeListener(ln net.Listener, l *Listener) error {
	if l.Protocol.UsesTLS() && l.TLS == nil || l.Protocol.UsesSASL() && l.SASL == nil {
		ln.Close()
		return fmt.Errorf("wire: listener %s (%s) is missing its TLS or SASL set-up", l.Name, l.Protocol)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of file descriptors or similar: back off instead of spinning.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; backing off", "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.accept(nc, l)
	}
}

func (s *Server) accept(nc net.Conn, l *Listener) {
	ip := connIP(nc.RemoteAddr())
	exempt := s.exempt(ip, l)
	if s.creation != nil && !exempt && !s.creation.Allow() {
		// Over max.connection.creation.rate: this listener takes no
		// further connection until the rate allows this one (they wait
		// in the kernel's backlog), as Kafka's acceptor does.
		start := time.Now()
		if err := s.creation.Wait(s.stop); err != nil {
			nc.Close()
			return
		}
		s.Stats.AcceptDelayed.Add(1)
		s.Stats.AcceptDelay.Add(int64(time.Since(start)))
	}
	s.mu.Lock()
	if s.closed || len(s.conns) >= s.limits.MaxConnections {
		s.mu.Unlock()
		s.Stats.Rejected.Add(1)
		s.log.Warn("connection refused: max.connections reached", "peer", nc.RemoteAddr().String(), "limit", s.limits.MaxConnections)
		nc.Close()
		return
	}
	s.mu.Unlock()
	if !exempt {
		// Kafka records the connection against the address's rate
		// before counting it, so a refused one counts too.
		if d := s.throttle(ip); d > 0 {
			s.Stats.Throttled.Add(1)
			s.mu.Lock()
			s.logRefusal(ip, "connection_creation_rate quota exceeded; closing after the throttle time", "throttle", d)
			s.mu.Unlock()
			s.hold(nc, d)
			return
		}
	}
	s.mu.Lock()
	if s.closed || len(s.conns) >= s.limits.MaxConnections {
		// Closed, or the other listeners took the last places meanwhile.
		s.mu.Unlock()
		s.Stats.Rejected.Add(1)
		nc.Close()
		return
	}
	if limit := s.perIPLimit(ip); !exempt && s.perIP[ip] >= limit {
		s.logRefusal(ip, "max.connections.per.ip reached", "limit", limit)
		s.mu.Unlock()
		s.Stats.RejectedPerIP.Add(1)
		nc.Close()
		return
	}
	s.perIP[ip]++
	tc, plainTCP := nc.(*net.TCPConn)
	if plainTCP {
		tc.SetNoDelay(true)
	}
	if l.Protocol.UsesTLS() {
		nc, plainTCP = tls.Server(nc, l.TLS), false
	}
	c := &serverConn{
		s:        s,
		nc:       nc,
		plainTCP: plainTCP,
		rd:       socketReader(nc, plainTCP),
		listener: l,
		ip:       ip,
		info:     &Conn{ID: s.nextID.Add(1), Remote: nc.RemoteAddr(), Local: nc.LocalAddr(), Listener: l, Host: remoteIP(nc.RemoteAddr()), born: time.Now()},
		pending:  make(chan pending, s.limits.MaxInFlight),
		auth:     authState{principal: auth.Anonymous, authed: !l.Protocol.UsesSASL()},
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if !c.auth.authed {
		c.authTimer = time.AfterFunc(s.limits.AuthTimeout, c.authTimedOut)
	}
	s.conns[c] = struct{}{}
	s.wg.Add(2)
	s.mu.Unlock()
	s.Stats.Accepted.Add(1)
	s.Stats.Open.Add(1)
	go c.readLoop()
	go c.writeLoop()
}

// Close stops accepting, closes every connection and waits for their
// goroutines. Replies still waiting see their context cancelled.
func (s *Server) Close() error {
	s.stopped()
	s.mu.Lock()
	s.closed = true
	for _, ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.close()
	}
	for nc, t := range s.held {
		t.Stop()
		nc.Close()
		delete(s.held, nc)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

type pending struct {
	req    *Request
	reply  Reply
	budget *budget // the budget size is held in: the shared one, or the pre-authentication one
	size   int64   // bytes held in the budget until the reply is written
	start  time.Time
	// raw is a bare SASL token to send (after SaslHandshake v0) instead
	// of a response; closeAfter closes the connection once written.
	raw        []byte
	closeAfter bool
}

type serverConn struct {
	s        *Server
	nc       net.Conn
	plainTCP bool       // nc is a TCP socket (sendfile works); false under TLS
	ip       netip.Addr // the client's address, as Server.perIP counts it
	rd       io.Reader  // frames are read from it: nc, or a rawReader on nc's socket
	listener *Listener
	info     *Conn
	auth     authState // the reader's alone
	pending  chan pending
	ctx      context.Context
	cancel   context.CancelFunc
	once     sync.Once
	// authTimer closes a SASL listener's connection that has not
	// authenticated within AuthTimeout; authenticated stops it (the
	// timer's goroutine reads it, the reader sets it once).
	authTimer     *time.Timer
	authenticated atomic.Bool
}

func (c *serverConn) close() {
	c.once.Do(func() {
		c.cancel()
		c.nc.Close()
		if c.authTimer != nil {
			c.authTimer.Stop()
		}
	})
}

// drop closes the connection because of what the peer sent. It is logged once
// per connection (the connection is gone after it); before authentication
// at most once a minute per client address and reason (anyone can send
// bad frames as fast as they can connect).
func (c *serverConn) drop(reason string, args ...any) {
	c.s.Stats.BadFrames.Add(1)
	if !c.auth.authed {
		c.s.mu.Lock()
		c.s.logLimited(c.ip, "closing unauthenticated connection: "+reason, append([]any{"peer", c.info.Remote.String(), "listener", c.listener.Name}, args...)...)
		c.s.mu.Unlock()
	} else {
		c.s.log.Warn("closing connection: "+reason, append([]any{"peer", c.info.Remote.String()}, args...)...)
	}
	c.close()
}

func (c *serverConn) readLoop() {
	defer c.s.wg.Done()
	defer close(c.pending)
	if !c.handshakeTLS() {
		return
	}
	var sizeBuf [4]byte
	for {
		c.nc.SetReadDeadline(time.Now().Add(c.s.limits.IdleTimeout))
		if _, err := io.ReadFull(c.rd, sizeBuf[:]); err != nil {
			if c.ctx.Err() == nil && !errors.Is(err, io.EOF) {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					c.s.log.Info("closing idle connection", "peer", c.info.Remote.String(), "idle", c.s.limits.IdleTimeout)
				}
			}
			c.close()
			return
		}
		size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
		b, preAuth := c.frameBudget()
		if preAuth && size > c.s.limits.MaxPreAuthBytes {
			c.refusePreAuth(size)
			return
		}
		if c.auth.raw {
			// After SaslHandshake v0: a bare SASL token, not a request.
			if !c.rawToken(size, b) {
				return
			}
			continue
		}
		if size < 8 || size > c.s.limits.MaxRequestBytes {
			// 8 = api key + version + correlation id: nothing smaller is a request.
			c.drop("bad frame size", "size", size, "max", c.s.limits.MaxRequestBytes)
			return
		}
		c.nc.SetReadDeadline(time.Now().Add(c.s.limits.ReadTimeout))
		buf, err := c.readFrame(int(size), b, preAuth)
		if err != nil {
			if c.ctx.Err() == nil {
				c.drop("truncated frame", "size", size, "err", err)
			}
			return
		}
		c.s.Stats.BytesIn.Add(int64(size) + 4)
		req, err := c.decode(buf)
		if err != nil {
			b.release(int64(size))
			c.drop("undecodable request", "err", err)
			return
		}
		c.s.Stats.Requests.Add(1)
		if d := c.info.muted(); d > 0 {
			// Throttled (Conn.Throttle): this request waits its turn.
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-c.ctx.Done():
				t.Stop()
				b.release(int64(size))
				return
			}
		}
		if reason := c.admit(req.Key); reason != "" {
			b.release(int64(size))
			c.drop("unexpected request: " + reason)
			return
		}
		req.Principal = c.auth.principal
		start := time.Now()
		var reply Reply
		closeAfter := false
		switch {
		case req.Body == nil:
			reply = c.unsupportedApiVersions(req)
		case (req.Key == kmsg.SASLHandshake.Int16() || req.Key == kmsg.SASLAuthenticate.Int16()) && !c.listener.Protocol.UsesSASL():
			reply = Respond(saslNotEnabled(req)) // as Kafka: an error, the connection stays
		case req.Key == kmsg.SASLHandshake.Int16():
			var resp kmsg.Response
			resp, closeAfter = c.saslHandshake(req)
			reply = Respond(resp)
		case req.Key == kmsg.SASLAuthenticate.Int16():
			var resp kmsg.Response
			resp, closeAfter = c.saslAuthenticate(req)
			reply = Respond(resp)
		default:
			if reply = c.handle(req); reply == nil {
				b.release(int64(size))
				return // it panicked: the connection is closed
			}
		}
		select {
		case c.pending <- pending{req: req, reply: reply, budget: b, size: int64(size), start: start, closeAfter: closeAfter}:
		case <-c.ctx.Done():
			b.release(int64(size))
			return
		}
		if closeAfter {
			return // the writer sends the answer, then closes
		}
	}
}

// rawToken reads and answers one bare SASL token (SaslHandshake v0's
// framing: a size and the token, both ways). false: stop reading.
func (c *serverConn) rawToken(size int32, b *budget) bool {
	const maxToken = 64 << 10
	if size < 0 || size > maxToken {
		c.drop("bad SASL token size", "size", size)
		return false
	}
	c.nc.SetReadDeadline(time.Now().Add(c.s.limits.ReadTimeout))
	buf, err := c.readFrame(int(size), b, b == c.s.preauth)
	if err != nil {
		if c.ctx.Err() == nil {
			c.drop("truncated SASL token", "size", size, "err", err)
		}
		return false
	}
	c.s.Stats.BytesIn.Add(int64(size) + 4)
	out, code, _, _, fatal := c.saslStep(buf, 0, true)
	if code != 0 || fatal {
		// v0 has no way to say why: Kafka closes the connection.
		b.release(int64(size))
		c.close()
		return false
	}
	if c.auth.sess == nil {
		c.auth.raw = false // done
	}
	select {
	case c.pending <- pending{req: &Request{Key: -1}, budget: b, size: int64(size), start: time.Now(), raw: append([]byte{}, out...)}:
		return true
	case <-c.ctx.Done():
		b.release(int64(size))
		return false
	}
}

// frameChunk is how much of a frame is reserved and read at a time.
const frameChunk = 64 << 10

// readFrame reads a frame body of size bytes into memory taken from b,
// reserved as the bytes arrive rather than for the announced size up
// front: a client that announces a large frame and stalls holds at most
// one chunk (until ReadTimeout), so stalled clients cannot starve the
// others. On error nothing stays reserved; on success size bytes are,
// until the reply is written.
//
// A pre-authentication frame (preAuth) takes no buffer before its budget:
// its buffer grows with what it reserved (at most twice that), so the
// memory of unauthenticated connections stays within about twice
// MaxPreAuthQueuedBytes however many announce a frame and stall.
func (c *serverConn) readFrame(size int, b *budget, preAuth bool) ([]byte, error) {
	// Up to frameUpfront the whole frame's buffer comes at once from the
	// pool (frames.go): no doubling, no copy, no zeroing. A larger frame
	// also takes a whole buffer if the pool has a free one of its size:
	// that memory is held already, a stalled client takes nothing more by
	// holding it. Otherwise it grows by doubling as the bytes arrive, so a
	// client that announces a huge frame and stalls holds little memory.
	// (Frames of a few MiB are the common case under a saturated producer:
	// a 1 MiB batch per partition; doubling copied each one about once.)
	var buf []byte
	if !preAuth {
		var ok bool
		if buf, ok = pooledFrame(size); !ok {
			buf = getFrame(min(size, frameUpfront))
		}
	}
	for len(buf) < size {
		n := min(size-len(buf), frameChunk)
		if !b.acquire(c.ctx, int64(n)) {
			b.release(int64(len(buf)))
			if buf != nil {
				putFrame(buf)
			}
			return nil, c.ctx.Err()
		}
		if len(buf)+n > cap(buf) {
			// Double rather than grow by a chunk: a large produce frame
			// then costs a few buffers and one frame's worth of copying,
			// not a dozen (growing by chunks was a quarter of the
			// broker's CPU under a 1 KiB-record load).
			want := max(2*cap(buf), 4*frameChunk)
			if preAuth {
				want = max(2*cap(buf), len(buf)+n)
			}
			grown := getFrame(min(size, want))[:len(buf)]
			if buf != nil {
				framesGrown.Add(1)
				copy(grown, buf)
				putFrame(buf)
			}
			buf = grown
		}
		buf = buf[:len(buf)+n]
		if _, err := io.ReadFull(c.rd, buf[len(buf)-n:]); err != nil {
			b.release(int64(len(buf)))
			return nil, err
		}
	}
	return buf, nil
}

// frameUpfront: frames up to this size get their whole buffer at once.
const frameUpfront = 1 << 20

var errUnsupported = errors.New("unsupported")

// decode parses the request header and body. A request for an ApiVersions
// version the server lacks comes back with a nil Body: Kafka answers it with
// a v0 response listing what it supports (KIP-511's downgrade).
func (c *serverConn) decode(buf []byte) (*Request, error) {
	key := int16(binary.BigEndian.Uint16(buf[0:]))
	version := int16(binary.BigEndian.Uint16(buf[2:]))
	req := &Request{Key: key, Version: version, CorrelationID: int32(binary.BigEndian.Uint32(buf[4:])), Conn: c.info, Size: len(buf), frame: buf}
	rest := buf[8:]
	// Header v1+ has a nullable client id (int16 length), every version we
	// serve has it.
	if len(rest) < 2 {
		return nil, fmt.Errorf("key %d: header truncated", key)
	}
	n := int16(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if n > 0 {
		if int(n) > len(rest) {
			return nil, fmt.Errorf("key %d: client id runs past the frame", key)
		}
		req.ClientID = string(rest[:n])
		rest = rest[n:]
	} else if n < -1 {
		return nil, fmt.Errorf("key %d: client id length %d", key, n)
	}

	minV, maxV, ok := c.versions(key)
	body := kmsg.RequestForKey(key)
	if !ok || body == nil {
		return nil, fmt.Errorf("api key %d (%s) not served: %w", key, kmsg.NameForKey(key), errUnsupported)
	}
	if version < minV || version > maxV || version > body.MaxVersion() {
		if key == kmsg.ApiVersions.Int16() {
			return req, nil
		}
		return nil, fmt.Errorf("%s v%d not served (v%d-v%d): %w", kmsg.NameForKey(key), version, minV, maxV, errUnsupported)
	}
	body.SetVersion(version)
	if body.IsFlexible() {
		var err error
		if rest, err = skipTags(rest); err != nil {
			return nil, fmt.Errorf("%s v%d header tags: %w", kmsg.NameForKey(key), version, err)
		}
	}
	if err := body.ReadFrom(rest); err != nil {
		return nil, fmt.Errorf("%s v%d body: %w", kmsg.NameForKey(key), version, err)
	}
	req.Body = body
	return req, nil
}

// unsupportedApiVersions answers an ApiVersions request whose version the
// server lacks with a v0 UNSUPPORTED_VERSION response that lists only
// ApiVersions' own range, as Kafka does (KIP-511), so the client retries
// with a version this server has and learns the rest from that answer,
// finalized features included. (Listing every key here made franz-go
// take this v0 answer as the key table and never see the features, so it
// missed transaction.version 2 on some connections.)
func (c *serverConn) unsupportedApiVersions(req *Request) Reply {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	for _, k := range SupportedKeys(c.s.h, c.listener) {
		if k.ApiKey == kmsg.ApiVersions.Int16() {
			resp.ApiKeys = append(resp.ApiKeys, k)
		}
	}
	req.Version = 0
	return Respond(resp)
}

// SupportedKeys lists the API keys and versions served on listener l, for
// an ApiVersions response: the handler's, and the SASL APIs on a SASL
// listener.
func SupportedKeys(h Handler, l *Listener) []kmsg.ApiVersionsResponseApiKey {
	if l == nil {
		l = DefaultListener()
	}
	var keys []kmsg.ApiVersionsResponseApiKey
	for k := int16(0); k <= kmsg.MaxKey; k++ {
		minV, maxV, ok := h.Versions(l, k)
		if v, sasl := saslKeys[k]; sasl {
			minV, maxV, ok = v[0], v[1], l.Protocol.UsesSASL()
		}
		if !ok {
			continue
		}
		keys = append(keys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: minV, MaxVersion: maxV})
	}
	return keys
}

func (c *serverConn) writeLoop() {
	defer c.s.wg.Done()
	defer func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		if c.s.perIP[c.ip]--; c.s.perIP[c.ip] <= 0 {
			delete(c.s.perIP, c.ip)
		}
		c.s.mu.Unlock()
		c.s.Stats.Open.Add(-1)
	}()
	var out []byte
	for p := range c.pending {
		if p.raw != nil {
			p.budget.release(p.size)
			out = binary.BigEndian.AppendUint32(out[:0], uint32(len(p.raw)))
			out = append(out, p.raw...)
			c.nc.SetWriteDeadline(time.Now().Add(c.s.limits.WriteTimeout))
			n, err := c.nc.Write(out)
			c.s.Stats.BytesOut.Add(int64(n))
			if err != nil {
				c.close()
			}
			continue
		}
		resp := c.run(p)
		p.budget.release(p.size)
		if resp == nil || c.ctx.Err() != nil {
			if sp, ok := resp.(*Spliced); ok && sp.Release != nil {
				sp.Release() // never written: let its files go
			}
			p.req.recycleFrame()
			continue
		}
		out = appendResponse(out[:0], p.req, resp)
		c.nc.SetWriteDeadline(time.Now().Add(c.s.limits.WriteTimeout))
		n, err := c.write(out, p.req, resp)
		c.s.Stats.BytesOut.Add(n)
		if err != nil {
			p.req.recycleFrame()
			c.close()
			continue // drain pending so their budget is released
		}
		if c.s.OnReply != nil {
			c.s.OnReply(p.req, resp, time.Since(p.start))
		}
		// Only after OnReply, which reads the request: the metrics count a
		// produce's records from its batches, which lie in the frame. Once
		// the reply is written, the frame's other holders (Raft) may have
		// let go already, and the pool would hand it to the next request.
		p.req.recycleFrame()
		if p.closeAfter {
			c.close()
			continue
		}
		if cap(out) > 1<<20 {
			out = nil // don't pin one huge fetch response's buffer forever
		}
	}
	c.close()
}

// write sends one framed response; a Spliced one goes out in parts, its file
// ranges by sendfile.
func (c *serverConn) write(frame []byte, req *Request, resp kmsg.Response) (int64, error) {
	sp, ok := resp.(*Spliced)
	if !ok {
		n, err := c.nc.Write(frame)
		return int64(n), err
	}
	if sp.Release != nil {
		defer sp.Release()
	}
	parts, err := splice(frame, sp, sp.IsFlexible())
	if err != nil {
		c.s.log.Error("cannot splice response; closing connection", "peer", c.info.Remote.String(), "api", kmsg.NameForKey(req.Key), "err", err)
		return 0, err
	}
	if !c.plainTCP {
		// No sendfile through TLS: one buffer, so one write and as few
		// TLS records as the response needs.
		flat, err := flatten(parts)
		if err != nil {
			return 0, err
		}
		n, err := c.nc.Write(flat)
		return int64(n), err
	}
	return writeParts(c.nc, parts)
}

// handle calls the handler; a panic closes only this connection and
// returns a nil Reply.
func (c *serverConn) handle(req *Request) (reply Reply) {
	defer func() {
		if r := recover(); r != nil {
			c.panicked(req, r)
			reply = nil
		}
	}()
	return c.s.h.Handle(c.ctx, req)
}

// panicked logs a handler's panic with its stack, counts it and closes the
// connection: one bad request must never take the broker down.
func (c *serverConn) panicked(req *Request, r any) {
	c.s.Stats.Panics.Add(1)
	c.s.log.Error("handler panic; closing connection", "peer", c.info.Remote.String(),
		"api", kmsg.NameForKey(req.Key), "version", req.Version, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	c.close()
}

// run calls a reply; a panicking handler closes only its own connection.
func (c *serverConn) run(p pending) (resp kmsg.Response) {
	defer func() {
		if r := recover(); r != nil {
			c.panicked(p.req, r)
			resp = nil
		}
	}()
	if c.ctx.Err() != nil {
		return nil
	}
	return p.reply(c.ctx)
}

// appendResponse frames resp: size, correlation id, header tags for flexible
// versions (never for ApiVersions, whose response header is always v0).
func appendResponse(dst []byte, req *Request, resp kmsg.Response) []byte {
	resp.SetVersion(req.Version)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(req.CorrelationID))
	if resp.IsFlexible() && req.Key != kmsg.ApiVersions.Int16() {
		dst = append(dst, 0)
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst, uint32(len(dst)-4))
	return dst
}

// skipTags skips a tagged-field section (uvarint count, then uvarint tag,
// uvarint size, bytes); the request header defines no tags we use.
func skipTags(b []byte) ([]byte, error) {
	n, used := binary.Uvarint(b)
	if used <= 0 {
		return nil, errors.New("bad tag count")
	}
	b = b[used:]
	for i := uint64(0); i < n; i++ {
		if _, used = binary.Uvarint(b); used <= 0 {
			return nil, errors.New("bad tag")
		}
		b = b[used:]
		size, used := binary.Uvarint(b)
		if used <= 0 || size > uint64(len(b)-used) {
			return nil, errors.New("bad tag size")
		}
		b = b[used+int(size):]
	}
	return b, nil
}

// budget is a byte semaphore over all connections' queued requests
// (queued.max.request.bytes), so many slow clients cannot grow memory without
// bound: readers wait for room before allocating a frame.
type budget struct {
	mu    sync.Mutex
	cond  *sync.Cond
	size  int64
	avail int64
	peak  int64 // most ever held at once (tests, metrics)
}

func newBudget(n int64) *budget {
	b := &budget{size: n, avail: n}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *budget) acquire(ctx context.Context, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.avail < n {
		stop := context.AfterFunc(ctx, func() {
			b.mu.Lock()
			b.cond.Broadcast()
			b.mu.Unlock()
		})
		defer stop()
		for b.avail < n {
			if ctx.Err() != nil {
				return false
			}
			b.cond.Wait()
		}
	}
	b.avail -= n
	b.peak = max(b.peak, b.size-b.avail)
	return true
}

func (b *budget) release(n int64) {
	b.mu.Lock()
	b.avail += n
	b.cond.Broadcast()
	b.mu.Unlock()
}

// used is what the budget's holders hold now and the most they held at once.
func (b *budget) used() (now, peak int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size - b.avail, b.peak
}
