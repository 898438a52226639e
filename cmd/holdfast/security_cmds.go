package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
)

func init() {
	commands["certs"] = command{"make a development CA and node/client certificates (TLS, mTLS)", certsCommand}
	commands["user"] = command{"set, list and delete SCRAM users (AlterUserScramCredentials)", userCommand}
	commands["acl"] = command{"create, list and delete ACLs", aclCommand}
}

// certsCommand makes a development CA (or reuses the one in --dir) and
// certificates for nodes and clients, as PEM files Kafka's
// ssl.keystore.type=PEM and librdkafka read: NAME.pem (key and
// certificate: ssl.keystore.location), NAME.crt and NAME.key (librdkafka's
// ssl.certificate.location / ssl.key.location), ca.pem (the truststore).
func certsCommand(args []string) error {
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	fs.Usage = flagUsage(fs, "certs [--dir certs] [--nodes 3] [--hosts localhost,127.0.0.1] [--clients admin,alice]")
	dir := fs.String("dir", "certs", "where the CA and the certificates go (an existing ca.pem/ca.key there is reused)")
	nodes := fs.Int("nodes", 1, "node certificates to make: node-1 ... node-N (server and client auth)")
	hosts := fs.String("hosts", "localhost,127.0.0.1", "DNS names and IPs in the node certificates (what clients and other nodes connect to)")
	clients := fs.String("clients", "", "client certificates to make, comma-separated names (the CN)")
	days := fs.Int("days", 365, "validity of new certificates, in days")
	if err := parseLayered(fs, args, ""); err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	validity := time.Duration(*days) * 24 * time.Hour
	caCert, caKey := filepath.Join(*dir, "ca.pem"), filepath.Join(*dir, "ca.key")
	var ca auth.Cert
	certPEM, err1 := os.ReadFile(caCert)
	keyPEM, err2 := os.ReadFile(caKey)
	switch {
	case err1 == nil && err2 == nil:
		ca = auth.Cert{CertPEM: certPEM, KeyPEM: keyPEM}
		fmt.Printf("using the CA in %s\n", caCert)
	case errors.Is(err1, os.ErrNotExist) && errors.Is(err2, os.ErrNotExist):
		if ca, err1 = auth.NewCA("Holdfast development CA", 10*validity); err1 != nil {
			return err1
		}
		if err := write(caCert, ca.CertPEM, 0o644); err != nil {
			return err
		}
		if err := write(caKey, ca.KeyPEM, 0o600); err != nil {
			return err
		}
		fmt.Printf("made a CA: %s (its key %s: keep it private)\n", caCert, caKey)
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
			if err := write(filepath.Join(*dir, f.name), f.data, 0o600); err != nil {
				return err
			}
		}
		role := "client"
		if len(hosts) > 0 {
			role = "node (server and client), for " + strings.Join(hosts, ", ")
		}
		fmt.Printf("%-12s CN=%s, %s: %s\n", name, name, role, filepath.Join(*dir, name+".pem"))
		return nil
	}
	var hs []string
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hs = append(hs, h)
		}
	}
	for i := 1; i <= *nodes; i++ {
		if err := issue(fmt.Sprintf("node-%d", i), hs); err != nil {
			return err
		}
	}
	if *clients != "" {
		for _, c := range strings.Split(*clients, ",") {
			if c = strings.TrimSpace(c); c != "" {
				if err := issue(c, nil); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func write(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// userCommand manages SCRAM users through AlterUserScramCredentials.
func userCommand(args []string) error {
	const synopsis = "user set|list|delete [--name NAME] [--password PW] [--mechanism SCRAM-SHA-512] [--iterations 8192]"
	if len(args) == 0 {
		return fmt.Errorf("usage: holdfast %s", synopsis)
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("user "+sub, flag.ContinueOnError)
	fs.Usage = flagUsage(fs, synopsis)
	bootstrap := bootstrapFlag(fs)
	name := fs.String("name", "", "the user")
	password := fs.String("password", "", "the password (set); also HOLDFAST_PASSWORD")
	mech := fs.String("mechanism", auth.MechScramSHA512, "SCRAM-SHA-256 or SCRAM-SHA-512")
	iters := fs.Int("iterations", 8192, "SCRAM iterations (4096..16384)")
	if err := parseLayered(fs, args, ""); err != nil {
		return err
	}
	m := kadm.ScramSha512
	switch strings.ToUpper(*mech) {
	case auth.MechScramSHA256:
		m = kadm.ScramSha256
	case auth.MechScramSHA512:
	default:
		return fmt.Errorf("--mechanism %q: SCRAM-SHA-256 or SCRAM-SHA-512", *mech)
	}
	cl, err := newClient(*bootstrap)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch sub {
	case "set":
		if *name == "" || *password == "" {
			return errors.New("user set needs --name and --password")
		}
		res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: *name, Mechanism: m, Iterations: int32(*iters), Password: *password}})
		if err == nil {
			err = res.Error()
		}
		if err != nil {
			return err
		}
		fmt.Printf("set %s for %s\n", m, *name)
	case "delete":
		if *name == "" {
			return errors.New("user delete needs --name")
		}
		res, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: *name, Mechanism: m}}, nil)
		if err == nil {
			err = res.Error()
		}
		if err != nil {
			return err
		}
		fmt.Printf("deleted %s of %s\n", m, *name)
	case "list":
		var users []string
		if *name != "" {
			users = []string{*name}
		}
		res, err := adm.DescribeUserSCRAMs(ctx, users...)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "USER\tMECHANISM\tITERATIONS")
		for _, u := range res.Sorted() {
			if u.Err != nil {
				fmt.Fprintf(w, "%s\t%v\t\n", u.User, u.Err)
				continue
			}
			for _, ci := range u.CredInfos {
				fmt.Fprintf(w, "%s\t%s\t%d\n", u.User, ci.Mechanism, ci.Iterations)
			}
		}
		return w.Flush()
	default:
		return fmt.Errorf("usage: holdfast %s", synopsis)
	}
	return nil
}

