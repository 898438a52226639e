package brokertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/testwait"
)

// TestScalePartitions measures a 3-node cluster (in this one process) with
// many partitions: how long creating them takes until each has a leader,
// start-up after a restart of every node until the first acknowledged
// produce and until every partition has a leader again, the idle CPU once
// the Raft groups have quiesced, and the resident memory per replica. It
// reports and asserts nothing about time (the machine is shared); it fails
// only if the cluster does not work. Long, so skipped unless asked for:
//
//	HOLDFAST_SCALE=1 go test ./internal/brokertest -run TestScalePartitions -v -timeout 30m
//
// HOLDFAST_SCALE_PARTITIONS (default 10000) and HOLDFAST_SCALE_RF (default
// 3) change the shape; HOLDFAST_SCALE_IDLE (default 10s) the CPU window.
// HOLDFAST_SCALE_PROFILE=dir writes CPU profiles and execution traces of
// the restart (restart.pprof, restart.trace) and of the idle window after
// it (idle.*) there.
func TestScalePartitions(t *testing.T) {
	if os.Getenv("HOLDFAST_SCALE") == "" {
		t.Skip("long: set HOLDFAST_SCALE=1 to run")
	}
	parts := envInt(t, "HOLDFAST_SCALE_PARTITIONS", 10000)
	rf := envInt(t, "HOLDFAST_SCALE_RF", 3)
	idle := 10 * time.Second
	if s := os.Getenv("HOLDFAST_SCALE_IDLE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		idle = d
	}
	// Every replica keeps its active segment open (and its index files
	// once written), and all three nodes share this process's limit.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		if need := uint64(parts*rf) * 3 / 2; need > lim.Cur {
			t.Skipf("%d replicas in one process need about %d file descriptors; the limit is %d (ulimit -n, or HOLDFAST_SCALE_RF=1)", parts*rf, need, lim.Cur)
		}
	}
	report := func(format string, args ...any) {
		t.Logf(format, args...)
	}
	rssBase := rssMiB(t)
	t0 := time.Now()
	nodes := StartCluster(t, 3)
	report("cluster of 3 started in %.2fs (RSS %.0f MiB)", time.Since(t0).Seconds(), rssMiB(t))
	rssEmpty := rssMiB(t)

	t0 = time.Now()
	createScaleTopic(t, nodes, parts, rf)
	awaitLong(t, "a leader for every partition", func() error { return allLed(nodes, parts) })
	report("%d partitions, RF=%d (%d replicas): created and led on every node in %.2fs", parts, rf, parts*rf, time.Since(t0).Seconds())
	produceOne(t, nodes, parts)

	cpu, gc := idleCPU(t, idle)
	rss := rssMiB(t)
	report("idle after creation: %.1f%% of a core over %s (GC cycles %d); RSS %.0f MiB, %.1f KiB per replica above the empty cluster's %.0f MiB (process base %.0f MiB)",
		cpu, idle, gc, rss, (rss-rssEmpty)*1024/float64(parts*rf), rssEmpty, rssBase)

	// Restart: every node stops, then all start again together (a cluster
	// needs its quorum to serve).
	for _, n := range nodes {
		n.Stop()
	}
	stopProf := startProfile(t, "restart.pprof")
	t0 = time.Now()
	startTogether(t, nodes)
	started := time.Since(t0)
	produceOne(t, nodes, parts)
	first := time.Since(t0)
	awaitLong(t, "a leader for every partition", func() error { return allLed(nodes, parts) })
	report("restart of all 3 nodes: brokers up in %.2fs, first produce acknowledged (acks=all) at %.2fs, every partition led at %.2fs",
		started.Seconds(), first.Seconds(), time.Since(t0).Seconds())
	stopProf()
	time.Sleep(3 * time.Second) // QuiesceTicks at the default tick
	stopProf = startProfile(t, "idle.pprof")
	cpu, gc = idleCPU(t, idle)
	stopProf()
	report("idle after restart: %.1f%% of a core over %s (GC cycles %d); RSS %.0f MiB", cpu, idle, gc, rssMiB(t))
}

