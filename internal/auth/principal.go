// Package auth holds Holdfast's security parts that know nothing of the
// broker: principals, Kafka's ACL authorizer semantics, the SASL mechanisms
// (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER), the mapping of TLS certificates
// to principals (ssl.principal.mapping.rules), PEM keystores that reload
// without a restart, and a development certificate authority.
//
// The wire layer runs the SASL exchanges and attaches the principal to each
// request; the broker asks an Authorizer before it acts; the controller
// stores ACLs and SCRAM credentials in the metadata log.
package auth

import (
	"fmt"
	"strings"
)

// Principal is who a request comes from, as Kafka names it: a type and a
// name, printed "User:alice".
type Principal struct {
	Type string
	Name string
}

// Anonymous is the principal of a connection that did not authenticate
// (PLAINTEXT, or SSL without a client certificate).
var Anonymous = Principal{Type: "User", Name: "ANONYMOUS"}

// User is the principal User:name.
func User(name string) Principal { return Principal{Type: "User", Name: name} }

func (p Principal) String() string { return p.Type + ":" + p.Name }

// IsAnonymous reports whether p is User:ANONYMOUS.
func (p Principal) IsAnonymous() bool { return p == Anonymous }

// ParsePrincipal parses "Type:Name" (Kafka's principal string). The type
// must be non-empty; the name may contain colons.
func ParsePrincipal(s string) (Principal, error) {
	typ, name, ok := strings.Cut(s, ":")
	if !ok || typ == "" || name == "" {
		return Principal{}, fmt.Errorf("principal %q: want Type:Name, e.g. User:alice", s)
	}
	return Principal{Type: typ, Name: name}, nil
}

// ParseSuperUsers parses super.users: principals separated by semicolons
// ("User:admin;User:CN=node").
func ParseSuperUsers(s string) ([]Principal, error) {
	var out []Principal
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		p, err := ParsePrincipal(part)
		if err != nil {
			return nil, fmt.Errorf("super.users: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}
