package auth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// TLSConfig is one listener's ssl.* settings, by Kafka's names. Only PEM
// keystores and truststores are read (Kafka's ssl.keystore.type=PEM);
// JKS and PKCS12 stores convert with keytool/openssl.
type TLSConfig struct {
	KeystoreType     string // ssl.keystore.type: PEM (the default here)
	KeystoreLocation string // ssl.keystore.location: a PEM file with the private key and the certificate chain
	KeystoreChain    string // ssl.keystore.certificate.chain: the chain as PEM text
	KeystoreKey      string // ssl.keystore.key: the private key as PEM text
	KeyPassword      string // ssl.key.password: encrypted keys are refused (see LoadTLS)

	TruststoreType         string // ssl.truststore.type: PEM
	TruststoreLocation     string // ssl.truststore.location: a PEM file of CA certificates
	TruststoreCertificates string // ssl.truststore.certificates: CA certificates as PEM text

	ClientAuth   string   // ssl.client.auth: required, requested or none (default none)
	Protocols    []string // ssl.enabled.protocols: TLSv1.2, TLSv1.3 (default both)
	CipherSuites []string // ssl.cipher.suites: IANA names (TLS 1.2; TLS 1.3 suites are fixed)
	// NoEndpointIdentification is an empty
	// ssl.endpoint.identification.algorithm: when this node connects to
	// another, the chain is verified but not the name in it (the default,
	// "https", checks the name too).
	NoEndpointIdentification bool
	// Reload is how often the files are checked for changes (default 10
	// s; certificates reload without a restart).
	Reload time.Duration
}

// ClientAuth values.
const (
	ClientAuthNone      = "none"
	ClientAuthRequested = "requested"
	ClientAuthRequired  = "required"
)

