package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/testwait"
)

// devClusterPorts finds a base port whose Kafka (base..base+2) and Raft
// (base+100..base+102) ports are all free now.
func devClusterPorts(t *testing.T) int {
	t.Helper()
	for range 20 {
		base := freePort(t)
		if base+202 > 65535 {
			continue
		}
		free := true
		for _, p := range []int{base, base + 1, base + 2, base + 100, base + 101, base + 102, base + 200, base + 201, base + 202} {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return base
		}
	}
	t.Skip("no free port range for a dev cluster")
	return 0
}

// devClusterProc is a running `holdfast dev-cluster --nodes 3` on a free
// port range: boot is its first node's address, done closes when it exits.
type devClusterProc struct {
	cmd  *exec.Cmd
	dir  string
	base int
	boot string
	done chan struct{}
	out  syncBuffer
}

// runDevCluster starts a 3-node dev cluster (with extra flags) until the
// test ends (SIGTERM, then kill after 20 s); it does not wait for the
// cluster to form (startDevCluster does).
func runDevCluster(t *testing.T, extra ...string) *devClusterProc {
	t.Helper()
	base := devClusterPorts(t)
	dc := &devClusterProc{dir: t.TempDir(), base: base, boot: "127.0.0.1:" + strconv.Itoa(base), done: make(chan struct{})}
	dc.cmd = exec.Command(binary, append([]string{"dev-cluster", "--nodes", "3", "--dir", dc.dir, "--base-port", strconv.Itoa(base)}, extra...)...)
	dc.cmd.Stdout, dc.cmd.Stderr = &dc.out, &dc.out
	if err := dc.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { dc.cmd.Wait(); close(dc.done) }()
	t.Cleanup(func() {
		dc.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-dc.done:
		case <-time.After(20 * time.Second):
			dc.cmd.Process.Kill()
			<-dc.done
		}
	})
	return dc
}

// Logs is what the cluster's nodes logged so far.
func (dc *devClusterProc) Logs() string { return dc.out.String() }

// createTopic creates a 6-partition topic of replication factor 3, asking
// again while the cluster forms.
func (dc *devClusterProc) createTopic(t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	var err error
	if !testwait.Poll(60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var resp kadm.CreateTopicResponses
		resp, err = adm.CreateTopics(ctx, 6, 3, nil, topic)
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			if rf := resp.Sorted()[0].ReplicationFactor; rf != 3 {
				t.Fatalf("CreateTopics answered replication factor %d, want 3", rf)
			}
		}
		return err == nil
	}) {
		t.Fatalf("create topic %s: %v\n%s", topic, err, dc.Logs())
	}
}

// TestClusterElectLeadersCLI runs `holdfast cluster elect-leaders` against
// a 3-node dev cluster: afterwards every partition is led by its preferred
// replica; an unknown topic exits non-zero and names the error.
func TestClusterElectLeadersCLI(t *testing.T) {
	dc := runDevCluster(t)
	boot := dc.boot
	cl, err := kgo.NewClient(kgo.SeedBrokers(boot))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	dc.createTopic(t, kadm.NewClient(cl), "cli-elect")
	var out []byte
	// Until every partition has a leader, some elections fail.
	if !testwait.Poll(60*time.Second, func() bool {
		out, err = exec.Command(binary, "cluster", "elect-leaders", "--bootstrap", boot, "--topic", "cli-elect").CombinedOutput()
		return err == nil
	}) {
		t.Fatalf("elect-leaders: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "TOPIC") || strings.Count(string(out), "cli-elect") != 6 {
		t.Fatalf("elect-leaders output, want a line per partition:\n%s", out)
	}
	// The broker that answered saw the new leaders; the others hear of
	// them with the next Raft message.
	bad := ""
	if !testwait.Poll(60*time.Second, func() bool { bad = notPreferred(t, cl, "cli-elect"); return bad == "" }) {
		t.Fatalf("after elect-leaders: %s\n%s", bad, out)
	}

	// cluster status: three live nodes, and per partition the replicas'
	// acknowledged offsets from their leader.
	if !testwait.Poll(60*time.Second, func() bool {
		out, err = exec.Command(binary, "cluster", "status", "--bootstrap", boot).CombinedOutput()
		return err == nil && strings.Count(string(out), "alive") == 3 &&
			regexp.MustCompile(`(?m)^cli-elect\s+0\s+\d\s+\d+\s+\[[1-3 ]+\]\s+\[[1-3 ]+\]\s+\[\]\s+\d+\s+\d:\d+ \d:\d+ \d:\d+\s*$`).Match(out)
	}) {
		t.Fatalf("cluster status: %v\n%s", err, out)
	}

	out, err = exec.Command(binary, "cluster", "elect-leaders", "--bootstrap", boot, "--topic", "no-such-topic", "--partition", "0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "UNKNOWN_TOPIC_OR_PARTITION") {
		t.Fatalf("unknown topic: err %v, output:\n%s", err, out)
	}
}

// notPreferred describes the first partition of topic not led by its
// preferred replica, "" if there is none.
func notPreferred(t *testing.T, cl *kgo.Client, topic string) string {
	t.Helper()
	for _, p := range topicMetadata(t, cl, topic).Partitions {
		if len(p.Replicas) == 0 || p.Leader != p.Replicas[0] {
			return fmt.Sprintf("partition %d: leader %d, replicas %v", p.Partition, p.Leader, p.Replicas)
		}
	}
	return ""
}
