// Package faulttest runs Holdfast as real child processes, one per node,
// and injects faults into them: SIGKILL, SIGSTOP, restarts with or without
// the data directory, and network cuts. As root with `ip` available, every
// node gets its own network namespace on a private bridge, so a cut is a real
// link going down; otherwise the nodes share loopback and network faults are
// skipped.
package faulttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/freeport"
)

// Ports inside each node's namespace; in loopback mode free ports are used.
const (
	kafkaPort   = 9092
	raftPort    = 9093
	metricsPort = 9094
)

var (
	buildOnce sync.Once
	buildDir  string
	buildPath string
	buildErr  error
	// buildFlags are the go build flags of the nodes' binary (race.go
	// adds -race under go test -race).
	buildFlags []string
)

// Binary builds ./cmd/holdfast once per test binary and returns its path.
// HOLDFAST_BINARY names a prebuilt binary to use instead.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv("HOLDFAST_BINARY"); p != "" {
			buildPath = p
			return
		}
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			buildErr = fmt.Errorf("go env GOMOD: %w", err)
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		if buildDir, err = os.MkdirTemp("", "holdfast-faulttest"); err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(buildDir, "holdfast")
		cmd := exec.Command("go", append(append([]string{"build"}, buildFlags...), "-o", buildPath, "./cmd/holdfast")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/holdfast: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// CleanupBinary removes the built binary; call it from TestMain.
func CleanupBinary() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// ClusterModeAvailable reports whether `holdfast serve` knows --peers, and
// if not, why.
func ClusterModeAvailable(t testing.TB) (bool, string) {
	out, _ := exec.Command(Binary(t), "serve", "--help").CombinedOutput()
	if !bytes.Contains(out, []byte("-peers")) {
		return false, "`holdfast serve --help` has no --peers flag"
	}
	return true, ""
}

// Options configure a Cluster.
type Options struct {
	Nodes int // number of processes; default 1
	// Cluster passes --node-id and --peers so the nodes form one Raft
	// cluster; without it each node is an independent single-node broker.
	Cluster bool
	Args    []string // extra `serve` flags for every node
	// Loopback forces the fallback without network namespaces.
	Loopback bool
	// Bin, when set, is the binary every node starts with instead of the
	// one built from this tree (an older release: a rolling upgrade
	// replaces it node by node, Upgrade).
	Bin string
	// DiskBytes, when positive, puts each node's data directory on its own
	// tmpfs of that size (root only), so a test can fill the disk; see
	// ResizeDisk.
	DiskBytes int64
	// Spare nodes get an id after the others, an address (and network
	// namespace) of their own and a data directory, but start only when
	// Join starts them, as nodes joining the running cluster (Cluster
	// only).
	Spare int
	// Env is added to every node's environment (e.g. a failpoint file,
	// internal/failpoint).
	Env []string
	// Metrics gives every node a Prometheus listener (Node.MetricsAddr),
	// open to the test's scrapes.
	Metrics bool
	// Prepare runs once the network exists and before any node starts:
	// it may start a service the nodes use (ServiceHost) and add flags
	// for it to Args.
	Prepare func(c *Cluster)
}

// Cluster is a set of holdfast processes.
type Cluster struct {
	t     testing.TB
	opts  Options
	Nodes []*Node // Nodes[i-1] has node id i
	spare []*Node // Options.Spare, not yet joined
	net   *netnsNet
}

// Node is one holdfast process and its data directory, kept across restarts.
type Node struct {
	c        *Cluster
	ID       int
	Addr     string // Kafka listener, host:port
	RaftAddr string
	// MetricsAddr is the Prometheus listener (Options.Metrics), host:port.
	MetricsAddr string
	DataDir     string
	bin         string // the binary it runs; "" for the one built from this tree
	join        string // --join of a node that joined (Cluster.Join)
	ns          string // network namespace, empty in loopback mode
	veth        string // host end of the node's veth

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	logs    syncBuffer
	starts  int
	mounted bool // DataDir is a tmpfs of ours
}

var runSeq atomic.Int32

// Start starts opts.Nodes processes and waits until each answers ApiVersions.
// Everything (processes, namespaces, bridge) is removed when the test ends,
// and the nodes' logs are printed if it failed.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Nodes <= 0 {
		opts.Nodes = 1
	}
	if opts.Nodes > 9 {
		t.Fatalf("faulttest: at most 9 nodes, got %d", opts.Nodes)
	}
	Binary(t) // build before any namespace exists
	c := &Cluster{t: t, opts: opts}
	root := t.TempDir()
	t.Cleanup(c.cleanup)
	if !opts.Loopback {
		if reason := netnsUsable(); reason == "" {
			n, err := newNetnsNet(opts.Nodes + opts.Spare)
			if err != nil {
				t.Fatalf("faulttest: network namespaces: %v", err)
			}
			c.net = n
			t.Logf("faulttest: %d node(s) in network namespaces %s..%s on bridge %s, subnet %s.0/24",
				opts.Nodes, n.ns(1), n.ns(opts.Nodes), n.bridge(), n.subnet)
		} else {
			t.Logf("faulttest: no network namespaces (%s): nodes share loopback, network faults are skipped", reason)
		}
	}
	for i := 1; i <= opts.Nodes+opts.Spare; i++ {
		n := &Node{c: c, ID: i, DataDir: filepath.Join(root, "n"+strconv.Itoa(i)), bin: opts.Bin}
		if c.net != nil {
			ip := c.net.nodeIP(i)
			n.Addr = net.JoinHostPort(ip, strconv.Itoa(kafkaPort))
			n.RaftAddr = net.JoinHostPort(ip, strconv.Itoa(raftPort))
			n.MetricsAddr = net.JoinHostPort(ip, strconv.Itoa(metricsPort))
			n.ns, n.veth = c.net.ns(i), c.net.veth(i)
		} else {
			n.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
			n.RaftAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
			n.MetricsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		}
		if opts.DiskBytes > 0 {
			if os.Geteuid() != 0 {
				t.Skip("faulttest: a size-limited data directory needs root (tmpfs mount)")
			}
			if err := os.MkdirAll(n.DataDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", opts.DiskBytes), "tmpfs", n.DataDir).CombinedOutput(); err != nil {
				t.Fatalf("faulttest: mount tmpfs on %s: %v: %s", n.DataDir, err, out)
			}
			n.mounted = true
		}
		if i > opts.Nodes {
			c.spare = append(c.spare, n)
			continue
		}
		c.Nodes = append(c.Nodes, n)
	}
	if opts.Prepare != nil {
		opts.Prepare(c)
	}
	for _, n := range c.Nodes {
		n.start()
	}
	for _, n := range c.Nodes {
		n.waitReady()
	}
	return c
}

