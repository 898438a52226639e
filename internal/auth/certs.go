package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// A development certificate authority: enough to run TLS and mTLS on a
// laptop or in a test, not a PKI. Keys are ECDSA P-256, stored as
// unencrypted PKCS#8 PEM (what Kafka's PEM keystore and librdkafka read).

// Cert is a PEM certificate and its PEM private key.
type Cert struct {
	CertPEM []byte
	KeyPEM  []byte
}

// Keystore is the key followed by the certificate (Kafka's PEM keystore
// layout for ssl.keystore.location).
func (c Cert) Keystore() []byte { return append(append([]byte(nil), c.KeyPEM...), c.CertPEM...) }

// NewCA makes a self-signed CA certificate.
func NewCA(commonName string, validity time.Duration) (Cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Cert{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"Holdfast development CA"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return Cert{}, err
	}
	return encodeCert(der, key)
}

// CertOptions says what a certificate is for.
type CertOptions struct {
	CommonName string
	// Hosts are DNS names and IP addresses the certificate is valid for
	// as a server (a node); empty for a client-only certificate.
	Hosts    []string
	Validity time.Duration
}

// Issue signs a certificate for a node (server and client auth: nodes
// connect to each other) or a client (client auth only, when no Hosts).
func (ca Cert) Issue(o CertOptions) (Cert, error) {
	caTLS, err := tls.X509KeyPair(ca.CertPEM, ca.KeyPEM)
	if err != nil {
		return Cert{}, fmt.Errorf("CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(caTLS.Certificate[0])
	if err != nil {
		return Cert{}, err
	}
	if !caCert.IsCA {
		return Cert{}, errors.New("the CA certificate is not a CA")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Cert{}, err
	}
	if o.Validity <= 0 {
		o.Validity = 365 * 24 * time.Hour
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: o.CommonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(o.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(o.Hosts) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		for _, h := range o.Hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caTLS.PrivateKey)
	if err != nil {
		return Cert{}, err
	}
	return encodeCert(der, key)
}

func encodeCert(der []byte, key *ecdsa.PrivateKey) (Cert, error) {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Cert{}, err
	}
	return Cert{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}