// startProfile starts a CPU profile into $HOLDFAST_SCALE_PROFILE/name (a
// no-op without it) and returns its stop.
func startProfile(t *testing.T, name string) func() {
	dir := os.Getenv("HOLDFAST_SCALE_PROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	tf, err := os.Create(filepath.Join(dir, strings.TrimSuffix(name, ".pprof")+".trace"))
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Start(tf); err != nil {
		t.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		trace.Stop()
		f.Close()
		tf.Close()
	}
}

// createScaleTopic creates the topic; a CreateTopics that times out (as
// Kafka's, the creation goes on) is fine: the caller waits for leaders.
func createScaleTopic(t *testing.T, nodes []*Node, parts, rf int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(Addrs(nodes)...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, int32(parts), int16(rf), nil, "scale")
	if err == nil {
		err = resp.Error()
	}
	if err != nil && !errors.Is(err, kerr.RequestTimedOut) {
		t.Fatalf("create topic: %v", err)
	}
}

// awaitLong is Await with ten minutes.
func awaitLong(t *testing.T, what string, fn func() error) {
	t.Helper()
	testwait.For(t, 10*time.Minute, what, fn)
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}

// produceOne produces a record to the last partition with acks=all,
// retrying until it is acknowledged.
func produceOne(t *testing.T, nodes []*Node, parts int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(Addrs(nodes)...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if !testwait.PollContext(ctx, 2*time.Minute, func() bool {
		err = cl.ProduceSync(ctx, &kgo.Record{Topic: "scale", Partition: int32(parts - 1), Value: []byte("x")}).FirstErr()
		return err == nil
	}) {
		t.Fatalf("produce: %v", err)
	}
}

func allLed(nodes []*Node, parts int) error {
	for _, n := range nodes {
		md, err := n.Metadata("scale")
		if err != nil {
			return err
		}
		if len(md.Topics) != 1 || len(md.Topics[0].Partitions) != parts {
			return fmt.Errorf("node %d: no topic yet", n.Cfg.NodeID)
		}
		for _, p := range md.Topics[0].Partitions {
			if p.ErrorCode != 0 || p.Leader <= 0 {
				return fmt.Errorf("node %d partition %d: leader %d code %d", n.Cfg.NodeID, p.Partition, p.Leader, p.ErrorCode)
			}
		}
	}
	return nil
}

// startTogether starts stopped nodes again on their addresses, all at
// once: a cluster needs its quorum up to serve.
func startTogether(t *testing.T, nodes []*Node) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		ln := relistenRetry(t, n.Addr)
		wg.Go(func() { errs[i] = n.startErr(ln) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func relistenRetry(t *testing.T, addr string) net.Listener {
	var ln net.Listener
	var err error
	if !testwait.Poll(5*time.Second, func() bool { ln, err = net.Listen("tcp", addr); return err == nil }) {
		t.Fatal(err)
	}
	return ln
}

// idleCPU waits a little for the groups to quiesce, then returns the
// process's CPU (user + system, from /proc/self/stat) over d as a
// percentage of one core, and the GC cycles in that window.
func idleCPU(t *testing.T, d time.Duration) (float64, uint32) {
	t.Helper()
	time.Sleep(3 * time.Second) // QuiesceTicks at the default tick: the groups go quiet (what is measured)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gc0 := ms.NumGC
	c0, w0 := procCPU(t), time.Now()
	time.Sleep(d) // the window the idle CPU is measured over
	c1, w1 := procCPU(t), time.Now()
	runtime.ReadMemStats(&ms)
	return 100 * (c1 - c0).Seconds() / w1.Sub(w0).Seconds(), ms.NumGC - gc0
}

func procCPU(t *testing.T) time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	// Fields after the command name (which may hold spaces): utime is the
	// 14th field of the line, stime the 15th, in clock ticks (100 Hz).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// rssMiB is the process's resident set after a GC that returns memory.
func rssMiB(t *testing.T) float64 {
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return kb / 1024
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
