package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"holdfast/internal/auth"
	"holdfast/internal/broker"
	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// Security settings come by Kafka's broker config names, in the --config
// file or as --override key=value, so a server.properties carries over:
//
//	listeners, advertised.listeners (the flags --listen and --advertised),
//	listener.security.protocol.map, inter.broker.listener.name (or
//	security.inter.broker.protocol), controller.listener.names,
//	ssl.* and sasl.* (each also as listener.name.<listener>.<name>),
//	super.users, allow.everyone.if.no.acl.found, authorizer.class.name,
//	connections.max.reauth.ms.
//
// The settings registry hands every name kafkaSecurityKey accepts to
// buildSecurity as it is; buildSecurity refuses the ones it does not
// know (a security setting silently ignored could leave a hole). Without
// any of them the broker is what it always was: one PLAINTEXT listener at
// --listen.

// kafkaSecurityKey reports whether a Kafka config name is a security
// setting, for buildSecurity.
func kafkaSecurityKey(k string) bool {
	for _, p := range []string{"ssl.", "sasl.", "listener.name."} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return slices.Contains(securityKeys, k) || slices.Contains(refusedSecurityKeys, k)
}

var securityKeys = []string{
	"listener.security.protocol.map", "inter.broker.listener.name", "security.inter.broker.protocol",
	"controller.listener.names", "super.users", "allow.everyone.if.no.acl.found", "authorizer.class.name",
	"connections.max.reauth.ms",
}

// Security settings Kafka has and Holdfast does not: refused rather than
// ignored, since ignoring them changes who is who.
var refusedSecurityKeys = []string{"principal.builder.class", "security.providers"}

// Per-listener settings (allowed bare and as listener.name.<l>.<key>).
var listenerKeys = []string{
	"ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.key.password",
	"ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates", "ssl.client.auth",
	"ssl.enabled.protocols", "ssl.cipher.suites", "ssl.endpoint.identification.algorithm", "ssl.protocol",
	"ssl.principal.mapping.rules", "sasl.enabled.mechanisms", "sasl.jaas.config", "connections.max.reauth.ms",
}

// Global-only settings.
var globalKeys = []string{
	"sasl.mechanism.inter.broker.protocol",
	"sasl.oauthbearer.jwks.endpoint.url", "sasl.oauthbearer.jwks.endpoint.refresh.ms",
	"sasl.oauthbearer.expected.issuer", "sasl.oauthbearer.expected.audience", "sasl.oauthbearer.sub.claim.name",
	"sasl.oauthbearer.clock.skew.seconds", "sasl.oauthbearer.allow.unsecured.tokens",
	"ssl.reload.interval.ms",
}

// The authorizer class names Kafka users have in their files: all mean
// Holdfast's ACL authorizer.
var authorizerNames = []string{
	"org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer",
	"kafka.security.auth.SimpleAclAuthorizer", "acl",
}

// props are Kafka settings by name.
type props map[string]string

// listenerProp is a listener's value for key: listener.name.<l>.key, else
// key.
func (p props) listenerProp(listener, key string) (string, bool) {
	if v, ok := p["listener.name."+strings.ToLower(listener)+"."+key]; ok {
		return v, true
	}
	v, ok := p[key]
	return v, ok
}

// serveSecurity is what serve needs: the listeners to bind and the
// broker's security config.
type serveSecurity struct {
	listeners []serveListener
	broker    broker.SecurityConfig
	// creds are the SCRAM credentials the SASL listeners check: the
	// broker's, once it runs (creds.Set).
	creds    *broker.LateCredentials
	oauth    *auth.OAuthValidator
	warnings []string
	// ignored are settings of Kafka's controller listeners, which Holdfast
	// does not have (its controllers talk Raft on --peers): reported with
	// the other unsupported settings.
	ignored []string
	// authenticates: some listener makes every client prove who it is.
	authenticates bool
}

type serveListener struct {
	bind string // host:port to listen on
	wire *wire.Listener
}

func (s *serveSecurity) close() {
	if s != nil && s.oauth != nil {
		s.oauth.Close()
	}
}

type endpoint struct {
	name, host string
	port       int
}

