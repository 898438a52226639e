package faulttest

import (
	"context"
	"fmt"
	"go/build"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/testwait"
)

// startVersitygw runs the S3-compatible server the tiered-storage tests
// use (internal/tiered/s3_test.go has the same), on 127.0.0.1, with a
// bucket "holdfast"; the nodes get its credentials from the environment.
// Without the binary the test skips, except under CI=true.
func startVersitygw(t *testing.T) (endpoint string, store *os.Process) {
	t.Helper()
	bin, err := exec.LookPath("versitygw")
	if err != nil {
		if p := filepath.Join(build.Default.GOPATH, "bin", "versitygw"); fileExists(p) {
			bin, err = p, nil
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("versitygw is not installed: .ci/run installs it")
		}
		t.Skip("versitygw not found on PATH or in $GOPATH/bin (.ci/run installs it)")
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "holdfast"), 0o755); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(freePort(t)))
	t.Setenv("AWS_ACCESS_KEY_ID", "faulttest")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "faulttestsecret")
	cmd := exec.Command(bin, "--access", "faulttest", "--secret", "faulttestsecret", "--port", addr, "--quiet", "posix", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	testwait.For(t, 30*time.Second, "versitygw listening on "+addr, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	return "http://" + addr, cmd.Process
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// tieredOffset is ListOffsets' special timestamp ts for partition 0.
func tieredOffset(cl *kgo.Client, topic string, ts int64) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, ts, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, kerr.ErrorForCode(p.ErrorCode)
}

// TestTieredLeaderKilledWhileUploading: a node uploading a backlog of
// segments (built up while the object store was stopped with SIGSTOP) is
// killed with SIGKILL as soon as its first new upload is committed, four
// times over, so that the kills land between an upload
// and its manifest's commit, between the commit and the local delete, or
// in the middle of an upload. Every acknowledged record is read back from
// offset 0 at the end, the old ones from the object store.
func TestTieredLeaderKilledWhileUploading(t *testing.T) {
	endpoint, store := startVersitygw(t)
	c := Start(t, Options{Nodes: 1, Loopback: true, Args: []string{
		"--remote-log-storage", "--remote-log-storage-s3-bucket", "holdfast", "--remote-log-storage-s3-endpoint", endpoint,
		"--remote-log-storage-s3-region", "us-east-1", "--remote-log-storage-s3-path-style",
		"--remote-log-manager-task-interval", "20ms"}})
	const topic, rounds, perRound = "tiered-kill", 4, 1200
	ctx := context.Background()
	resp, err := c.Admin().CreateTopics(ctx, 1, 1, map[string]*string{
		"remote.storage.enable": kmsg.StringPtr("true"), "segment.bytes": kmsg.StringPtr("4096"), "local.retention.bytes": kmsg.StringPtr("1"),
	}, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	next := 0
	for round := 0; round < rounds; round++ {
		cl := c.Client()
		before, err := tieredOffset(cl, topic, -5)
		if err != nil {
			t.Fatal(err)
		}
		// The store stands still while the round is produced (uploads
		// wait), so that a backlog of segments builds up.
		store.Signal(syscall.SIGSTOP)
		var batch []*kgo.Record
		for i := 0; i < perRound; i++ {
			batch = append(batch, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "record-%06d-%s", next+i, strings.Repeat("x", 60))})
			if len(batch) == 20 || i == perRound-1 {
				pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				err := cl.ProduceSync(pctx, batch...).FirstErr()
				cancel()
				if err != nil {
					t.Fatalf("round %d: produce: %v", round, err)
				}
				batch = nil
			}
		}
		next += perRound
		store.Signal(syscall.SIGCONT)
		// Kill as soon as the backlog's first segment is committed: the
		// rest are being uploaded, committed or deleted locally.
		testwait.For(t, 60*time.Second, fmt.Sprintf("round %d: an upload past %d", round, before), func() error {
			got, err := tieredOffset(cl, topic, -5)
			if err == nil && got <= before {
				err = fmt.Errorf("uploaded to %d", got)
			}
			return err
		})
		c.Kill(1)
		cl.Close()
		c.Restart(1)
	}
	cl := c.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	testwait.For(t, 60*time.Second, "the local tier to catch up", func() error {
		local, err := tieredOffset(cl, topic, -4)
		if err == nil && local < int64(next/2) {
			err = fmt.Errorf("local log start %d", local)
		}
		return err
	})
	if earliest, err := tieredOffset(cl, topic, -2); err != nil || earliest != 0 {
		t.Fatalf("earliest offset %d (%v), want 0", earliest, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for got := 0; got < next; {
		fs := cl.PollFetches(cctx)
		if cctx.Err() != nil {
			t.Fatalf("read %d of %d records: %v", got, next, cctx.Err())
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch: %v", e.Err)
		}
		for _, r := range fs.Records() {
			if w := fmt.Sprintf("record-%06d-", got); r.Offset != int64(got) || !strings.HasPrefix(string(r.Value), w) {
				t.Fatalf("offset %d holds %.20q, want offset %d %s", r.Offset, r.Value, got, w)
			}
			got++
		}
	}
}
