package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"holdfast/internal/auth"
	"holdfast/internal/broker"
	"holdfast/internal/controller"
	"holdfast/internal/wire"
)

// Security settings come by Kafka's broker config names, in the --config
// file or as --override key=value, so a server.properties carries over:
//
//	listeners, advertised.listeners, listener.security.protocol.map,
//	inter.broker.listener.name (or security.inter.broker.protocol),
//	ssl.* and sasl.* (each also as listener.name.<listener>.<name>),
//	super.users, allow.everyone.if.no.acl.found, authorizer.class.name,
//	connections.max.reauth.ms, ssl.principal.mapping.rules.
//
// Without any of them the broker is what it always was: one PLAINTEXT
// listener at --listen.

// kafkaSecurityKey reports whether a config file key is a Kafka security
// setting (collected for buildSecurity rather than a flag).
func kafkaSecurityKey(k string) bool {
	for _, p := range []string{"ssl.", "sasl.", "listener.name."} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return slices.Contains(securityKeys, k)
}

var securityKeys = []string{
	"listeners", "advertised.listeners", "listener.security.protocol.map", "inter.broker.listener.name",
	"security.inter.broker.protocol", "super.users", "allow.everyone.if.no.acl.found", "authorizer.class.name",
	"connections.max.reauth.ms",
}

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

// listenerProp is a listener's value for key: listener.name.<l>.key, or
// (for mechanism-specific JAAS) listener.name.<l>.<mech>.key, or key.
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
	creds     *broker.LateCredentials
	oauth     *auth.OAuthValidator
	warnings  []string
}

type serveListener struct {
	bind string // host:port to listen on
	wire *wire.Listener
}

func (s *serveSecurity) close() {
	if s.oauth != nil {
		s.oauth.Close()
	}
}

type endpoint struct {
	name, host string
	port       int
}

func parseListenerList(key, s string) ([]endpoint, error) {
	var out []endpoint
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, addr, ok := strings.Cut(item, "://")
		if !ok || name == "" {
			return nil, fmt.Errorf("%s: %q: want NAME://host:port", key, item)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", key, item, err)
		}
		n, err := strconv.Atoi(port)
		if err != nil || n < 0 || n > 65535 {
			return nil, fmt.Errorf("%s: %q: bad port", key, item)
		}
		name = strings.ToUpper(name)
		if seen[name] {
			return nil, fmt.Errorf("%s: listener %s named twice", key, name)
		}
		seen[name] = true
		out = append(out, endpoint{name: name, host: host, port: n})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no listener", key)
	}
	return out, nil
}

