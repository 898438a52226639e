package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/replica"
	"holdfast/internal/testwait"
)

// TestClusterStopsCleanlyUnderLoad stops three real nodes together with
// SIGTERM (one, then the other two) while a producer writes acks=all to every partition of an RF=3
// topic. The Raft host must stop before the partition logs close: when it
// ran on, every replica that got a message in between failed with
// "raft: group failed ... storage: log closed" at ERROR (and with 10,000
// partitions the stop took 20-35 s). Each node must exit 0 with no ERROR
// logged during the stop, leave the clean shutdown marker (every log
// closed and fsynced), and after a restart of all three every record
// acknowledged before the stop must still be there.
func TestClusterStopsCleanlyUnderLoad(t *testing.T) {
	const nodes, parts = 3, 200
	var kafkaAddrs, peers []string
	for i := 1; i <= nodes; i++ {
		kafkaAddrs = append(kafkaAddrs, "127.0.0.1:"+strconv.Itoa(freePort(t)))
		peers = append(peers, fmt.Sprintf("%d@127.0.0.1:%d", i, freePort(t)))
	}
	root := t.TempDir()
	type node struct {
		cmd  *exec.Cmd
		logs *bytes.Buffer
		mu   *sync.Mutex
		done chan struct{}
	}
	start := func() []*node {
		var ns []*node
		for i := 1; i <= nodes; i++ {
			raftAddr := peers[i-1][strings.Index(peers[i-1], "@")+1:]
			cmd := exec.Command(binary, "serve", "--node-id", strconv.Itoa(i), "--peers", strings.Join(peers, ","),
				"--raft-listen", raftAddr, "--listen", kafkaAddrs[i-1], "--metrics-listen", "",
				"--data-dir", filepath.Join(root, "n"+strconv.Itoa(i)))
			cmd.Env = append(os.Environ(), "HOLDFAST_OFFSETS_PARTITIONS=3")
			n := &node{cmd: cmd, logs: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
			w := writerFunc(func(b []byte) (int, error) { n.mu.Lock(); defer n.mu.Unlock(); return n.logs.Write(b) })
			cmd.Stdout, cmd.Stderr = w, w
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { cmd.Wait(); close(n.done) }()
			t.Cleanup(func() { cmd.Process.Signal(syscall.SIGKILL); <-n.done })
			ns = append(ns, n)
		}
		for _, a := range kafkaAddrs {
			testwait.For(t, 60*time.Second, "the node at "+a+" to serve", func() error { return ping(a) })
		}
		return ns
	}
	ns := start()
	boot := strings.Join(kafkaAddrs, ",")
	// Refused until every broker has registered.
	testwait.For(t, 60*time.Second, "topic load created", func() error {
		out, err := exec.Command(binary, "topic", "create", "load", "--if-not-exists", "--partitions", strconv.Itoa(parts),
			"--replication-factor", "3", "--bootstrap", boot, "--timeout", "60s").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v\n%s", err, out)
		}
		return nil
	})

	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs...), kgo.DefaultProduceTopic("load"),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordRetries(2), kgo.RecordDeliveryTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var acked atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			cl.Produce(ctx, kgo.StringRecord("x"), func(_ *kgo.Record, err error) {
				if err == nil {
					acked.Add(1)
				}
			})
		}
	})
	testwait.Until(t, time.Minute, "2000 records acknowledged", func() bool { return acked.Load() >= 2000 })
	// Node 1 stops alone while the others lead under load (their appends
	// keep reaching it while it closes its logs), then the other two
	// together.
	mark := make([]int, nodes)
	stop := func(which ...int) {
		for _, i := range which {
			n := ns[i]
			n.mu.Lock()
			mark[i] = n.logs.Len()
			n.mu.Unlock()
			n.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, i := range which {
			select {
			case <-ns[i].done:
			case <-time.After(2 * time.Minute):
				t.Fatalf("node %d did not stop within 2 minutes of SIGTERM", i+1)
			}
		}
	}
	stop(0)
	stop(1, 2)
	cancel()
	wg.Wait()
	cl.Close()
	want := acked.Load()
	for i, n := range ns {
		stopLogs := n.logs.String()[mark[i]:]
		if code := n.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("node %d exited %d", i+1, code)
		}
		for _, line := range strings.Split(stopLogs, "\n") {
			if strings.Contains(line, "level=ERROR") {
				t.Errorf("node %d logged an error while stopping: %s", i+1, line)
			}
		}
		if _, err := os.Stat(filepath.Join(root, "n"+strconv.Itoa(i+1), replica.CleanShutdownFile)); err != nil {
			t.Errorf("node %d left no clean shutdown marker (%v); its stop logs:\n%s", i+1, err, stopLogs)
		}
	}
	if t.Failed() {
		return
	}

	// Every acknowledged record is still there after all three restart.
	start()
	cl, err = kgo.NewClient(kgo.SeedBrokers(kafkaAddrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var total int64
	seen := 0
	if !testwait.Poll(60*time.Second, func() bool {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "load"
		for p := int32(0); p < parts; p++ {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		total, seen = 0, 0
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		shards := cl.RequestSharded(rctx, req)
		rcancel()
		for _, s := range shards {
			if s.Err != nil {
				continue
			}
			for _, tr := range s.Resp.(*kmsg.ListOffsetsResponse).Topics {
				for _, pr := range tr.Partitions {
					if pr.ErrorCode == 0 {
						total += pr.Offset
						seen++
					}
				}
			}
		}
		return seen == parts && total >= want
	}) {
		t.Fatalf("after the restart: %d partitions answered, %d records (%d acknowledged before the stop)", seen, total, want)
	}
	t.Logf("%d records acknowledged before the stop, %d in the log after the restart", want, total)
}
