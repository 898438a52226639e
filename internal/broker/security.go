package broker

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"holdfast/internal/auth"
	"holdfast/internal/cluster"
	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// SecurityConfig is the broker's side of security: who may do what, and
// how this node proves itself to the others. The wire layer authenticates
// connections (TLS, SASL) and puts the principal on each request; the
// handlers ask authorize before they act.
type SecurityConfig struct {
	// Listeners are this node's endpoints as clients reach them
	// (advertised.listeners), the first being the default. Empty: one
	// PLAINTEXT listener at AdvertisedHost:AdvertisedPort.
	Listeners []metadata.Endpoint
	// InterBrokerListener is inter.broker.listener.name: the listener
	// nodes use to reach each other, where the node-to-node APIs are
	// served. Default: the first listener.
	InterBrokerListener string
	// Authorizer enforces ACLs (authorizer.class.name set). nil: like
	// Kafka without an authorizer, every principal may do everything -
	// except that node-to-node APIs are still served on the inter-broker
	// listener only.
	Authorizer *auth.Authorizer
	// NodeTLS is this node's key, certificate and trusted CAs, for
	// connecting to other nodes over an SSL or SASL_SSL inter-broker
	// listener and for the Raft transport.
	NodeTLS *auth.TLSMaterial
	// NodeSASL is how this node logs in on a SASL inter-broker listener
	// (sasl.mechanism.inter.broker.protocol, with the username and
	// password of that listener's sasl.jaas.config).
	NodeSASL *NodeSASL
	// RaftTLS runs the Raft transport over mutual TLS with NodeTLS: only
	// nodes with a certificate from the cluster's CA take part, each
	// speaking for the node its certificate names (RaftMapper).
	RaftTLS bool
	// RaftMapper maps a Raft peer's certificate to its principal
	// (ssl.principal.mapping.rules of the RAFT listener): node N is
	// User:node-N, or has the CN node-N (auth.PrincipalMapper.CertNode).
	// nil: DEFAULT.
	RaftMapper *auth.PrincipalMapper
	// BootstrapScram are SCRAM users created when they do not exist yet
	// (Kafka's kafka-storage format --add-scram): the first admin and
	// the nodes' own users.
	BootstrapScram []auth.ScramCredential
}

// NodeSASL is a node's own SASL login.
type NodeSASL struct {
	Mechanism, User, Password string
}

