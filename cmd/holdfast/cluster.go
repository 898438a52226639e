package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/admin"
	"holdfast/internal/broker"
	"holdfast/internal/console"
	"holdfast/internal/metrics"
	"holdfast/internal/storage"
	"holdfast/internal/wire"
)

// parsePeers reads --peers: "1@host:port,2@host:port,...".
func parsePeers(s string) (map[int32]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[int32]string{}
	for _, e := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(e), "@")
		n, err := strconv.ParseInt(id, 10, 32)
		if !ok || err != nil || n <= 0 || addr == "" {
			return nil, fmt.Errorf("--peers entry %q: want id@host:port", e)
		}
		if _, dup := out[int32(n)]; dup {
			return nil, fmt.Errorf("--peers: node %d listed twice", n)
		}
		out[int32(n)] = addr
	}
	return out, nil
}

func init() {
	addCommand(newClusterCmd)
	addCommand(newDevClusterCmd)
}

func newClusterCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "cluster",
		Short: "Cluster status, leader elections, dynamic broker configs, unregistering brokers, changing the controller quorum",
	}
	conn := clientCommand(c)
	c.AddCommand(clusterStatusCmd(conn), electLeadersCmd(conn), clusterConfigCmd(conn), unregisterCmd(conn),
		addControllerCmd(conn), removeControllerCmd(conn))
	return c
}

func clusterStatusCmd(conn *connFlags) *cobra.Command {
	var internal bool
	c := &cobra.Command{
		Use:   "status",
		Short: "Nodes (alive, fenced), and per partition leader, epoch, replicas, ISR and replica offsets",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				cl, err := c.ClusterStatus(ctx)
				if err != nil {
					return err
				}
				return printClusterStatus(cmd.OutOrStdout(), cl, internal)
			})
		},
	}
	c.Flags().BoolVar(&internal, "internal", false, "include internal topics' partitions (__consumer_offsets has 50)")
	return c
}