// TLSMaterial is a listener's loaded key, chain and trusted CAs. It checks
// its files now and then and reloads them when they change: a renewed
// certificate is used by the next handshake, without a restart. A reload
// that fails keeps the old material and logs why.
type TLSMaterial struct {
	cfg TLSConfig
	log *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	pool    *x509.CertPool
	checked time.Time
	stamps  map[string]fileStamp
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// LoadTLS reads the keystore and truststore. A listener that serves TLS
// needs a keystore; one that only verifies (a client) needs a truststore.
func LoadTLS(cfg TLSConfig, log *slog.Logger) (*TLSMaterial, error) {
	if log == nil {
		log = slog.Default()
	}
	for _, typ := range []string{cfg.KeystoreType, cfg.TruststoreType} {
		if typ != "" && !strings.EqualFold(typ, "PEM") {
			return nil, fmt.Errorf("store type %s: only PEM is supported (convert with: openssl pkcs12 -in store.p12 -nodes -out store.pem)", typ)
		}
	}
	switch cfg.ClientAuth {
	case "", ClientAuthNone, ClientAuthRequested, ClientAuthRequired:
	default:
		return nil, fmt.Errorf("ssl.client.auth %q: want required, requested or none", cfg.ClientAuth)
	}
	if cfg.KeystoreLocation != "" && (cfg.KeystoreChain != "" || cfg.KeystoreKey != "") {
		return nil, errors.New("set ssl.keystore.location or ssl.keystore.certificate.chain with ssl.keystore.key, not both")
	}
	if (cfg.KeystoreChain == "") != (cfg.KeystoreKey == "") {
		return nil, errors.New("ssl.keystore.certificate.chain and ssl.keystore.key go together")
	}
	if cfg.Reload <= 0 {
		cfg.Reload = 10 * time.Second
	}
	if _, err := tlsVersions(cfg.Protocols); err != nil {
		return nil, err
	}
	if _, err := cipherSuites(cfg.CipherSuites); err != nil {
		return nil, err
	}
	m := &TLSMaterial{cfg: cfg, log: log, stamps: map[string]fileStamp{}}
	if err := m.load(); err != nil {
		return nil, err
	}
	return m, nil
}

// HasKeystore reports whether a certificate and key are configured.
func (m *TLSMaterial) HasKeystore() bool {
	return m.cfg.KeystoreLocation != "" || m.cfg.KeystoreChain != ""
}

// HasTruststore reports whether trusted CAs are configured.
func (m *TLSMaterial) HasTruststore() bool {
	return m.cfg.TruststoreLocation != "" || m.cfg.TruststoreCertificates != ""
}

// ClientAuth is the configured ssl.client.auth (none when unset).
func (m *TLSMaterial) ClientAuth() string {
	if m.cfg.ClientAuth == "" {
		return ClientAuthNone
	}
	return m.cfg.ClientAuth
}

func (m *TLSMaterial) load() error {
	var cert *tls.Certificate
	stamps := map[string]fileStamp{}
	if m.HasKeystore() {
		chain, key := []byte(m.cfg.KeystoreChain), []byte(m.cfg.KeystoreKey)
		if m.cfg.KeystoreLocation != "" {
			b, st, err := readStamped(m.cfg.KeystoreLocation)
			if err != nil {
				return fmt.Errorf("ssl.keystore.location: %w", err)
			}
			stamps[m.cfg.KeystoreLocation] = st
			chain, key = b, b
		}
		if err := refuseEncrypted(key); err != nil {
			return err
		}
		c, err := tls.X509KeyPair(chain, key)
		if err != nil {
			return fmt.Errorf("keystore: %w", err)
		}
		cert = &c
	}
	var pool *x509.CertPool
	if m.HasTruststore() {
		data := []byte(m.cfg.TruststoreCertificates)
		if m.cfg.TruststoreLocation != "" {
			b, st, err := readStamped(m.cfg.TruststoreLocation)
			if err != nil {
				return fmt.Errorf("ssl.truststore.location: %w", err)
			}
			stamps[m.cfg.TruststoreLocation] = st
			data = b
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return errors.New("truststore: no PEM certificate in it")
		}
	}
	m.mu.Lock()
	m.cert, m.pool, m.stamps, m.checked = cert, pool, stamps, time.Now()
	m.mu.Unlock()
	return nil
}

// refuseEncrypted explains the one PEM form we cannot read.
func refuseEncrypted(pemData []byte) error {
	for rest := pemData; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil
		}
		if b.Type == "ENCRYPTED PRIVATE KEY" || b.Headers["Proc-Type"] == "4,ENCRYPTED" {
			return errors.New("keystore: the private key is encrypted (ssl.key.password); Holdfast reads unencrypted PEM keys only: protect the file with its permissions (chmod 600)")
		}
	}
}

const maxStoreBytes = 1 << 20

func readStamped(path string) ([]byte, fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fileStamp{}, err
	}
	if st.Size() > maxStoreBytes {
		return nil, fileStamp{}, fmt.Errorf("%s: %d bytes, more than a PEM store can sensibly hold", path, st.Size())
	}
	b, err := os.ReadFile(path)
	return b, fileStamp{st.ModTime(), st.Size()}, err
}

// maybeReload reloads when a file changed since the last check (checked
// at most once per Reload interval).
func (m *TLSMaterial) maybeReload() {
	m.mu.Lock()
	if time.Since(m.checked) < m.cfg.Reload || len(m.stamps) == 0 {
		m.mu.Unlock()
		return
	}
	m.checked = time.Now()
	changed := false
	for path, old := range m.stamps {
		st, err := os.Stat(path)
		if err != nil || !st.ModTime().Equal(old.mod) || st.Size() != old.size {
			changed = true
		}
	}
	m.mu.Unlock()
	if !changed {
		return
	}
	if err := m.load(); err != nil {
		m.log.Error("TLS files changed but did not load; keeping the previous ones", "err", err)
		return
	}
	m.log.Info("reloaded TLS keystore and truststore")
}

// Reload reloads the files now.
func (m *TLSMaterial) Reload() error { return m.load() }

func (m *TLSMaterial) current() (*tls.Certificate, *x509.CertPool) {
	m.maybeReload()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cert, m.pool
}

