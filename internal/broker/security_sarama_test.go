package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/xdg-go/scram"
)

// xdgSCRAM is the SCRAM client sarama's documentation wires in.
type xdgSCRAM struct {
	gen  scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (x *xdgSCRAM) Begin(user, pass, authz string) error {
	cl, err := x.gen.NewClient(user, pass, authz)
	if err != nil {
		return err
	}
	x.conv = cl.NewConversation()
	return nil
}

func (x *xdgSCRAM) Step(challenge string) (string, error) { return x.conv.Step(challenge) }
func (x *xdgSCRAM) Done() bool                            { return x.conv.Done() }

// TestSaramaSASL: sarama authenticates with SCRAM-SHA-512, with PLAIN over
// the legacy SaslHandshake v0 framing and over v1, and with mutual TLS -
// and is refused with a wrong password or a topic it may not write.
func TestSaramaSASL(t *testing.T) {
	s := newSecureSetup(t)
	n, _ := startSecureNode(t, s)
	ctx := testCtx(t)
	adm := kadm.NewClient(scramClient(t, n.Addrs["SASL"], "admin", adminPass))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "S"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"User:plainuser", "User:alice"} {
		mustACL(t, adm, kadm.NewACLs().Allow(p).Topics("S").Operations(kadm.OpWrite, kadm.OpRead).ResourcePatternType(kadm.ACLPatternLiteral))
	}

	produce := func(addr string, cfg *sarama.Config) error {
		cfg.Producer.Return.Successes = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Producer.Retry.Max = 1
		cfg.Metadata.Retry.Max = 1
		cfg.Net.DialTimeout = 5 * time.Second
		p, err := sarama.NewSyncProducer([]string{addr}, cfg)
		if err != nil {
			return err
		}
		defer p.Close()
		_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: "S", Value: sarama.StringEncoder("from sarama")})
		return err
	}
	scramCfg := func(user, pass string) *sarama.Config {
		cfg := sarama.NewConfig()
		cfg.Net.SASL.Enable = true
		cfg.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
		cfg.Net.SASL.User, cfg.Net.SASL.Password = user, pass
		cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &xdgSCRAM{gen: scram.SHA512} }
		return cfg
	}
	if err := produce(n.Addrs["SASL"], scramCfg("admin", adminPass)); err != nil {
		t.Fatalf("sarama SCRAM-SHA-512: %v", err)
	}
	if err := produce(n.Addrs["SASL"], scramCfg("admin", "wrong")); !errors.Is(err, sarama.ErrSASLAuthenticationFailed) {
		t.Fatalf("sarama with a wrong password: %v", err)
	}
	for _, v := range []int16{sarama.SASLHandshakeV0, sarama.SASLHandshakeV1} {
		cfg := sarama.NewConfig()
		cfg.Net.SASL.Enable = true
		cfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		cfg.Net.SASL.User, cfg.Net.SASL.Password = "plainuser", "plain-secret"
		cfg.Net.SASL.Version = v
		if v == sarama.SASLHandshakeV0 {
			cfg.ApiVersionsRequest = false // sarama's rule for v0
		}
		if err := produce(n.Addrs["SASL"], cfg); err != nil {
			t.Fatalf("sarama PLAIN, handshake v%d: %v", v, err)
		}
	}
	s.issue(t, "alice")
	tlsCfg := sarama.NewConfig()
	tlsCfg.Net.TLS.Enable = true
	tlsCfg.Net.TLS.Config = s.clientTLS(t, "alice")
	if err := produce(n.Addrs["SSL"], tlsCfg); err != nil {
		t.Fatalf("sarama mTLS as alice: %v", err)
	}
	s.issue(t, "bob")
	bobCfg := sarama.NewConfig()
	bobCfg.Net.TLS.Enable = true
	bobCfg.Net.TLS.Config = s.clientTLS(t, "bob")
	if err := produce(n.Addrs["SSL"], bobCfg); !errors.Is(err, sarama.ErrTopicAuthorizationFailed) {
		t.Fatalf("sarama mTLS as bob (no ACL): %v", err)
	}
}