func printClusterStatus(out io.Writer, cl *admin.Cluster, internal bool) error {
	w := tw(out)
	fmt.Fprintf(w, "cluster %s, controller %d\n\nNODE\tHOST\tPORT\tRACK\tSTATE\n", cl.ID, cl.Controller)
	for _, b := range cl.Nodes {
		state := "alive"
		if b.Fenced {
			state = "fenced (no heartbeat within broker.session.timeout.ms, or shut down)"
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\n", b.ID, b.Host, b.Port, b.Rack, state)
	}
	fmt.Fprintf(w, "\nTOPIC\tPARTITION\tLEADER\tEPOCH\tREPLICAS\tISR\tOFFLINE\tHW\tREPLICA OFFSETS (acked = fsynced; leader: fsynced)\n")
	hidden := 0
	for _, t := range cl.Topics {
		if t.Internal && !internal {
			hidden += len(t.Partitions)
			continue
		}
		for _, p := range t.Partitions {
			hw, offs := "-", "-"
			if p.HighWatermark >= 0 {
				hw = strconv.FormatInt(p.HighWatermark, 10)
				var parts []string
				for _, id := range p.Replicas {
					if o, ok := p.Acked[id]; ok {
						parts = append(parts, fmt.Sprintf("%d:%d", id, o))
					}
				}
				offs = strings.Join(parts, " ")
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%v\t%v\t%v\t%s\t%s\n", t.Name, p.Partition, p.Leader, p.Epoch, p.Replicas, p.ISR, p.Offline, hw, offs)
		}
	}
	if hidden > 0 {
		fmt.Fprintf(w, "(%d partitions of internal topics not shown: --internal)\n", hidden)
	}
	return w.Flush()
}

// electLeadersCmd sends ElectLeaders (kafka-leader-election.sh): a
// preferred election moves each partition's leadership to its first
// replica. Without --topic it covers every partition and prints only those
// that changed or failed.
func electLeadersCmd(conn *connFlags) *cobra.Command {
	var (
		topic     string
		partition int32
		election  string
	)
	c := &cobra.Command{
		Use:   "elect-leaders",
		Short: "Move leadership of partitions back to their preferred (first) replica",
		Long: `Moves leadership of partitions back to their preferred (first) replica, as
kafka-leader-election.sh does. Without --topic: every partition. Exits
non-zero if an election failed (ELECTION_NOT_NEEDED is not a failure). The
brokers wait up to --timeout for the transfers.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := kmsg.NewPtrElectLeadersRequest()
			switch election {
			case "preferred":
				req.ElectionType = 0
			case "unclean":
				req.ElectionType = 1
			default:
				return usagef("--election %q: want preferred or unclean", election)
			}
			if partition >= 0 && topic == "" {
				return usagef("--partition needs --topic")
			}
			req.TimeoutMillis = int32(conn.timeout.Milliseconds())
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				// The brokers wait up to --timeout; give their answer time to come back.
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), conn.timeout+15*time.Second)
				defer cancel()
				return electLeaders(ctx, cmd.OutOrStdout(), c.K, req, topic, partition)
			})
		},
	}
	c.Flags().StringVar(&topic, "topic", "", "only this topic (default: every partition of every topic)")
	c.Flags().Int32Var(&partition, "partition", -1, "only this partition of --topic (default: all of them)")
	c.Flags().StringVar(&election, "election", "preferred", "preferred, or unclean (Raft never elects an unclean leader: answers ELECTION_NOT_NEEDED or ELIGIBLE_LEADERS_NOT_AVAILABLE)")
	return c
}

func electLeaders(ctx context.Context, out io.Writer, cl *kgo.Client, req *kmsg.ElectLeadersRequest, topic string, partition int32) error {
	if topic != "" {
		rt := kmsg.NewElectLeadersRequestTopic()
		rt.Topic = topic
		if partition >= 0 {
			rt.Partitions = []int32{partition}
		} else {
			mreq := kmsg.NewPtrMetadataRequest()
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = &topic
			mreq.Topics = append(mreq.Topics, mt)
			md, err := mreq.RequestWith(ctx, cl)
			if err != nil {
				return err
			}
			if len(md.Topics) != 1 || md.Topics[0].ErrorCode != 0 {
				return fmt.Errorf("topic %s: %v", topic, kerrFor(md.Topics))
			}
			for _, p := range md.Topics[0].Partitions {
				rt.Partitions = append(rt.Partitions, p.Partition)
			}
			slices.Sort(rt.Partitions)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if resp.ErrorCode != 0 {
		return fmt.Errorf("elect leaders: %w", kerr.ErrorForCode(resp.ErrorCode))
	}
	w := tw(out)
	fmt.Fprintf(w, "TOPIC\tPARTITION\tRESULT\n")
	failed := 0
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			res := "elected"
			if p.ErrorCode != 0 {
				res = kerr.ErrorForCode(p.ErrorCode).Error()
				if ke, ok := kerr.ErrorForCode(p.ErrorCode).(*kerr.Error); ok {
					res = ke.Message // the code's name; the broker's message says why
				}
				if p.ErrorMessage != nil {
					res += ": " + *p.ErrorMessage
				}
				if p.ErrorCode != kerr.ElectionNotNeeded.Code {
					failed++
				}
			}
			fmt.Fprintf(w, "%s\t%d\t%s\n", t.Topic, p.Partition, res)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d elections failed", failed)
	}
	return nil
}

func kerrFor(ts []kmsg.MetadataResponseTopic) error {
	if len(ts) != 1 {
		return errors.New("malformed metadata response")
	}
	return kerr.ErrorForCode(ts[0].ErrorCode)
}

// unregisterCmd is `cluster unregister --id N`: UnregisterBroker for a
// broker-only node whose replicas were moved away (topic reassign).
// clusterConfigCmd shows or changes the dynamic broker configs, as
// kafka-configs.sh --entity-type brokers does.
func clusterConfigCmd(conn *connFlags) *cobra.Command {
	var (
		set, del []string
		broker   int32
	)
	c := &cobra.Command{
		Use:   "config [--set k=v ...] [--delete k ...] [--broker N]",
		Short: "Show or change the dynamic broker configs (the topic defaults: log.retention.ms, message.max.bytes, ...)",
		Long: `Without --set or --delete, lists the dynamic broker configs: the cluster-wide
defaults, or with --broker N that broker's configs (every one, with where its value
comes from: a dynamic config, the broker's config file, a flag or a HOLDFAST_*
variable, or the default). --set and --delete change the cluster-wide defaults (kafka-configs.sh
--entity-type brokers --entity-default), or with --broker N that broker's own. Only
the topic defaults are dynamic; a topic's own config still wins over them.`,
		Example: `  holdfast cluster config --set log.retention.ms=86400000 --set min.insync.replicas=2
  holdfast cluster config --broker 2 --delete log.retention.ms
  holdfast cluster config --broker 2`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kv, err := kvList("set", set)
			if err != nil {
				return err
			}
			var ids []int32
			scope := "cluster-wide defaults"
			if broker >= 0 {
				ids, scope = []int32{broker}, fmt.Sprintf("broker %d", broker)
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				if len(kv)+len(del) == 0 {
					var rcs kadm.ResourceConfigs
					if rcs, err = c.A.DescribeBrokerConfigs(ctx, ids...); err != nil {
						return err
					}
					return printBrokerConfigs(cmd.OutOrStdout(), rcs, scope)
				}
				var alter []kadm.AlterConfig
				for _, k := range slices.Sorted(maps.Keys(kv)) {
					alter = append(alter, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: kadm.StringPtr(kv[k])})
				}
				for _, k := range del {
					alter = append(alter, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
				}
				resp, err := c.A.AlterBrokerConfigs(ctx, alter, ids...)
				if err != nil {
					return err
				}
				for _, r := range resp {
					if r.Err != nil {
						return fmt.Errorf("%s: %w %s", scope, r.Err, r.ErrMessage)
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "altered the %s\n", scope)
				return nil
			})
		},
	}
	c.Flags().StringArrayVar(&set, "set", nil, "config key=value to set, repeatable")
	c.Flags().StringArrayVar(&del, "delete", nil, "config to remove (back to the static setting), repeatable")
	c.Flags().Int32Var(&broker, "broker", -1, "one broker's configs instead of the cluster-wide defaults")
	return c
}

