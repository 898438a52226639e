package broker_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"holdfast/internal/auth"
	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

// secureSetup is a CA, an OAUTHBEARER signing key and the files a secured
// node reads, in one temporary directory.
type secureSetup struct {
	dir      string
	ca       auth.Cert
	jwtKey   *ecdsa.PrivateKey
	jwksPath string
	// warnings, if set, gets the warnings of the nodes startSecureCluster
	// starts.
	warnings io.Writer
}

func newSecureSetup(t *testing.T) *secureSetup {
	t.Helper()
	s := &secureSetup{dir: t.TempDir()}
	var err error
	if s.ca, err = auth.NewCA("holdfast test CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(s.dir, "ca.pem"), s.ca.CertPEM)
	if s.jwtKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	b := func(n *big.Int) string { return base64.RawURLEncoding.EncodeToString(n.FillBytes(make([]byte, 32))) }
	doc, _ := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "EC", "crv": "P-256", "kid": "test", "alg": "ES256", "use": "sig", "x": b(s.jwtKey.X), "y": b(s.jwtKey.Y),
	}}})
	s.jwksPath = filepath.Join(s.dir, "jwks.json")
	writeTestFile(t, s.jwksPath, doc)
	return s
}

func writeTestFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue writes name's certificate: name.pem (key and chain), name.crt and
// name.key, and returns the keystore path.
func (s *secureSetup) issue(t *testing.T, name string, hosts ...string) string {
	t.Helper()
	c, err := s.ca.Issue(auth.CertOptions{CommonName: name, Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(s.dir, name+".pem")
	writeTestFile(t, p, c.Keystore())
	writeTestFile(t, filepath.Join(s.dir, name+".crt"), c.CertPEM)
	writeTestFile(t, filepath.Join(s.dir, name+".key"), c.KeyPEM)
	return p
}

func (s *secureSetup) material(t *testing.T, keystore string, clientAuth string) *auth.TLSMaterial {
	t.Helper()
	m, err := auth.LoadTLS(auth.TLSConfig{KeystoreLocation: keystore, TruststoreLocation: filepath.Join(s.dir, "ca.pem"), ClientAuth: clientAuth}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// clientTLS is a client's TLS config: the CA, and name's certificate if
// name is not empty.
func (s *secureSetup) clientTLS(t *testing.T, name string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca.CertPEM)
	cfg := &tls.Config{RootCAs: pool}
	if name != "" {
		kp, err := tls.LoadX509KeyPair(filepath.Join(s.dir, name+".crt"), filepath.Join(s.dir, name+".key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg
}

func (s *secureSetup) token(t *testing.T, sub string, exp time.Time) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": sub, "iss": "https://idp.test", "aud": "holdfast", "exp": exp.Unix()})
	tok.Header["kid"] = "test"
	out, err := tok.SignedString(s.jwtKey)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

const adminPass = "admin-secret"

// startSecureNode starts one node with an ACL authorizer (super user
// User:admin, created as a bootstrap SCRAM user) and two listeners:
// SASL (SASL_PLAINTEXT: PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) and SSL
// (mutual TLS, principal = the certificate's CN).
func startSecureNode(t *testing.T, s *secureSetup) (*brokertest.Node, *auth.Authorizer) {
	t.Helper()
	creds := &broker.LateCredentials{}
	v, err := auth.NewOAuthValidator(auth.OAuthConfig{JWKSURL: "file://" + s.jwksPath, Issuer: "https://idp.test", Audience: []string{"holdfast"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	ss, err := auth.NewSASLServer(auth.SASLConfig{
		Mechanisms: []string{auth.MechScramSHA512, auth.MechScramSHA256, auth.MechPlain, auth.MechOAuthBearer},
		Scram:      creds, PlainUsers: map[string]string{"plainuser": "plain-secret"}, OAuth: v,
	})
	if err != nil {
		t.Fatal(err)
	}
	nodeKS := s.issue(t, "node-1", "127.0.0.1", "localhost")
	mat := s.material(t, nodeKS, auth.ClientAuthRequired)
	mapper, _ := auth.ParseMappingRules(`RULE:^CN=([^,]*).*$/$1/,DEFAULT`)
	listeners := []*wire.Listener{
		{Name: "SASL", Protocol: wire.SASLPlaintext, SASL: ss},
		{Name: "SSL", Protocol: wire.SSL, TLS: mat.ServerConfig(), CertPrincipal: mapper.CertPrincipal, Internal: true},
	}
	az := auth.NewAuthorizer([]auth.Principal{auth.User("admin")}, false)
	admin, err := auth.NewScramCredential("admin", auth.MechScramSHA512, adminPass, 4096)
	if err != nil {
		t.Fatal(err)
	}
	n := brokertest.StartListeners(t, listeners, func(c *broker.Config, _ *wire.Limits) {
		c.Security.Authorizer = az
		c.Security.InterBrokerListener = "SSL"
		c.Security.NodeTLS = mat
		c.Security.BootstrapScram = []auth.ScramCredential{admin}
	})
	creds.Set(n.B)
	return n, az
}

func scramClient(t *testing.T, addr, user, pass string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func mustACL(t *testing.T, adm *kadm.Client, b *kadm.ACLBuilder) {
	t.Helper()
	res, err := adm.CreateACLs(testCtx(t), b)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("create ACL %+v: %v", r, r.Err)
		}
	}
}

// TestACLMatrix: a principal allowed to write topic A cannot read topic B,
// cannot see B in Metadata, cannot join group G without READ on it,
// cannot use a transactional id without WRITE on it, and cannot change
// ACLs or users; what it is granted works, and a DENY wins.
func TestACLMatrix(t *testing.T) {
	s := newSecureSetup(t)
	n, _ := startSecureNode(t, s)
	ctx := testCtx(t)
	addr := n.Addrs["SASL"]
	adm := kadm.NewClient(scramClient(t, addr, "admin", adminPass))

	// The admin (a super user) creates alice through the API.
	up, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "alice-secret"}})
	if err != nil || up.Error() != nil {
		t.Fatalf("creating alice: %v %v", err, up.Error())
	}
	for _, topic := range []string{"A", "B"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	mustACL(t, adm, kadm.NewACLs().Allow("User:alice").Topics("A").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral))

	alice := scramClient(t, addr, "alice", "alice-secret", kgo.DefaultProduceTopic("A"), kgo.RecordRetries(2), kgo.UnknownTopicRetries(1))
	if err := alice.ProduceSync(ctx, kgo.StringRecord("hello")).FirstErr(); err != nil {
		t.Fatalf("alice writes A: %v", err)
	}
	err = alice.ProduceSync(ctx, &kgo.Record{Topic: "B", Value: []byte("x")}).FirstErr()
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice writes B: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}

	// Metadata shows alice A (write implies describe), never B.
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, tp := range md.Topics {
		seen = append(seen, *tp.Topic)
	}
	if !slices.Contains(seen, "A") || slices.Contains(seen, "B") {
		t.Fatalf("alice's full metadata lists %v: want A, not B", seen)
	}
	named := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("B")
	named.Topics = append(named.Topics, rt)
	if md, err := named.RequestWith(ctx, alice); err != nil || md.Topics[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("alice asks for B by name: %v %+v", err, md)
	}

	// Reading B: TOPIC_AUTHORIZATION_FAILED.
	topics, err := adm.ListTopics(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	fetch := kmsg.NewPtrFetchRequest()
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic, ft.TopicID = "B", topics["B"].ID
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	fetch.MaxBytes = 1 << 20
	fresp, err := fetch.RequestWith(ctx, alice.Broker(1))
	if err != nil {
		t.Fatal(err)
	}
	if code := fresp.Topics[0].Partitions[0].ErrorCode; code != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("alice fetches B: %v", kerr.ErrorForCode(code))
	}

	// Joining group G without READ on it: GROUP_AUTHORIZATION_FAILED.
	join := func() error {
		cl := scramClient(t, addr, "alice", "alice-secret", kgo.ConsumerGroup("G"), kgo.ConsumeTopics("A"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		defer cl.Close() // a refused member must not join later and take the partition
		fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		for {
			fs := cl.PollFetches(fctx)
			if err := fs.Err0(); err != nil {
				return err
			}
			if fs.NumRecords() > 0 {
				return nil
			}
		}
	}
	if err := join(); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("alice joins G without READ: %v, want GROUP_AUTHORIZATION_FAILED", err)
	}
	mustACL(t, adm, kadm.NewACLs().Allow("User:alice").Groups("G").Topics("A").Operations(kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral))
	if err := join(); err != nil {
		t.Fatalf("alice joins G with READ on G and A: %v", err)
	}

	// A transactional id without WRITE on it.
	txn := scramClient(t, addr, "alice", "alice-secret", kgo.TransactionalID("T"), kgo.DefaultProduceTopic("A"), kgo.RecordRetries(2))
	// franz-go asks for the producer id (InitProducerId) as the
	// transaction begins or at the first produce.
	err = txn.BeginTransaction()
	if err == nil {
		err = txn.ProduceSync(ctx, kgo.StringRecord("in txn")).FirstErr()
	}
	if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Fatalf("alice's transactional produce without WRITE on T: %v", err)
	}
	mustACL(t, adm, kadm.NewACLs().Allow("User:alice").TransactionalIDs("T").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral))
	txn2 := scramClient(t, addr, "alice", "alice-secret", kgo.TransactionalID("T"), kgo.DefaultProduceTopic("A"))
	if err := txn2.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn2.ProduceSync(ctx, kgo.StringRecord("in txn")).FirstErr(); err != nil {
		t.Fatalf("transactional produce with WRITE on T: %v", err)
	}
	if err := txn2.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	// Alice administers nothing.
	aliceAdm := kadm.NewClient(alice)
	if res, err := aliceAdm.CreateACLs(ctx, kadm.NewACLs().Allow("User:alice").Topics("B").Operations(kadm.OpAll).ResourcePatternType(kadm.ACLPatternLiteral)); err == nil && !errors.Is(res[0].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alice creates an ACL: %+v", res)
	}
	if res, err := aliceAdm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "admin", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "mine"}}); err == nil && !errors.Is(res.Error(), kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alice resets admin's password: %v", res.Error())
	}
	if _, err := aliceAdm.CreateTopic(ctx, 1, 1, nil, "C"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice creates a topic: %v", err)
	}
	if _, err := aliceAdm.DeleteTopic(ctx, "A"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice deletes A: %v", err)
	}

	// A prefixed DENY wins over the literal ALLOW.
	mustACL(t, adm, kadm.NewACLs().Deny("User:alice").Topics("A").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternPrefixed))
	err = alice.ProduceSync(ctx, kgo.StringRecord("denied")).FirstErr()
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice writes A after the DENY: %v", err)
	}

	// DescribeAcls and DeleteAcls see what was made.
	described, err := adm.DescribeACLs(ctx, kadm.NewACLs().AnyResource().Allow().AllowHosts().Deny().DenyHosts().Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, d := range described {
		total += len(d.Described)
	}
	if total != 5 {
		t.Fatalf("described %d ACLs, want 5: %+v", total, described)
	}
	deleted, err := adm.DeleteACLs(ctx, kadm.NewACLs().Deny("User:alice").DenyHosts().Topics("A").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternPrefixed))
	if err != nil || len(deleted) != 1 || len(deleted[0].Deleted) != 1 {
		t.Fatalf("delete the DENY: %v %+v", err, deleted)
	}
	if err := alice.ProduceSync(ctx, kgo.StringRecord("allowed again")).FirstErr(); err != nil {
		t.Fatalf("alice writes A after the DENY is gone: %v", err)
	}

	// The ACLs are in the metadata: they survive a restart.
	n.Restart()
	if err := alice.ProduceSync(ctx, kgo.StringRecord("after restart")).FirstErr(); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if err := alice.ProduceSync(ctx, &kgo.Record{Topic: "B", Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("after restart, alice writes B: %v", err)
	}
}

