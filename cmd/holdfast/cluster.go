package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
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
	commands["cluster"] = command{"cluster status: nodes, leaders, per-replica offsets; cluster elect-leaders: move leadership to preferred replicas; cluster unregister: remove a broker-only node", clusterCommand}
	commands["dev-cluster"] = command{"run a local N-node cluster in one process for development", devClusterCommand}
}

func clusterCommand(args []string) error {
	switch {
	case len(args) > 0 && args[0] == "elect-leaders":
		return electLeadersCommand(args[1:])
	case len(args) > 0 && args[0] == "unregister":
		return unregisterCommand(args[1:])
	case len(args) == 0 || args[0] != "status":
		return fmt.Errorf("usage: holdfast cluster status [--bootstrap host:port]\n       holdfast cluster elect-leaders [--bootstrap host:port] [--topic T [--partition P]] [--election preferred|unclean]\n       holdfast cluster unregister [--bootstrap host:port] --id N")
	}
	fs := flag.NewFlagSet("cluster status", flag.ContinueOnError)
	fs.Usage = flagUsage(fs, "cluster status [flags]")
	bootstrap := bootstrapFlag(fs)
	if err := parseLayered(fs, args[1:], ""); err != nil {
		return err
	}
	cl, err := newClient(*bootstrap)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "cluster %s, controller %d\n\nNODE\tHOST\tPORT\tRACK\tSTATE\n", deref(md.ClusterID), md.ControllerID)
	for _, b := range clusterBrokers(ctx, cl, md) {
		state := "alive"
		if b.IsFenced {
			state = "fenced (no heartbeat within broker.session.timeout.ms, or shut down)"
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\n", b.NodeID, b.Host, b.Port, deref(b.Rack), state)
	}
	fmt.Fprintf(w, "\nTOPIC\tPARTITION\tLEADER\tEPOCH\tREPLICAS\tISR\tOFFLINE\tHW\tREPLICA OFFSETS (acked = fsynced; leader: fsynced)\n")
	sort.Slice(md.Topics, func(i, j int) bool { return deref(md.Topics[i].Topic) < deref(md.Topics[j].Topic) })
	for _, t := range md.Topics {
		name := deref(t.Topic)
		sort.Slice(t.Partitions, func(i, j int) bool { return t.Partitions[i].Partition < t.Partitions[j].Partition })
		for _, p := range t.Partitions {
			hw, offs := "-", "-"
			if p.Leader >= 0 {
				if q, err := describeQuorum(ctx, cl, p.Leader, name, p.Partition); err == nil && q.ErrorCode == 0 {
					hw = strconv.FormatInt(q.HighWatermark, 10)
					var parts []string
					for _, v := range q.CurrentVoters {
						parts = append(parts, fmt.Sprintf("%d:%d", v.ReplicaID, v.LogEndOffset))
					}
					offs = strings.Join(parts, " ")
				}
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%v\t%v\t%v\t%s\t%s\n", name, p.Partition, p.Leader, p.LeaderEpoch, p.Replicas, p.ISR, p.OfflineReplicas, hw, offs)
		}
	}
	return w.Flush()
}

// electLeadersCommand sends ElectLeaders (kafka-leader-election.sh): a
// preferred election moves each partition's leadership to its first
// replica. Without --topic it covers every partition and prints only those
// that changed or failed.
func electLeadersCommand(args []string) error {
	fs := flag.NewFlagSet("cluster elect-leaders", flag.ContinueOnError)
	fs.Usage = flagUsage(fs, "cluster elect-leaders [flags]\n\nMoves leadership of partitions back to their preferred (first) replica, as\nkafka-leader-election.sh does. Without --topic: every partition. Exits non-zero\nif an election failed (ELECTION_NOT_NEEDED is not a failure).")
	bootstrap := bootstrapFlag(fs)
	topic := fs.String("topic", "", "only this topic (default: every partition of every topic)")
	partition := fs.Int("partition", -1, "only this partition of --topic (default: all of them)")
	election := fs.String("election", "preferred", "preferred, or unclean (Raft never elects an unclean leader: answers ELECTION_NOT_NEEDED or ELIGIBLE_LEADERS_NOT_AVAILABLE)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long the brokers wait for the transfers")
	if err := parseLayered(fs, args, ""); err != nil {
		return err
	}
	req := kmsg.NewPtrElectLeadersRequest()
	switch *election {
	case "preferred":
		req.ElectionType = 0
	case "unclean":
		req.ElectionType = 1
	default:
		return fmt.Errorf("--election %q: want preferred or unclean", *election)
	}
	if *partition >= 0 && *topic == "" {
		return errors.New("--partition needs --topic")
	}
	req.TimeoutMillis = int32(timeout.Milliseconds())
	cl, err := newClient(*bootstrap)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout+15*time.Second)
	defer cancel()
	if *topic != "" {
		rt := kmsg.NewElectLeadersRequestTopic()
		rt.Topic = *topic
		if *partition >= 0 {
			rt.Partitions = []int32{int32(*partition)}
		} else {
			mreq := kmsg.NewPtrMetadataRequest()
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = topic
			mreq.Topics = append(mreq.Topics, mt)
			md, err := mreq.RequestWith(ctx, cl)
			if err != nil {
				return err
			}
			if len(md.Topics) != 1 || md.Topics[0].ErrorCode != 0 {
				return fmt.Errorf("topic %s: %v", *topic, kerrFor(md.Topics))
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
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
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

// clusterBrokers lists the brokers with the fenced ones (DescribeCluster v2,
// KIP-1073); Metadata leaves fenced brokers out, so it is only the
// fallback for a broker that cannot answer that.
func clusterBrokers(ctx context.Context, cl *kgo.Client, md *kmsg.MetadataResponse) []kmsg.DescribeClusterResponseBroker {
	req := kmsg.NewPtrDescribeClusterRequest()
	req.IncludeFencedBrokers = true
	var out []kmsg.DescribeClusterResponseBroker
	if resp, err := req.RequestWith(ctx, cl); err == nil && resp.ErrorCode == 0 {
		out = resp.Brokers
	} else {
		for _, b := range md.Brokers {
			db := kmsg.NewDescribeClusterResponseBroker()
			db.NodeID, db.Host, db.Port, db.Rack = b.NodeID, b.Host, b.Port, b.Rack
			out = append(out, db)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

func describeQuorum(ctx context.Context, cl *kgo.Client, leader int32, topic string, partition int32) (kmsg.DescribeQuorumResponseTopicPartition, error) {
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDescribeQuorumRequestTopicPartition()
	rp.Partition = partition
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := cl.Broker(int(leader)).Request(ctx, req)
	if err != nil {
		return kmsg.DescribeQuorumResponseTopicPartition{}, err
	}
	resp := kresp.(*kmsg.DescribeQuorumResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return kmsg.DescribeQuorumResponseTopicPartition{}, errors.New("malformed DescribeQuorum response")
	}
	return resp.Topics[0].Partitions[0], nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// devClusterCommand runs N brokers in this process on 127.0.0.1: Kafka on
// base-port+i-1, Raft on base-port+100+i-1, data under dir/node-i. It
// prints the bootstrap string and stops cleanly on SIGINT/SIGTERM.
func devClusterCommand(args []string) error {
	fs := flag.NewFlagSet("dev-cluster", flag.ContinueOnError)
	fs.Usage = flagUsage(fs, "dev-cluster [flags]")
	nodes := fs.Int("nodes", 3, "number of nodes")
	dir := fs.String("dir", "./dev-cluster", "data directory (one sub-directory per node)")
	basePort := fs.Int("base-port", 19092, "Kafka port of node 1; node i listens on base-port+i-1, its Raft on base-port+100+i-1")
	flush := fs.String("flush", "sync", "durability policy (as serve --flush)")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	if err := parseLayered(fs, args, ""); err != nil {
		return err
	}
	if *nodes < 1 || *nodes > 99 {
		return fmt.Errorf("--nodes %d: want 1..99", *nodes)
	}
	logger, err := newLogger(*logLevel, "text")
	if err != nil {
		return err
	}
	policy, err := storage.ParseFlushPolicy(*flush)
	if err != nil {
		return err
	}
	peers := map[int32]string{}
	for i := 1; i <= *nodes; i++ {
		peers[int32(i)] = net.JoinHostPort("127.0.0.1", strconv.Itoa(*basePort+100+i-1))
	}
	type running struct {
		b   *broker.Broker
		srv *wire.Server
	}
	var rs []running
	defer func() {
		for i := len(rs) - 1; i >= 0; i-- {
			rs[i].srv.Close()
			rs[i].b.Close()
		}
	}()
	var boot []string
	errc := make(chan error, *nodes)
	cfgs := make([]broker.Config, *nodes)
	lns := make([]net.Listener, *nodes)
	defer func() {
		for _, ln := range lns {
			if ln != nil {
				ln.Close() // closed already if its server ran
			}
		}
	}()
	for i := 1; i <= *nodes; i++ {
		cfg := broker.DefaultConfig()
		cfg.NodeID = int32(i)
		cfg.DataDir = filepath.Join(*dir, "node-"+strconv.Itoa(i))
		cfg.AdvertisedHost, cfg.AdvertisedPort = "127.0.0.1", int32(*basePort+i-1)
		cfg.LogDefaults.Flush = policy
		cfg.Logger = logger.With("node", i)
		if *nodes > 1 {
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
	bs := make([]*broker.Broker, *nodes)
	errs := make([]error, *nodes)
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Go(func() { bs[i], errs[i] = broker.New(cfgs[i]) })
	}
	wg.Wait()
	for i, b := range bs {
		if b != nil {
			srv := wire.NewServer(b, wire.DefaultLimits(), cfgs[i].Logger)
			go func(ln net.Listener) { errc <- srv.Serve(ln) }(lns[i])
			rs = append(rs, running{b, srv})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Println(strings.Join(boot, ","))
	os.Stdout.Sync()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		logger.Warn("dev-cluster stopping", "signal", s.String())
	case err := <-errc:
		return err
	}
	return nil
}

// unregisterCommand is `cluster unregister --id N`: UnregisterBroker for a
// broker-only node whose replicas were moved away (topic reassign).
func unregisterCommand(args []string) error {
	fs := flag.NewFlagSet("cluster unregister", flag.ContinueOnError)
	fs.Usage = flagUsage(fs, "cluster unregister --id N [flags]")
	bootstrap := bootstrapFlag(fs)
	id := fs.Int("id", -1, "the broker-only node to remove (move its replicas away first; stop it afterwards)")
	if err := parseLayered(fs, args, ""); err != nil {
		return err
	}
	if *id <= 0 {
		return errors.New("--id: name the broker to unregister")
	}
	cl, err := newClient(*bootstrap)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req := kmsg.NewPtrUnregisterBrokerRequest()
	req.BrokerID = int32(*id)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if resp.ErrorCode != 0 {
		return fmt.Errorf("broker %d: %w %s", *id, kerr.ErrorForCode(resp.ErrorCode), deref(resp.ErrorMessage))
	}
	fmt.Printf("unregistered broker %d; stop it now\n", *id)
	return nil
}
