// Package admin reads a cluster's state through the Kafka protocol, the way
// any Kafka tool would: nodes, partitions with their replicas' offsets,
// consumer groups with lag, records. The CLI (cmd/holdfast) prints it and
// the web console (internal/console) renders it, so both show the same
// thing, and both work against any broker of the cluster.
package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Client is a Kafka client and the options it was made with (reading
// records takes a second, consuming client with the same options).
type Client struct {
	Seeds []string
	Opts  []kgo.Opt // besides the seeds: TLS, SASL, timeouts
	K     *kgo.Client
	A     *kadm.Client
}

// NewClient connects lazily to seeds.
func NewClient(seeds []string, opts ...kgo.Opt) (*Client, error) {
	k, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		return nil, err
	}
	return &Client{Seeds: seeds, Opts: opts, K: k, A: kadm.NewClient(k)}, nil
}

// Close closes the client.
func (c *Client) Close() { c.K.Close() }

// Node is one broker.
type Node struct {
	ID     int32
	Host   string
	Port   int32
	Rack   string
	Fenced bool // no heartbeat within broker.session.timeout.ms, or shut down
}

// Partition is one partition as its leader reports it.
type Partition struct {
	Topic     string
	Partition int32
	Leader    int32
	Epoch     int32
	Replicas  []int32
	ISR       []int32
	Offline   []int32
	// HighWatermark is the committed offset (-1 when the leader did not
	// answer DescribeQuorum).
	HighWatermark int64
	// Acked is each replica's acknowledged offset from the leader's Raft
	// progress: followers acknowledge after fsync, and the leader's own
	// entry is its fsynced offset. Empty on a single node (not asked: its
	// groups' only voter is the leader, whose offsets the metadata shows).
	Acked map[int32]int64
	Err   string
}

// Topic is a topic and its partitions.
type Topic struct {
	Name       string
	Internal   bool
	Partitions []Partition
}

// Cluster is what Metadata, DescribeCluster and DescribeQuorum report.
type Cluster struct {
	ID         string
	Controller int32
	Nodes      []Node
	Topics     []Topic
}

