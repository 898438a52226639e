package wire

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
)

// SecurityProtocol is a listener's protocol, as Kafka's
// listener.security.protocol.map names them.
type SecurityProtocol string

const (
	Plaintext     SecurityProtocol = "PLAINTEXT"
	SSL           SecurityProtocol = "SSL"
	SASLPlaintext SecurityProtocol = "SASL_PLAINTEXT"
	SASLSSL       SecurityProtocol = "SASL_SSL"
)

// ParseSecurityProtocol accepts Kafka's four protocol names.
func ParseSecurityProtocol(s string) (SecurityProtocol, error) {
	switch p := SecurityProtocol(s); p {
	case Plaintext, SSL, SASLPlaintext, SASLSSL:
		return p, nil
	}
	return "", fmt.Errorf("security protocol %q: want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", s)
}

// UsesTLS reports whether the protocol runs over TLS.
func (p SecurityProtocol) UsesTLS() bool { return p == SSL || p == SASLSSL }

// UsesSASL reports whether the protocol authenticates with SASL.
func (p SecurityProtocol) UsesSASL() bool { return p == SASLPlaintext || p == SASLSSL }

// Listener is one named endpoint's security (Kafka's listeners,
// listener.security.protocol.map and the listener.name.<name>.* configs).
type Listener struct {
	Name     string
	Protocol SecurityProtocol
	// TLS is the server config of an SSL or SASL_SSL listener.
	TLS *tls.Config
	// SASL runs the enabled mechanisms of a SASL_* listener.
	SASL *auth.SASLServer
	// CertPrincipal names the principal of an SSL listener's client by
	// its verified certificate (ssl.principal.mapping.rules); nil: the
	// subject's distinguished name as it is.
	CertPrincipal func(*x509.Certificate) (auth.Principal, error)
	// ReauthAfter is connections.max.reauth.ms: a SASL session lasts at
	// most this long (and no longer than its credential, an OAUTHBEARER
	// token's expiry); a client re-authenticates on the same connection
	// (KIP-368) or is disconnected at its next request. 0: sessions last
	// as long as their credential.
	ReauthAfter time.Duration
	// Internal marks the node-to-node listener (inter.broker.listener.name):
	// the broker serves its internal APIs only there.
	Internal bool
}

// DefaultListener is the one listener of a server without a security
// configuration: PLAINTEXT, and the node-to-node listener too.
func DefaultListener() *Listener {
	return &Listener{Name: string(Plaintext), Protocol: Plaintext, Internal: true}
}

// Authenticates reports whether every client of the listener proves who it
// is: SASL, or TLS with required client certificates.
func (l *Listener) Authenticates(clientAuthRequired bool) bool {
	return l.Protocol.UsesSASL() || l.Protocol == SSL && clientAuthRequired
}

// saslKeys are the APIs the wire layer itself serves on SASL listeners.
var saslKeys = map[int16][2]int16{
	kmsg.SASLHandshake.Int16():    {0, 1},
	kmsg.SASLAuthenticate.Int16(): {0, 2},
}

// versions is what the connection serves for key: the SASL APIs on SASL
// listeners, otherwise what the handler serves on this listener.
//
// On other listeners the SASL APIs are decoded too (but not advertised),
// to be answered ILLEGAL_SASL_STATE as Kafka does.
func (c *serverConn) versions(key int16) (int16, int16, bool) {
	if v, ok := saslKeys[key]; ok {
		return v[0], v[1], true
	}
	return c.s.h.Versions(c.listener, key)
}

// saslNotEnabled answers a SASL request on a listener without SASL.
func saslNotEnabled(req *Request) kmsg.Response {
	switch r := req.Body.(type) {
	case *kmsg.SASLHandshakeRequest:
		resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.ErrorCode = kerr.IllegalSaslState.Code
		resp.SupportedMechanisms = []string{}
		return resp
	case *kmsg.SASLAuthenticateRequest:
		resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.IllegalSaslState.Code
		resp.ErrorMessage = kmsg.StringPtr("SASL is not enabled on this listener")
		return resp
	}
	return nil
}