// TestSASLMechanisms: PLAIN from the JAAS users, SCRAM users managed with
// AlterUserScramCredentials (and deleted), OAUTHBEARER against the JWKS,
// mTLS with the certificate's mapped name - and the refusals.
func TestSASLMechanisms(t *testing.T) {
	s := newSecureSetup(t)
	n, _ := startSecureNode(t, s)
	ctx := testCtx(t)
	addr := n.Addrs["SASL"]
	adminCl := scramClient(t, addr, "admin", adminPass)
	adm := kadm.NewClient(adminCl)
	// Everyone may describe the cluster's topics for this test.
	mustACL(t, adm, kadm.NewACLs().Allow("User:*").Topics("*").Operations(kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternLiteral))

	ping := func(opts ...kgo.Opt) error {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.RequestRetries(0)}, opts...)...)
		if err != nil {
			return err
		}
		defer cl.Close()
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = kmsg.NewPtrMetadataRequest().RequestWith(pctx, cl)
		return err
	}
	seed := kgo.SeedBrokers(addr)

	if err := ping(seed, kgo.SASL(plain.Auth{User: "plainuser", Pass: "plain-secret"}.AsMechanism())); err != nil {
		t.Fatalf("PLAIN: %v", err)
	}
	if err := ping(seed, kgo.SASL(plain.Auth{User: "plainuser", Pass: "wrong"}.AsMechanism())); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("PLAIN with a wrong password: %v", err)
	}

	up, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "carol", Mechanism: kadm.ScramSha256, Iterations: 8192, Password: "carol-256"},
		{User: "carol", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "carol-512"},
	})
	if err != nil || up.Error() != nil {
		t.Fatalf("create carol: %v %v", err, up.Error())
	}
	if err := ping(seed, kgo.SASL(scram.Auth{User: "carol", Pass: "carol-256"}.AsSha256Mechanism())); err != nil {
		t.Fatalf("SCRAM-SHA-256: %v", err)
	}
	if err := ping(seed, kgo.SASL(scram.Auth{User: "carol", Pass: "carol-512"}.AsSha512Mechanism())); err != nil {
		t.Fatalf("SCRAM-SHA-512: %v", err)
	}
	if err := ping(seed, kgo.SASL(plain.Auth{User: "carol", Pass: "carol-512"}.AsMechanism())); err != nil {
		t.Fatalf("PLAIN against carol's SCRAM credential: %v", err)
	}
	described, err := adm.DescribeUserSCRAMs(ctx, "carol")
	if err != nil {
		t.Fatal(err)
	}
	if d := described["carol"]; d.Err != nil || len(d.CredInfos) != 2 {
		t.Fatalf("describe carol: %+v", d)
	}
	if _, err := adm.DescribeUserSCRAMs(ctx, "nobody"); err == nil {
		described, _ := adm.DescribeUserSCRAMs(ctx, "nobody")
		if !errors.Is(described["nobody"].Err, kerr.ResourceNotFound) {
			t.Fatalf("describe a missing user: %+v", described)
		}
	}
	del, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "carol", Mechanism: kadm.ScramSha256}}, nil)
	if err != nil || del.Error() != nil {
		t.Fatalf("delete carol's SHA-256: %v %v", err, del.Error())
	}
	if err := ping(seed, kgo.SASL(scram.Auth{User: "carol", Pass: "carol-256"}.AsSha256Mechanism())); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("SCRAM-SHA-256 after deletion: %v", err)
	}
	// kadm refuses too few iterations itself: send the request raw.
	raw := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	u := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
	u.Name, u.Mechanism, u.Iterations, u.Salt, u.SaltedPassword = "dave", 1, 100, []byte("salt"), []byte("salted")
	raw.Upsertions = append(raw.Upsertions, u)
	if bad, err := raw.RequestWith(ctx, adminCl); err != nil || bad.Results[0].ErrorCode != kerr.UnacceptableCredential.Code {
		t.Fatalf("100 iterations: %v %+v", err, bad)
	}

	if err := ping(seed, kgo.SASL(oauth.Auth{Token: s.token(t, "svc", time.Now().Add(time.Hour))}.AsMechanism())); err != nil {
		t.Fatalf("OAUTHBEARER: %v", err)
	}
	if err := ping(seed, kgo.SASL(oauth.Auth{Token: s.token(t, "svc", time.Now().Add(-time.Hour))}.AsMechanism())); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("expired OAUTHBEARER token: %v", err)
	}
	if err := ping(seed); err == nil {
		t.Fatal("a client without SASL was served on the SASL listener")
	}

	s.issue(t, "alice")
	sslSeed := kgo.SeedBrokers(n.Addrs["SSL"])
	if err := ping(sslSeed, kgo.DialTLSConfig(s.clientTLS(t, "alice"))); err != nil {
		t.Fatalf("mTLS: %v", err)
	}
	if err := ping(sslSeed, kgo.DialTLSConfig(s.clientTLS(t, ""))); err == nil {
		t.Fatal("a TLS client without a certificate was served on the mTLS listener")
	}
}