func printBrokerConfigs(out io.Writer, rcs kadm.ResourceConfigs, scope string) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CONFIG\tVALUE\tSOURCE")
	n := 0
	for _, rc := range rcs {
		if rc.Err != nil {
			return fmt.Errorf("%s: %w %s", scope, rc.Err, rc.ErrMessage)
		}
		for _, c := range rc.Configs {
			src := strings.ToLower(strings.TrimSuffix(c.Source.String(), "_CONFIG"))
			if o := admin.Origin(c); o != "" {
				src += " (" + o + ")"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", c.Key, c.MaybeValue(), src)
			n++
		}
	}
	if n == 0 {
		fmt.Fprintf(out, "no dynamic configs in the %s\n", scope)
		return nil
	}
	return w.Flush()
}

func unregisterCmd(conn *connFlags) *cobra.Command {
	var id int32
	c := &cobra.Command{
		Use:   "unregister --id N",
		Short: "Remove a broker-only node from the cluster (move its replicas away first; stop it afterwards)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id <= 0 {
				return usagef("--id: name the broker to unregister")
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				req := kmsg.NewPtrUnregisterBrokerRequest()
				req.BrokerID = id
				resp, err := req.RequestWith(ctx, c.K)
				if err != nil {
					return err
				}
				if resp.ErrorCode != 0 {
					msg := ""
					if resp.ErrorMessage != nil {
						msg = *resp.ErrorMessage
					}
					return fmt.Errorf("broker %d: %w %s", id, kerr.ErrorForCode(resp.ErrorCode), msg)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "unregistered broker %d; stop it now\n", id)
				return nil
			})
		},
	}
	c.Flags().Int32Var(&id, "id", -1, "the broker-only node to remove")
	return c
}