// ClusterStatus describes the nodes and, for each partition of the named
// topics (all if none), its leader, replicas and replica offsets.
func (c *Client) ClusterStatus(ctx context.Context, topics ...string) (*Cluster, error) {
	mreq := kmsg.NewPtrMetadataRequest()
	if len(topics) > 0 {
		for _, t := range topics {
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = kmsg.StringPtr(t)
			mreq.Topics = append(mreq.Topics, mt)
		}
	}
	md, err := mreq.RequestWith(ctx, c.K)
	if err != nil {
		return nil, err
	}
	out := &Cluster{ID: deref(md.ClusterID), Controller: md.ControllerID}
	for _, b := range c.brokers(ctx, md) {
		out.Nodes = append(out.Nodes, Node{ID: b.NodeID, Host: b.Host, Port: b.Port, Rack: deref(b.Rack), Fenced: b.IsFenced})
	}
	for _, t := range md.Topics {
		ot := Topic{Name: deref(t.Topic), Internal: t.IsInternal}
		if t.ErrorCode != 0 {
			return nil, fmt.Errorf("topic %s: %w", ot.Name, kerr.ErrorForCode(t.ErrorCode))
		}
		for _, p := range t.Partitions {
			op := Partition{Topic: ot.Name, Partition: p.Partition, Leader: p.Leader, Epoch: p.LeaderEpoch,
				Replicas: p.Replicas, ISR: p.ISR, Offline: p.OfflineReplicas, HighWatermark: -1}
			if p.ErrorCode != 0 {
				op.Err = errName(p.ErrorCode)
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		sort.Slice(ot.Partitions, func(i, j int) bool { return ot.Partitions[i].Partition < ot.Partitions[j].Partition })
		out.Topics = append(out.Topics, ot)
	}
	sort.Slice(out.Topics, func(i, j int) bool { return out.Topics[i].Name < out.Topics[j].Name })
	if len(out.Nodes) > 1 {
		// A single node's groups have one voter each, the leader itself:
		// no other replica's progress to ask for.
		c.quorums(ctx, out)
	}
	return out, nil
}

// quorums asks each leader, in one DescribeQuorum per leader, for its
// partitions' high watermarks and replica offsets.
func (c *Client) quorums(ctx context.Context, cl *Cluster) {
	byLeader := map[int32][]*Partition{}
	for ti := range cl.Topics {
		for pi := range cl.Topics[ti].Partitions {
			p := &cl.Topics[ti].Partitions[pi]
			if p.Leader >= 0 {
				byLeader[p.Leader] = append(byLeader[p.Leader], p)
			}
		}
	}
	for leader, ps := range byLeader {
		req := kmsg.NewPtrDescribeQuorumRequest()
		idx := map[string]int{}
		for _, p := range ps {
			i, ok := idx[p.Topic]
			if !ok {
				i = len(req.Topics)
				idx[p.Topic] = i
				rt := kmsg.NewDescribeQuorumRequestTopic()
				rt.Topic = p.Topic
				req.Topics = append(req.Topics, rt)
			}
			rp := kmsg.NewDescribeQuorumRequestTopicPartition()
			rp.Partition = p.Partition
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
		}
		kresp, err := c.K.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			continue
		}
		resp := kresp.(*kmsg.DescribeQuorumResponse)
		for _, t := range resp.Topics {
			for _, qp := range t.Partitions {
				if qp.ErrorCode != 0 {
					continue
				}
				for _, p := range ps {
					if p.Topic != t.Topic || p.Partition != qp.Partition {
						continue
					}
					p.HighWatermark = qp.HighWatermark
					p.Acked = map[int32]int64{}
					for _, v := range append(qp.CurrentVoters, qp.Observers...) {
						p.Acked[v.ReplicaID] = v.LogEndOffset
					}
				}
			}
		}
	}
}

// Nodes lists the brokers, fenced ones included.
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.Topics = []kmsg.MetadataRequestTopic{} // none
	md, err := mreq.RequestWith(ctx, c.K)
	if err != nil {
		return nil, err
	}
	var out []Node
	for _, b := range c.brokers(ctx, md) {
		out = append(out, Node{ID: b.NodeID, Host: b.Host, Port: b.Port, Rack: deref(b.Rack), Fenced: b.IsFenced})
	}
	return out, nil
}

