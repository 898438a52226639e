package broker_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

// startSecureCluster starts n nodes that form one cluster with everything
// on: a CLIENT listener (SASL_PLAINTEXT, SCRAM-SHA-512), an INTERNAL
// listener (mutual TLS) the nodes use to reach each other, Raft over
// mutual TLS, an ACL authorizer whose super users are User:admin and the
// nodes (User:node-<id>, from their certificates' CN), and admin as a
// bootstrap SCRAM user.
func startSecureCluster(t *testing.T, s *secureSetup, n int) ([]*brokertest.Node, map[int32]string) {
	t.Helper()
	supers := []auth.Principal{auth.User("admin")}
	for i := 1; i <= n; i++ {
		supers = append(supers, auth.User("node-"+strconv.Itoa(i)))
	}
	admin, err := auth.NewScramCredential("admin", auth.MechScramSHA512, adminPass, 4096)
	if err != nil {
		t.Fatal(err)
	}
	mapper, _ := auth.ParseMappingRules(`RULE:^CN=([^,]*).*$/$1/,DEFAULT`)
	creds := map[int32]*broker.LateCredentials{}
	mats := map[int32]*auth.TLSMaterial{}
	nodes := brokertest.StartClusterListeners(t, n, func(id int32) []*wire.Listener {
		mat := s.material(t, s.issue(t, "node-"+strconv.Itoa(int(id)), "127.0.0.1", "localhost"), auth.ClientAuthRequired)
		creds[id], mats[id] = &broker.LateCredentials{}, mat
		ss, err := auth.NewSASLServer(auth.SASLConfig{Mechanisms: []string{auth.MechScramSHA512}, Scram: creds[id]})
		if err != nil {
			t.Fatal(err)
		}
		return []*wire.Listener{
			{Name: "CLIENT", Protocol: wire.SASLPlaintext, SASL: ss},
			{Name: "INTERNAL", Protocol: wire.SSL, TLS: mat.ServerConfig(), CertPrincipal: mapper.CertPrincipal, Internal: true},
		}
	}, func(id int32, c *broker.Config) {
		c.Security.InterBrokerListener = "INTERNAL"
		c.Security.Authorizer = auth.NewAuthorizer(supers, false)
		c.Security.NodeTLS = mats[id]
		c.Security.RaftTLS, c.Security.RaftMapper = true, mapper
		if s.warnings != nil {
			c.Logger = slog.New(slog.NewTextHandler(s.warnings, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", id)
		}
		c.Security.BootstrapScram = []auth.ScramCredential{admin}
	})
	for _, nd := range nodes {
		creds[nd.Cfg.NodeID].Set(nd.B)
	}
	peers := nodes[0].Cfg.Peers
	awaitCluster(t, "every broker registered everywhere, admin known", func() error {
		for _, node := range nodes {
			cl, err := kgo.NewClient(kgo.SeedBrokers(node.Addrs["CLIENT"]), kgo.SASL(scramMech("admin", adminPass)))
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl.Broker(int(node.Cfg.NodeID)))
			cancel()
			cl.Close()
			if err != nil {
				return fmt.Errorf("node %d: %w", node.Cfg.NodeID, err)
			}
			if len(md.Brokers) != n || md.ControllerID <= 0 {
				return fmt.Errorf("node %d: brokers %d, controller %d", node.Cfg.NodeID, len(md.Brokers), md.ControllerID)
			}
			for _, br := range md.Brokers {
				// The CLIENT listener's endpoints, never INTERNAL's.
				if addr := net.JoinHostPort(br.Host, strconv.Itoa(int(br.Port))); addr != nodes[br.NodeID-1].Addrs["CLIENT"] {
					return fmt.Errorf("node %d lists broker %d at %s", node.Cfg.NodeID, br.NodeID, addr)
				}
			}
		}
		return nil
	})
	return nodes, peers
}

// TestSecureCluster runs the ACL matrix across three nodes: users and ACLs
// made on any node are committed to the metadata log and enforced by all;
// a client cannot fence or register a broker; a node without the
// cluster's certificate cannot reach Raft, and a certificate of the
// cluster's CA speaks Raft only for the node it names (raftForgeries).
func TestSecureCluster(t *testing.T) {
	s := newSecureSetup(t)
	warnings := &lockedLog{}
	s.warnings = warnings
	nodes, peers := startSecureCluster(t, s, 3)
	ctx := testCtx(t)
	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.Addrs["CLIENT"])
	}
	adminCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.SASL(scramMech("admin", adminPass)))
	if err != nil {
		t.Fatal(err)
	}
	defer adminCl.Close()
	adm := kadm.NewClient(adminCl)

	// Users and ACLs are changed through a node that is not the
	// controller (forwarded), and every node enforces them.
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, adminCl)
	if err != nil {
		t.Fatal(err)
	}
	var other *brokertest.Node
	for _, n := range nodes {
		if n.Cfg.NodeID != md.ControllerID {
			other = n
		}
	}
	viaOther, err := kgo.NewClient(kgo.SeedBrokers(other.Addrs["CLIENT"]), kgo.SASL(scramMech("admin", adminPass)))
	if err != nil {
		t.Fatal(err)
	}
	defer viaOther.Close()
	pinned := kadm.NewClient(viaOther)
	ups, err := pinned.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "alice-secret"}})
	if err != nil || ups.Error() != nil {
		t.Fatalf("create alice through node %d: %v %v", other.Cfg.NodeID, err, ups.Error())
	}
	createClusterTopicSASL(t, adm, "A", 3)
	createClusterTopicSASL(t, adm, "B", 3)
	res, err := pinned.CreateACLs(ctx, kadm.NewACLs().Allow("User:alice").Topics("A").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral))
	if err != nil || res[0].Err != nil {
		t.Fatalf("create ACL through node %d: %v %+v", other.Cfg.NodeID, err, res)
	}
	for _, n := range nodes {
		n := n
		awaitCluster(t, fmt.Sprintf("node %d enforcing alice's ACL", n.Cfg.NodeID), func() error {
			cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addrs["CLIENT"]), kgo.SASL(scramMech("alice", "alice-secret")),
				kgo.DefaultProduceTopic("A"), kgo.RecordRetries(3), kgo.UnknownTopicRetries(2))
			if err != nil {
				return err
			}
			defer cl.Close()
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := cl.ProduceSync(pctx, kgo.StringRecord("via node "+strconv.Itoa(int(n.Cfg.NodeID)))).FirstErr(); err != nil {
				return err
			}
			if err := cl.ProduceSync(pctx, &kgo.Record{Topic: "B", Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
				t.Fatalf("alice writes B via node %d: %v", n.Cfg.NodeID, err)
			}
			return nil
		})
	}

	// Clients cannot steer the cluster: the node-to-node APIs are not on
	// the CLIENT listener, and on INTERNAL a certificate that is not a
	// node's is refused.
	hb := kmsg.NewPtrBrokerHeartbeatRequest()
	hb.BrokerID, hb.BrokerEpoch, hb.WantFence = 2, 1, true
	if _, err := hb.RequestWith(ctx, adminCl.Broker(int(md.ControllerID))); err == nil {
		t.Fatal("BrokerHeartbeat answered on the CLIENT listener")
	}
	ctrl := nodes[md.ControllerID-1]
	s.issue(t, "mallory")
	mallory, err := kgo.NewClient(kgo.SeedBrokers(ctrl.Addrs["INTERNAL"]), kgo.DialTLSConfig(s.clientTLS(t, "mallory")))
	if err != nil {
		t.Fatal(err)
	}
	defer mallory.Close()
	resp, err := hb.RequestWith(ctx, mallory)
	if err != nil || resp.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("mallory fences broker 2: %v %+v", err, resp)
	}
	anon, err := kgo.NewClient(kgo.SeedBrokers(ctrl.Addrs["INTERNAL"]), kgo.DialTLSConfig(s.clientTLS(t, "")), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := hb.RequestWith(ctx, anon); err == nil {
		t.Fatal("a client without a certificate reached the INTERNAL listener")
	}
	reg := kmsg.NewPtrBrokerRegistrationRequest()
	reg.BrokerID = 2
	l := kmsg.NewBrokerRegistrationRequestListener()
	l.Name, l.Host, l.Port = "CLIENT", "evil.example", 9092
	reg.Listeners = append(reg.Listeners, l)
	if resp, err := reg.RequestWith(ctx, mallory); err != nil || resp.ErrorCode != kerr.ClusterAuthorizationFailed.Code {
		t.Fatalf("mallory re-registers broker 2: %v %+v", err, resp)
	}
	md2, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, adminCl)
	if err != nil {
		t.Fatal(err)
	}
	if len(md2.Brokers) != 3 || !slices.ContainsFunc(md2.Brokers, func(b kmsg.MetadataResponseBroker) bool { return b.NodeID == 2 && b.Host == "127.0.0.1" }) {
		t.Fatalf("brokers after the attempts: %+v", md2.Brokers)
	}

	// Raft: a node with another CA's certificate, or none, gets no TLS
	// session on a Raft port.
	other2, _ := auth.NewCA("intruder CA", time.Hour)
	intruder, _ := other2.Issue(auth.CertOptions{CommonName: "node-4", Hosts: []string{"127.0.0.1"}})
	kp, _ := tls.X509KeyPair(intruder.CertPEM, intruder.KeyPEM)
	for name, cfg := range map[string]*tls.Config{
		"another CA's certificate": {Certificates: []tls.Certificate{kp}, InsecureSkipVerify: true},
		"no certificate":           {InsecureSkipVerify: true},
	} {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", peers[1], cfg)
		if err == nil {
			// TLS 1.3 reports the refused client certificate on the
			// first read.
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%s: the Raft port kept the connection (%v)", name, err)
		}
	}
	if _, err := net.DialTimeout("tcp", peers[1], time.Second); err != nil {
		t.Fatal(err) // the port is there; only TLS with the cluster's CA gets further
	}
	raftForgeries(t, s, nodes, peers, adminCl, warnings)

	// The cluster kept working throughout.
	alice2, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.SASL(scramMech("alice", "alice-secret")), kgo.DefaultProduceTopic("A"))
	if err != nil {
		t.Fatal(err)
	}
	defer alice2.Close()
	if err := alice2.ProduceSync(ctx, kgo.StringRecord("still fine")).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func createClusterTopicSASL(t *testing.T, adm *kadm.Client, topic string, rf int16) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopics(ctx, 1, rf, nil, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

// TestSecureClusterSASLInterBroker: nodes log in to each other with SCRAM
// (the bootstrap user the controller commits first), no certificates.
func TestSecureClusterSASLInterBroker(t *testing.T) {
	node, err := auth.NewScramCredential("node", auth.MechScramSHA512, "node-secret", 4096)
	if err != nil {
		t.Fatal(err)
	}
	creds := map[int32]*broker.LateCredentials{}
	nodes := brokertest.StartClusterListeners(t, 3, func(id int32) []*wire.Listener {
		creds[id] = &broker.LateCredentials{}
		ss, err := auth.NewSASLServer(auth.SASLConfig{Mechanisms: []string{auth.MechScramSHA512}, Scram: creds[id]})
		if err != nil {
			t.Fatal(err)
		}
		return []*wire.Listener{{Name: "SASL", Protocol: wire.SASLPlaintext, SASL: ss, Internal: true}}
	}, func(id int32, c *broker.Config) {
		c.Security.Authorizer = auth.NewAuthorizer([]auth.Principal{auth.User("node")}, false)
		c.Security.NodeSASL = &broker.NodeSASL{Mechanism: auth.MechScramSHA512, User: "node", Password: "node-secret"}
		c.Security.BootstrapScram = []auth.ScramCredential{node}
	})
	for _, nd := range nodes {
		creds[nd.Cfg.NodeID].Set(nd.B)
	}
	awaitCluster(t, "every broker registered everywhere over SASL", func() error {
		for _, nd := range nodes {
			cl, err := kgo.NewClient(kgo.SeedBrokers(nd.Addr), kgo.SASL(scramMech("node", "node-secret")))
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl.Broker(int(nd.Cfg.NodeID)))
			cancel()
			cl.Close()
			if err != nil {
				return err
			}
			if len(md.Brokers) != 3 || md.ControllerID <= 0 {
				return fmt.Errorf("node %d: brokers %d, controller %d", nd.Cfg.NodeID, len(md.Brokers), md.ControllerID)
			}
		}
		return nil
	})
	// An anonymous client is not even served here.
	anon, err := kgo.NewClient(kgo.SeedBrokers(nodes[0].Addr), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	hb := kmsg.NewPtrBrokerHeartbeatRequest()
	hb.BrokerID, hb.WantFence = 2, true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := hb.RequestWith(ctx, anon); err == nil {
		t.Fatal("an unauthenticated BrokerHeartbeat was answered")
	}
}