// authState is a connection's authentication, touched only by its reader.
type authState struct {
	principal auth.Principal
	authed    bool
	mech      string       // the mechanism of the current or last exchange
	sess      auth.Session // the exchange under way
	raw       bool         // SaslHandshake v0: the next frames are bare SASL tokens
	expires   time.Time    // zero: the session does not expire
	// reauthOK: the client authenticated with SaslAuthenticate v1+ and
	// so may re-authenticate on this connection (KIP-368).
	reauthOK bool
}

// handshakeTLS runs the TLS handshake of a new connection and names an SSL
// client by its certificate. false: the connection is closed.
func (c *serverConn) handshakeTLS() bool {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return true
	}
	tc.SetDeadline(time.Now().Add(c.s.limits.ReadTimeout))
	if err := tc.HandshakeContext(c.ctx); err != nil {
		c.s.Stats.AuthFailures.Add(1)
		level := slog.LevelInfo
		if errors.Is(err, io.EOF) {
			level = slog.LevelDebug // a port check, or a client that gave up
		}
		c.s.log.Log(c.ctx, level, "TLS handshake failed", "peer", c.info.Remote.String(), "listener", c.listener.Name, "err", err)
		c.close()
		return false
	}
	tc.SetDeadline(time.Time{})
	st := tc.ConnectionState()
	if c.listener.Protocol != SSL || len(st.PeerCertificates) == 0 {
		return true
	}
	p, err := c.certPrincipal(st.PeerCertificates[0])
	if err != nil {
		c.s.Stats.AuthFailures.Add(1)
		c.s.log.Warn("client certificate maps to no principal; closing connection", "peer", c.info.Remote.String(), "listener", c.listener.Name, "err", err)
		c.close()
		return false
	}
	c.auth.principal = p
	return true
}

func (c *serverConn) certPrincipal(cert *x509.Certificate) (auth.Principal, error) {
	if c.listener.CertPrincipal != nil {
		return c.listener.CertPrincipal(cert)
	}
	return auth.User(cert.Subject.String()), nil
}

// admit decides whether a decoded request may go on: before a SASL
// listener's client has authenticated only ApiVersions and the SASL APIs
// are served (Kafka closes the connection on anything else), and a session
// past its lifetime is closed at its next request. A non-empty reason
// closes the connection.
func (c *serverConn) admit(key int16) (reason string) {
	if !c.listener.Protocol.UsesSASL() {
		return ""
	}
	_, sasl := saslKeys[key]
	if sasl || key == kmsg.ApiVersions.Int16() {
		return ""
	}
	switch {
	case !c.auth.authed:
		return fmt.Sprintf("%s before SASL authentication", kmsg.NameForKey(key))
	case c.auth.sess != nil:
		return fmt.Sprintf("%s during SASL re-authentication", kmsg.NameForKey(key))
	case !c.auth.expires.IsZero() && time.Now().After(c.auth.expires):
		return "SASL session expired without re-authentication (connections.max.reauth.ms or the credential's expiry)"
	}
	return ""
}

// saslHandshake answers SaslHandshake. fatal: close after the answer.
func (c *serverConn) saslHandshake(req *Request) (resp kmsg.Response, fatal bool) {
	r := req.Body.(*kmsg.SASLHandshakeRequest)
	out := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
	out.SupportedMechanisms = c.listener.SASL.Mechanisms()
	a := &c.auth
	switch {
	case a.sess != nil:
		out.ErrorCode = kerr.IllegalSaslState.Code
		return out, true
	case a.authed && (!a.reauthOK || r.Version < 1):
		// Re-authentication needs a client that said it can (KIP-368).
		out.ErrorCode = kerr.IllegalSaslState.Code
		return out, true
	case a.authed && r.Mechanism != a.mech:
		c.s.log.Info("re-authentication with another mechanism refused", "peer", c.info.Remote.String(), "from", a.mech, "to", r.Mechanism)
		out.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return out, true
	}
	sess, ok := c.listener.SASL.Start(r.Mechanism)
	if !ok {
		out.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return out, true
	}
	a.sess, a.mech, a.raw = sess, r.Mechanism, r.Version == 0
	return out, false
}