// brokers lists the brokers with the fenced ones (DescribeCluster v2,
// KIP-1073); Metadata leaves fenced brokers out, so it is only the
// fallback for a broker that cannot answer that.
func (c *Client) brokers(ctx context.Context, md *kmsg.MetadataResponse) []kmsg.DescribeClusterResponseBroker {
	req := kmsg.NewPtrDescribeClusterRequest()
	req.IncludeFencedBrokers = true
	var out []kmsg.DescribeClusterResponseBroker
	if resp, err := req.RequestWith(ctx, c.K); err == nil && resp.ErrorCode == 0 {
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

// Offsets are a partition's log start and high watermark.
type Offsets struct{ Start, End int64 }

// TopicOffsets lists the start and end (high watermark) of every partition
// of the topics. A partition whose offsets could not be listed (no leader
// yet) is left out of the map, and the first such error is returned with
// the rest; a failed request returns a nil map.
func (c *Client) TopicOffsets(ctx context.Context, topics ...string) (map[string]map[int32]Offsets, error) {
	// kadm returns what the brokers answered along with a shard's error
	// (a partition without a leader has no broker to ask).
	start, first := c.A.ListStartOffsets(ctx, topics...)
	if start == nil {
		return nil, first
	}
	end, err := c.A.ListEndOffsets(ctx, topics...)
	if end == nil {
		return nil, err
	}
	if first == nil {
		first = err
	}
	out := map[string]map[int32]Offsets{}
	end.Each(func(o kadm.ListedOffset) {
		s, ok := start.Lookup(o.Topic, o.Partition)
		if o.Err == nil && ok {
			o.Err = s.Err
		}
		if o.Err != nil || !ok {
			if first == nil && o.Err != nil {
				first = fmt.Errorf("%s: %w", o.Topic, o.Err)
			}
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]Offsets{}
		}
		out[o.Topic][o.Partition] = Offsets{Start: s.Offset, End: o.Offset}
	})
	return out, first
}

// Config is one topic config as DescribeConfigs reports it.
type Config struct {
	Name, Value, Source string
	Sensitive           bool
}

// TopicConfigs lists a topic's configs.
func (c *Client) TopicConfigs(ctx context.Context, topic string) ([]Config, error) {
	rcs, err := c.A.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return nil, err
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		return nil, err
	}
	if rc.Err != nil {
		return nil, fmt.Errorf("%s: %w", topic, rc.Err)
	}
	var out []Config
	for _, cf := range rc.Configs {
		out = append(out, Config{Name: cf.Key, Value: cf.MaybeValue(), Source: ConfigSource(cf), Sensitive: cf.Sensitive})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ConfigSource is where cf's value comes from, for a table: SourceName,
// and for a static broker setting also what set it, from its
// STATIC_BROKER_CONFIG synonym (Origin): "broker (file:
// log.retention.hours)".
func ConfigSource(cf kadm.Config) string {
	if o := Origin(cf); o != "" {
		return SourceName(cf.Source) + " (" + o + ")"
	}
	return SourceName(cf.Source)
}

// Origin says what set a value whose source is STATIC_BROKER_CONFIG:
// "file: log.retention.hours", "flag: --retention" or "env:
// HOLDFAST_RETENTION", read from the name of its STATIC_BROKER_CONFIG
// synonym (Holdfast names that synonym by what set it: the file's key as
// Kafka does, the flag, or the environment variable); "" for any other
// source or without synonyms.
func Origin(cf kadm.Config) string {
	if cf.Source != kmsg.ConfigSourceStaticBrokerConfig {
		return ""
	}
	for _, syn := range cf.Synonyms {
		if syn.Source != kmsg.ConfigSourceStaticBrokerConfig {
			continue
		}
		switch {
		case strings.HasPrefix(syn.Key, "--"):
			return "flag: " + syn.Key
		case strings.HasPrefix(syn.Key, "HOLDFAST_"):
			return "env: " + syn.Key
		}
		return "file: " + syn.Key
	}
	return ""
}

// SourceName is a short name for where a config value comes from.
func SourceName(s kmsg.ConfigSource) string {
	switch s {
	case kmsg.ConfigSourceDynamicTopicConfig:
		return "topic"
	case kmsg.ConfigSourceDefaultConfig:
		return "default"
	case kmsg.ConfigSourceStaticBrokerConfig:
		return "broker"
	case kmsg.ConfigSourceDynamicBrokerConfig, kmsg.ConfigSourceDynamicDefaultBrokerConfig:
		return "broker (dynamic)"
	}
	return strings.ToLower(s.String())
}

// GroupPartition is a group's position in one partition.
type GroupPartition struct {
	Topic     string
	Partition int32
	Committed int64 // -1: no commit
	End       int64 // high watermark
	// Lag is End - Committed; -1 (shown "-") when either is unknown, a
	// partition with no commit included: Kafka's kafka-consumer-groups.sh
	// and the holdfast_group_lag metrics define it so too, so a total here
	// and in Prometheus agree.
	Lag int64
	// TimeLag is how old the next record the group will read is: zero
	// when it is caught up, negative when the age is unknown (no time lag
	// asked for, no commit, or the record could not be read in time).
	TimeLag time.Duration
	Member  string
}

// GroupMember is one member and its assignment.
type GroupMember struct {
	ID, InstanceID, ClientID, Host string
	Assigned                       []string // topic[partitions]
	Lag                            int64
}

// Group is a consumer group with its lag.
type Group struct {
	Name, State, ProtocolType, Protocol string
	Coordinator                         int32
	Members                             []GroupMember
	Partitions                          []GroupPartition
	TotalLag                            int64
	MaxTimeLag                          time.Duration
	Err                                 string

	notClassic bool // DescribeGroups answered GROUP_ID_NOT_FOUND
}

// ListGroups lists the groups by name.
func (c *Client) ListGroups(ctx context.Context) ([]kadm.ListedGroup, error) {
	gs, err := c.A.ListGroups(ctx)
	if err != nil {
		return nil, err
	}
	return gs.Sorted(), nil
}

// Groups describes groups with lag per partition and per member; with
// timeLag it also reads the next record of each lagging partition for its
// age (a fetch per lagging partition).
func (c *Client) Groups(ctx context.Context, timeLag bool, groups ...string) ([]Group, error) {
	lags, err := c.A.Lag(ctx, groups...)
	if err != nil {
		return nil, err
	}
	var out []Group
	for _, name := range groups {
		l, ok := lags[name]
		if !ok {
			out = append(out, Group{Name: name, Err: "no answer"})
			continue
		}
		g := Group{Name: name, State: l.State, ProtocolType: l.ProtocolType, Protocol: l.Protocol, Coordinator: l.Coordinator.NodeID}
		if err := l.Error(); err != nil {
			g.Err = err.Error()
			if errors.Is(err, kerr.GroupIDNotFound) {
				g.notClassic = true // perhaps a KIP-848 group (DescribeGroups v6)
			}
			out = append(out, g)
			continue
		}
		memberLag := map[string]int64{}
		for _, pl := range l.Lag.Sorted() {
			gp := GroupPartition{Topic: pl.Topic, Partition: pl.Partition, Committed: pl.Commit.At, End: pl.End.Offset, Lag: -1, Member: "-"}
			if pl.Member != nil {
				gp.Member = pl.Member.MemberID
			}
			if pl.Err == nil && pl.Lag >= 0 && gp.Committed >= 0 {
				gp.Lag = pl.Lag
				g.TotalLag += pl.Lag
				memberLag[gp.Member] += pl.Lag
			}
			g.Partitions = append(g.Partitions, gp)
		}
		for _, m := range l.Members {
			gm := GroupMember{ID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Lag: memberLag[m.MemberID]}
			if m.InstanceID != nil {
				gm.InstanceID = *m.InstanceID
			}
			if a, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range a.Topics {
					gm.Assigned = append(gm.Assigned, fmt.Sprintf("%s%v", t.Topic, t.Partitions))
				}
			}
			g.Members = append(g.Members, gm)
		}
		out = append(out, g)
	}
	c.consumerGroups(ctx, out)
	c.fillTimeLag(ctx, out, timeLag)
	return out, nil
}

// fillTimeLag sets each partition's time lag: zero when caught up, the age
// of the next record to read when behind and asked for (read), else
// unknown. Every group's partitions count, KIP-848 ones included, and
// several groups at different offsets of one partition each get their own.
func (c *Client) fillTimeLag(ctx context.Context, gs []Group, read bool) {
	want := map[tp][]int64{}
	for gi := range gs {
		for pi := range gs[gi].Partitions {
			p := &gs[gi].Partitions[pi]
			if p.Lag == 0 {
				continue
			}
			p.TimeLag = -1
			if read && p.Lag > 0 && p.Committed >= 0 {
				k := tp{p.Topic, p.Partition}
				if !slices.Contains(want[k], p.Committed) {
					want[k] = append(want[k], p.Committed)
				}
			}
		}
	}
	var ts map[tpo]time.Time
	if len(want) > 0 {
		ts = c.timestampsAt(ctx, want)
	}
	now := time.Now()
	for gi := range gs {
		g := &gs[gi]
		unknown := false
		for pi := range g.Partitions {
			p := &g.Partitions[pi]
			if at, ok := ts[tpo{p.Topic, p.Partition, p.Committed}]; ok && p.Lag > 0 && p.Committed >= 0 {
				p.TimeLag = max(now.Sub(at), 0)
			}
			if p.TimeLag < 0 {
				unknown = true
			}
			g.MaxTimeLag = max(g.MaxTimeLag, p.TimeLag)
		}
		if unknown && g.MaxTimeLag == 0 {
			g.MaxTimeLag = -1 // behind, by an age no partition could tell
		}
	}
}

// FormatAge shows a time lag as the CLI and the console print it: "-"
// when unknown.
func FormatAge(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d == 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// consumerGroups fills in the KIP-848 groups among gs: DescribeGroups
// (classic groups) reports them GROUP_ID_NOT_FOUND (v6, as Kafka 4) or
// Dead with no members (before v6), so their state, assignor and members
// come from ConsumerGroupDescribe, and for v6 their lag from the committed
// and end offsets here (kadm's Lag skips a group it could not describe).
func (c *Client) consumerGroups(ctx context.Context, gs []Group) {
	var names []string
	for _, g := range gs {
		if g.notClassic || g.Err == "" && g.State == "Dead" && len(g.Members) == 0 {
			names = append(names, g.Name)
		}
	}
	if len(names) == 0 {
		return
	}
	described, _ := c.A.DescribeConsumerGroups(ctx, names...) // a group not there: left as it is
	for gi := range gs {
		g := &gs[gi]
		d, ok := described[g.Name]
		if !ok || d.Err != nil {
			continue
		}
		g.State, g.ProtocolType, g.Protocol, g.Coordinator = d.State, "consumer", d.AssignorName, d.Coordinator.NodeID
		if g.notClassic {
			g.Err, g.notClassic = "", false
			if err := c.committedLag(ctx, g); err != nil {
				g.Err = err.Error()
			}
		}
		owner := map[tp]string{}
		for _, m := range d.Members {
			gm := GroupMember{ID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost}
			if m.InstanceID != nil {
				gm.InstanceID = *m.InstanceID
			}
			for _, t := range m.Assignment.Sorted() {
				gm.Assigned = append(gm.Assigned, fmt.Sprintf("%s%v", t.Topic, t.Partitions))
				for _, p := range t.Partitions {
					owner[tp{t.Topic, p}] = m.MemberID
				}
			}
			g.Members = append(g.Members, gm)
		}
		lag := map[string]int64{}
		for pi := range g.Partitions {
			p := &g.Partitions[pi]
			if id, ok := owner[tp{p.Topic, p.Partition}]; ok {
				p.Member = id
				if p.Lag > 0 {
					lag[id] += p.Lag
				}
			}
		}
		for mi := range g.Members {
			g.Members[mi].Lag = lag[g.Members[mi].ID]
		}
	}
}

// committedLag fills g's partitions and total lag from its committed
// offsets and the partitions' end offsets.
func (c *Client) committedLag(ctx context.Context, g *Group) error {
	committed, err := c.A.FetchOffsets(ctx, g.Name)
	if err != nil {
		return err
	}
	if err := committed.Error(); err != nil {
		return err
	}
	ends, err := c.A.ListEndOffsets(ctx, committed.Offsets().TopicsSet().Topics()...)
	if err != nil {
		return err
	}
	for _, o := range committed.Sorted() {
		gp := GroupPartition{Topic: o.Topic, Partition: o.Partition, Committed: o.At, End: -1, Lag: -1, Member: "-"}
		if e, ok := ends.Lookup(o.Topic, o.Partition); ok && e.Err == nil {
			gp.End = e.Offset
			if o.At >= 0 {
				gp.Lag = max(e.Offset-o.At, 0)
				g.TotalLag += gp.Lag
			}
		}
		g.Partitions = append(g.Partitions, gp)
	}
	return nil
}

type tp struct {
	topic     string
	partition int32
}

type tpo struct {
	topic     string
	partition int32
	offset    int64
}

// timestampsAt reads the record at each offset (the first at or after it)
// and returns their timestamps. It gives up on what it has not read within
// a few seconds or by ctx's deadline.
func (c *Client) timestampsAt(ctx context.Context, at map[tp][]int64) map[tpo]time.Time {
	out := map[tpo]time.Time{}
	// Several groups may read the same partition from different offsets:
	// one pass per distinct offset is overkill; read from the smallest and
	// answer each offset with the first record at or after it.
	parts := map[string]map[int32]kgo.Offset{}
	want := map[tp][]int64{}
	for k, offs := range at {
		if parts[k.topic] == nil {
			parts[k.topic] = map[int32]kgo.Offset{}
		}
		parts[k.topic][k.partition] = kgo.NewOffset().At(slices.Min(offs))
		want[k] = slices.Clone(offs)
	}
	rc, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Seeds...), kgo.ConsumePartitions(parts),
		kgo.FetchMaxBytes(1 << 20), kgo.FetchMaxPartitionBytes(64 << 10)}, c.Opts...)...)
	if err != nil {
		return out
	}
	defer rc.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for len(want) > 0 && ctx.Err() == nil {
		fs := rc.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			k := tp{r.Topic, r.Partition}
			offs := want[k]
			rest := offs[:0]
			for _, o := range offs {
				if r.Offset >= o {
					out[tpo{k.topic, k.partition, o}] = r.Timestamp
				} else {
					rest = append(rest, o)
				}
			}
			if len(rest) == 0 {
				delete(want, k)
			} else {
				want[k] = rest
			}
		})
	}
	return out
}