// TestNodeAPIsHiddenFromClients: the client listener neither advertises
// nor serves the node-to-node APIs; on the inter-broker listener a client
// that is not a node is refused with CLUSTER_AUTHORIZATION_FAILED.
func TestNodeAPIsHiddenFromClients(t *testing.T) {
	s := newSecureSetup(t)
	n, _ := startSecureNode(t, s)
	ctx := testCtx(t)
	admin := scramClient(t, n.Addrs["SASL"], "admin", adminPass)
	vers, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	internal := []int16{kmsg.BrokerRegistration.Int16(), kmsg.BrokerHeartbeat.Int16(), kmsg.AlterPartition.Int16(), kmsg.WriteTxnMarkers.Int16()}
	var saslSeen bool
	for _, k := range vers.ApiKeys {
		if slices.Contains(internal, k.ApiKey) {
			t.Errorf("the client listener advertises %s", kmsg.NameForKey(k.ApiKey))
		}
		saslSeen = saslSeen || k.ApiKey == kmsg.SASLAuthenticate.Int16()
	}
	if !saslSeen {
		t.Error("the SASL listener does not advertise SaslAuthenticate")
	}
	hb := kmsg.NewPtrBrokerHeartbeatRequest()
	hb.BrokerID, hb.WantFence = 1, true
	if _, err := hb.RequestWith(ctx, admin.Broker(1)); err == nil {
		t.Fatal("BrokerHeartbeat was answered on the client listener")
	}

	s.issue(t, "mallory")
	mallory, err := kgo.NewClient(kgo.SeedBrokers(n.Addrs["SSL"]), kgo.DialTLSConfig(s.clientTLS(t, "mallory")))
	if err != nil {
		t.Fatal(err)
	}
	defer mallory.Close()
	resp, err := hb.RequestWith(ctx, mallory)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("a non-node's BrokerHeartbeat on the inter-broker listener: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	reg := kmsg.NewPtrBrokerRegistrationRequest()
	reg.BrokerID = 7
	l := kmsg.NewBrokerRegistrationRequestListener()
	l.Name, l.Host, l.Port = "PLAINTEXT", "evil.example", 9092
	reg.Listeners = append(reg.Listeners, l)
	if resp, err := reg.RequestWith(ctx, mallory); err != nil || resp.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("a non-node registers a broker: %v %+v", err, resp)
	}
	if !strings.Contains(n.B.Config().Security.InterBrokerListener, "SSL") {
		t.Fatal("inter-broker listener")
	}
}

func scramMech(user, pass string) sasl.Mechanism {
	return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
}