// serviceIP is the address, on the bridge, of services the nodes use
// (ServiceHost): not the bridge's own .254, which is the clients' source
// address, so that CutService leaves the clients alone.
const serviceIP = 253

// ServiceHost is the IP address a service the nodes use (an object store)
// listens on, in the test's own namespace: an address of its own on the
// bridge with network namespaces, else 127.0.0.1. CutService makes it
// unreachable from a node.
func (c *Cluster) ServiceHost() string {
	c.t.Helper()
	if c.net == nil {
		return "127.0.0.1"
	}
	ip := fmt.Sprintf("%s.%d", c.net.subnet, serviceIP)
	if !c.net.service {
		c.ip("addr", "add", ip+"/32", "dev", c.net.bridge())
		c.net.service = true
	}
	return ip
}

// CutService makes ServiceHost unreachable from node i the way a network
// partition does: packets vanish, nothing answers, nothing is refused. The
// node's packets still arrive, but everything the service sends to the
// node is dropped (a blackhole rule for that pair of addresses in the
// test's namespace): a connection is never set up, data sent on one
// already set up is never acknowledged. Nothing else changes.
func (c *Cluster) CutService(i int) {
	c.t.Helper()
	c.needNet("CutService")
	n := c.Node(i)
	fmt.Fprintf(&n.logs, "=== faulttest: service %s cut\n", c.ServiceHost())
	c.ip("rule", "add", "from", c.ServiceHost(), "to", c.net.nodeIP(i), "blackhole")
}

// HealService undoes CutService.
func (c *Cluster) HealService(i int) {
	c.t.Helper()
	c.needNet("HealService")
	n := c.Node(i)
	fmt.Fprintf(&n.logs, "=== faulttest: service %s healed\n", c.ServiceHost())
	c.ip("rule", "del", "from", c.ServiceHost(), "to", c.net.nodeIP(i), "blackhole")
}

// AddArgs adds flags for every node's next start (Options.Prepare).
func (c *Cluster) AddArgs(args ...string) { c.opts.Args = append(c.opts.Args, args...) }

