package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// devClusterPorts finds a base port whose Kafka (base..base+2) and Raft
// (base+100..base+102) ports are all free now.
func devClusterPorts(t *testing.T) int {
	t.Helper()
	for range 20 {
		base := freePort(t)
		if base+102 > 65535 {
			continue
		}
		free := true
		for _, p := range []int{base, base + 1, base + 2, base + 100, base + 101, base + 102} {
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

// TestClusterElectLeadersCLI runs `holdfast cluster elect-leaders` against
// a 3-node dev cluster: afterwards every partition is led by its preferred
// replica; an unknown topic exits non-zero and names the error.
func TestClusterElectLeadersCLI(t *testing.T) {
	base := devClusterPorts(t)
	cmd := exec.Command(binary, "dev-cluster", "--nodes", "3", "--dir", t.TempDir(), "--base-port", strconv.Itoa(base))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	boot := "127.0.0.1:" + strconv.Itoa(base)

	cl, err := kgo.NewClient(kgo.SeedBrokers(boot))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := adm.CreateTopics(ctx, 6, 3, nil, "cli-elect")
		cancel()
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			if rf := resp.Sorted()[0].ReplicationFactor; rf != 3 {
				t.Fatalf("CreateTopics answered replication factor %d, want 3", rf)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create topic: %v\n%s", err, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}

	var out []byte
	for {
		// Until every partition has a leader, some elections fail.
		out, err = exec.Command(binary, "cluster", "elect-leaders", "--bootstrap", boot, "--topic", "cli-elect").CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("elect-leaders: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(string(out), "TOPIC") || strings.Count(string(out), "cli-elect") != 6 {
		t.Fatalf("elect-leaders output, want a line per partition:\n%s", out)
	}
	// The broker that answered saw the new leaders; the others hear of
	// them with the next Raft message.
	for {
		bad := notPreferred(t, cl, "cli-elect")
		if bad == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after elect-leaders: %s\n%s", bad, out)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// cluster status: three live nodes, and per partition the replicas'
	// acknowledged offsets from their leader.
	for {
		out, err = exec.Command(binary, "cluster", "status", "--bootstrap", boot).CombinedOutput()
		if err == nil && strings.Count(string(out), "alive") == 3 &&
			regexp.MustCompile(`(?m)^cli-elect\s+0\s+\d\s+\d+\s+\[[1-3 ]+\]\s+\[[1-3 ]+\]\s+\[\]\s+\d+\s+\d:\d+ \d:\d+ \d:\d+\s*$`).Match(out) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster status: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	md, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range md.Topics[0].Partitions {
		if len(p.Replicas) == 0 || p.Leader != p.Replicas[0] {
			return fmt.Sprintf("partition %d: leader %d, replicas %v", p.Partition, p.Leader, p.Replicas)
		}
	}
	return ""
}