func (e endpoint) addr() string { return net.JoinHostPort(e.host, strconv.Itoa(e.port)) }

// kafkaListeners reads --listen or --advertised: host:port (a PLAINTEXT
// listener) or Kafka's NAME://host:port,... . Listeners named in
// controller are left out.
func kafkaListeners(flag, s string, controller []string) ([]endpoint, error) {
	if !strings.Contains(s, "://") {
		s = "PLAINTEXT://" + s
	}
	var out []endpoint
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, addr, ok := strings.Cut(item, "://")
		if !ok || name == "" {
			return nil, fmt.Errorf("%s: %q: want NAME://host:port", flag, item)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", flag, item, err)
		}
		n, err := strconv.Atoi(port)
		if err != nil || n < 0 || n > 65535 {
			return nil, fmt.Errorf("%s: %q: bad port", flag, item)
		}
		name = strings.ToUpper(name)
		if seen[name] {
			return nil, fmt.Errorf("%s: listener %s named twice", flag, name)
		}
		seen[name] = true
		if !slices.Contains(controller, name) {
			out = append(out, endpoint{name: name, host: host, port: n})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s %q: no listener for clients", flag, s)
	}
	return out, nil
}

// checkSecurityKeys refuses settings buildSecurity does not read, and
// per-listener settings of a listener that is not there (a typo there
// would silently leave a listener unprotected). Settings of controller
// listeners come back as ignored.
func checkSecurityKeys(p props, binds []endpoint, controller []string) (ignored []string, err error) {
	for k := range p {
		if slices.Contains(securityKeys, k) || slices.Contains(listenerKeys, k) || slices.Contains(globalKeys, k) {
			continue
		}
		if k == "sasl.mechanism.controller.protocol" {
			ignored = append(ignored, k)
			continue
		}
		if rest, ok := strings.CutPrefix(k, "listener.name."); ok {
			l, key, _ := strings.Cut(rest, ".")
			if slices.Contains(controller, strings.ToUpper(l)) {
				ignored = append(ignored, k)
				continue
			}
			if slices.Contains(listenerKeys, key) || strings.HasSuffix(key, ".sasl.jaas.config") {
				if l != "raft" && !slices.ContainsFunc(binds, func(e endpoint) bool { return strings.EqualFold(e.name, l) }) {
					return nil, fmt.Errorf("%s: there is no listener %s (listeners names them)", k, strings.ToUpper(l))
				}
				continue
			}
		}
		return nil, fmt.Errorf("%s is not supported (docs/security.md lists the security settings Holdfast reads)", k)
	}
	sort.Strings(ignored)
	return ignored, nil
}