// newDevClusterCmd runs N brokers in this process on 127.0.0.1: Kafka on
// base-port+i-1, Raft on base-port+100+i-1, data under dir/node-i. It
// prints the bootstrap string and stops cleanly on SIGINT/SIGTERM.
func newDevClusterCmd() *cobra.Command {
	var (
		nodes, basePort      int
		dir, flush, logLevel string
		config               string
		overrides            []string
		admin                bool
	)
	c := &cobra.Command{
		Use:   "dev-cluster",
		Short: "Run a local N-node cluster in one process for development",
		Long: `Run N brokers in this process on 127.0.0.1: node i serves Kafka on
base-port+i-1, Raft on base-port+100+i-1 and its admin listener (web
console, /metrics, /healthz, /debug/pprof) on base-port+200+i-1, with its
data in DIR/node-i.
Prints the bootstrap string, then runs until SIGINT/SIGTERM. Every flag can
also be set as HOLDFAST_<FLAG>.

--config and --override take serve's settings (its flag names or Kafka's,
as in a server.properties) for every node: group, transaction, log,
retention and limit settings. What tells the nodes apart (listeners, node
id, data dir, Raft peers) and security are dev-cluster's own: setting them
is an error. PLAINTEXT only.`,
		Example: `  holdfast dev-cluster --nodes 3 --dir /tmp/dc
  holdfast dev-cluster --override group.initial.rebalance.delay.ms=0 --override group.consumer.heartbeat.interval.ms=500`,
		Args: noArgs,
	}
	c.Flags().StringVar(&config, "config", "", "a serve config file (key=value lines, flag or Kafka names) applied to every node")
	c.Flags().StringArrayVar(&overrides, "override", nil, "a serve config line `key=value` (Kafka's name or a serve flag's) for every node, repeatable; wins over --config")
	s := newSettings(c.Flags())
	s.Int(&nodes, "nodes", 3, "number of nodes")
	s.String(&dir, "dir", "./dev-cluster", "data directory (one sub-directory per node)")
	s.Int(&basePort, "base-port", 19092, "Kafka port of node 1; node i listens on base-port+i-1, its Raft on base-port+100+i-1")
	s.String(&flush, "flush", "sync", "durability policy (as serve --flush)")
	s.String(&logLevel, "log-level", "warn", "debug, info, warn or error")
	s.Bool(&admin, "admin", true, "give each node an admin listener (console, /metrics) on base-port+200+i-1, printed after the bootstrap string")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if _, err := s.load("", nil); err != nil {
			return usageError{err}
		}
		base, err := devClusterBase(config, overrides)
		if err != nil {
			return usageError{err}
		}
		return devCluster(cmd.OutOrStdout(), devClusterOpts{nodes: nodes, basePort: basePort, dir: dir, flush: flush, logLevel: logLevel, admin: admin}, base)
	}
	return c
}

// devClusterNodeFlags are the serve settings that tell nodes apart (or
// secure them), which dev-cluster chooses itself.
var devClusterNodeFlags = []string{"listen", "advertised", "data-dir", "node-id", "peers", "raft-listen", "join", "metrics-listen", "add-scram"}

// devClusterBase reads serve's settings from config and overrides (and
// HOLDFAST_<FLAG> for serve's flags) into the configuration every node
// starts from; nil with neither. The returned function gives a node's copy.
func devClusterBase(config string, overrides []string) (func(*slog.Logger) (broker.Config, wire.Limits, error), error) {
	if config == "" && len(overrides) == 0 {
		return nil, nil
	}
	sc := &serveConfig{}
	s := newSettings(pflag.NewFlagSet("serve", pflag.ContinueOnError))
	sc.register(s)
	unsupported, err := s.load(config, overrides)
	if err != nil {
		return nil, err
	}
	sc.origins = s.configOrigins(describedAs)
	if len(unsupported) > 0 {
		return nil, fmt.Errorf("settings Holdfast does not support: %s", strings.Join(unsupported, ", "))
	}
	for _, f := range devClusterNodeFlags {
		if fl := s.fs.Lookup(f); fl != nil && fl.Changed {
			return nil, fmt.Errorf("--%s: dev-cluster chooses it for each node itself", f)
		}
	}
	if len(sc.security) > 0 {
		return nil, fmt.Errorf("security settings (%s): dev-cluster is PLAINTEXT only; run holdfast serve per node for security", strings.Join(slices.Sorted(maps.Keys(sc.security)), ", "))
	}
	return func(logger *slog.Logger) (broker.Config, wire.Limits, error) {
		cfg, lim, _, err := sc.brokerConfig(logger)
		cfg.Security = broker.DefaultConfig().Security
		return cfg, lim, err
	}, nil
}

// devClusterOpts are dev-cluster's own settings.
type devClusterOpts struct {
	nodes, basePort      int
	dir, flush, logLevel string
	admin                bool // an admin listener per node on basePort+200+i-1
}

