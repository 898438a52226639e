package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	be "encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"google.golang.org/protobuf/proto"

	pb "go.etcd.io/raft/v3/raftpb"

	"holdfast/internal/datadir"
	"holdfast/internal/testwait"
)

// raftForgeries is issue 25's attack on the three processes of
// docs/security.md's cluster: a client certificate made as the docs say
// (holdfast certs --clients, the same CA) and node 1's own certificate
// each open a TLS session on a Raft port and send one MsgHeartbeat of the
// metadata group at a term 1000 above the quorum's epoch, with the cluster
// id `holdfast cluster status` shows anyone, speaking for another node.
// Each connection is closed, logged with its reason and counted in
// /metrics; the quorum's leader and epoch do not move. (On 304dc41 the
// client certificate's one frame moved it to leader 2, epoch 1001.)
func raftForgeries(t *testing.T, dir string, raftAddr func(node int) string, client, metricsPort map[int]string, logs []func() string) {
	t.Helper()
	if r := hfIn(t, dir, "certs", "--dir", "certs", "--nodes", "0", "--clients", "alice"); r.code != 0 {
		t.Fatalf("certs --clients alice: %s%s", r.out, r.err)
	}
	r := hfIn(t, dir, "cluster", "status", "--bootstrap", "localhost:"+client[1], "--command-config", "admin.properties")
	m := regexp.MustCompile(`cluster (\S+),`).FindStringSubmatch(r.out)
	if m == nil {
		t.Fatalf("cluster status: %s%s", r.out, r.err)
	}
	clusterID, err := datadir.ParseUUID(m[1])
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "certs", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	adm, err := kgo.NewClient(kgo.SeedBrokers("localhost:"+client[1], "localhost:"+client[2], "localhost:"+client[3]),
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool}), kgo.SASL(scram.Auth{User: "admin", Pass: "admin-secret"}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	leader, epoch := describeMetadataQuorum(t, adm)

	frame := func(from, msgFrom, to uint64) []byte {
		msg, err := proto.Marshal(&pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), From: new(msgFrom), To: new(to), Term: new(uint64(epoch) + 1000), Commit: new(uint64(0))})
		if err != nil {
			t.Fatal(err)
		}
		b := []byte{0, 0, 0, 0, 2} // length, frame version
		b = append(b, clusterID[:]...)
		b = be.BigEndian.AppendUint64(b, from)
		b = be.BigEndian.AppendUint32(b, 1)
		b = be.BigEndian.AppendUint64(b, 1) // the metadata group
		b = be.BigEndian.AppendUint32(b, uint32(len(msg)))
		b = append(b, msg...)
		be.BigEndian.PutUint32(b, uint32(len(b)-4))
		return b
	}
	for _, c := range []struct {
		what, cert, reason string
		target             int
		frame              []byte
	}{
		{"alice's client certificate as node 1", "alice", "not_a_node", 2, frame(1, 1, 2)},
		{"node 1's certificate as node 2", "node-1", "impersonation", 3, frame(2, 2, 3)},
	} {
		kp, err := tls.LoadX509KeyPair(filepath.Join(dir, "certs", c.cert+".crt"), filepath.Join(dir, "certs", c.cert+".key"))
		if err != nil {
			t.Fatal(err)
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", raftAddr(c.target),
			&tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: []tls.Certificate{kp}})
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		conn.Write(c.frame)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
		if ne, ok := err.(net.Error); err == nil || ok && ne.Timeout() {
			t.Errorf("%s: node %d kept the Raft session (%v)", c.what, c.target, err)
		}
		// The process's log reaches us through a pipe: wait for the line.
		if !testwait.Poll(10*time.Second, func() bool { return strings.Contains(logs[c.target-1](), "reason="+c.reason) }) {
			t.Errorf("%s: node %d logged no refusal:\n%s", c.what, c.target, logs[c.target-1]())
		}
		// The brokers authenticate their Kafka listeners, so /metrics asks
		// who is scraping (--admin-auth auto): the docs' admin.
		req, _ := http.NewRequest("GET", "http://localhost:"+metricsPort[c.target]+"/metrics", nil)
		req.SetBasicAuth("admin", "admin-secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("holdfast_raft_refused_total{reason=%q} 1\n", c.reason); !strings.Contains(string(body), want) {
			t.Errorf("%s: node %d's /metrics has no %s", c.what, c.target, want)
		}
	}
	if l, e := describeMetadataQuorum(t, adm); e >= epoch+500 || l != leader && e > epoch+2 {
		t.Fatalf("the metadata quorum moved from leader %d epoch %d to leader %d epoch %d", leader, epoch, l, e)
	}
}

// describeMetadataQuorum is the metadata quorum's leader and epoch as
// DescribeQuorum tells a client (only the leader answers).
func describeMetadataQuorum(t *testing.T, cl *kgo.Client) (leader, epoch int32) {
	t.Helper()
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = "__cluster_metadata"
	rt.Partitions = append(rt.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
	req.Topics = append(req.Topics, rt)
	if !testwait.Poll(30*time.Second, func() bool {
		for _, b := range cl.DiscoveredBrokers() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := b.Request(ctx, req)
			cancel()
			if err != nil {
				continue
			}
			if p := resp.(*kmsg.DescribeQuorumResponse).Topics[0].Partitions[0]; p.ErrorCode == 0 && p.LeaderID > 0 {
				leader, epoch = p.LeaderID, p.LeaderEpoch
				return true
			}
		}
		if len(cl.DiscoveredBrokers()) == 0 {
			kmsg.NewPtrMetadataRequest().RequestWith(context.Background(), cl) // discover them
		}
		return false
	}) {
		t.Fatal("no node answered DescribeQuorum for the metadata quorum")
	}
	return leader, epoch
}
