package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

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

// commandConfig is the --command-config path of the running command.
var commandConfig string

func commandConfigFlag() (string, string) {
	return os.Getenv("HOLDFAST_COMMAND_CONFIG"), "Kafka client properties for a secured cluster (security.protocol, sasl.*, ssl.*; docs/security.md)"
}

func readClientProps(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("command config: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		k, v, ok := strings.Cut(text, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want key=value", path, line)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, sc.Err()
}

// securityOpts turns client properties into franz-go options.
func securityOpts(path string) ([]kgo.Opt, error) {
	if path == "" {
		return nil, nil
	}
	p, err := readClientProps(path)
	if err != nil {
		return nil, err
	}
	get := func(keys ...string) string {
		for _, k := range keys {
			if v, ok := p[k]; ok {
				return v
			}
		}
		return ""
	}
	proto := strings.ToUpper(get("security.protocol"))
	if proto == "" {
		proto = "PLAINTEXT"
	}
	var opts []kgo.Opt
	if proto == "SSL" || proto == "SASL_SSL" {
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
			certFile, keyFile = ks, ks
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
				opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
				for _, c := range cs.PeerCertificates[1:] {
					opts.Intermediates.AddCert(c)
				}
				_, err := cs.PeerCertificates[0].Verify(opts)
				return err
			}
		}
		opts = append(opts, kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			c := cfg.Clone()
			if h, _, err := net.SplitHostPort(host); err == nil && c.ServerName == "" {
				c.ServerName = h
			}
			return (&tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: c}).DialContext(ctx, network, host)
		}))
	}
	if proto == "SASL_PLAINTEXT" || proto == "SASL_SSL" {
		user, pass := get("sasl.username"), get("sasl.password")
		if j := get("sasl.jaas.config"); j != "" {
			jaas, err := auth.ParseJAAS(j)
			if err != nil {
				return nil, err
			}
			user, pass = jaas.Options["username"], jaas.Options["password"]
		}
		mech := strings.ToUpper(get("sasl.mechanism", "sasl.mechanisms"))
		switch mech {
		case auth.MechPlain:
			opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
		case auth.MechScramSHA256:
			opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
		case auth.MechScramSHA512:
			opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
		default:
			return nil, fmt.Errorf("sasl.mechanism %q: the holdfast CLI logs in with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", mech)
		}
	}
	if proto != "PLAINTEXT" && proto != "SSL" && proto != "SASL_PLAINTEXT" && proto != "SASL_SSL" {
		return nil, fmt.Errorf("security.protocol %q", proto)
	}
	return opts, nil
}
