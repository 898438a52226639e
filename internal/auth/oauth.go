package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

// OAuthConfig is how OAUTHBEARER tokens are validated; the names are
// Kafka's sasl.oauthbearer.* broker configs.
type OAuthConfig struct {
	// JWKSURL is sasl.oauthbearer.jwks.endpoint.url: an https:// (or
	// http://) URL of the identity provider's JSON Web Key Set, or a
	// file: URL of one on disk. Tokens must be signed by one of its keys.
	JWKSURL string
	// Refresh is sasl.oauthbearer.jwks.endpoint.refresh.ms (default one
	// hour): how often the key set is fetched or the file re-read.
	Refresh time.Duration
	// Issuer is sasl.oauthbearer.expected.issuer; empty: not checked.
	Issuer string
	// Audience is sasl.oauthbearer.expected.audience; empty: not
	// checked. The token's aud must name at least one of them.
	Audience []string
	// SubClaim is sasl.oauthbearer.sub.claim.name (default "sub"): the
	// claim that names the principal.
	SubClaim string
	// ClockSkew is sasl.oauthbearer.clock.skew.seconds: how far the
	// token issuer's clock may be off this node's, for exp, nbf and iat
	// alike (a token is accepted until exp plus the skew, and its
	// session lasts that long). 0: Kafka's default, 30 s; negative: none.
	ClockSkew time.Duration
	// AllowUnsecured accepts unsigned tokens ({"alg":"none"}), as Kafka's
	// default validator does when no JWKS is configured; expiry and the
	// subject are still checked. For development only.
	AllowUnsecured bool

	Logger *slog.Logger
	Now    func() time.Time // nil: time.Now
}

// OAuthValidator validates bearer tokens (JWTs).
type OAuthValidator struct {
	cfg     OAuthConfig
	keys    func() (keyfunc.Keyfunc, error)
	methods []string
	stop    context.CancelFunc
}

// ErrInvalidToken is wrapped by every validation failure.
var ErrInvalidToken = errors.New("invalid_token")

// NewOAuthValidator builds a validator; with a JWKS URL it fetches (or
// reads) the key set now, so a bad configuration fails at start-up.
func NewOAuthValidator(cfg OAuthConfig) (*OAuthValidator, error) {
	if cfg.SubClaim == "" {
		cfg.SubClaim = "sub"
	}
	if cfg.ClockSkew == 0 {
		cfg.ClockSkew = 30 * time.Second
	}
	cfg.ClockSkew = max(cfg.ClockSkew, 0)
	if cfg.Refresh <= 0 {
		cfg.Refresh = time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	v := &OAuthValidator{cfg: cfg, methods: []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}}
	if cfg.JWKSURL == "" {
		if !cfg.AllowUnsecured {
			return nil, errors.New("OAUTHBEARER: set sasl.oauthbearer.jwks.endpoint.url (an https: or file: URL of the identity provider's key set)")
		}
		return v, nil
	}
	u, err := url.Parse(cfg.JWKSURL)
	if err != nil {
		return nil, fmt.Errorf("sasl.oauthbearer.jwks.endpoint.url: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	v.stop = cancel
	switch u.Scheme {
	case "file":
		path := u.Path
		if path == "" {
			path = u.Opaque
		}
		f := &fileJWKS{path: path, every: cfg.Refresh, log: cfg.Logger}
		if _, err := f.get(); err != nil {
			cancel()
			return nil, err
		}
		v.keys = f.get
	case "https", "http":
		kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
			RefreshInterval: cfg.Refresh,
			HTTPTimeout:     10 * time.Second,
			RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
				return func(_ context.Context, err error) {
					cfg.Logger.Warn("refreshing the OAUTHBEARER key set", "url", u, "err", err)
				}
			},
		})
		if err != nil {
			cancel()
			return nil, fmt.Errorf("sasl.oauthbearer.jwks.endpoint.url %s: %w", cfg.JWKSURL, err)
		}
		v.keys = func() (keyfunc.Keyfunc, error) { return kf, nil }
	default:
		cancel()
		return nil, fmt.Errorf("sasl.oauthbearer.jwks.endpoint.url %q: want an https:, http: or file: URL", cfg.JWKSURL)
	}
	return v, nil
}