// buildSecurity turns the Kafka settings into listeners and the broker's
// security config. listen and advertised are --listen and --advertised,
// used when listeners is not set; cluster says whether Raft runs, on
// raftListen.
func buildSecurity(p props, listen, advertised, raftListen string, cluster bool, log *slog.Logger) (*serveSecurity, error) {
	for k := range p {
		if slices.Contains(securityKeys, k) || slices.Contains(listenerKeys, k) || slices.Contains(globalKeys, k) {
			continue
		}
		if rest, ok := strings.CutPrefix(k, "listener.name."); ok {
			if _, key, ok := strings.Cut(rest, "."); ok && (slices.Contains(listenerKeys, key) || strings.HasSuffix(key, ".sasl.jaas.config")) {
				continue
			}
		}
		return nil, fmt.Errorf("config %s is not supported (see docs/security.md for the settings Holdfast reads)", k)
	}
	if _, ok := p["listeners"]; !ok {
		if advertised == "" {
			advertised = listen
		}
		p["listeners"] = "PLAINTEXT://" + listen
		if _, ok := p["advertised.listeners"]; !ok {
			p["advertised.listeners"] = "PLAINTEXT://" + advertised
		}
	}
	binds, err := parseListenerList("listeners", p["listeners"])
	if err != nil {
		return nil, err
	}
	adv := binds
	if v, ok := p["advertised.listeners"]; ok {
		if adv, err = parseListenerList("advertised.listeners", v); err != nil {
			return nil, err
		}
	}
	protoMap := map[string]wire.SecurityProtocol{}
	for _, pr := range []wire.SecurityProtocol{wire.Plaintext, wire.SSL, wire.SASLPlaintext, wire.SASLSSL} {
		protoMap[string(pr)] = pr
	}
	if v, ok := p["listener.security.protocol.map"]; ok {
		protoMap = map[string]wire.SecurityProtocol{}
		for _, item := range strings.Split(v, ",") {
			name, proto, ok := strings.Cut(strings.TrimSpace(item), ":")
			if !ok {
				return nil, fmt.Errorf("listener.security.protocol.map: %q: want NAME:PROTOCOL", item)
			}
			pr, err := wire.ParseSecurityProtocol(strings.ToUpper(strings.TrimSpace(proto)))
			if err != nil {
				return nil, fmt.Errorf("listener.security.protocol.map: %w", err)
			}
			protoMap[strings.ToUpper(strings.TrimSpace(name))] = pr
		}
	}

	sec := &serveSecurity{creds: &broker.LateCredentials{}}
	sb := &sec.broker
	ib := p["inter.broker.listener.name"]
	if ib == "" {
		if v := p["security.inter.broker.protocol"]; v != "" {
			for _, b := range binds {
				if string(protoMap[b.name]) == v {
					ib = b.name
					break
				}
			}
		}
	}
	if ib == "" {
		ib = binds[0].name
	}
	sb.InterBrokerListener = strings.ToUpper(ib)

	reload := 10 * time.Second
	if v, ok := p["ssl.reload.interval.ms"]; ok {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return nil, fmt.Errorf("ssl.reload.interval.ms %q: want a positive number", v)
		}
		reload = time.Duration(ms) * time.Millisecond
	}
	tlsFor := func(listener string) (*auth.TLSMaterial, error) {
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

	// OAUTHBEARER, if any listener enables it.
	oauthCfg := func() (*auth.OAuthValidator, error) {
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
				return nil, fmt.Errorf("sasl.oauthbearer.jwks.endpoint.refresh.ms %q", v)
			}
			c.Refresh = time.Duration(ms) * time.Millisecond
		}
		if v := p["sasl.oauthbearer.clock.skew.seconds"]; v != "" {
			s, err := strconv.Atoi(v)
			if err != nil || s < 0 {
				return nil, fmt.Errorf("sasl.oauthbearer.clock.skew.seconds %q", v)
			}
			c.ClockSkew = time.Duration(s) * time.Second
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
			m, err := tlsFor(b.name)
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
			mechs := []string{auth.MechScramSHA256, auth.MechScramSHA512}
			if v, ok := p.listenerProp(b.name, "sasl.enabled.mechanisms"); ok {
				mechs = nil
				for _, m := range strings.Split(v, ",") {
					if m = strings.ToUpper(strings.TrimSpace(m)); m != "" {
						mechs = append(mechs, m)
					}
				}
			}
			cfg := auth.SASLConfig{Mechanisms: mechs, Scram: sec.creds}
			if slices.Contains(mechs, auth.MechPlain) {
				if j, ok, err := jaasFor(p, b.name, auth.MechPlain); err != nil {
					return nil, err
				} else if ok {
					cfg.PlainUsers = j.PlainUsers()
				}
			}
			if slices.Contains(mechs, auth.MechOAuthBearer) {
				v, err := oauthCfg()
				if err != nil {
					return nil, err
				}
				cfg.OAuth = v
			}
			ss, err := auth.NewSASLServer(cfg)
			if err != nil {
				return nil, fmt.Errorf("listener %s: %w", b.name, err)
			}
			l.SASL = ss
		}
		// The advertised endpoint of this listener: by name, else the
		// bound address.
		j := slices.IndexFunc(adv, func(e endpoint) bool { return e.name == b.name })
		if j < 0 {
			return nil, fmt.Errorf("advertised.listeners has no %s listener", b.name)
		}
		a := adv[j]
		if a.host == "" || a.host == "0.0.0.0" || a.host == "::" {
			return nil, fmt.Errorf("advertised address of listener %s (%s:%d): clients cannot connect to a wildcard host; set advertised.listeners (or --advertised)", b.name, a.host, a.port)
		}
		if a.port == 0 {
			return nil, fmt.Errorf("advertised address of listener %s: port 0", b.name)
		}
		sec.listeners = append(sec.listeners, serveListener{bind: net.JoinHostPort(b.host, strconv.Itoa(b.port)), wire: l})
		sb.Listeners = append(sb.Listeners, controller.Endpoint{Name: b.name, Host: a.host, Port: int32(a.port), Protocol: string(proto)})
		if !l.Authenticates(clientAuthRequired[b.name]) && !loopback(b.host) {
			sec.warnings = append(sec.warnings, fmt.Sprintf("listener %s (%s) on %s accepts connections from beyond this machine without authentication: anyone who reaches it can read, write and administer%s. Configure SASL or mutual TLS and an authorizer (docs/security.md)",
				b.name, proto, net.JoinHostPort(b.host, strconv.Itoa(b.port)), map[bool]string{true: " - and steer the cluster if it is the inter-broker listener", false: ""}[cluster]))
		}
	}
	if !slices.ContainsFunc(binds, func(e endpoint) bool { return e.name == sb.InterBrokerListener }) {
		return nil, fmt.Errorf("inter.broker.listener.name %s is not one of the listeners", sb.InterBrokerListener)
	}

	// How this node logs in to the others.
	ibProto := protoMap[sb.InterBrokerListener]
	if ibProto.UsesSASL() {
		mech := strings.ToUpper(p["sasl.mechanism.inter.broker.protocol"])
		if mech == "" {
			mech = sec.listeners[slices.IndexFunc(sec.listeners, func(l serveListener) bool { return l.wire.Name == sb.InterBrokerListener })].wire.SASL.Mechanisms()[0]
		}
		j, ok, err := jaasFor(p, sb.InterBrokerListener, mech)
		if err != nil {
			return nil, err
		}
		if !ok || j.Options["username"] == "" {
			return nil, fmt.Errorf("the inter-broker listener %s uses SASL: give this node's username and password in listener.name.%s.%s.sasl.jaas.config",
				sb.InterBrokerListener, strings.ToLower(sb.InterBrokerListener), strings.ToLower(mech))
		}
		sb.NodeSASL = &broker.NodeSASL{Mechanism: mech, User: j.Options["username"], Password: j.Options["password"]}
	}
	if ibProto.UsesTLS() && sb.NodeTLS != nil && !sb.NodeTLS.HasTruststore() {
		return nil, fmt.Errorf("the inter-broker listener %s uses TLS: set ssl.truststore.location so nodes can verify each other", sb.InterBrokerListener)
	}

	// Raft: over mutual TLS when the map says RAFT:SSL, or by default when
	// nodes already reach each other over TLS.
	if cluster {
		raftProto, set := protoMap["RAFT"]
		if !set && ibProto.UsesTLS() {
			raftProto = wire.SSL
		}
		switch raftProto {
		case wire.SSL:
			m := sb.NodeTLS
			if _, own := p["listener.name.raft.ssl.keystore.location"]; own || m == nil {
				var err error
				if m, err = tlsFor("RAFT"); err != nil {
					return nil, err
				}
			}
			if !m.HasKeystore() || !m.HasTruststore() {
				return nil, errors.New("Raft over TLS (RAFT:SSL) needs this node's keystore and the cluster's truststore (ssl.* or listener.name.raft.ssl.*)")
			}
			if sb.NodeTLS == nil {
				sb.NodeTLS = m
			}
			sb.RaftTLS = true
		case wire.Plaintext, "":
			if host, _, err := net.SplitHostPort(raftListen); err == nil && loopback(host) {
				break
			}
			sec.warnings = append(sec.warnings, "the Raft transport between nodes is not encrypted or authenticated: anyone who reaches a Raft port can inject into the cluster's logs. Set RAFT:SSL in listener.security.protocol.map with node certificates (docs/security.md)")
		default:
			return nil, fmt.Errorf("RAFT:%s: the Raft transport runs PLAINTEXT or SSL (mutual TLS)", raftProto)
		}
	}

	// Authorization.
	if cls := p["authorizer.class.name"]; cls != "" {
		if !slices.Contains(authorizerNames, cls) {
			return nil, fmt.Errorf("authorizer.class.name %s: Holdfast's ACL authorizer is named org.apache.kafka.metadata.authorizer.StandardAuthorizer (or acl)", cls)
		}
		supers, err := auth.ParseSuperUsers(p["super.users"])
		if err != nil {
			return nil, err
		}
		everyone := false
		if v, ok := p["allow.everyone.if.no.acl.found"]; ok {
			if everyone, err = strconv.ParseBool(v); err != nil {
				return nil, fmt.Errorf("allow.everyone.if.no.acl.found %q: %w", v, err)
			}
		}
		sb.Authorizer = auth.NewAuthorizer(supers, everyone)
		if everyone {
			sec.warnings = append(sec.warnings, "allow.everyone.if.no.acl.found=true: every resource without an ACL is open to every principal, anonymous ones included")
		}
	} else {
		if _, ok := p["super.users"]; ok {
			return nil, errors.New("super.users is set but authorizer.class.name is not: no ACLs would be enforced")
		}
		for _, l := range sec.listeners {
			if l.wire.Authenticates(clientAuthRequired[l.wire.Name]) {
				sec.warnings = append(sec.warnings, "clients authenticate but no authorizer is set (authorizer.class.name): every authenticated principal may do everything, including what only nodes should")
				break
			}
		}
	}
	return sec, nil
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