// ReadSpec says where to start reading a partition.
type ReadSpec struct {
	Topic     string
	Partition int32
	Offset    int64     // used when Time is zero; negative: that many before the end
	Time      time.Time // first record at or after this time
	Max       int       // records to return
}

// ReadRecords reads up to spec.Max records of one partition from the
// offset or time given. It returns what it has at ctx's deadline or when
// it reaches the high watermark.
func (c *Client) ReadRecords(ctx context.Context, spec ReadSpec) ([]*kgo.Record, error) {
	offs, err := c.TopicOffsets(ctx, spec.Topic)
	if err != nil {
		return nil, err
	}
	po, ok := offs[spec.Topic][spec.Partition]
	if !ok {
		return nil, fmt.Errorf("%s-%d: %w", spec.Topic, spec.Partition, kerr.UnknownTopicOrPartition)
	}
	var start kgo.Offset
	switch {
	case !spec.Time.IsZero():
		start = kgo.NewOffset().AfterMilli(spec.Time.UnixMilli())
	case spec.Offset < 0:
		start = kgo.NewOffset().At(max(po.End+spec.Offset, po.Start))
	default:
		start = kgo.NewOffset().At(spec.Offset)
	}
	if spec.Max <= 0 {
		spec.Max = 50
	}
	if po.End <= po.Start || (spec.Time.IsZero() && spec.Offset >= po.End) {
		return nil, nil
	}
	rc, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{spec.Topic: {spec.Partition: start}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500 * time.Millisecond)}, c.Opts...)...)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var out []*kgo.Record
	for len(out) < spec.Max {
		fs := rc.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return out, ferr
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if len(out) < spec.Max {
				out = append(out, r)
			}
			done = done || r.Offset+1 >= po.End
		})
		if done {
			break
		}
	}
	return out, nil
}