// aclCommand manages ACLs (CreateAcls, DescribeAcls, DeleteAcls).
func aclCommand(args []string) error {
	const synopsis = "acl create|list|delete [--allow User:alice | --deny User:bob] [--operation read,write] [--topic T] [--group G] [--transactional-id X] [--cluster] [--prefixed] [--host IP]"
	if len(args) == 0 {
		return fmt.Errorf("usage: holdfast %s", synopsis)
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("acl "+sub, flag.ContinueOnError)
	fs.Usage = flagUsage(fs, synopsis)
	bootstrap := bootstrapFlag(fs)
	allow := fs.String("allow", "", "principal to allow, e.g. User:alice (User:* for every user)")
	deny := fs.String("deny", "", "principal to deny")
	host := fs.String("host", "", "client IP the ACL is for (default: every host, *)")
	ops := fs.String("operation", "", "operations, comma-separated: read, write, create, delete, alter, describe, cluster_action, describe_configs, alter_configs, idempotent_write, all")
	topic := fs.String("topic", "", "topic name (or prefix with --prefixed; * for every topic)")
	group := fs.String("group", "", "consumer group")
	txn := fs.String("transactional-id", "", "transactional id")
	cluster := fs.Bool("cluster", false, "the cluster resource")
	prefixed := fs.Bool("prefixed", false, "the names are prefixes")
	if err := parseLayered(fs, args, ""); err != nil {
		return err
	}
	b := kadm.NewACLs()
	var operations []kadm.ACLOperation
	for _, o := range strings.Split(*ops, ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		op, err := kmsg.ParseACLOperation(o)
		if err != nil {
			return fmt.Errorf("--operation %q: %w", o, err)
		}
		operations = append(operations, op)
	}
	pattern := kadm.ACLPatternLiteral
	if *prefixed {
		pattern = kadm.ACLPatternPrefixed
	}
	hosts := []string{}
	if *host != "" {
		hosts = []string{*host}
	}
	switch sub {
	case "create":
		if *allow == "" && *deny == "" || len(operations) == 0 {
			return errors.New("acl create needs --allow or --deny, and --operation")
		}
		if *topic == "" && *group == "" && *txn == "" && !*cluster {
			return errors.New("acl create needs a resource: --topic, --group, --transactional-id or --cluster")
		}
	case "list", "delete":
		if len(operations) == 0 {
			operations = []kadm.ACLOperation{kadm.OpAny}
		}
		if sub == "list" && *topic == "" && *group == "" && *txn == "" && !*cluster {
			b.AnyResource()
		}
		if !*prefixed && sub == "list" {
			pattern = kadm.ACLPatternAny
		}
	default:
		return fmt.Errorf("usage: holdfast %s", synopsis)
	}
	if *allow != "" {
		b.Allow(*allow).AllowHosts(hosts...)
	}
	if *deny != "" {
		b.Deny(*deny).DenyHosts(hosts...)
	}
	if *allow == "" && *deny == "" && sub != "create" {
		b.Allow().AllowHosts().Deny().DenyHosts()
	}
	if *topic != "" {
		b.Topics(*topic)
	}
	if *group != "" {
		b.Groups(*group)
	}
	if *txn != "" {
		b.TransactionalIDs(*txn)
	}
	if *cluster {
		b.Clusters()
	}
	b.Operations(operations...).ResourcePatternType(pattern)
	cl, err := newClient(*bootstrap)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	defer w.Flush()
	switch sub {
	case "create":
		res, err := adm.CreateACLs(ctx, b)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return fmt.Errorf("%s %s on %s:%s: %w", r.Permission, r.Operation, r.Type, r.Name, r.Err)
			}
			fmt.Fprintf(w, "created\t%s\t%s\t%s\t%s:%s:%s\thost=%s\n", r.Permission, r.Principal, r.Operation, r.Type, r.Pattern, r.Name, r.Host)
		}
	case "list":
		res, err := adm.DescribeACLs(ctx, b)
		if err != nil {
			return err
		}
		fmt.Fprintln(w, "PERMISSION\tPRINCIPAL\tOPERATION\tRESOURCE\tHOST")
		for _, r := range res {
			if r.Err != nil {
				return r.Err
			}
			for _, d := range r.Described {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s:%s:%s\t%s\n", d.Permission, d.Principal, d.Operation, d.Type, d.Pattern, d.Name, d.Host)
			}
		}
	case "delete":
		res, err := adm.DeleteACLs(ctx, b)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return r.Err
			}
			for _, d := range r.Deleted {
				fmt.Fprintf(w, "deleted\t%s\t%s\t%s\t%s:%s:%s\thost=%s\n", d.Permission, d.Principal, d.Operation, d.Type, d.Pattern, d.Name, d.Host)
			}
		}
	}
	return nil
}