// scramFlag is --add-scram, repeatable, in kafka-storage's syntax:
// SCRAM-SHA-512=[name=alice,password=alice-secret] (iterations=N optional).
type scramFlag []auth.ScramCredential

func (f *scramFlag) String() string {
	var names []string
	for _, c := range *f {
		names = append(names, c.Mechanism+"="+c.User)
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func (f *scramFlag) Set(v string) error {
	mech, body, ok := strings.Cut(v, "=")
	if !ok || !strings.HasPrefix(body, "[") || !strings.HasSuffix(body, "]") {
		return fmt.Errorf("%q: want SCRAM-SHA-512=[name=alice,password=alice-secret]", v)
	}
	mech = strings.ToUpper(strings.TrimSpace(mech))
	kv := map[string]string{}
	for _, part := range strings.Split(body[1:len(body)-1], ",") {
		k, val, ok := strings.Cut(part, "=")
		if !ok {
			return fmt.Errorf("%q: want key=value pairs", v)
		}
		kv[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(val), `"`)
	}
	iters := 4096
	if s, ok := kv["iterations"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("iterations %q", s)
		}
		iters = n
	}
	if kv["name"] == "" || kv["password"] == "" {
		return fmt.Errorf("%q: name and password are required", v)
	}
	c, err := auth.NewScramCredential(kv["name"], mech, kv["password"], iters)
	if err != nil {
		return err
	}
	*f = append(*f, c)
	return nil
}

// overrideFlag is --override key=value, repeatable (Kafka's
// kafka-server-start.sh --override).
type overrideFlag props

func (f overrideFlag) String() string { return "" }

func (f overrideFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("%q: want key=value", v)
	}
	f[strings.TrimSpace(k)] = strings.TrimSpace(val)
	return nil
}