// buildSecurity turns --listen, --advertised and the Kafka security
// settings into listeners and the broker's security config. cluster says
// whether Raft runs, on raftListen.
func buildSecurity(p props, listen, advertised, raftListen string, cluster bool, log *slog.Logger) (*serveSecurity, error) {
	controllers := []string{"CONTROLLER"}
	if v, ok := p["controller.listener.names"]; ok {
		controllers = nil
		for _, n := range strings.Split(v, ",") {
			controllers = append(controllers, strings.ToUpper(strings.TrimSpace(n)))
		}
	}
	binds, err := kafkaListeners("listeners (--listen)", listen, controllers)
	if err != nil {
		return nil, err
	}
	var adv []endpoint
	if advertised != "" {
		if adv, err = kafkaListeners("advertised.listeners (--advertised)", advertised, controllers); err != nil {
			return nil, err
		}
	}
	sec := &serveSecurity{creds: &broker.LateCredentials{}}
	if sec.ignored, err = checkSecurityKeys(p, binds, controllers); err != nil {
		return nil, err
	}
	protoMap, err := protocolMap(p)
	if err != nil {
		return nil, err
	}
	sb := &sec.broker
	sb.InterBrokerListener = interBrokerListener(p, binds, protoMap)
	if !slices.ContainsFunc(binds, func(e endpoint) bool { return e.name == sb.InterBrokerListener }) {
		return nil, fmt.Errorf("inter.broker.listener.name %s is not one of the listeners", sb.InterBrokerListener)
	}
	reload := 10 * time.Second
	if v, ok := p["ssl.reload.interval.ms"]; ok {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return nil, fmt.Errorf("ssl.reload.interval.ms %q: want a positive number", v)
		}
		reload = time.Duration(ms) * time.Millisecond
	}

	// Each listener: its protocol, TLS, SASL, and where clients reach it.
	clientAuthRequired := map[string]bool{}
	for _, b := range binds {
		proto, ok := protoMap[b.name]
		if !ok {
			return nil, fmt.Errorf("listener %s has no security protocol in listener.security.protocol.map", b.name)
		}
		l := &wire.Listener{Name: b.name, Protocol: proto, Internal: b.name == sb.InterBrokerListener}
		if v, ok := p.listenerProp(b.name, "connections.max.reauth.ms"); ok {
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ms < 0 {
				return nil, fmt.Errorf("connections.max.reauth.ms %q: want milliseconds", v)
			}
			l.ReauthAfter = time.Duration(ms) * time.Millisecond
		}
		if proto.UsesTLS() {
			m, err := loadListenerTLS(p, b.name, reload, log)
			if err != nil {
				return nil, err
			}
			if !m.HasKeystore() {
				return nil, fmt.Errorf("listener %s is %s: set ssl.keystore.location (or ssl.keystore.certificate.chain and ssl.keystore.key)", b.name, proto)
			}
			if m.ClientAuth() != auth.ClientAuthNone && !m.HasTruststore() {
				return nil, fmt.Errorf("listener %s: ssl.client.auth=%s needs ssl.truststore.location to verify clients", b.name, m.ClientAuth())
			}
			clientAuthRequired[b.name] = m.ClientAuth() == auth.ClientAuthRequired
			l.TLS = m.ServerConfig()
			rules, _ := p.listenerProp(b.name, "ssl.principal.mapping.rules")
			mapper, err := auth.ParseMappingRules(rules)
			if err != nil {
				return nil, err
			}
			l.CertPrincipal = mapper.CertPrincipal
			if b.name == sb.InterBrokerListener {
				sb.NodeTLS = m
			}
		}
		if proto.UsesSASL() {
			if l.SASL, err = sec.saslServer(p, b.name, log); err != nil {
				return nil, err
			}
		}
		a, err := advertisedFor(b, adv)
		if err != nil {
			return nil, err
		}
		sec.listeners = append(sec.listeners, serveListener{bind: b.addr(), wire: l})
		sb.Listeners = append(sb.Listeners, metadata.Endpoint{Name: b.name, Host: a.host, Port: int32(a.port), Protocol: string(proto)})
		if l.Authenticates(clientAuthRequired[b.name]) {
			sec.authenticates = true
		} else if !loopback(b.host) {
			sec.warnings = append(sec.warnings, fmt.Sprintf("listener %s (%s) on %s accepts connections from beyond this machine without authentication: anyone who reaches it can read, write and administer%s. Configure SASL or mutual TLS and an authorizer (docs/security.md)",
				b.name, proto, b.addr(), map[bool]string{true: " - and steer the cluster if it is the inter-broker listener", false: ""}[cluster]))
		}
	}
	if err := sec.nodeLogin(p, protoMap[sb.InterBrokerListener]); err != nil {
		return nil, err
	}
	if cluster {
		if err := sec.raftTransport(p, protoMap, raftListen, reload, log); err != nil {
			return nil, err
		}
	}
	if err := sec.authorizer(p); err != nil {
		return nil, err
	}
	return sec, nil
}

// protocolMap is listener.security.protocol.map: by default each of
// Kafka's four protocol names maps to itself.
func protocolMap(p props) (map[string]wire.SecurityProtocol, error) {
	m := map[string]wire.SecurityProtocol{}
	v, ok := p["listener.security.protocol.map"]
	if !ok {
		for _, pr := range []wire.SecurityProtocol{wire.Plaintext, wire.SSL, wire.SASLPlaintext, wire.SASLSSL} {
			m[string(pr)] = pr
		}
		return m, nil
	}
	for _, item := range strings.Split(v, ",") {
		name, proto, ok := strings.Cut(strings.TrimSpace(item), ":")
		if !ok {
			return nil, fmt.Errorf("listener.security.protocol.map: %q: want NAME:PROTOCOL", item)
		}
		pr, err := wire.ParseSecurityProtocol(strings.ToUpper(strings.TrimSpace(proto)))
		if err != nil {
			return nil, fmt.Errorf("listener.security.protocol.map: %w", err)
		}
		m[strings.ToUpper(strings.TrimSpace(name))] = pr
	}
	return m, nil
}

