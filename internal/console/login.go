package console

// Logins: when the cluster's Kafka clients must authenticate, so must the
// console's users, and the console then reads and acts as the user logged
// in: every page asks the broker's own authorizer (broker.Authorized, the
// rule each Kafka request is held to) whether that principal may see what
// it shows. The admin listener's other endpoints (/metrics, /debug/pprof)
// follow the same logins under a setting of their own (admin.auth).
//
// A login is a Kafka user and password of the cluster (a SCRAM credential
// or a PLAIN user of a listener's JAAS config), or a client certificate the
// admin listener verified. It opens a session: a random token in a cookie
// (HttpOnly, SameSite=Strict, Secure over TLS) that the server keeps with
// its principal, a CSRF token and its expiry. Every POST but the login
// itself needs the session's CSRF token (a form field or X-CSRF-Token);
// the login form is guarded like the lab's actions (same origin only).
// Reads (GET) also take HTTP Basic credentials, for curl and Prometheus.

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"holdfast/internal/auth"
)

// Session limits.
const (
	// SessionIdle ends a session not used for this long.
	SessionIdle = time.Hour
	// SessionMax ends every session this long after its login.
	SessionMax = 12 * time.Hour
	// MaxSessions bounds the sessions kept: a login beyond it ends the
	// oldest.
	MaxSessions = 10000
	// loginPenalty holds the next login after a failed one: a password
	// cannot be guessed at speed (logins are checked one at a time).
	loginPenalty = 500 * time.Millisecond

	sessionCookie = "holdfast_session"
	csrfField     = "csrf"
	csrfHeader    = "X-CSRF-Token"
)

// GateConfig says who may use the admin listener.
type GateConfig struct {
	// Pages: the console's pages need a login.
	Pages bool
	// Endpoints: /metrics (DESCRIBE on the CLUSTER) and /debug/pprof
	// (ALTER on the CLUSTER) need a login; MetricsOpen leaves /metrics
	// open all the same (a scraper without credentials).
	Endpoints, MetricsOpen bool
	// Password checks a Kafka user's password.
	Password func(user, password string) bool
	// Certificate names the principal of a client certificate the admin
	// listener verified (the TLS listener's principal mapping); nil: a
	// certificate logs nobody in.
	Certificate func(*x509.Certificate) (auth.Principal, error)
	// Authorized is the broker's rule (broker.Broker.Authorized).
	Authorized func(p auth.Principal, host string, op auth.Operation, typ auth.ResourceType, name string) bool
	Logger     *slog.Logger
}

// Gate keeps the sessions and guards the admin listener's handlers.
type Gate struct {
	cfg   GateConfig
	cop   *http.CrossOriginProtection
	login *template.Template

	loginMu sync.Mutex // one password check at a time

	mu       sync.Mutex
	sessions map[string]*session // by token
}

type session struct {
	token, csrf  string
	principal    auth.Principal
	created, use time.Time
}

// identity is who a request is from, in its context.
type identity struct {
	principal auth.Principal
	host      string
	csrf      string // "": not a session (HTTP Basic)
}

type identityKey struct{}

// NewGate returns a gate; nil when nothing needs a login.
func NewGate(cfg GateConfig) (*Gate, error) {
	if !cfg.Pages && !cfg.Endpoints {
		return nil, nil
	}
	if cfg.Password == nil || cfg.Authorized == nil {
		return nil, errors.New("console: a gate needs a password check and an authorizer")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	t, err := template.New("").Funcs(funcs).ParseFS(assets, "assets/login.html")
	if err != nil {
		return nil, err
	}
	return &Gate{cfg: cfg, cop: http.NewCrossOriginProtection(), login: t, sessions: map[string]*session{}}, nil
}

// Routes adds GET and POST /login and POST /logout to mux.
func (g *Gate) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /login", g.loginPage)
	mux.Handle("POST /login", g.cop.Handler(http.HandlerFunc(g.doLogin)))
	mux.Handle("POST /logout", g.cop.Handler(http.HandlerFunc(g.doLogout)))
}

