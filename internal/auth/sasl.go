package auth

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// CredentialStore is where SCRAM credentials live (the metadata log).
type CredentialStore interface {
	ScramCredential(user, mechanism string) (ScramCredential, bool)
}

// SASLConfig is one listener's SASL set-up.
type SASLConfig struct {
	// Mechanisms is sasl.enabled.mechanisms, in the order advertised.
	Mechanisms []string
	// Scram holds SCRAM credentials; PLAIN also checks passwords against
	// them (a user made with AlterUserScramCredentials can log in with
	// PLAIN over TLS).
	Scram CredentialStore
	// PlainUsers are PLAIN users from the JAAS config's user_<name>="pw"
	// entries (Kafka's PlainLoginModule on the broker).
	PlainUsers map[string]string
	// OAuth validates OAUTHBEARER tokens.
	OAuth *OAuthValidator
}

// SASLServer runs a listener's SASL exchanges.
type SASLServer struct {
	cfg SASLConfig
}

// AuthError is an authentication failure; Msg is what the client is told
// (SaslAuthenticate's error message, with SASL_AUTHENTICATION_FAILED).
type AuthError struct{ Msg string }

func (e *AuthError) Error() string { return e.Msg }

// IsAuthError reports whether err is an authentication failure (as opposed
// to a malformed exchange).
func IsAuthError(err error) bool {
	var ae *AuthError
	return errors.As(err, &ae)
}

// NewSASLServer checks that every enabled mechanism is known and has what
// it needs.
func NewSASLServer(cfg SASLConfig) (*SASLServer, error) {
	if len(cfg.Mechanisms) == 0 {
		return nil, errors.New("sasl.enabled.mechanisms is empty")
	}
	for _, m := range cfg.Mechanisms {
		switch m {
		case MechPlain:
			if cfg.Scram == nil && len(cfg.PlainUsers) == 0 {
				return nil, errors.New("PLAIN has no users: give user_<name>=\"<password>\" in the listener's plain.sasl.jaas.config, or SCRAM credentials")
			}
		case MechScramSHA256, MechScramSHA512:
			if cfg.Scram == nil {
				return nil, fmt.Errorf("%s needs a credential store", m)
			}
		case MechOAuthBearer:
			if cfg.OAuth == nil {
				return nil, errors.New("OAUTHBEARER needs a token validator (sasl.oauthbearer.jwks.endpoint.url)")
			}
		default:
			return nil, fmt.Errorf("SASL mechanism %q is not supported (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)", m)
		}
	}
	return &SASLServer{cfg: cfg}, nil
}

// Mechanisms lists the enabled mechanisms (SaslHandshake's answer).
func (s *SASLServer) Mechanisms() []string { return slices.Clone(s.cfg.Mechanisms) }

// Session is one SASL exchange.
type Session interface {
	// Step takes the client's next message and returns the server's
	// reply. done reports success; an error ends the exchange (an
	// *AuthError for bad credentials).
	Step(in []byte) (out []byte, done bool, err error)
	// Principal is who authenticated, once done.
	Principal() Principal
	// Expiry is when the credential stops being valid (an OAUTHBEARER
	// token's exp plus the allowed clock skew); zero if it does not
	// expire.
	Expiry() time.Time
}

// Start begins an exchange with an enabled mechanism.
func (s *SASLServer) Start(mech string) (Session, bool) {
	if !slices.Contains(s.cfg.Mechanisms, mech) {
		return nil, false
	}
	switch mech {
	case MechPlain:
		return &plainSession{s: s}, true
	case MechScramSHA256, MechScramSHA512:
		return newScramSession(s.cfg.Scram, mech), true
	case MechOAuthBearer:
		return &oauthSession{v: s.cfg.OAuth}, true
	}
	return nil, false
}

// plainSession is RFC 4616: one message, authzid NUL authcid NUL passwd.
type plainSession struct {
	s    *SASLServer
	done bool
	user string
}

var errPlainFailed = &AuthError{"Authentication failed: Invalid username or password"}