func errName(code int16) string {
	var ke *kerr.Error
	if errors.As(kerr.ErrorForCode(code), &ke) {
		return ke.Message
	}
	return fmt.Sprint(code)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TopicRead says what ReadTopic reads: the records of every partition (or
// those in Partitions) from Offset (negative: that many before each
// partition's end) or from Time, keeping those Match accepts (nil: all).
type TopicRead struct {
	Topic      string
	Partitions []int32
	Offset     int64
	Time       time.Time
	Max        int // matching records to return
	// Scan bounds the records read, over all partitions (each gets an
	// equal share); 0: Max.
	Scan  int
	Match func(*kgo.Record) bool
}

// TopicReadResult is what ReadTopic found.
type TopicReadResult struct {
	Records    []*kgo.Record // by timestamp, then partition and offset
	Scanned    int           // records read
	Partitions int           // partitions read
	// Bounded: the scan stopped at its bound (or the deadline) before the
	// end of some partition.
	Bounded bool
}

// ReadTopic reads a topic's partitions at once and merges their records
// by timestamp: from an offset or a time, the first Max that match; from
// before the end (Offset < 0), the last Max that match. It reads at most
// Scan records and stops at ctx's deadline with what it has.
func (c *Client) ReadTopic(ctx context.Context, spec TopicRead) (TopicReadResult, error) {
	var res TopicReadResult
	if spec.Max <= 0 {
		spec.Max = 50
	}
	if spec.Scan <= 0 {
		spec.Scan = spec.Max
	}
	offs, err := c.TopicOffsets(ctx, spec.Topic)
	if err != nil {
		return res, err
	}
	parts := offs[spec.Topic]
	if len(parts) == 0 {
		return res, fmt.Errorf("%s: %w", spec.Topic, kerr.UnknownTopicOrPartition)
	}
	want := map[int32]Offsets{}
	for p, o := range parts {
		if len(spec.Partitions) == 0 || slices.Contains(spec.Partitions, p) {
			want[p] = o
		}
	}
	for _, p := range spec.Partitions {
		if _, ok := parts[p]; !ok {
			return res, fmt.Errorf("%s-%d: %w", spec.Topic, p, kerr.UnknownTopicOrPartition)
		}
	}
	res.Partitions = len(want)
	share := (spec.Scan + len(want) - 1) / len(want)
	var at kadm.ListedOffsets
	if !spec.Time.IsZero() {
		if at, err = c.A.ListOffsetsAfterMilli(ctx, spec.Time.UnixMilli(), spec.Topic); err != nil {
			return res, err
		}
	}
	starts := map[int32]kgo.Offset{}
	end := map[int32]int64{} // read up to here (the high watermark now)
	limit := map[int32]int{} // read at most this many
	for p, o := range want {
		from := spec.Offset
		switch {
		case at != nil:
			lo, ok := at.Lookup(spec.Topic, p)
			if !ok || lo.Err != nil || lo.Offset < 0 {
				continue
			}
			from = lo.Offset
		case spec.Offset < 0:
			// The newest: a search scans its share before the end;
			// a browse the last Max of each.
			n := share
			if spec.Match == nil {
				n = max(share, int(-spec.Offset))
			}
			from = o.End - int64(n)
		}
		from = max(from, o.Start)
		if from >= o.End {
			continue
		}
		starts[p], end[p], limit[p] = kgo.NewOffset().At(from), o.End, share
		if at == nil && spec.Offset < 0 {
			limit[p] = int(o.End - from) // the newest of each: the last Max may all be in one
		}
	}
	if len(starts) == 0 {
		return res, nil
	}
	rc, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{spec.Topic: starts}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500 * time.Millisecond)}, c.Opts...)...)
	if err != nil {
		return res, err
	}
	defer rc.Close()
	read := map[int32]int{}
	var out []*kgo.Record
	for len(end) > 0 {
		fs := rc.PollFetches(ctx)
		if ctx.Err() != nil {
			res.Bounded = true
			break
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return res, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			e, live := end[r.Partition]
			if !live || r.Offset >= e {
				return
			}
			read[r.Partition]++
			res.Scanned++
			if spec.Match == nil || spec.Match(r) {
				out = append(out, r)
			}
			if r.Offset+1 >= e {
				delete(end, r.Partition)
			} else if read[r.Partition] >= limit[r.Partition] {
				delete(end, r.Partition)
				res.Bounded = true
			}
		})
		var done []int32
		for p := range starts {
			if _, live := end[p]; !live {
				done = append(done, p)
			}
		}
		rc.PauseFetchPartitions(map[string][]int32{spec.Topic: done})
	}
	slices.SortFunc(out, func(a, b *kgo.Record) int {
		if c := a.Timestamp.Compare(b.Timestamp); c != 0 {
			return c
		}
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	if len(out) > spec.Max {
		if spec.Offset < 0 && at == nil {
			out = out[len(out)-spec.Max:]
		} else {
			out = out[:spec.Max]
		}
	}
	res.Records = out
	return res, nil
}