// saslAuthenticate answers SaslAuthenticate (or, raw, a bare token after
// SaslHandshake v0). fatal: close after the answer.
func (c *serverConn) saslStep(token []byte, version int16, raw bool) (out []byte, code int16, msg string, lifetime time.Duration, fatal bool) {
	a := &c.auth
	if a.sess == nil {
		return nil, kerr.IllegalSaslState.Code, "SaslAuthenticate without SaslHandshake", 0, true
	}
	out, done, err := a.sess.Step(token)
	if err != nil {
		a.sess = nil
		c.s.Stats.AuthFailures.Add(1)
		msg := "Authentication failed: malformed SASL exchange"
		if auth.IsAuthError(err) {
			msg = err.Error()
		}
		c.s.log.Info("SASL authentication failed", "peer", c.info.Remote.String(), "listener", c.listener.Name, "mechanism", a.mech, "err", err)
		return nil, kerr.SaslAuthenticationFailed.Code, msg, 0, true
	}
	if !done {
		return out, 0, "", 0, false
	}
	p := a.sess.Principal()
	expiry := a.sess.Expiry()
	a.sess = nil
	if a.authed && p != a.principal {
		c.s.Stats.AuthFailures.Add(1)
		c.s.log.Warn("re-authentication as another principal refused", "peer", c.info.Remote.String(), "was", a.principal.String(), "now", p.String())
		return nil, kerr.SaslAuthenticationFailed.Code, "Cannot change principals during re-authentication from " + a.principal.String() + " to " + p.String(), 0, true
	}
	now := time.Now()
	if !expiry.IsZero() && !expiry.After(now) {
		return nil, kerr.SaslAuthenticationFailed.Code, "Authentication failed: the credential has expired", 0, true
	}
	if !a.authed {
		c.s.Stats.AuthSuccesses.Add(1)
		c.s.log.Debug("SASL authenticated", "peer", c.info.Remote.String(), "listener", c.listener.Name, "mechanism", a.mech, "principal", p.String())
	}
	a.authed, a.principal = true, p
	if !c.authenticated.Swap(true) && c.authTimer != nil {
		c.authTimer.Stop()
	}
	a.reauthOK = !raw && version >= 1
	a.expires = time.Time{}
	if c.listener.ReauthAfter > 0 {
		a.expires = now.Add(c.listener.ReauthAfter)
	}
	if !expiry.IsZero() && (a.expires.IsZero() || expiry.Before(a.expires)) {
		a.expires = expiry
	}
	if !a.expires.IsZero() {
		lifetime = a.expires.Sub(now)
	}
	return out, 0, "", lifetime, false
}

func (c *serverConn) saslAuthenticate(req *Request) (kmsg.Response, bool) {
	r := req.Body.(*kmsg.SASLAuthenticateRequest)
	resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	if c.auth.raw {
		// After SaslHandshake v0 the client sends bare tokens, not this.
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return resp, true
	}
	out, code, msg, lifetime, fatal := c.saslStep(r.SASLAuthBytes, r.Version, false)
	resp.SASLAuthBytes, resp.ErrorCode = out, code
	if msg != "" {
		resp.ErrorMessage = &msg
	}
	if r.Version >= 1 && lifetime > 0 {
		resp.SessionLifetimeMillis = max(lifetime.Milliseconds(), 1)
	}
	return resp, fatal
}

// remoteIP is the client's address without the port (ACL host matching).
func remoteIP(a net.Addr) string {
	if a == nil {
		return ""
	}
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// Code is the protocol's number in BrokerRegistration (Kafka's
// SecurityProtocol ids: PLAINTEXT 0, SSL 1, SASL_PLAINTEXT 2, SASL_SSL 3).
func (p SecurityProtocol) Code() int16 {
	switch p {
	case SSL:
		return 1
	case SASLPlaintext:
		return 2
	case SASLSSL:
		return 3
	}
	return 0
}

// ProtocolForCode is the protocol of a BrokerRegistration code
// (PLAINTEXT for an unknown one).
func ProtocolForCode(code int16) SecurityProtocol {
	switch code {
	case 1:
		return SSL
	case 2:
		return SASLPlaintext
	case 3:
		return SASLSSL
	}
	return Plaintext
}