// interBrokerListener is inter.broker.listener.name, else the listener
// whose protocol is security.inter.broker.protocol, else the first.
func interBrokerListener(p props, binds []endpoint, protoMap map[string]wire.SecurityProtocol) string {
	if ib := p["inter.broker.listener.name"]; ib != "" {
		return strings.ToUpper(ib)
	}
	if v := p["security.inter.broker.protocol"]; v != "" {
		for _, b := range binds {
			if strings.EqualFold(string(protoMap[b.name]), v) {
				return b.name
			}
		}
	}
	return binds[0].name
}

// advertisedFor is where clients reach listener b: its entry in
// advertised.listeners, else its bound address (not a wildcard).
func advertisedFor(b endpoint, adv []endpoint) (endpoint, error) {
	a := b
	if j := slices.IndexFunc(adv, func(e endpoint) bool { return e.name == b.name }); j >= 0 {
		a = adv[j]
	}
	if a.host == "" || a.host == "0.0.0.0" || a.host == "::" {
		return a, fmt.Errorf("listener %s: clients cannot connect to the wildcard host of %s; set advertised.listeners (or --advertised)", b.name, a.addr())
	}
	if a.port == 0 {
		return a, fmt.Errorf("listener %s: advertised port 0; set advertised.listeners (or --advertised)", b.name)
	}
	return a, nil
}

// loadListenerTLS reads a listener's ssl.* settings (listener.name.<l>.ssl.*
// first).
func loadListenerTLS(p props, listener string, reload time.Duration, log *slog.Logger) (*auth.TLSMaterial, error) {
	get := func(k string) string { v, _ := p.listenerProp(listener, k); return v }
	cfg := auth.TLSConfig{
		KeystoreType: get("ssl.keystore.type"), KeystoreLocation: get("ssl.keystore.location"),
		KeystoreChain: get("ssl.keystore.certificate.chain"), KeystoreKey: get("ssl.keystore.key"),
		KeyPassword:    get("ssl.key.password"),
		TruststoreType: get("ssl.truststore.type"), TruststoreLocation: get("ssl.truststore.location"),
		TruststoreCertificates: get("ssl.truststore.certificates"), ClientAuth: get("ssl.client.auth"),
		Reload: reload,
	}
	if v := get("ssl.enabled.protocols"); v != "" {
		cfg.Protocols = strings.Split(v, ",")
	}
	if v := get("ssl.cipher.suites"); v != "" {
		cfg.CipherSuites = strings.Split(v, ",")
	}
	if v, ok := p.listenerProp(listener, "ssl.endpoint.identification.algorithm"); ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "":
			cfg.NoEndpointIdentification = true
		case "https":
		default:
			return nil, fmt.Errorf("ssl.endpoint.identification.algorithm %q: want https or empty", v)
		}
	}
	if cfg.KeyPassword != "" {
		return nil, errors.New("ssl.key.password: encrypted private keys are not supported; use an unencrypted PEM key readable only by the broker (chmod 600)")
	}
	m, err := auth.LoadTLS(cfg, log)
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", listener, err)
	}
	return m, nil
}

