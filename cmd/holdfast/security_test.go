package main

import (
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// devCerts makes a CA, node-1 and a client alice in a temporary directory.
func devCerts(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	if err := makeCerts(io.Discard, dir, 1, []string{"localhost", "127.0.0.1"}, []string{"alice"}, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	return dir
}

// parseProps reads key=value lines as a server.properties.
func parseProps(t *testing.T, text string) props {
	t.Helper()
	lines, err := readProperties(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	p := props{}
	for _, l := range lines {
		p[l.key] = l.value
	}
	return p
}

// TestBuildSecurity: Kafka's security settings become listeners, the
// broker's security config and SECURITY warnings; what would leave a hole
// is refused.
func TestBuildSecurity(t *testing.T) {
	certs := devCerts(t)
	tlsProps := "ssl.keystore.location=" + filepath.Join(certs, "node-1.pem") + "\nssl.truststore.location=" + filepath.Join(certs, "ca.pem") + "\n"
	type want struct {
		listeners string // NAME=bind>advertised, ...
		ib        string
		warn      []string // substrings, one per warning, in order
		ignored   string
		err       string
		raftTLS   bool
		authz     bool
	}
	for _, tc := range []struct {
		name, props, listen, advertised string
		cluster                         bool
		raft                            string // default 127.0.0.1:9300
		want                            want
	}{
		{name: "zero config", listen: "localhost:9092",
			want: want{listeners: "PLAINTEXT=localhost:9092>localhost:9092", ib: "PLAINTEXT"}},
		{name: "every interface, no authentication", listen: "0.0.0.0:9092", advertised: "host1:9092",
			want: want{listeners: "PLAINTEXT=0.0.0.0:9092>host1:9092", ib: "PLAINTEXT", warn: []string{"listener PLAINTEXT (PLAINTEXT) on 0.0.0.0:9092 accepts connections from beyond this machine without authentication"}}},
		{name: "wildcard not advertised", listen: ":9092",
			want: want{err: "clients cannot connect to the wildcard host"}},
		{name: "Kafka's KRaft example: CONTROLLER left out", listen: "PLAINTEXT://:9092,CONTROLLER://:9093", advertised: "PLAINTEXT://localhost:9092",
			props: "controller.listener.names=CONTROLLER\nlistener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\ninter.broker.listener.name=PLAINTEXT\nlistener.name.controller.ssl.client.auth=required\nsasl.mechanism.controller.protocol=PLAIN\n",
			want: want{listeners: "PLAINTEXT=:9092>localhost:9092", ib: "PLAINTEXT", warn: []string{"beyond this machine"},
				ignored: "listener.name.controller.ssl.client.auth sasl.mechanism.controller.protocol"}},
		{name: "SASL_SSL and mTLS, advertised by bind address", listen: "SASL_SSL://127.0.0.1:9093,SSL://127.0.0.1:9094",
			props: tlsProps + "inter.broker.listener.name=SSL\nlistener.name.ssl.ssl.client.auth=required\nsasl.enabled.mechanisms=SCRAM-SHA-512\n" +
				"authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\nsuper.users=User:admin;User:node-1\n",
			want: want{listeners: "SASL_SSL=127.0.0.1:9093>127.0.0.1:9093,SSL=127.0.0.1:9094>127.0.0.1:9094", ib: "SSL", authz: true}},
		{name: "authentication without an authorizer", listen: "SASL_PLAINTEXT://localhost:9093",
			want: want{listeners: "SASL_PLAINTEXT=localhost:9093>localhost:9093", ib: "SASL_PLAINTEXT", err: "inter-broker listener SASL_PLAINTEXT uses SASL"}},
		{name: "SASL listener, node login, no authorizer", listen: "SASL_PLAINTEXT://localhost:9093",
			props: `sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="node" password="n";` + "\n",
			want:  want{listeners: "SASL_PLAINTEXT=localhost:9093>localhost:9093", ib: "SASL_PLAINTEXT", warn: []string{"no authorizer is set"}}},
		{name: "cluster: TLS between nodes puts Raft on mTLS", listen: "INTERNAL://127.0.0.1:9094", cluster: true,
			props: tlsProps + "listener.security.protocol.map=INTERNAL:SSL\nlistener.name.internal.ssl.client.auth=required\n",
			want:  want{listeners: "INTERNAL=127.0.0.1:9094>127.0.0.1:9094", ib: "INTERNAL", raftTLS: true, warn: []string{"no authorizer is set"}}},
		{name: "cluster: a Raft mapping rule that does not parse", listen: "INTERNAL://127.0.0.1:9094", cluster: true,
			props: tlsProps + "listener.security.protocol.map=INTERNAL:SSL\nlistener.name.internal.ssl.client.auth=required\nlistener.name.raft.ssl.principal.mapping.rules=RULE:broken\n",
			want:  want{err: "ssl.principal.mapping.rules"}},
		{name: "cluster: Raft in the clear on loopback", listen: "localhost:9092", cluster: true,
			want: want{listeners: "PLAINTEXT=localhost:9092>localhost:9092", ib: "PLAINTEXT"}},
		{name: "cluster: Raft in the clear beyond loopback", listen: "localhost:9092", cluster: true, raft: "10.0.0.1:9300",
			want: want{listeners: "PLAINTEXT=localhost:9092>localhost:9092", ib: "PLAINTEXT", warn: []string{"Raft transport between nodes is not encrypted"}}},
		{name: "typo in a listener name", listen: "SSL://localhost:9094", props: tlsProps + "listener.name.sll.ssl.client.auth=required\n",
			want: want{err: "listener.name.sll.ssl.client.auth: there is no listener SLL"}},
		{name: "unknown ssl setting", listen: "localhost:9092", props: "ssl.keymanager.algorithm=SunX509\n",
			want: want{err: "ssl.keymanager.algorithm is not supported"}},
		{name: "principal builder", listen: "localhost:9092", props: "principal.builder.class=com.example.Builder\n",
			want: want{err: "principal.builder.class is not supported"}},
		{name: "SSL without keystore", listen: "SSL://localhost:9094",
			want: want{err: "set ssl.keystore.location"}},
		{name: "client auth without truststore", listen: "SSL://localhost:9094", props: "ssl.keystore.location=" + filepath.Join(certs, "node-1.pem") + "\nssl.client.auth=required\n",
			want: want{err: "needs ssl.truststore.location"}},
		{name: "super.users without authorizer", listen: "localhost:9092", props: "super.users=User:admin\n",
			want: want{err: "no ACLs would be enforced"}},
		{name: "other authorizer", listen: "localhost:9092", props: "authorizer.class.name=com.example.Authz\n",
			want: want{err: "authorizer.class.name com.example.Authz"}},
		{name: "inter-broker listener not there", listen: "localhost:9092", props: "inter.broker.listener.name=INTERNAL\n",
			want: want{err: "inter.broker.listener.name INTERNAL is not one of the listeners"}},
		{name: "listener without protocol", listen: "CLIENT://localhost:9092",
			want: want{err: "listener CLIENT has no security protocol"}},
		{name: "encrypted key", listen: "SSL://localhost:9094", props: tlsProps + "ssl.key.password=x\n",
			want: want{err: "encrypted private keys are not supported"}},
		{name: "everyone allowed", listen: "localhost:9092", props: "authorizer.class.name=acl\nallow.everyone.if.no.acl.found=true\n",
			want: want{listeners: "PLAINTEXT=localhost:9092>localhost:9092", ib: "PLAINTEXT", authz: true, warn: []string{"allow.everyone.if.no.acl.found=true"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raft := tc.raft
			if raft == "" {
				raft = "127.0.0.1:9300"
			}
			sec, err := buildSecurity(parseProps(t, tc.props), tc.listen, tc.advertised, raft, tc.cluster, nil)
			if tc.want.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.want.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer sec.close()
			var ls []string
			for i, l := range sec.listeners {
				a := sec.broker.Listeners[i]
				ls = append(ls, l.wire.Name+"="+l.bind+">"+a.Host+":"+strconv.Itoa(int(a.Port)))
			}
			if got := strings.Join(ls, ","); got != tc.want.listeners {
				t.Errorf("listeners %s, want %s", got, tc.want.listeners)
			}
			if sec.broker.InterBrokerListener != tc.want.ib {
				t.Errorf("inter-broker listener %s, want %s", sec.broker.InterBrokerListener, tc.want.ib)
			}
			if len(sec.warnings) != len(tc.want.warn) {
				t.Fatalf("warnings %q, want %d", sec.warnings, len(tc.want.warn))
			}
			for i, w := range tc.want.warn {
				if !strings.Contains(sec.warnings[i], w) {
					t.Errorf("warning %q, want it to say %q", sec.warnings[i], w)
				}
			}
			if got := strings.Join(sec.ignored, " "); got != tc.want.ignored {
				t.Errorf("ignored %q, want %q", got, tc.want.ignored)
			}
			if sec.broker.RaftTLS && sec.broker.RaftMapper == nil {
				t.Error("Raft over TLS without a mapping of certificates to nodes")
			}
			if sec.broker.RaftTLS != tc.want.raftTLS || (sec.broker.Authorizer != nil) != tc.want.authz {
				t.Errorf("raft TLS %v, authorizer %v", sec.broker.RaftTLS, sec.broker.Authorizer != nil)
			}
		})
	}
}
