package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/auth"
	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/cluster"
	"holdfast/internal/datadir"
)

// lockedLog collects the nodes' warnings.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// raftForgeries is issue 25's attack, from outside, on a running secured
// cluster: raw TLS connections to Raft ports send a MsgHeartbeat of the
// metadata group at a term 1000 above the quorum's epoch, with the
// cluster id a Metadata response gives anyone, speaking for another node
// - with a client certificate of the cluster's CA, and with node 1's own
// certificate as node 2. Each connection is closed, refused with its
// reason, logged, and the metadata quorum's leader and epoch do not move.
// (Before, the client certificate's one frame moved the quorum to
// leader 2, epoch 1001.)
func raftForgeries(t *testing.T, s *secureSetup, nodes []*brokertest.Node, peers map[int32]string, adminCl *kgo.Client, warnings *lockedLog) {
	t.Helper()
	ctx := testCtx(t)
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, adminCl)
	if err != nil || md.ClusterID == nil {
		t.Fatalf("metadata: %v", err)
	}
	clusterID, err := datadir.ParseUUID(*md.ClusterID)
	if err != nil {
		t.Fatal(err)
	}
	leader, epoch := metadataQuorum(t, adminCl)
	s.issue(t, "alice") // a client certificate of the cluster's CA
	frame := func(from uint64, msgFrom, to uint64) []byte {
		m, err := proto.Marshal(&pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), From: new(msgFrom), To: new(to),
			Term: new(uint64(epoch) + 1000), Commit: new(uint64(0))})
		if err != nil {
			t.Fatal(err)
		}
		b := []byte{0, 0, 0, 0, 2} // length, frame version
		b = append(b, clusterID[:]...)
		b = binary.BigEndian.AppendUint64(b, from)
		b = binary.BigEndian.AppendUint32(b, 1)
		b = binary.BigEndian.AppendUint64(b, cluster.MetadataGroup)
		b = binary.BigEndian.AppendUint32(b, uint32(len(m)))
		b = append(b, m...)
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		return b
	}
	cases := []struct {
		what, cert, reason string
		target             int32
		frame              []byte
	}{
		{"a client certificate of the cluster's CA as node 1", "alice", "not_a_node", 2, frame(1, 1, 2)},
		{"node 1's certificate as node 2", "node-1", "impersonation", 3, frame(2, 2, 3)},
		{"node 1's certificate carrying node 2's message", "node-1", "wrong_address", 3, frame(1, 2, 3)},
	}
	for _, c := range cases {
		target := nodes[c.target-1]
		before := target.B.RaftTransportStats().RefusedBy[c.reason]
		cfg := s.clientTLS(t, c.cert)
		cfg.ServerName = "127.0.0.1"
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", peers[c.target], cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err) // TLS 1.3: the server checks the certificate after the client's handshake
		}
		conn.Write(c.frame)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
		if ne, ok := err.(net.Error); err == nil || ok && ne.Timeout() {
			t.Errorf("%s: node %d kept the connection (%v)", c.what, c.target, err)
		}
		if got := target.B.RaftTransportStats().RefusedBy[c.reason]; got != before+1 {
			t.Errorf("%s: node %d counted %d refusals as %s, want %d", c.what, c.target, got, c.reason, before+1)
		}
		logged := false
		for _, line := range strings.Split(warnings.String(), "\n") {
			logged = logged || strings.Contains(line, fmt.Sprintf("node=%d ", c.target)) && strings.Contains(line, "reason="+c.reason)
		}
		if !logged {
			t.Errorf("%s: not logged by node %d:\n%s", c.what, c.target, warnings.String())
		}
	}
	if l, e := metadataQuorum(t, adminCl); e >= epoch+500 || l != leader && e > epoch+2 {
		t.Fatalf("the metadata quorum moved from leader %d epoch %d to leader %d epoch %d", leader, epoch, l, e)
	}
}

// metadataQuorum is the metadata quorum's leader and epoch, as
// DescribeQuorum tells a client (only the leader answers).
func metadataQuorum(t *testing.T, cl *kgo.Client) (leader, epoch int32) {
	t.Helper()
	brokertest.Await(t, "the metadata quorum's leader to answer", func() error {
		req := kmsg.NewPtrDescribeQuorumRequest()
		rt := kmsg.NewDescribeQuorumRequestTopic()
		rt.Topic = cluster.MetadataTopic
		rt.Partitions = append(rt.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
		req.Topics = append(req.Topics, rt)
		var last error = fmt.Errorf("no node answered")
		for _, b := range cl.DiscoveredBrokers() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := b.Request(ctx, req)
			cancel()
			if err != nil {
				last = err
				continue
			}
			p := resp.(*kmsg.DescribeQuorumResponse).Topics[0].Partitions[0]
			if p.ErrorCode == 0 && p.LeaderID > 0 {
				leader, epoch = p.LeaderID, p.LeaderEpoch
				return nil
			}
		}
		return last
	})
	return leader, epoch
}

// TestRaftTLSNeedsOwnCertificate: a node whose certificate names another
// node, or none, refuses to start with Raft over TLS (its peers would
// refuse every session of it) and says why.
func TestRaftTLSNeedsOwnCertificate(t *testing.T) {
	s := newSecureSetup(t)
	for name, want := range map[string]string{
		s.issue(t, "node-2", "127.0.0.1"): "names node 2, not this node (1)",
		s.issue(t, "alice"):               "must name node 1",
	} {
		cfg := broker.DefaultConfig()
		cfg.NodeID, cfg.DataDir = 1, t.TempDir()
		cfg.Peers = map[int32]string{1: "127.0.0.1:0", 2: "127.0.0.1:1"}
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg.Security.NodeTLS = s.material(t, name, auth.ClientAuthRequired)
		cfg.Security.RaftTLS = true
		b, err := broker.New(cfg)
		if err == nil {
			b.Close()
			t.Fatalf("%s: started", name)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to say %q", name, err, want)
		}
	}
}
