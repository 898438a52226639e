package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"holdfast/internal/auth"
)

func init() { addCommand(newCertsCmd) }

// newCertsCmd makes a development CA (or reuses the one in --dir) and
// certificates for nodes and clients, as PEM files Kafka's
// ssl.keystore.type=PEM and librdkafka read: NAME.pem (key and
// certificate: ssl.keystore.location), NAME.crt and NAME.key
// (librdkafka's ssl.certificate.location / ssl.key.location), ca.pem (the
// truststore).
func newCertsCmd() *cobra.Command {
	var (
		dir, hosts, clients string
		nodes, days         int
	)
	c := &cobra.Command{
		Use:   "certs",
		Short: "Make a development CA and node and client certificates (TLS, mTLS)",
		Long: `Make a development CA (or reuse ca.pem and ca.key in --dir) and ECDSA P-256
certificates, as PEM files:

  ca.pem               the CA certificate: ssl.truststore.location, ssl.ca.location
  ca.key               the CA's key: keep it private
  NAME.pem             key and certificate: ssl.keystore.location
  NAME.crt, NAME.key   the same apart: librdkafka's ssl.certificate.location, ssl.key.location

Node certificates (node-1 ... node-N) carry --hosts as names and serve for
server and client authentication; node N's certificate is node N's identity
on the Raft transport (CN node-N). Client certificates (--clients) are for
client authentication only, with the name as CN: the Raft transport never
takes one for a node's, and a client may not be called node-N. A
convenience for development and tests, not a PKI (docs/security.md).`,
		Example: `  holdfast certs --dir certs --nodes 1 --hosts localhost,127.0.0.1 --clients alice
  holdfast certs --dir certs --nodes 0 --clients bob   # one more client, same CA`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 0 || nodes > 999 {
				return usagef("--nodes %d: want 0..999", nodes)
			}
			if days <= 0 {
				return usagef("--days %d: want a positive number", days)
			}
			return makeCerts(cmd.OutOrStdout(), dir, nodes, splitList(hosts), splitList(clients), time.Duration(days)*24*time.Hour)
		},
	}
	c.Flags().StringVar(&dir, "dir", "certs", "where the CA and the certificates go (an existing ca.pem and ca.key there are reused)")
	c.Flags().IntVar(&nodes, "nodes", 1, "node certificates to make: node-1 ... node-N (server and client authentication)")
	c.Flags().StringVar(&hosts, "hosts", "localhost,127.0.0.1", "DNS names and IPs in the node certificates (what clients and other nodes connect to)")
	c.Flags().StringVar(&clients, "clients", "", "client certificates to make, comma-separated names (each the CN)")
	c.Flags().IntVar(&days, "days", 365, "validity of new certificates, in days (a new CA: ten times that)")
	return c
}

func makeCerts(out io.Writer, dir string, nodes int, hosts, clients []string, validity time.Duration) error {
	if nodes > 0 && len(hosts) == 0 {
		return usagef("--hosts: node certificates need at least one name")
	}
	for _, c := range clients {
		if !certName.MatchString(c) || c == "ca" {
			return usagef("--clients: %q: a name is letters, digits, '.', '_' and '-' (and not ca)", c)
		}
		if _, node := auth.NodeOfPrincipal(strings.ToLower(c)); node {
			return usagef("--clients: %q is a node's name (node-N names node N on the Raft transport): name the client otherwise", c)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caCert, caKey := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca.key")
	var ca auth.Cert
	certPEM, err1 := os.ReadFile(caCert)
	keyPEM, err2 := os.ReadFile(caKey)
	switch {
	case err1 == nil && err2 == nil:
		ca = auth.Cert{CertPEM: certPEM, KeyPEM: keyPEM}
		fmt.Fprintf(out, "using the CA in %s\n", caCert)
	case errors.Is(err1, os.ErrNotExist) && errors.Is(err2, os.ErrNotExist):
		var err error
		if ca, err = auth.NewCA("Holdfast development CA", 10*validity); err != nil {
			return err
		}
		if err := writeFile(caCert, ca.CertPEM, 0o644); err != nil {
			return err
		}
		if err := writeFile(caKey, ca.KeyPEM, 0o600); err != nil {
			return err
		}
		fmt.Fprintf(out, "made a CA: %s (its key %s: keep it private)\n", caCert, caKey)
	default:
		return fmt.Errorf("%s and %s: need both or neither (%v, %v)", caCert, caKey, err1, err2)
	}
	issue := func(name string, hosts []string) error {
		c, err := ca.Issue(auth.CertOptions{CommonName: name, Hosts: hosts, Validity: validity})
		if err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			data []byte
		}{{name + ".pem", c.Keystore()}, {name + ".crt", c.CertPEM}, {name + ".key", c.KeyPEM}} {
			if err := writeFile(filepath.Join(dir, f.name), f.data, 0o600); err != nil {
				return err
			}
		}
		role := "client"
		if len(hosts) > 0 {
			role = "node (server and client), for " + strings.Join(hosts, ", ")
		}
		fmt.Fprintf(out, "%-12s CN=%s, %s: %s\n", name, name, role, filepath.Join(dir, name+".pem"))
		return nil
	}
	for i := 1; i <= nodes; i++ {
		if err := issue(fmt.Sprintf("node-%d", i), hosts); err != nil {
			return err
		}
	}
	for _, c := range clients {
		if err := issue(c, nil); err != nil {
			return err
		}
	}
	return nil
}

// certName is what a client certificate may be called: it names files.
var certName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// writeFile replaces path with data at once (a reader never sees half a
// certificate).
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