// Netns reports whether nodes run in their own network namespaces.
func (c *Cluster) Netns() bool { return c.net != nil }

// Node returns the node with id i (1-based).
func (c *Cluster) Node(i int) *Node {
	if i < 1 || i > len(c.Nodes) {
		c.t.Fatalf("faulttest: no node %d", i)
	}
	return c.Nodes[i-1]
}

// Bootstrap is the comma-separated list of every node's Kafka address.
func (c *Cluster) Bootstrap() string {
	var s []string
	for _, n := range c.Nodes {
		s = append(s, n.Addr)
	}
	return strings.Join(s, ",")
}

// Client returns a franz-go client seeded with every node, closed at test end.
func (c *Cluster) Client(opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(c.Bootstrap(), ",")...)}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// Admin returns a kadm client over Client.
func (c *Cluster) Admin() *kadm.Client { return kadm.NewClient(c.Client()) }

// peers is --peers: the nodes the cluster was started with (a node that
// joined later is not in it; every node learns it from its registration).
func (c *Cluster) peers() string {
	var s []string
	for _, n := range c.Nodes[:c.opts.Nodes] {
		s = append(s, fmt.Sprintf("%d@%s", n.ID, n.RaftAddr))
	}
	return strings.Join(s, ",")
}

func (c *Cluster) args(n *Node) []string {
	metrics := ""
	if c.opts.Metrics {
		metrics = n.MetricsAddr
	}
	a := []string{"serve", "--listen", n.Addr, "--data-dir", n.DataDir, "--metrics-listen", metrics}
	if metrics != "" {
		// The test scrapes from beyond the node's loopback.
		a = append(a, "--admin-auth-metrics", "open")
	}
	if c.opts.Cluster {
		a = append(a, "--node-id", strconv.Itoa(n.ID), "--peers", c.peers(), "--raft-listen", n.RaftAddr,
			"--default-replication-factor", strconv.Itoa(min(3, c.opts.Nodes)))
		if n.ID > c.opts.Nodes {
			// A node that joins: through the Kafka listeners of the
			// nodes running when it first started.
			if n.join == "" {
				var live []string
				for _, o := range c.Nodes {
					if o != n && o.Running() {
						live = append(live, o.Addr)
					}
				}
				n.join = strings.Join(live, ",")
			}
			a = append(a, "--join", n.join)
		}
	}
	return append(a, c.opts.Args...)
}

// Join starts the next spare node (Options.Spare) as a node joining the
// running cluster - `serve --join` with the Kafka addresses of the nodes
// running now, its own new Raft address, the cluster's --peers - and
// waits until it serves. It returns the node's id.
func (c *Cluster) Join() int {
	c.t.Helper()
	if len(c.spare) == 0 {
		c.t.Fatal("faulttest: no spare node to join (Options.Spare)")
	}
	n := c.spare[0]
	c.spare = c.spare[1:]
	c.Nodes = append(c.Nodes, n)
	n.start()
	n.waitReady()
	return n.ID
}

func (n *Node) start() {
	t := n.c.t
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		select {
		case <-n.done:
		default:
			t.Fatalf("faulttest: node %d is already running", n.ID)
		}
	}
	bin, args := n.bin, n.c.args(n)
	if bin == "" {
		bin = Binary(t)
	}
	if n.ns != "" {
		// ip netns exec execs in place, so the pid is holdfast's own and
		// signals reach it directly.
		args = append([]string{"netns", "exec", n.ns, bin}, args...)
		bin = "ip"
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), "HOLDFAST_OFFSETS_PARTITIONS=3", "HOLDFAST_TXN_PARTITIONS=3"), n.c.opts.Env...)
	// The node dies with the test binary even if cleanup never runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	n.starts++
	fmt.Fprintf(&n.logs, "=== faulttest: start #%d: %s %s\n", n.starts, bin, strings.Join(args, " "))
	cmd.Stdout, cmd.Stderr = &n.logs, &n.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("faulttest: start node %d: %v", n.ID, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	n.cmd, n.done = cmd, done
}