func (n *NodeSASL) mechanism() (sasl.Mechanism, error) {
	switch n.Mechanism {
	case auth.MechPlain:
		return plain.Auth{User: n.User, Pass: n.Password}.AsMechanism(), nil
	case auth.MechScramSHA256:
		return scram.Auth{User: n.User, Pass: n.Password}.AsSha256Mechanism(), nil
	case auth.MechScramSHA512:
		return scram.Auth{User: n.User, Pass: n.Password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("sasl.mechanism.inter.broker.protocol %q: nodes log in with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", n.Mechanism)
}

// checkSecurity fills in the listener defaults and checks that this node
// can reach the others as the configuration says (before anything
// connects to another node).
func (b *Broker) checkSecurity() error {
	sc := b.cfg.Security
	if len(sc.Listeners) == 0 {
		sc.Listeners = []metadata.Endpoint{{Name: string(wire.Plaintext), Host: b.cfg.AdvertisedHost, Port: b.cfg.AdvertisedPort, Protocol: string(wire.Plaintext)}}
	}
	if sc.InterBrokerListener == "" {
		sc.InterBrokerListener = sc.Listeners[0].Name
	}
	ib, ok := endpointNamed(sc.Listeners, sc.InterBrokerListener)
	if !ok {
		return fmt.Errorf("inter.broker.listener.name %s is not one of the listeners", sc.InterBrokerListener)
	}
	proto := wire.SecurityProtocol(ib.Protocol)
	if proto.UsesTLS() && sc.NodeTLS == nil {
		return fmt.Errorf("the inter-broker listener %s is %s: this node needs ssl.truststore.* (and a keystore for mTLS) to reach the others", ib.Name, ib.Protocol)
	}
	if proto.UsesSASL() {
		if sc.NodeSASL == nil {
			return fmt.Errorf("the inter-broker listener %s is %s: set sasl.mechanism.inter.broker.protocol and a username/password in its sasl.jaas.config", ib.Name, ib.Protocol)
		}
		if _, err := sc.NodeSASL.mechanism(); err != nil {
			return err
		}
	}
	if sc.RaftTLS && (sc.NodeTLS == nil || !sc.NodeTLS.HasKeystore() || !sc.NodeTLS.HasTruststore()) {
		return fmt.Errorf("Raft over TLS needs this node's keystore and the cluster's truststore")
	}
	if sc.RaftTLS {
		// The other nodes take this node's Raft session for the node its
		// certificate names: say so now rather than be refused by all.
		leaf := sc.NodeTLS.Leaf()
		if leaf == nil {
			return fmt.Errorf("Raft over TLS: this node's certificate does not parse")
		}
		node, err := sc.RaftMapper.CertNode(leaf)
		if err != nil {
			return fmt.Errorf("Raft over TLS: this node's certificate must name node %d (CN node-%d, or a principal node-%d through ssl.principal.mapping.rules): %w", b.cfg.NodeID, b.cfg.NodeID, b.cfg.NodeID, err)
		}
		if node != uint64(b.cfg.NodeID) {
			return fmt.Errorf("Raft over TLS: this node's certificate %q names node %d, not this node (%d): each node needs its own certificate", leaf.Subject.String(), node, b.cfg.NodeID)
		}
	}
	b.cfg.Security = sc
	return nil
}

// startSecurity loads the committed ACLs into the authorizer and creates
// the bootstrap SCRAM users.
func (b *Broker) startSecurity() error {
	sc := b.cfg.Security
	if sc.Authorizer != nil {
		sc.Authorizer.SetACLs(b.meta.ACLs())
	}
	if len(sc.BootstrapScram) > 0 {
		// The controller commits them, once it leads an initialized
		// metadata log.
		stop := goLoop(func(stop <-chan struct{}) {
			tick := b.clk().NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if len(b.missingScram()) == 0 {
					return // committed (by this node or another controller)
				}
				if !b.cluster.IsController() || len(b.meta.Brokers()) == 0 {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := b.bootstrapScram(ctx)
				cancel()
				if err == nil {
					return
				}
				b.log.Debug("creating bootstrap SCRAM users", "err", err)
			}
		})
		b.closers = append(b.closers, func() error { stop(); return nil })
	}
	return nil
}

func endpointNamed(eps []metadata.Endpoint, name string) (metadata.Endpoint, bool) {
	for _, e := range eps {
		if e.Name == name {
			return e, true
		}
	}
	return metadata.Endpoint{}, false
}

// authorize reports whether the request's principal may perform op on the
// resource. Without an authorizer everything is allowed.
func (b *Broker) authorize(r *wire.Request, op auth.Operation, typ auth.ResourceType, name string) bool {
	allowed := b.Authorized(r.Principal, requestHost(r), op, typ, name)
	if !allowed {
		b.log.Debug("authorization denied", "principal", r.Principal.String(), "host", requestHost(r), "operation", op.String(),
			"resource", typ.String()+":"+name, "api", kmsg.NameForKey(r.Key))
	}
	return allowed
}

// Authorized is the rule every request of a Kafka listener is held to,
// for principal p connected from host (an IP address): the authorizer's
// answer, or yes when there is none. The web console asks it for the
// user logged in to it, so the console shows what that user's Kafka
// client would be shown.
func (b *Broker) Authorized(p auth.Principal, host string, op auth.Operation, typ auth.ResourceType, name string) bool {
	az := b.cfg.Security.Authorizer
	return az == nil || az.Authorize(p, host, op, typ, name)
}

// authorizedGroups splits groups into those the request's principal may
// perform op on and those it may not (answered GROUP_AUTHORIZATION_FAILED
// without being looked at).
func (b *Broker) authorizedGroups(r *wire.Request, op auth.Operation, groups []string) (allowed, denied []string) {
	for _, g := range groups {
		if b.authorize(r, op, auth.ResourceGroup, g) {
			allowed = append(allowed, g)
		} else {
			denied = append(denied, g)
		}
	}
	return allowed, denied
}

// authorizeCluster is authorize on the cluster resource.
func (b *Broker) authorizeCluster(r *wire.Request, op auth.Operation) bool {
	return b.authorize(r, op, auth.ResourceCluster, auth.ClusterName)
}

// authorizedOps is the KIP-430 bitfield for a resource: every supported
// operation without an authorizer.
func (b *Broker) authorizedOps(r *wire.Request, typ auth.ResourceType, name string) int32 {
	az := b.cfg.Security.Authorizer
	if az == nil {
		var bits int32
		for _, op := range auth.Operations[typ] {
			bits |= 1 << op
		}
		return bits
	}
	return az.AuthorizedOperations(r.Principal, requestHost(r), typ, name)
}

func requestHost(r *wire.Request) string {
	if r.Conn == nil {
		return ""
	}
	return r.Conn.Host
}

// fromNode reports whether a request comes from another node: it arrived
// on the inter-broker listener and its principal may CLUSTER_ACTION. With
// an authorizer, an anonymous principal never counts as a node, whatever
// allow.everyone.if.no.acl.found says.
func (b *Broker) fromNode(r *wire.Request) bool {
	if r.Conn == nil || r.Conn.Listener == nil || !r.Conn.Listener.Internal {
		return false
	}
	if b.cfg.Security.Authorizer != nil && r.Principal.IsAnonymous() {
		return false
	}
	return b.authorizeCluster(r, auth.OpClusterAction)
}

// internalDenied is the answer to a node-to-node API from someone who is
// not a node.
func internalDenied(req kmsg.Request) kmsg.Response {
	code := kerr.ClusterAuthorizationFailed.Code
	switch r := req.(type) {
	case *kmsg.BrokerRegistrationRequest:
		resp := r.ResponseKind().(*kmsg.BrokerRegistrationResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.BrokerHeartbeatRequest:
		resp := r.ResponseKind().(*kmsg.BrokerHeartbeatResponse)
		resp.ErrorCode, resp.IsFenced = code, true
		return resp
	case *kmsg.AlterPartitionRequest:
		resp := r.ResponseKind().(*kmsg.AlterPartitionResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.AllocateProducerIDsRequest:
		resp := r.ResponseKind().(*kmsg.AllocateProducerIDsResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.WriteTxnMarkersRequest:
		resp := r.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
		for _, m := range r.Markers {
			rm := kmsg.NewWriteTxnMarkersResponseMarker()
			rm.ProducerID = m.ProducerID
			for _, t := range m.Topics {
				rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
					rp.Partition, rp.ErrorCode = p, code
					rt.Partitions = append(rt.Partitions, rp)
				}
				rm.Topics = append(rm.Topics, rt)
			}
			resp.Markers = append(resp.Markers, rm)
		}
		return resp
	case *kmsg.ReadShareGroupStateRequest:
		resp := r.ResponseKind().(*kmsg.ReadShareGroupStateResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewReadShareGroupStateResponseTopic()
			rt.TopicID = t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewReadShareGroupStateResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	case *kmsg.WriteShareGroupStateRequest:
		resp := r.ResponseKind().(*kmsg.WriteShareGroupStateResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewWriteShareGroupStateResponseTopic()
			rt.TopicID = t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewWriteShareGroupStateResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	panic(fmt.Sprintf("broker: %s is not a node-to-node API", kmsg.NameForKey(req.Key())))
}

// listenerName is the name of the listener a request came on (the
// default listener's for requests without one).
func (b *Broker) listenerName(r *wire.Request) string {
	if r != nil && r.Conn != nil && r.Conn.Listener != nil {
		return r.Conn.Listener.Name
	}
	return b.cfg.Security.Listeners[0].Name
}

// selfEndpoint is this node's advertised endpoint for a listener name.
func (b *Broker) selfEndpoint(listener string) (metadata.Endpoint, bool) {
	return endpointNamed(b.cfg.Security.Listeners, listener)
}

// nodeClient is a Kafka client to other nodes' inter-broker listener,
// logged in as this node; extra options come after.
func (b *Broker) nodeClient(seeds []string, opts ...kgo.Opt) (*kgo.Client, error) {
	sc := b.cfg.Security
	base := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	ib, _ := endpointNamed(sc.Listeners, sc.InterBrokerListener)
	proto := wire.SecurityProtocol(ib.Protocol)
	if b.cfg.Dialer != nil && !proto.UsesTLS() {
		base = append(base, kgo.Dialer(b.cfg.Dialer))
	}
	if proto.UsesTLS() {
		mat := sc.NodeTLS
		base = append(base, kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: mat.ClientConfig(host)}
			return d.DialContext(ctx, network, host)
		}))
	}
	if proto.UsesSASL() {
		m, err := sc.NodeSASL.mechanism()
		if err != nil {
			return nil, err
		}
		base = append(base, kgo.SASL(m))
	}
	return kgo.NewClient(append(base, opts...)...)
}

// selfInfo is this node's registration: its default endpoint, and every
// named listener.
func (b *Broker) selfInfo() metadata.BrokerInfo {
	me := metadata.BrokerInfo{ID: b.cfg.NodeID, Host: b.cfg.AdvertisedHost, Port: b.cfg.AdvertisedPort, Rack: b.cfg.Rack}
	if ls := b.cfg.Security.Listeners; len(ls) > 0 {
		me.Host, me.Port = ls[0].Host, ls[0].Port
		if len(ls) > 1 || ls[0].Name != string(wire.Plaintext) || ls[0].Protocol != string(wire.Plaintext) {
			me.Listeners = slices.Clone(ls)
		}
	}
	return me
}

// commitSecurity commits a security command through the metadata log on
// the controller. The authorizer follows as it is applied.
func (b *Broker) commitSecurity(ctx context.Context, cmd metadata.Command) error {
	return b.cluster.Propose(ctx, cmd)
}

// securityApplied refreshes what depends on the security metadata.
func (b *Broker) securityApplied() {
	if az := b.cfg.Security.Authorizer; az != nil {
		az.SetACLs(b.meta.ACLs())
	}
}

// bootstrapScram creates the configured SCRAM users that do not exist.
func (b *Broker) bootstrapScram(ctx context.Context) error {
	missing := b.missingScram()
	if len(missing) == 0 {
		return nil
	}
	err := b.commitSecurity(ctx, metadata.Command{Op: metadata.OpScram, Scram: missing})
	if err == nil {
		for _, c := range missing {
			b.log.Info("created bootstrap SCRAM user", "user", c.User, "mechanism", c.Mechanism)
		}
	}
	return err
}

// clusterTopicVisible is Metadata's rule: a principal sees a topic only if
// it may describe it.
func (b *Broker) topicVisible(r *wire.Request, name string) bool {
	return b.authorize(r, auth.OpDescribe, auth.ResourceTopic, name)
}

// forwardedBy reports whether another node sent r on behalf of a client
// (and so must not forward it again): a node's request with a broker
// client id.
func (b *Broker) forwardedBy(r *wire.Request) bool {
	return strings.HasPrefix(r.ClientID, cluster.BrokerClientPrefix) && b.fromNode(r)
}

// missingScram are the bootstrap SCRAM users not in the metadata yet.
func (b *Broker) missingScram() []auth.ScramCredential {
	var missing []auth.ScramCredential
	for _, c := range b.cfg.Security.BootstrapScram {
		if _, ok := b.meta.ScramCredential(c.User, c.Mechanism); !ok {
			missing = append(missing, c)
		}
	}
	return missing
}

// thenEdit runs reply and lets edit change its response (authorization
// results merged into a coordinator's answer).
func thenEdit(reply wire.Reply, edit func(kmsg.Response)) wire.Reply {
	return func(ctx context.Context) kmsg.Response {
		resp := reply(ctx)
		if resp != nil {
			edit(resp)
		}
		return resp
	}
}

// authorizeConfigs checks DESCRIBE_CONFIGS or ALTER_CONFIGS on a config
// resource: the topic, or the cluster for broker configs.
func (b *Broker) authorizeConfigs(r *wire.Request, typ kmsg.ConfigResourceType, name string, op auth.Operation) error {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
		if !b.authorize(r, op, auth.ResourceTopic, name) {
			return errCode(kerr.TopicAuthorizationFailed, "%s", kerr.TopicAuthorizationFailed.Description)
		}
	case kmsg.ConfigResourceTypeGroupConfig:
		if !b.authorize(r, op, auth.ResourceGroup, name) {
			return errCode(kerr.GroupAuthorizationFailed, "%s", kerr.GroupAuthorizationFailed.Description)
		}
	case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
		if !b.authorizeCluster(r, op) {
			return errCode(kerr.ClusterAuthorizationFailed, "%s", kerr.ClusterAuthorizationFailed.Description)
		}
	}
	return nil
}

// authorizeIdempotent is Kafka's rule for an idempotent (non-transactional)
// producer id: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
func (b *Broker) authorizeIdempotent(r *wire.Request) bool {
	az := b.cfg.Security.Authorizer
	if az == nil || b.authorizeCluster(r, auth.OpIdempotentWrite) {
		return true
	}
	return az.AuthorizeAny(r.Principal, requestHost(r), auth.OpWrite, auth.ResourceTopic)
}

// authorizeTxnID is WRITE on a transactional id.
func (b *Broker) authorizeTxnID(r *wire.Request, id string) bool {
	return b.authorize(r, auth.OpWrite, auth.ResourceTransactionalID, id)
}

// LateCredentials is the SCRAM credential store of a broker that does not
// exist yet: listeners (and their SASL servers) are set up before the
// broker starts, and Set hands it over once it has.
type LateCredentials struct{ b atomic.Pointer[Broker] }

// Set makes b the source of credentials.
func (l *LateCredentials) Set(b *Broker) { l.b.Store(b) }

// ScramCredential implements auth.CredentialStore.
func (l *LateCredentials) ScramCredential(user, mech string) (auth.ScramCredential, bool) {
	b := l.b.Load()
	if b == nil {
		return auth.ScramCredential{}, false
	}
	return b.meta.ScramCredential(user, mech)
}