// Pages guards the console: without a login a browser is sent to the
// login page and anything else gets 401; a POST also needs its session's
// CSRF token (403 without it). Static files (the login page's style) are
// open.
func (g *Gate) Pages(next http.Handler) http.Handler {
	if g == nil || !g.cfg.Pages {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/static/") && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			next.ServeHTTP(w, r)
			return
		}
		id, ok := g.identify(w, r)
		if !ok {
			g.challenge(w, r)
			return
		}
		if !g.safe(r) && !g.csrfOK(r, id) {
			http.Error(w, "no or wrong CSRF token: reload the page and try again", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(contextWith(r, id)))
	})
}

// Endpoint guards /metrics (metrics true) or /debug/pprof: a login whose
// principal may perform op on the CLUSTER.
func (g *Gate) Endpoint(op auth.Operation, metrics bool, next http.Handler) http.Handler {
	if g == nil || !g.cfg.Endpoints || metrics && g.cfg.MetricsOpen {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := g.identify(w, r)
		if !ok {
			g.challenge(w, r)
			return
		}
		if !g.safe(r) && !g.csrfOK(r, id) {
			http.Error(w, "no or wrong CSRF token", http.StatusForbidden)
			return
		}
		if !g.cfg.Authorized(id.principal, id.host, op, auth.ResourceCluster, auth.ClusterName) {
			http.Error(w, fmt.Sprintf("%s may not %s the CLUSTER (CLUSTER_AUTHORIZATION_FAILED)", id.principal, op), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (g *Gate) safe(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions
}

// identify finds who r is from: its session, its client certificate (a
// browser gets a session for it, so that its POSTs carry a CSRF token
// too), or on a read its HTTP Basic credentials.
func (g *Gate) identify(w http.ResponseWriter, r *http.Request) (identity, bool) {
	host := remoteIP(r)
	if s := g.session(r); s != nil {
		return identity{principal: s.principal, host: host, csrf: s.csrf}, true
	}
	if p, ok := g.certificate(r); ok {
		if !strings.Contains(r.Header.Get("Accept"), "text/html") {
			return identity{principal: p, host: host}, true // a tool: it reads, and keeps no cookie
		}
		s := g.open(w, r, p)
		return identity{principal: p, host: host, csrf: s.csrf}, true
	}
	if user, pass, ok := r.BasicAuth(); ok && g.safe(r) && g.checkPassword(user, pass) {
		return identity{principal: auth.User(user), host: host}, true
	}
	return identity{}, false
}

func (g *Gate) certificate(r *http.Request) (auth.Principal, bool) {
	if g.cfg.Certificate == nil || r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.PeerCertificates) == 0 {
		return auth.Principal{}, false
	}
	p, err := g.cfg.Certificate(r.TLS.PeerCertificates[0])
	if err != nil {
		g.cfg.Logger.Warn("console: a client certificate maps to no principal", "err", err, "from", remoteIP(r))
		return auth.Principal{}, false
	}
	return p, true
}

// challenge answers a request without a login: a browser's page request
// goes to the login page, anything else gets 401 with a Basic challenge.
func (g *Gate) challenge(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if g.cfg.Pages && r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") && r.Header.Get("X-Console-Fragment") == "" {
		http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return
	}
	if r.Header.Get("X-Console-Fragment") == "" {
		// Not to a page's own refresh: the browser would pop up its
		// password dialog over the page whose session ended.
		w.Header().Set("WWW-Authenticate", `Basic realm="Holdfast", charset="UTF-8"`)
	}
	http.Error(w, ErrLoginRequired.Error(), http.StatusUnauthorized)
}

// checkPassword checks one login at a time, and holds the next after a
// failed one.
func (g *Gate) checkPassword(user, pass string) bool {
	if user == "" || pass == "" {
		return false
	}
	g.loginMu.Lock()
	defer g.loginMu.Unlock()
	ok := g.cfg.Password(user, pass)
	if !ok {
		time.Sleep(loginPenalty)
	}
	return ok
}

func (g *Gate) csrfOK(r *http.Request, id identity) bool {
	if id.csrf == "" {
		return false // HTTP Basic: no session, no token (and no POST)
	}
	got := r.Header.Get(csrfHeader)
	if got == "" {
		// Only a form body is read for it here (a multipart one within
		// the lab's file limit); a JSON body sends the header.
		r.Body = http.MaxBytesReader(nil, r.Body, maxFormBytes)
		got = r.FormValue(csrfField)
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(id.csrf)) == 1
}

// maxFormBytes bounds a POST body read for its CSRF token: a lab results
// file and its form.
const maxFormBytes = 1<<20 + 64<<10

// session returns r's live session, refreshing its last use.
func (g *Gate) session(r *http.Request) *session {
	ck, err := r.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		return nil
	}
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sessions[ck.Value]
	if s == nil {
		return nil
	}
	if now.Sub(s.use) > SessionIdle || now.Sub(s.created) > SessionMax {
		delete(g.sessions, s.token)
		return nil
	}
	s.use = now
	return s
}

// open starts a session for p and sets its cookie.
func (g *Gate) open(w http.ResponseWriter, r *http.Request, p auth.Principal) *session {
	now := time.Now()
	s := &session{token: randomToken(), csrf: randomToken(), principal: p, created: now, use: now}
	g.mu.Lock()
	for t, old := range g.sessions {
		if now.Sub(old.use) > SessionIdle || now.Sub(old.created) > SessionMax {
			delete(g.sessions, t)
		}
	}
	if len(g.sessions) >= MaxSessions {
		var oldest *session
		for _, o := range g.sessions {
			if oldest == nil || o.created.Before(oldest.created) {
				oldest = o
			}
		}
		delete(g.sessions, oldest.token)
	}
	g.sessions[s.token] = s
	g.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.token, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(SessionMax / time.Second)})
	return s
}