// saslServer is a SASL listener's mechanisms (sasl.enabled.mechanisms;
// default both SCRAMs): SCRAM users from the metadata, PLAIN users from
// the JAAS config, OAUTHBEARER tokens against a JWKS.
func (sec *serveSecurity) saslServer(p props, listener string, log *slog.Logger) (*auth.SASLServer, error) {
	mechs := []string{auth.MechScramSHA256, auth.MechScramSHA512}
	if v, ok := p.listenerProp(listener, "sasl.enabled.mechanisms"); ok {
		mechs = nil
		for _, m := range strings.Split(v, ",") {
			if m = strings.ToUpper(strings.TrimSpace(m)); m != "" {
				mechs = append(mechs, m)
			}
		}
	}
	cfg := auth.SASLConfig{Mechanisms: mechs, Scram: sec.creds}
	if slices.Contains(mechs, auth.MechPlain) {
		j, ok, err := jaasFor(p, listener, auth.MechPlain)
		if err != nil {
			return nil, err
		}
		if ok {
			cfg.PlainUsers = j.PlainUsers()
		}
	}
	if slices.Contains(mechs, auth.MechOAuthBearer) {
		v, err := sec.oauthValidator(p, log)
		if err != nil {
			return nil, err
		}
		cfg.OAuth = v
	}
	ss, err := auth.NewSASLServer(cfg)
	if err != nil {
		return nil, fmt.Errorf("listener %s: %w", listener, err)
	}
	return ss, nil
}

// oauthValidator is the one OAUTHBEARER token validator of all listeners.
func (sec *serveSecurity) oauthValidator(p props, log *slog.Logger) (*auth.OAuthValidator, error) {
	if sec.oauth != nil {
		return sec.oauth, nil
	}
	c := auth.OAuthConfig{
		JWKSURL: p["sasl.oauthbearer.jwks.endpoint.url"], Issuer: p["sasl.oauthbearer.expected.issuer"],
		SubClaim: p["sasl.oauthbearer.sub.claim.name"], AllowUnsecured: p["sasl.oauthbearer.allow.unsecured.tokens"] == "true",
		Logger: log,
	}
	if v := p["sasl.oauthbearer.expected.audience"]; v != "" {
		for _, a := range strings.Split(v, ",") {
			c.Audience = append(c.Audience, strings.TrimSpace(a))
		}
	}
	if v := p["sasl.oauthbearer.jwks.endpoint.refresh.ms"]; v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return nil, fmt.Errorf("sasl.oauthbearer.jwks.endpoint.refresh.ms %q: want a positive number", v)
		}
		c.Refresh = time.Duration(ms) * time.Millisecond
	}
	if v := p["sasl.oauthbearer.clock.skew.seconds"]; v != "" {
		s, err := strconv.Atoi(v)
		if err != nil || s < 0 {
			return nil, fmt.Errorf("sasl.oauthbearer.clock.skew.seconds %q: want a number of seconds", v)
		}
		c.ClockSkew = time.Duration(s) * time.Second
		if s == 0 {
			c.ClockSkew = -1 // none (0 is the validator's "default")
		}
	}
	if c.AllowUnsecured && c.JWKSURL == "" {
		sec.warnings = append(sec.warnings, "OAUTHBEARER accepts unsigned tokens (sasl.oauthbearer.allow.unsecured.tokens=true): anyone can claim any principal; for development only")
	}
	v, err := auth.NewOAuthValidator(c)
	if err != nil {
		return nil, err
	}
	sec.oauth = v
	return v, nil
}

// nodeLogin is how this node logs in to the others on the inter-broker
// listener: its certificate (NodeTLS, set with the listener), and on a
// SASL listener the username and password of that listener's JAAS config.
func (sec *serveSecurity) nodeLogin(p props, proto wire.SecurityProtocol) error {
	sb := &sec.broker
	if proto.UsesSASL() {
		mech := strings.ToUpper(p["sasl.mechanism.inter.broker.protocol"])
		if mech == "" {
			i := slices.IndexFunc(sec.listeners, func(l serveListener) bool { return l.wire.Name == sb.InterBrokerListener })
			mech = sec.listeners[i].wire.SASL.Mechanisms()[0]
		}
		j, ok, err := jaasFor(p, sb.InterBrokerListener, mech)
		if err != nil {
			return err
		}
		if !ok || j.Options["username"] == "" {
			return fmt.Errorf("the inter-broker listener %s uses SASL: give this node's username and password in listener.name.%s.%s.sasl.jaas.config",
				sb.InterBrokerListener, strings.ToLower(sb.InterBrokerListener), strings.ToLower(mech))
		}
		sb.NodeSASL = &broker.NodeSASL{Mechanism: mech, User: j.Options["username"], Password: j.Options["password"]}
	}
	if proto.UsesTLS() && sb.NodeTLS != nil && !sb.NodeTLS.HasTruststore() {
		return fmt.Errorf("the inter-broker listener %s uses TLS: set ssl.truststore.location so nodes can verify each other", sb.InterBrokerListener)
	}
	return nil
}

