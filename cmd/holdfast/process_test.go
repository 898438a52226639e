package main

// These tests run the real binary as a child process: the zero-configuration
// start a newcomer does, kill -9 in the middle of acknowledged writes, and
// interoperability with librdkafka's kcat.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/freeport"
	"holdfast/internal/testwait"
	"holdfast/internal/wire"
)

var binary string // built once by TestMain

// buildFlags are the go build flags of the binary TestMain builds
// (race_test.go adds -race under go test -race).
var buildFlags []string

func TestMain(m *testing.M) {
	// Every broker these tests run, child process or not, poisons the
	// frames it puts back (internal/wire poisonFrames).
	os.Setenv("HOLDFAST_POISON_FRAMES", "1")
	wire.SetPoisonFrames(true)
	dir, err := os.MkdirTemp("", "holdfast-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "holdfast")
	out, err := exec.Command("go", append(append([]string{"build"}, buildFlags...), "-o", binary, ".")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building holdfast: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type proc struct {
	cmd  *exec.Cmd
	addr string
	// logs is written by the child's output while the test reads it: a
	// plain bytes.Buffer locked only on the write side raced with every
	// read (go test -race, TestServeWarnsBeyondLoopback).
	logs *syncBuffer
	done chan struct{}
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startProc runs `holdfast serve args...` in dir and waits until it answers
// Kafka requests on addr.
func startProc(t *testing.T, dir, addr string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOLDFAST_OFFSETS_PARTITIONS=3")
	p := &proc{cmd: cmd, addr: addr, logs: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill(); <-p.done })
	exited := false
	if !testwait.Poll(30*time.Second, func() bool {
		select {
		case <-p.done:
			exited = true
			return true
		default:
		}
		return ping(addr) == nil
	}) {
		t.Fatalf("holdfast did not start serving on %s:\n%s", addr, p.logs)
	}
	if exited {
		t.Fatalf("holdfast exited during start-up:\n%s", p.logs)
	}
	return p
}

func (p *proc) kill() { p.cmd.Process.Signal(syscall.SIGKILL) }

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func ping(addr string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	return err
}

// TestServeZeroConfig is the README's first command: no flags, data in
// ./data, Kafka on localhost:9092, metrics on localhost:9095.
func TestServeZeroConfig(t *testing.T) {
	for _, a := range []string{"localhost:9092", "localhost:9095"} {
		if ln, err := net.Listen("tcp", a); err != nil {
			t.Skipf("%s is in use here; the zero-configuration start needs it", a)
		} else {
			ln.Close()
		}
	}
	dir := t.TempDir()
	p := startProc(t, dir, "localhost:9092")
	cl, err := kgo.NewClient(kgo.SeedBrokers("localhost:9092"), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("hello"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, kgo.StringRecord("world")).FirstErr(); err != nil {
		t.Fatalf("produce: %v\n%s", err, p.logs)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err != nil {
		t.Fatalf("no ./data directory: %v", err)
	}
	resp, err := http.Get("http://localhost:9095/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `holdfast_partition_high_watermark{partition="0",topic="hello"} 1`) {
		t.Fatalf("metrics lack the partition's high watermark:\n%s", body)
	}
	// A clean stop on SIGTERM.
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("no exit 10s after SIGTERM")
	}
	if !strings.Contains(p.logs.String(), "stopped") {
		t.Fatalf("no clean shutdown in logs:\n%s", p.logs)
	}
	// Unchanged by security: one PLAINTEXT listener on localhost, nothing
	// to warn about.
	if l := p.logs.String(); strings.Contains(l, "SECURITY:") || strings.Contains(l, "ignoring settings") || !regexp.MustCompile(`listeners=PLAINTEXT://(127\.0\.0\.1|\[::1\]):9092 `).MatchString(l) {
		t.Fatalf("zero-config start: a warning, or not one PLAINTEXT listener on localhost:\n%s", l)
	}
}

// TestKill9KeepsEveryAcknowledgedRecord kills the broker with SIGKILL while
// an idempotent acks=all producer is writing, restarts it, and checks that
// every acknowledged record is there exactly once at its acknowledged offset
// and that new writes continue after the old ones.
func TestKill9KeepsEveryAcknowledgedRecord(t *testing.T) {
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := []string{"--listen", addr, "--metrics-listen", ""}
	p := startProc(t, dir, addr, args...)

	const topic = "kill9"
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation(),
		kgo.RecordRetries(3), kgo.RequestRetries(3), kgo.ProduceRequestTimeout(3*time.Second), kgo.RecordDeliveryTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type ack struct {
		partition int32
		offset    int64
	}
	var mu sync.Mutex
	acked := map[string]ack{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			v := "v" + strconv.Itoa(i)
			cl.Produce(ctx, kgo.StringRecord(v), func(r *kgo.Record, err error) {
				if err == nil {
					mu.Lock()
					acked[string(r.Value)] = ack{r.Partition, r.Offset}
					mu.Unlock()
				}
			})
		}
	}()
	// Let a few thousand records be acknowledged, then pull the plug.
	testwait.Poll(20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 3000
	})
	p.kill()
	<-p.done
	cancel()
	wg.Wait()
	cl.Close()
	mu.Lock()
	if len(acked) < 100 {
		t.Fatalf("only %d records acknowledged before the kill:\n%s", len(acked), p.logs)
	}
	want := acked
	mu.Unlock()

	startProc(t, dir, addr, args...)
	seen := map[string]int64{}
	var maxOffset int64 = -1
	consumeAll(t, addr, topic, func(r *kgo.Record) {
		if prev, dup := seen[string(r.Value)]; dup {
			t.Errorf("%s stored twice, at offsets %d and %d", r.Value, prev, r.Offset)
		}
		seen[string(r.Value)] = r.Offset
		maxOffset = max(maxOffset, r.Offset)
	})
	lost := 0
	for v, a := range want {
		off, ok := seen[v]
		switch {
		case !ok:
			lost++
			if lost <= 10 {
				t.Errorf("acknowledged %s (offset %d) lost", v, a.offset)
			}
		case off != a.offset:
			t.Errorf("%s acknowledged at offset %d, found at %d", v, a.offset, off)
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged records lost after kill -9", lost, len(want))
	}
	// The log takes writes again, after what survived.
	cl2, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer pcancel()
	r := kgo.StringRecord("after")
	if err := cl2.ProduceSync(pctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if r.Offset != maxOffset+1 {
		t.Fatalf("first record after restart at offset %d, want %d", r.Offset, maxOffset+1)
	}
	t.Logf("%d acknowledged before kill -9, %d stored, none lost", len(want), len(seen))
}

// consumeAll reads topic from the start up to its current end offsets.
func consumeAll(t *testing.T, addr, topic string, fn func(*kgo.Record)) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends := map[int32]int64{}
	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for i := int32(0); i < 1; i++ {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp = i, -1
		lt.Partitions = append(lt.Partitions, lp)
	}
	lo.Topics = append(lo.Topics, lt)
	resp, err := lo.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range resp.Topics[0].Partitions {
		ends[p.Partition] = p.Offset
	}
	remaining := int64(0)
	for _, e := range ends {
		remaining += e
	}
	for remaining > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("timed out consuming %s with %d records to go", topic, remaining)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < ends[r.Partition] {
				fn(r)
				remaining--
			}
		})
	}
}

// TestKcatInterop drives the broker with librdkafka's kcat: metadata,
// produce keyed records and consume back the exact bytes.
func TestKcatInterop(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("kcat not installed; .ci/run installs it with apt-get")
		}
		t.Skip("kcat not installed (apt-get install kcat)")
	}
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	startProc(t, dir, addr, "--listen", addr, "--metrics-listen", "")
	run := func(stdin string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, kcat, append([]string{"-b", addr}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("kcat %v: %v\n%s", args, err, errb.String())
		}
		return out.String()
	}
	var input strings.Builder
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&input, "key-%d:value %d with spaces, ümlauts and \ttabs\n", i, i)
	}
	run(input.String(), "-P", "-t", "interop", "-K", ":", "-X", "acks=all", "-z", "lz4")
	got := run("", "-C", "-t", "interop", "-o", "beginning", "-e", "-f", "%k:%s\n")
	if got != input.String() {
		t.Fatalf("kcat read back different bytes:\nwant %q\n got %q", input.String()[:200], got[:min(200, len(got))])
	}
	if md := run("", "-L", "-t", "interop"); !strings.Contains(md, `topic "interop" with 1 partitions`) {
		t.Fatalf("kcat metadata: %s", md)
	}
}