func (p *plainSession) Step(in []byte) ([]byte, bool, error) {
	if p.done {
		return nil, false, errors.New("PLAIN exchange already complete")
	}
	p.done = true
	parts := bytes.Split(in, []byte{0})
	if len(parts) != 3 {
		return nil, false, &AuthError{"Invalid SASL/PLAIN response: expected 3 tokens"}
	}
	authz, user, pass := string(parts[0]), string(parts[1]), string(parts[2])
	if user == "" || pass == "" {
		return nil, false, &AuthError{"Authentication failed: username and password must not be empty"}
	}
	if authz != "" && authz != user {
		return nil, false, &AuthError{"Authentication failed: Client requested an authorization id that is different from username"}
	}
	if !p.s.verifyPlain(user, pass) {
		return nil, false, errPlainFailed
	}
	p.user = user
	return nil, true, nil
}

func (s *SASLServer) verifyPlain(user, pass string) bool {
	if want, ok := s.cfg.PlainUsers[user]; ok {
		return subtle.ConstantTimeCompare([]byte(want), []byte(pass)) == 1
	}
	if s.cfg.Scram == nil {
		return false
	}
	for _, mech := range []string{MechScramSHA512, MechScramSHA256} {
		if c, ok := s.cfg.Scram.ScramCredential(user, mech); ok {
			return c.VerifyPassword(pass)
		}
	}
	return false
}

func (p *plainSession) Principal() Principal { return User(p.user) }
func (p *plainSession) Expiry() time.Time    { return time.Time{} }

// oauthSession is RFC 7628 as Kafka runs it: the client's first message
// carries the token; a rejected token is answered with an error document
// the client acknowledges with a single %x01, and then the exchange fails
// with that document as the message.
type oauthSession struct {
	v       *OAuthValidator
	user    string
	expiry  time.Time
	failure string // the error document sent, awaiting the client's %x01
	done    bool
}

// oauthInitial is Kafka's OAuthBearerClientInitialResponse pattern:
// gs2 header, then key=value pairs separated by %x01, auth among them.
var (
	oauthInitial = regexp.MustCompile(`^n,(?:a=((?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+))?,\x01((?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*)\x01$`)
	oauthAuth    = regexp.MustCompile(`^(\w+) +([-_.a-zA-Z0-9]+)$`)
)

func (o *oauthSession) Step(in []byte) ([]byte, bool, error) {
	if o.done {
		return nil, false, errors.New("OAUTHBEARER exchange already complete")
	}
	if o.failure != "" {
		o.done = true
		return nil, false, &AuthError{o.failure}
	}
	m := oauthInitial.FindSubmatch(in)
	if m == nil {
		o.done = true
		return nil, false, &AuthError{"Invalid OAUTHBEARER client first message"}
	}
	var auth string
	for _, kv := range strings.Split(string(m[2]), "\x01") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == "auth" {
			auth = v
		}
	}
	a := oauthAuth.FindStringSubmatch(auth)
	if a == nil || !strings.EqualFold(a[1], "bearer") {
		o.done = true
		return nil, false, &AuthError{"Invalid OAUTHBEARER client first message: no Bearer token"}
	}
	sub, exp, err := o.v.Validate(a[2])
	if err == nil && len(m[1]) > 0 {
		if authz := saslName(string(m[1])); authz != sub {
			err = fmt.Errorf("%w: authorization id %q is not the token's principal %q", ErrInvalidToken, authz, sub)
		}
	}
	if err != nil {
		o.v.cfg.Logger.Debug("OAUTHBEARER token refused", "err", err)
		// Kafka's error document; the client answers %x01.
		o.failure = `{"status":"invalid_token"}`
		return []byte(o.failure), false, nil
	}
	o.user, o.expiry, o.done = sub, exp, true
	return nil, true, nil
}

func saslName(s string) string {
	return strings.NewReplacer("=2C", ",", "=3D", "=").Replace(s)
}

func (o *oauthSession) Principal() Principal { return User(o.user) }
func (o *oauthSession) Expiry() time.Time    { return o.expiry }
