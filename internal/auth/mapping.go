package auth

import (
	"crypto/x509"
	"fmt"
	"regexp"
	"strings"
)

// PrincipalMapper turns a TLS client certificate's subject into a principal
// name with Kafka's ssl.principal.mapping.rules: a comma-separated list of
//
//	DEFAULT                              the distinguished name as it is
//	RULE:pattern/replacement/[L|U]       if pattern matches the whole DN,
//	                                     the replacement ($1... for groups),
//	                                     lower- or upper-cased by L or U
//
// tried in order; the first that applies wins. A DN no rule applies to
// fails authentication, as in Kafka. The DN is in RFC 2253 order
// ("CN=alice,OU=eng,O=Example"), as Java prints it.
type PrincipalMapper struct {
	rules []mappingRule
}

type mappingRule struct {
	isDefault   bool
	re          *regexp.Regexp
	replacement string
	lower       bool
	upper       bool
}

// ruleSplitter is Kafka's RULE_SPLITTER: DEFAULT, or RULE:p/r/ with
// backslash-escaped slashes inside p and r and an optional L/U flag.
var ruleSplitter = regexp.MustCompile(`^\s*(DEFAULT|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,\s*|$)`)

// ParseMappingRules parses ssl.principal.mapping.rules; an empty string
// is "DEFAULT".
func ParseMappingRules(s string) (*PrincipalMapper, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		s = "DEFAULT"
	}
	m := &PrincipalMapper{}
	for rest := s; strings.TrimSpace(rest) != ""; {
		g := ruleSplitter.FindStringSubmatch(rest)
		if g == nil {
			return nil, fmt.Errorf("ssl.principal.mapping.rules: cannot parse %q (want DEFAULT or RULE:pattern/replacement/[LU], comma-separated)", rest)
		}
		rest = rest[len(g[0]):]
		if g[1] == "DEFAULT" {
			m.rules = append(m.rules, mappingRule{isDefault: true})
			continue
		}
		re, err := regexp.Compile(`^(?:` + g[2] + `)$`)
		if err != nil {
			return nil, fmt.Errorf("ssl.principal.mapping.rules: pattern %q: %w", g[2], err)
		}
		m.rules = append(m.rules, mappingRule{re: re, replacement: javaReplacement(g[3]), lower: g[4] == "L", upper: g[4] == "U"})
	}
	return m, nil
}

// javaReplacement turns a Java replacement string ($1, \x escapes) into
// Go's (${1}, $$ for a literal dollar).
func javaReplacement(r string) string {
	var b strings.Builder
	for i := 0; i < len(r); i++ {
		c := r[i]
		switch {
		case c == '\\' && i+1 < len(r):
			i++
			if r[i] == '$' {
				b.WriteString("$$")
			} else {
				b.WriteByte(r[i])
			}
		case c == '$' && i+1 < len(r) && r[i+1] >= '0' && r[i+1] <= '9':
			j := i + 1
			for j < len(r) && r[j] >= '0' && r[j] <= '9' {
				j++
			}
			b.WriteString("${" + r[i+1:j] + "}")
			i = j - 1
		case c == '$':
			b.WriteString("$$")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Map returns the principal name for a distinguished name.
func (m *PrincipalMapper) Map(dn string) (string, error) {
	for _, r := range m.rules {
		if r.isDefault {
			return dn, nil
		}
		if !r.re.MatchString(dn) {
			continue
		}
		out := r.re.ReplaceAllString(dn, r.replacement)
		switch {
		case r.lower:
			out = strings.ToLower(out)
		case r.upper:
			out = strings.ToUpper(out)
		}
		if out == "" {
			continue
		}
		return out, nil
	}
	return "", fmt.Errorf("no ssl.principal.mapping.rules rule applies to %q", dn)
}

// CertPrincipal is the principal of a verified client certificate.
func (m *PrincipalMapper) CertPrincipal(cert *x509.Certificate) (Principal, error) {
	name, err := m.Map(cert.Subject.String())
	if err != nil {
		return Principal{}, err
	}
	return User(name), nil
}

// NodePrincipalPrefix starts a node's principal name: node N is
// User:node-N (what `holdfast certs` names its node certificates, and the
// super users docs/security.md lists).
const NodePrincipalPrefix = "node-"

// CertNode returns the node a verified peer certificate belongs to, for
// the Raft transport: a session with it speaks for that node only. The
// certificate must be valid for server authentication (every node serves
// its peers; a client-only certificate, such as `holdfast certs
// --clients` issues, is never a node's), and name node N: its principal
// after the mapping rules is User:node-N, or, if the rules give no node
// name, its subject CN is node-N. m nil: DEFAULT.
func (m *PrincipalMapper) CertNode(cert *x509.Certificate) (uint64, error) {
	if !serverAuth(cert) {
		return 0, fmt.Errorf("certificate %q is not valid for server authentication (a client certificate): not a node's", cert.Subject.String())
	}
	if m != nil {
		if name, err := m.Map(cert.Subject.String()); err == nil {
			if id, ok := NodeOfPrincipal(name); ok {
				return id, nil
			}
		}
	}
	if id, ok := NodeOfPrincipal(cert.Subject.CommonName); ok {
		return id, nil
	}
	return 0, fmt.Errorf("certificate %q names no node (want the principal or the CN node-<id>)", cert.Subject.String())
}

// NodeOfPrincipal parses a node principal's name, "node-N" with N a
// positive decimal without leading zeros.
func NodeOfPrincipal(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, NodePrincipalPrefix)
	if !ok || s == "" || s[0] == '0' || len(s) > 10 {
		return 0, false
	}
	var id uint64
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		id = id*10 + uint64(c-'0')
	}
	return id, id <= 1<<31-1
}

// serverAuth: no extended key usage (valid for anything), or one that
// includes server authentication.
func serverAuth(cert *x509.Certificate) bool {
	if len(cert.ExtKeyUsage) == 0 && len(cert.UnknownExtKeyUsage) == 0 {
		return true
	}
	for _, u := range cert.ExtKeyUsage {
		if u == x509.ExtKeyUsageServerAuth || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}