// raftTransport: Raft runs over mutual TLS when the protocol map says
// RAFT:SSL, or by default when nodes already reach each other over TLS.
func (sec *serveSecurity) raftTransport(p props, protoMap map[string]wire.SecurityProtocol, raftListen string, reload time.Duration, log *slog.Logger) error {
	sb := &sec.broker
	raftProto, set := protoMap["RAFT"]
	if !set && protoMap[sb.InterBrokerListener].UsesTLS() {
		raftProto = wire.SSL
	}
	switch raftProto {
	case wire.SSL:
		m := sb.NodeTLS
		if _, own := p["listener.name.raft.ssl.keystore.location"]; own || m == nil {
			var err error
			if m, err = loadListenerTLS(p, "RAFT", reload, log); err != nil {
				return err
			}
		}
		if !m.HasKeystore() || !m.HasTruststore() {
			return errors.New("Raft over TLS (RAFT:SSL) needs this node's keystore and the cluster's truststore (ssl.* or listener.name.raft.ssl.*)")
		}
		if sb.NodeTLS == nil {
			sb.NodeTLS = m
		}
		rules, _ := p.listenerProp("RAFT", "ssl.principal.mapping.rules")
		mapper, err := auth.ParseMappingRules(rules)
		if err != nil {
			return err
		}
		sb.RaftTLS, sb.RaftMapper = true, mapper
	case wire.Plaintext, "":
		if host, _, err := net.SplitHostPort(raftListen); err == nil && loopback(host) {
			break
		}
		sec.warnings = append(sec.warnings, "the Raft transport between nodes is not encrypted or authenticated: anyone who reaches a Raft port can inject into the cluster's logs. Set RAFT:SSL in listener.security.protocol.map with node certificates (docs/security.md)")
	default:
		return fmt.Errorf("RAFT:%s: the Raft transport runs PLAINTEXT or SSL (mutual TLS)", raftProto)
	}
	return nil
}

// authorizer: ACLs with authorizer.class.name, super.users and
// allow.everyone.if.no.acl.found.
func (sec *serveSecurity) authorizer(p props) error {
	cls := p["authorizer.class.name"]
	if cls == "" {
		if _, ok := p["super.users"]; ok {
			return errors.New("super.users is set but authorizer.class.name is not: no ACLs would be enforced")
		}
		if sec.authenticates {
			sec.warnings = append(sec.warnings, "clients authenticate but no authorizer is set (authorizer.class.name): every authenticated principal may do everything, including what only nodes should")
		}
		return nil
	}
	if !slices.Contains(authorizerNames, cls) {
		return fmt.Errorf("authorizer.class.name %s: Holdfast's ACL authorizer is named org.apache.kafka.metadata.authorizer.StandardAuthorizer (or acl)", cls)
	}
	supers, err := auth.ParseSuperUsers(p["super.users"])
	if err != nil {
		return err
	}
	everyone := false
	if v, ok := p["allow.everyone.if.no.acl.found"]; ok {
		if everyone, err = strconv.ParseBool(v); err != nil {
			return fmt.Errorf("allow.everyone.if.no.acl.found %q: %w", v, err)
		}
	}
	sec.broker.Authorizer = auth.NewAuthorizer(supers, everyone)
	if everyone {
		sec.warnings = append(sec.warnings, "allow.everyone.if.no.acl.found=true: every resource without an ACL is open to every principal, anonymous ones included")
	}
	return nil
}

