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