// Close stops the key set's refreshing.
func (v *OAuthValidator) Close() {
	if v != nil && v.stop != nil {
		v.stop()
	}
}

// Validate checks a token and returns its principal name and expiry: the
// token's exp plus the clock skew, the instant this node stops accepting
// it. (Returning the bare exp made a token within the skew past its exp
// pass the JWT checks and then fail as expired: the skew applied to nbf
// and iat only.)
func (v *OAuthValidator) Validate(token string) (string, time.Time, error) {
	opts := []jwt.ParserOption{
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(v.cfg.ClockSkew),
		jwt.WithTimeFunc(v.cfg.Now),
	}
	if v.cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(v.cfg.Issuer))
	}
	if len(v.cfg.Audience) > 0 {
		opts = append(opts, jwt.WithAudience(v.cfg.Audience...))
	}
	claims := jwt.MapClaims{}
	var err error
	if v.keys == nil {
		err = v.parseUnsecured(token, claims, opts)
	} else {
		var kf keyfunc.Keyfunc
		if kf, err = v.keys(); err == nil {
			_, err = jwt.ParseWithClaims(token, claims, kf.Keyfunc, append(opts, jwt.WithValidMethods(v.methods))...)
		}
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	sub, _ := claims[v.cfg.SubClaim].(string)
	if strings.TrimSpace(sub) == "" {
		return "", time.Time{}, fmt.Errorf("%w: no %q claim", ErrInvalidToken, v.cfg.SubClaim)
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return "", time.Time{}, fmt.Errorf("%w: no exp claim", ErrInvalidToken)
	}
	return sub, exp.Time.Add(v.cfg.ClockSkew), nil
}

// parseUnsecured accepts only alg "none" tokens with an empty signature,
// and validates their claims like any other.
func (v *OAuthValidator) parseUnsecured(token string, claims jwt.MapClaims, opts []jwt.ParserOption) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[2] != "" {
		return errors.New("not an unsecured JWS (header.claims.)")
	}
	hdr, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return fmt.Errorf("header: %w", err)
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if err := json.Unmarshal(hdr, &h); err != nil || h.Alg != "none" {
		return fmt.Errorf("unsecured token with alg %q", h.Alg)
	}
	body, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return fmt.Errorf("claims: %w", err)
	}
	if err := json.Unmarshal(body, &claims); err != nil {
		return fmt.Errorf("claims: %w", err)
	}
	return jwt.NewValidator(opts...).Validate(claims)
}

// fileJWKS is a key set file, re-read when it changes (checked at most
// once per refresh interval, and at most once a second).
type fileJWKS struct {
	path  string
	every time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	kf      keyfunc.Keyfunc
	checked time.Time
	mod     time.Time
	size    int64
}

func (f *fileJWKS) get() (keyfunc.Keyfunc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.kf != nil && time.Since(f.checked) < min(f.every, time.Second) {
		return f.kf, nil
	}
	f.checked = time.Now()
	st, err := os.Stat(f.path)
	if err != nil {
		if f.kf != nil {
			f.log.Warn("OAUTHBEARER key set file unreadable; keeping the last one", "path", f.path, "err", err)
			return f.kf, nil
		}
		return nil, fmt.Errorf("OAUTHBEARER key set: %w", err)
	}
	if f.kf != nil && st.ModTime().Equal(f.mod) && st.Size() == f.size {
		return f.kf, nil
	}
	raw, err := os.ReadFile(f.path)
	if err == nil && len(raw) > 1<<20 {
		err = fmt.Errorf("%d bytes: larger than 1 MiB", len(raw))
	}
	var kf keyfunc.Keyfunc
	if err == nil {
		kf, err = keyfunc.NewJWKSetJSON(raw)
	}
	if err != nil {
		if f.kf != nil {
			f.log.Warn("OAUTHBEARER key set file did not load; keeping the last one", "path", f.path, "err", err)
			return f.kf, nil
		}
		return nil, fmt.Errorf("OAUTHBEARER key set %s: %w", f.path, err)
	}
	if f.kf != nil {
		f.log.Info("reloaded the OAUTHBEARER key set", "path", f.path)
	}
	f.kf, f.mod, f.size = kf, st.ModTime(), st.Size()
	return kf, nil
}