// jaasFor finds the JAAS config of a listener for a mechanism:
// listener.name.<l>.<mech>.sasl.jaas.config, listener.name.<l>.sasl.jaas.config,
// then sasl.jaas.config.
func jaasFor(p props, listener, mech string) (auth.JAAS, bool, error) {
	l := strings.ToLower(listener)
	for _, k := range []string{"listener.name." + l + "." + strings.ToLower(mech) + ".sasl.jaas.config", "listener.name." + l + ".sasl.jaas.config", "sasl.jaas.config"} {
		if v, ok := p[k]; ok {
			j, err := auth.ParseJAAS(v)
			if err != nil {
				return auth.JAAS{}, false, fmt.Errorf("%s: %w", k, err)
			}
			return j, true, nil
		}
	}
	return auth.JAAS{}, false, nil
}

// loopback reports whether a bind host is reachable only from this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// consoleClient is how the web console reaches this node: on the
// inter-broker listener, logged in as this node (its certificate, its SASL
// login), as the other nodes reach it. bound is that listener's bound
// address; a TLS listener is dialled at its advertised name, which the
// node's certificate carries.
func (sec *serveSecurity) consoleClient(bound string) (seed string, opts []kgo.Opt, err error) {
	sb := sec.broker
	i := slices.IndexFunc(sb.Listeners, func(e metadata.Endpoint) bool { return e.Name == sb.InterBrokerListener })
	ib := sb.Listeners[i]
	proto := wire.SecurityProtocol(ib.Protocol)
	seed = bound
	if proto.UsesTLS() {
		seed = net.JoinHostPort(ib.Host, strconv.Itoa(int(ib.Port)))
		mat := sb.NodeTLS
		opts = append(opts, kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: mat.ClientConfig(host)}
			return d.DialContext(ctx, network, host)
		}))
	}
	if proto.UsesSASL() {
		m, err := saslMechanism(sb.NodeSASL.Mechanism, sb.NodeSASL.User, sb.NodeSASL.Password)
		if err != nil {
			return "", nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return seed, opts, nil
}

// saslMechanism is a client's login with a user and password.
func saslMechanism(mech, user, pass string) (sasl.Mechanism, error) {
	switch strings.ToUpper(mech) {
	case auth.MechPlain:
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case auth.MechScramSHA256:
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case auth.MechScramSHA512:
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("sasl.mechanism %q: the holdfast CLI logs in with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", mech)
}

// scramFlag is --add-scram, repeatable, in kafka-storage's syntax:
// SCRAM-SHA-512=[name=alice,password=alice-secret] (iterations=N optional).
// Errors never repeat the value: it holds a password. Values from the
// command line, --override, HOLDFAST_ADD_SCRAM and the file add up; of two
// for the same user and mechanism the first set is kept (the settings
// load them in their precedence order: command line, environment, file).
type scramFlag []auth.ScramCredential

func (f *scramFlag) appends() {}

func (f *scramFlag) Type() string { return "scram-user" }

func (f *scramFlag) String() string {
	var names []string
	for _, c := range *f {
		names = append(names, c.Mechanism+"="+c.User)
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func (f *scramFlag) Set(v string) error {
	const want = "want SCRAM-SHA-512=[name=alice,password=alice-secret] (or SCRAM-SHA-256=...)"
	mech, body, ok := strings.Cut(v, "=")
	if !ok || !strings.HasPrefix(body, "[") || !strings.HasSuffix(body, "]") {
		return errors.New(want)
	}
	mech = strings.ToUpper(strings.TrimSpace(mech))
	kv := map[string]string{}
	for _, part := range strings.Split(body[1:len(body)-1], ",") {
		k, val, ok := strings.Cut(part, "=")
		if !ok {
			return errors.New(want)
		}
		kv[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(val), `"`)
	}
	iters := 4096
	if s, ok := kv["iterations"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("iterations %q: want a number (4096..16384)", s)
		}
		iters = n
	}
	if kv["name"] == "" || kv["password"] == "" {
		return fmt.Errorf("name and password are required: %s", want)
	}
	c, err := auth.NewScramCredential(kv["name"], mech, kv["password"], iters)
	if err != nil {
		return err
	}
	for _, have := range *f {
		if have.User == c.User && have.Mechanism == c.Mechanism {
			return nil // given with a higher precedence already
		}
	}
	*f = append(*f, c)
	return nil
}
