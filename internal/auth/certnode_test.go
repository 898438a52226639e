package auth

import (
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"
)

// TestCertNode: a node certificate names its node, through the mapping
// rules or its CN; a client certificate of the same CA, or one that names
// no node, is nobody's.
func TestCertNode(t *testing.T) {
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(cn string, hosts ...string) *x509.Certificate {
		c, err := ca.Issue(CertOptions{CommonName: cn, Hosts: hosts})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(c.CertPEM)
		x, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	cnRule, _ := ParseMappingRules(`RULE:^CN=([^,]*).*$/$1/,DEFAULT`)
	corp, _ := ParseMappingRules(`RULE:^CN=broker([0-9]+)\.example\.com$/node-$1/`)
	cases := []struct {
		name string
		m    *PrincipalMapper
		cert *x509.Certificate
		want uint64 // 0: refused
	}{
		{"node cert, DEFAULT rules (CN)", nil, issue("node-2", "localhost"), 2},
		{"node cert, CN rule", cnRule, issue("node-3", "localhost"), 3},
		{"mapped corporate name", corp, issue("broker7.example.com", "broker7.example.com"), 7},
		{"client cert named like a node", cnRule, issue("node-1"), 0},
		{"client cert", cnRule, issue("alice"), 0},
		{"server cert naming no node", cnRule, issue("kafka", "localhost"), 0},
		{"leading zero", nil, issue("node-01", "localhost"), 0},
		{"node-0", nil, issue("node-0", "localhost"), 0},
	}
	for _, c := range cases {
		got, err := c.m.CertNode(c.cert)
		if c.want == 0 {
			if err == nil {
				t.Errorf("%s: node %d, want refused", c.name, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: node %d, %v; want %d", c.name, got, err, c.want)
		}
	}
	for _, s := range []string{"node-", "node-1a", "node--1", "node-99999999999", "Node-1", "node-+1"} {
		if id, ok := NodeOfPrincipal(s); ok {
			t.Errorf("%q parsed as node %d", s, id)
		}
	}
}
