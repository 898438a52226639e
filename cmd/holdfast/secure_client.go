package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/auth"
)

// The client commands reach a secured cluster with a Kafka client
// properties file (--command-config, as Kafka's CLI tools take it; or
// HOLDFAST_COMMAND_CONFIG), in either Java's or librdkafka's names:
//
//	security.protocol=SASL_SSL
//	sasl.mechanism=SCRAM-SHA-512
//	sasl.jaas.config=... ScramLoginModule required username="admin" password="...";
//	  (or sasl.username=admin / sasl.password=...)
//	ssl.truststore.location=ca.pem        (or ssl.ca.location)
//	ssl.keystore.location=alice.pem       (key and chain; or ssl.certificate.location with ssl.key.location)
//	ssl.endpoint.identification.algorithm=  (empty: do not check the broker's name)
//
// Other client settings in the file (client.id, request.timeout.ms, ...)
// are left alone, as Kafka's tools leave the ones they do not use.

// clientSecurity turns the client properties file at path into franz-go
// options; "" is PLAINTEXT.
func clientSecurity(path string) ([]kgo.Opt, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--command-config: %w", err)
	}
	defer f.Close()
	lines, err := readProperties(f)
	if err != nil {
		return nil, fmt.Errorf("--command-config %s: %w", path, err)
	}
	p := map[string]string{}
	for _, l := range lines {
		p[l.key] = l.value
	}
	opts, err := clientSecurityOpts(p)
	if err != nil {
		return nil, fmt.Errorf("--command-config %s: %w", path, err)
	}
	return opts, nil
}

func clientSecurityOpts(p map[string]string) ([]kgo.Opt, error) {
	get := func(keys ...string) string {
		for _, k := range keys {
			if v, ok := p[k]; ok {
				return v
			}
		}
		return ""
	}
	proto := strings.ToUpper(get("security.protocol"))
	switch proto {
	case "":
		proto = "PLAINTEXT"
	case "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL":
	default:
		return nil, fmt.Errorf("security.protocol %q: want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", proto)
	}
	var opts []kgo.Opt
	if proto == "SSL" || proto == "SASL_SSL" {
		cfg, err := clientTLS(p, get)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(cfg)) // the server name is the host dialled
	}
	if proto == "SASL_PLAINTEXT" || proto == "SASL_SSL" {
		user, pass := get("sasl.username"), get("sasl.password")
		if j := get("sasl.jaas.config"); j != "" {
			jaas, err := auth.ParseJAAS(j)
			if err != nil {
				return nil, fmt.Errorf("sasl.jaas.config: %w", err)
			}
			user, pass = jaas.Options["username"], jaas.Options["password"]
		}
		if user == "" {
			return nil, errors.New("SASL needs a username: sasl.jaas.config with username=\"...\" password=\"...\" (or sasl.username and sasl.password)")
		}
		m, err := saslMechanism(get("sasl.mechanism", "sasl.mechanisms"), user, pass)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// clientTLS reads the ssl.* client settings: the CAs to trust, the
// client's own certificate (mTLS), and whether the broker's name is
// checked.
func clientTLS(p map[string]string, get func(...string) string) (*tls.Config, error) {
	for _, k := range []string{"ssl.truststore.type", "ssl.keystore.type"} {
		if v := get(k); v != "" && !strings.EqualFold(v, "PEM") {
			return nil, fmt.Errorf("%s=%s: only PEM is read (convert with: openssl pkcs12 -in store.p12 -nodes -out store.pem)", k, v)
		}
	}
	if get("ssl.key.password") != "" {
		return nil, errors.New("ssl.key.password: encrypted private keys are not read; use an unencrypted PEM key readable only by you")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca := get("ssl.truststore.location", "ssl.ca.location"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate", ca)
		}
	}
	certFile, keyFile := get("ssl.certificate.location"), get("ssl.key.location")
	if ks := get("ssl.keystore.location"); ks != "" {
		certFile, keyFile = ks, ks // key and chain in one PEM file
	}
	if certFile != "" {
		kp, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	if v, ok := p["ssl.endpoint.identification.algorithm"]; ok && (v == "" || strings.EqualFold(v, "none")) {
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true // the chain is verified below, not the name
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the broker sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return cfg, nil
}