func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// --- the login page ---

type loginView struct {
	Next, User, Err string
	Certificate     bool
}

func (g *Gate) loginPage(w http.ResponseWriter, r *http.Request) {
	g.renderLogin(w, http.StatusOK, loginView{Next: localPath(r.URL.Query().Get("next")), Certificate: g.cfg.Certificate != nil})
}

func (g *Gate) renderLogin(w http.ResponseWriter, status int, v loginView) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := g.login.ExecuteTemplate(w, "login", v); err != nil {
		g.cfg.Logger.Warn("console: rendering the login page", "err", err)
	}
}

// doLogin: POST /login with user, password and next.
func (g *Gate) doLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form does not read: "+err.Error(), http.StatusBadRequest)
		return
	}
	user, pass, next := r.PostForm.Get("user"), r.PostForm.Get("password"), localPath(r.PostForm.Get("next"))
	if !g.checkPassword(user, pass) {
		g.cfg.Logger.Info("console: login refused", "user", user, "from", remoteIP(r))
		g.renderLogin(w, http.StatusUnauthorized, loginView{Next: next, User: user, Err: "wrong user or password", Certificate: g.cfg.Certificate != nil})
		return
	}
	if old := g.session(r); old != nil {
		g.end(old.token)
	}
	g.open(w, r, auth.User(user))
	g.cfg.Logger.Info("console: login", "user", user, "from", remoteIP(r))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// doLogout: POST /logout with the session's CSRF token.
func (g *Gate) doLogout(w http.ResponseWriter, r *http.Request) {
	s := g.session(r)
	if s == nil {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	if !g.csrfOK(r, identity{csrf: s.csrf}) {
		http.Error(w, "no or wrong CSRF token: reload the page and try again", http.StatusForbidden)
		return
	}
	g.end(s.token)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

func (g *Gate) end(token string) {
	g.mu.Lock()
	delete(g.sessions, token)
	g.mu.Unlock()
}

// localPath keeps a redirect on this site: a path, never another host
// (browsers drop tabs and newlines and read a backslash as a slash, so
// none may be in it).
func localPath(p string) string {
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") ||
		strings.ContainsAny(p, "\\\t\r\n") || strings.HasPrefix(p, "/login") {
		return "/"
	}
	return p
}

// --- who a page is for ---

func contextWith(r *http.Request, id identity) context.Context {
	return context.WithValue(r.Context(), identityKey{}, id)
}

// userOf is the principal r is from, and false when the console asks
// nobody (it then shows everything, as this node sees it).
func userOf(r *http.Request) (identity, bool) {
	id, ok := r.Context().Value(identityKey{}).(identity)
	return id, ok
}