// waitReady waits until the node answers ApiVersions.
func (n *Node) waitReady() {
	t := n.c.t
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if Ping(n.Addr) == nil {
			return
		}
		select {
		case <-n.done:
			t.Fatalf("faulttest: node %d exited during start-up:\n%s", n.ID, n.logs.tail(8000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("faulttest: node %d did not serve on %s within 60s:\n%s", n.ID, n.Addr, n.logs.tail(8000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Ping sends ApiVersions to addr.
func Ping(addr string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(500*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	return err
}

func (n *Node) signal(s syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && n.cmd.Process != nil {
		n.cmd.Process.Signal(s)
	}
}

// Running reports whether the node's process is alive (possibly stopped).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to node i and waits for it to exit.
func (c *Cluster) Kill(i int) {
	n := c.Node(i)
	fmt.Fprintf(&n.logs, "=== faulttest: SIGKILL\n")
	n.signal(syscall.SIGCONT) // a stopped process dies on SIGKILL too, but be explicit
	n.signal(syscall.SIGKILL)
	n.awaitExit()
}

// Stop sends SIGTERM to node i (a clean shutdown) and waits for it to
// exit.
func (c *Cluster) Stop(i int) {
	n := c.Node(i)
	fmt.Fprintf(&n.logs, "=== faulttest: SIGTERM\n")
	n.signal(syscall.SIGTERM)
	n.awaitExit()
}

// Upgrade stops node i with SIGTERM (a clean shutdown, with controlled
// shutdown) and starts it again on its data directory with the binary
// built from this tree, waiting until it serves: one step of a rolling
// upgrade from Options.Bin.
func (c *Cluster) Upgrade(i int) {
	c.t.Helper()
	c.Stop(i)
	n := c.Node(i)
	n.mu.Lock()
	n.bin = ""
	n.mu.Unlock()
	fmt.Fprintf(&n.logs, "=== faulttest: upgrade to %s\n", Binary(c.t))
	n.start()
	n.waitReady()
}

// awaitExit waits until the node's process has exited (at once if it is
// not running).
func (n *Node) awaitExit() {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Pause stops node i with SIGSTOP: its sockets stay open but nothing runs.
func (c *Cluster) Pause(i int) {
	n := c.Node(i)
	fmt.Fprintf(&n.logs, "=== faulttest: SIGSTOP\n")
	n.signal(syscall.SIGSTOP)
	n.awaitStopped()
}

// awaitStopped returns once every thread of the node's process is stopped: a signal is
// delivered asynchronously, and a process still running for a moment
// after SIGSTOP answered the request meant to find it frozen
// (TestHarnessNetworkFaults, 1 of 3 full-suite runs).
func (n *Node) awaitStopped() {
	n.mu.Lock()
	var pid int
	if n.cmd != nil && n.cmd.Process != nil {
		pid = n.cmd.Process.Pid
	}
	n.mu.Unlock()
	if pid == 0 {
		return
	}
	stopped := func(stat string) bool {
		b, err := os.ReadFile(stat)
		if err != nil {
			return true // the thread is gone
		}
		// The state follows the command name in parentheses.
		j := bytes.LastIndexByte(b, ')')
		return j >= 0 && j+2 < len(b) && (b[j+2] == 'T' || b[j+2] == 't')
	}
	for range 5000 { // bounded: a process that exited is never stopped
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(tasks) == 0 {
			return // gone, or no /proc: nothing to wait for
		}
		all := true
		for _, st := range tasks {
			all = all && stopped(st)
		}
		if all {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// Resume continues node i with SIGCONT.
func (c *Cluster) Resume(i int) {
	n := c.Node(i)
	fmt.Fprintf(&n.logs, "=== faulttest: SIGCONT\n")
	n.signal(syscall.SIGCONT)
}

// Restart kills node i if it runs, starts it again on the same data
// directory and address, and waits until it serves.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	n := c.Node(i)
	if n.Running() {
		c.Kill(i)
	}
	n.start()
	n.waitReady()
}

// WipeAndRestart kills node i if it runs, deletes its data directory and
// starts it again: a replacement disk.
func (c *Cluster) WipeAndRestart(i int) {
	c.t.Helper()
	c.WipeAndStart(i)
	c.Node(i).waitReady()
}

// WipeAndStart is WipeAndRestart without waiting for the node to serve: a
// node with a new data directory serves only once it has found its cluster,
// which it cannot while no node that has the cluster answers.
func (c *Cluster) WipeAndStart(i int) {
	c.t.Helper()
	n := c.Node(i)
	if n.Running() {
		c.Kill(i)
	}
	fmt.Fprintf(&n.logs, "=== faulttest: data directory wiped\n")
	if err := removeContents(n.DataDir); err != nil {
		c.t.Fatal(err)
	}
	n.start()
}

// WaitReady waits until node i answers ApiVersions.
func (c *Cluster) WaitReady(i int) {
	c.t.Helper()
	c.Node(i).waitReady()
}

// Isolate cuts node i from every other node and from the clients (its link
// goes down).
func (c *Cluster) Isolate(i int) {
	c.t.Helper()
	c.needNet("Isolate")
	n := c.Node(i)
	fmt.Fprintf(&n.logs, "=== faulttest: isolated\n")
	c.ip("link", "set", n.veth, "down")
}

// Heal undoes Isolate.
func (c *Cluster) Heal(i int) {
	c.t.Helper()
	c.needNet("Heal")
	n := c.Node(i)
	fmt.Fprintf(&n.logs, "=== faulttest: healed\n")
	c.ip("link", "set", n.veth, "up")
}

// PartitionPair drops all traffic between nodes i and j (both directions),
// leaving both reachable by the others and by clients. It uses blackhole
// routes inside the two namespaces, so it needs neither iptables nor nft.
func (c *Cluster) PartitionPair(i, j int) {
	c.t.Helper()
	c.needNet("PartitionPair")
	a, b := c.Node(i), c.Node(j)
	c.ip("-n", a.ns, "route", "add", "blackhole", c.net.nodeIP(j)+"/32")
	c.ip("-n", b.ns, "route", "add", "blackhole", c.net.nodeIP(i)+"/32")
}

// HealPair undoes PartitionPair.
func (c *Cluster) HealPair(i, j int) {
	c.t.Helper()
	c.needNet("HealPair")
	a, b := c.Node(i), c.Node(j)
	c.ip("-n", a.ns, "route", "del", "blackhole", c.net.nodeIP(j)+"/32")
	c.ip("-n", b.ns, "route", "del", "blackhole", c.net.nodeIP(i)+"/32")
}

func (c *Cluster) needNet(op string) {
	if c.net == nil {
		c.t.Skipf("faulttest: %s needs network namespaces (run as root with iproute2); nodes share loopback here", op)
	}
}

func (c *Cluster) ip(args ...string) {
	c.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		c.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// Logs returns everything node i wrote so far, across restarts.
func (c *Cluster) Logs(i int) string { return c.Node(i).logs.String() }

func (c *Cluster) cleanup() {
	for _, n := range c.Nodes {
		n.signal(syscall.SIGCONT)
		n.signal(syscall.SIGKILL)
		n.awaitExit()
	}
	if c.t.Failed() {
		for _, n := range c.Nodes {
			c.t.Logf("---- node %d (%s) log tail ----\n%s", n.ID, n.Addr, n.logs.tail(32<<10))
		}
	}
	if c.net != nil {
		c.net.remove()
	}
	for _, n := range c.Nodes {
		if n.mounted {
			exec.Command("umount", "-l", n.DataDir).Run()
		}
	}
}

// ResizeDisk changes the size of node i's tmpfs data directory (see
// Options.DiskBytes), e.g. to free space after filling it.
func (c *Cluster) ResizeDisk(i int, bytes int64) {
	c.t.Helper()
	n := c.Node(i)
	if !n.mounted {
		c.t.Fatalf("faulttest: node %d has no size-limited data directory", i)
	}
	if out, err := exec.Command("mount", "-o", fmt.Sprintf("remount,size=%d", bytes), n.DataDir).CombinedOutput(); err != nil {
		c.t.Fatalf("faulttest: resize tmpfs %s: %v: %s", n.DataDir, err, out)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// syncBuffer is a log buffer written by the child's stdout and stderr and
// read by the test; capped so a chatty node cannot exhaust memory.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const maxLogBytes = 8 << 20

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > maxLogBytes {
		b.buf = append([]byte("[...]\n"), b.buf[len(b.buf)-maxLogBytes/2:]...)
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func (b *syncBuffer) tail(n int) string {
	s := b.String()
	if len(s) > n {
		s = "[...]" + s[len(s)-n:]
	}
	return s
}

// ---- network namespaces ----

// netnsNet is one bridge in the root namespace (address .254 of a private
// /24 in 10.99.0.0/16) and a namespace per node joined to it by a veth whose
// namespace end is eth0. Names carry the creating pid so leftovers of a
// killed run can be recognised and removed.
type netnsNet struct {
	tag    string // "<pid>x<seq>"
	subnet string // "10.99.K"
	n      int
	// service: ServiceHost's address was added to the bridge (it goes
	// with the bridge).
	service bool
}

var netnsName = regexp.MustCompile(`^hf[bv]?(\d+)x\d+`)

func netnsUsable() string {
	if os.Geteuid() != 0 {
		return "not root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "no ip command"
	}
	if os.Getenv("HOLDFAST_FAULTTEST_LOOPBACK") != "" {
		return "HOLDFAST_FAULTTEST_LOOPBACK is set"
	}
	return ""
}

// setupLock serialises subnet choice between concurrent test binaries.
func setupLock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "holdfast-faulttest.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

func newNetnsNet(nodes int) (_ *netnsNet, err error) {
	unlock, err := setupLock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	removeStale()
	subnet, err := freeSubnet()
	if err != nil {
		return nil, err
	}
	// Interface names have at most 15 bytes: "hfv" + 7-digit pid + "x" +
	// 2-digit sequence + "n" + node.
	n := &netnsNet{tag: fmt.Sprintf("%dx%d", os.Getpid(), runSeq.Add(1)%100), subnet: subnet, n: nodes}
	defer func() {
		if err != nil {
			n.remove()
		}
	}()
	br := n.bridge()
	steps := [][]string{
		{"link", "add", br, "type", "bridge"},
		{"addr", "add", subnet + ".254/24", "dev", br},
		{"link", "set", br, "up"},
	}
	for i := 1; i <= nodes; i++ {
		ns, veth := n.ns(i), n.veth(i)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"link", "set", veth, "master", br},
			[]string{"link", "set", veth, "up"},
			[]string{"-n", ns, "addr", "add", n.nodeIP(i) + "/24", "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ip %s: %w: %s", strings.Join(s, " "), err, out)
		}
	}
	// Wait for the bridge to forward (ports go through learning quickly,
	// but the first dial must not race link-up).
	deadline := time.Now().Add(10 * time.Second)
	for i := 1; i <= nodes; i++ {
		for {
			out, _ := exec.Command("ip", "-n", n.ns(i), "-o", "link", "show", "eth0").Output()
			if bytes.Contains(out, []byte("LOWER_UP")) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return n, nil
}

func (n *netnsNet) bridge() string      { return "hfb" + n.tag }
func (n *netnsNet) ns(i int) string     { return fmt.Sprintf("hf%sn%d", n.tag, i) }
func (n *netnsNet) veth(i int) string   { return fmt.Sprintf("hfv%sn%d", n.tag, i) }
func (n *netnsNet) nodeIP(i int) string { return fmt.Sprintf("%s.%d", n.subnet, i) }

func (n *netnsNet) remove() {
	if n.service {
		// CutService's rules, if a test left one (they name the service's
		// address, which goes with the bridge).
		svc := fmt.Sprintf("%s.%d", n.subnet, serviceIP)
		for i := 1; i <= n.n; i++ {
			exec.Command("ip", "rule", "del", "from", svc, "to", n.nodeIP(i), "blackhole").Run()
		}
	}
	for i := 1; i <= n.n; i++ {
		exec.Command("ip", "netns", "del", n.ns(i)).Run() // takes the veth pair with it
		exec.Command("ip", "link", "del", n.veth(i)).Run()
	}
	exec.Command("ip", "link", "del", n.bridge()).Run()
}

// freeSubnet picks 10.99.K.0/24 with no .254 on any interface, so that a
// concurrent run on the same machine never shares a subnet.
func freeSubnet() (string, error) {
	out, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		return "", fmt.Errorf("ip addr show: %w", err)
	}
	for k := 0; k < 256; k++ {
		s := fmt.Sprintf("10.99.%d", k)
		if !bytes.Contains(out, []byte(" "+s+".")) {
			return s, nil
		}
	}
	return "", errors.New("no free 10.99.K.0/24 subnet")
}

// removeStale deletes namespaces, veths and bridges left by runs whose
// process is gone (a killed `go test`).
func removeStale() {
	dead := func(name string) bool {
		m := netnsName.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid <= 0 {
			return false
		}
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && dead(f[0]) {
				exec.Command("ip", "netns", "del", f[0]).Run()
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if dead(name) {
				exec.Command("ip", "link", "del", name).Run()
			}
		}
	}
}

// removeContents empties dir but keeps it (it may be a mount point).
func removeContents(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