func devCluster(out io.Writer, o devClusterOpts, base func(*slog.Logger) (broker.Config, wire.Limits, error)) error {
	nodes, basePort, dir := o.nodes, o.basePort, o.dir
	if nodes < 1 || nodes > 99 {
		return usagef("--nodes %d: want 1..99", nodes)
	}
	logger, err := newLogger(o.logLevel, "text")
	if err != nil {
		return usageError{err}
	}
	policy, err := storage.ParseFlushPolicy(o.flush)
	if err != nil {
		return usageError{err}
	}
	peers := map[int32]string{}
	for i := 1; i <= nodes; i++ {
		peers[int32(i)] = net.JoinHostPort("127.0.0.1", strconv.Itoa(basePort+100+i-1))
	}
	type running struct {
		b   *broker.Broker
		srv *wire.Server
		log *slog.Logger
	}
	var rs []running
	defer func() {
		for i := len(rs) - 1; i >= 0; i-- {
			rs[i].srv.Close()
			rs[i].b.Close()
		}
	}()
	var boot []string
	errc := make(chan error, nodes)
	cfgs := make([]broker.Config, nodes)
	lns := make([]net.Listener, nodes)
	defer func() {
		for _, ln := range lns {
			if ln != nil {
				ln.Close() // closed already if its server ran
			}
		}
	}()
	lims := make([]wire.Limits, nodes)
	// The admin listeners are bound with the Kafka ones: a port in use
	// fails the start, as serve's --metrics-listen does.
	var admins []net.Listener
	var consoles []string
	defer func() {
		for _, ln := range admins {
			ln.Close()
		}
	}()
	if o.admin {
		for i := 1; i <= nodes; i++ {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(basePort+200+i-1)))
			if err != nil {
				return fmt.Errorf("admin listener of node %d (--admin=false leaves them out): %w", i, err)
			}
			admins = append(admins, ln)
			consoles = append(consoles, "http://"+ln.Addr().String())
		}
	}
	for i := 1; i <= nodes; i++ {
		cfg, lim := broker.DefaultConfig(), wire.DefaultLimits()
		if base != nil {
			if cfg, lim, err = base(logger); err != nil {
				return usageError{err}
			}
		}
		lims[i-1] = lim
		cfg.NodeID = int32(i)
		cfg.DataDir = filepath.Join(dir, "node-"+strconv.Itoa(i))
		cfg.AdvertisedHost, cfg.AdvertisedPort = "127.0.0.1", int32(basePort+i-1)
		cfg.LogDefaults.Flush = policy
		cfg.Logger = logger.With("node", i)
		if nodes > 1 {
			cfg.Peers = peers
		}
		addr := net.JoinHostPort(cfg.AdvertisedHost, strconv.Itoa(int(cfg.AdvertisedPort)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		cfgs[i-1], lns[i-1] = cfg, ln
		boot = append(boot, addr)
	}
	// Started together: a new cluster forms once every node is up.
	bs := make([]*broker.Broker, nodes)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Go(func() { bs[i], errs[i] = broker.New(cfgs[i]) })
	}
	wg.Wait()
	for i, b := range bs {
		if b != nil {
			srv := wire.NewServer(b, lims[i], cfgs[i].Logger)
			if o.admin {
				// Before Serve: the metrics install the server's OnReply hook.
				cc := &console.Config{Broker: b, Seeds: []string{boot[i]}, Logger: cfgs[i].Logger.With("component", "console")}
				handler, stop := adminMux(b, srv, nil, metrics.Options{PartitionSeriesMax: metrics.DefaultPartitionSeriesMax}, cc, cfgs[i].Logger)
				defer stop()
				hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
				go hs.Serve(admins[i])
				defer hs.Close()
			}
			go func(ln net.Listener) { errc <- srv.Serve(ln) }(lns[i])
			rs = append(rs, running{b, srv, cfgs[i].Logger})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintln(out, strings.Join(boot, ","))
	for i, c := range consoles {
		fmt.Fprintf(out, "node %d: console %s/  metrics %s/metrics\n", i+1, c, c)
	}
	os.Stdout.Sync()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		logger.Info("dev-cluster stopping", "signal", s.String())
	case err := <-errc:
		return err
	}
	// Every node fenced first, together, as serve does on SIGTERM: while
	// the metadata quorum is whole, so each fence commits at once, and the
	// controller stops naming the nodes to clients. Each node's controlled
	// shutdown then leaves its leaderships where they are (every other
	// replica is stopping too) instead of passing them to a node about to
	// close; the last node waited a second for that.
	var fenced sync.WaitGroup
	for _, r := range rs {
		fenced.Go(func() { fenceForShutdown(r.b, r.log) })
	}
	fenced.Wait()
	// A fence is committed on the controller first; each node's metadata
	// applies it a moment later, and a node that closes before it sees the
	// others fenced would still hand them leaderships.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if !slices.ContainsFunc(rs, func(r running) bool { return len(r.b.FencedBrokers()) < len(rs) }) {
			break
		}
	}
	return nil
}