// Leaf returns the current certificate's leaf (nil without a keystore).
func (m *TLSMaterial) Leaf() *x509.Certificate {
	cert, _ := m.current()
	if cert == nil {
		return nil
	}
	if cert.Leaf != nil {
		return cert.Leaf
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil
	}
	return leaf
}

func (m *TLSMaterial) base() *tls.Config {
	vers, _ := tlsVersions(m.cfg.Protocols)
	suites, _ := cipherSuites(m.cfg.CipherSuites)
	return &tls.Config{MinVersion: vers[0], MaxVersion: vers[1], CipherSuites: suites}
}

// MutualServerConfig is ServerConfig with client certificates required
// and verified whatever ssl.client.auth says (node-to-node links).
func (m *TLSMaterial) MutualServerConfig() *tls.Config {
	cfg := m.ServerConfig()
	get := cfg.GetConfigForClient
	cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		c, err := get(h)
		if err != nil {
			return nil, err
		}
		if c.ClientCAs == nil {
			return nil, errors.New("no truststore to verify peers with")
		}
		c.ClientAuth = tls.RequireAndVerifyClientCert
		return c, nil
	}
	return cfg
}

// ServerConfig is the listener's TLS config: each handshake takes the
// current certificate and CAs.
func (m *TLSMaterial) ServerConfig() *tls.Config {
	cfg := m.base()
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cert, pool := m.current()
		if cert == nil {
			return nil, errors.New("no server certificate configured")
		}
		c := m.base()
		c.Certificates = []tls.Certificate{*cert}
		c.ClientCAs = pool
		switch m.ClientAuth() {
		case ClientAuthRequired:
			c.ClientAuth = tls.RequireAndVerifyClientCert
		case ClientAuthRequested:
			c.ClientAuth = tls.VerifyClientCertIfGiven
		}
		return c, nil
	}
	return cfg
}

// ClientConfig is a config for connecting to serverAddr (host or
// host:port) with this node's certificate (for mTLS) and trusted CAs; a
// fresh one per connection, so renewed files are picked up.
func (m *TLSMaterial) ClientConfig(serverAddr string) *tls.Config {
	cert, pool := m.current()
	cfg := m.base()
	cfg.RootCAs = pool
	if cert != nil {
		c := *cert
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
	}
	host := serverAddr
	if h, _, err := net.SplitHostPort(serverAddr); err == nil {
		host = h
	}
	cfg.ServerName = host
	if m.cfg.NoEndpointIdentification {
		// Verify the chain but not the name (Kafka's empty
		// ssl.endpoint.identification.algorithm).
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("server sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool()}
			for _, ic := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return cfg
}

func tlsVersions(protos []string) ([2]uint16, error) {
	if len(protos) == 0 {
		return [2]uint16{tls.VersionTLS12, tls.VersionTLS13}, nil
	}
	lo, hi := uint16(0), uint16(0)
	for _, p := range protos {
		var v uint16
		switch strings.TrimSpace(p) {
		case "TLSv1.2":
			v = tls.VersionTLS12
		case "TLSv1.3":
			v = tls.VersionTLS13
		default:
			return [2]uint16{}, fmt.Errorf("ssl.enabled.protocols: %q is not supported (TLSv1.2, TLSv1.3)", p)
		}
		if lo == 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
	}
	return [2]uint16{lo, hi}, nil
}

func cipherSuites(names []string) ([]uint16, error) {
	if len(names) == 0 {
		return nil, nil
	}
	known := map[string]uint16{}
	for _, s := range tls.CipherSuites() {
		known[s.Name] = s.ID
	}
	var ids []uint16
	for _, n := range names {
		n = strings.TrimSpace(n)
		id, ok := known[n]
		if !ok {
			if strings.HasPrefix(n, "TLS_AES_") || strings.HasPrefix(n, "TLS_CHACHA20_") {
				continue // TLS 1.3 suites are always on in Go
			}
			return nil, fmt.Errorf("ssl.cipher.suites: %q is not a secure suite Go supports", n)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
