package console

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/admin"
	"holdfast/internal/auth"
	"holdfast/internal/broker"
	"holdfast/internal/tiered"
)

var funcs = template.FuncMap{
	"ids": func(v []int32) string {
		s := make([]string, len(v))
		for i, id := range v {
			s[i] = strconv.Itoa(int(id))
		}
		return strings.Join(s, ",")
	},
	"bytes": humanBytes,
	"age":   admin.FormatAge,
	"ts":    func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") },
	"add":   func(a, b int) int { return a + b },
	"join":  func(s []string) string { return strings.Join(s, ", ") },
	"list":  func(s ...string) []string { return s },
	"int64": func(f float64) int64 { return int64(f) },
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// --- cluster ---

type clusterView struct {
	*admin.Cluster
	Partitions, UnderReplicated, Offline int
	Groups                               int
	Local                                []broker.PartitionStats
	// Usage: each node's disk and throughput (DESCRIBE on the CLUSTER,
	// DescribeLogDirs' rule); UsageErr why not shown.
	Usage    []nodeUsageView
	UsageErr string
}

type nodeUsageView struct {
	Node                int32
	Size, Total, Used   int64 // Total -1: unreported
	UsedPct             float64
	BytesRate, RecsRate float64 // per second over the last two samples
	SizeChart           template.HTML
	BytesChart          template.HTML
	RecordsChart        template.HTML
	Samples             int
	Err                 string
}

// usage builds the node rows from the samples: size over time, and the
// growth of size (bytes written net of retention, never below 0) and of
// records per second.
func (c *Console) usage(ctx context.Context) []nodeUsageView {
	hist := c.nodeHistory()
	if len(hist) == 0 || time.Since(lastSample(hist)) > 2*c.cfg.LagSampleInterval {
		c.sampleNodes(ctx) // a view is a sample too: the page is never empty
		hist = c.nodeHistory()
	}
	var out []nodeUsageView
	for _, n := range sortedInt32Keys(hist) {
		h := hist[n]
		last := h[len(h)-1]
		v := nodeUsageView{Node: n, Size: last.Size, Total: last.Total, Samples: len(h), Err: last.Err}
		if last.Total > 0 {
			v.Used = last.Total - last.Usable
			v.UsedPct = float64(v.Used) / float64(last.Total) * 100
		}
		var at []time.Time
		var size, bytesRate, recsRate []float64
		for i, s := range h {
			at = append(at, s.At)
			size = append(size, float64(s.Size))
			if i == 0 {
				bytesRate, recsRate = append(bytesRate, 0), append(recsRate, 0)
				continue
			}
			dt := s.At.Sub(h[i-1].At).Seconds()
			if dt <= 0 {
				dt = 1
			}
			bytesRate = append(bytesRate, max(0, float64(s.Size-h[i-1].Size)/dt))
			recsRate = append(recsRate, max(0, float64(s.Records-h[i-1].Records)/dt))
		}
		v.BytesRate, v.RecsRate = bytesRate[len(bytesRate)-1], recsRate[len(recsRate)-1]
		v.SizeChart = seriesChart(at, size, fmt.Sprintf("node %d: bytes on disk over time", n), func(f float64) string { return humanBytes(int64(f)) })
		v.BytesChart = seriesChart(at, bytesRate, fmt.Sprintf("node %d: bytes written per second", n), func(f float64) string { return humanBytes(int64(f)) + "/s" })
		v.RecordsChart = seriesChart(at, recsRate, fmt.Sprintf("node %d: records per second", n), func(f float64) string { return fmt.Sprintf("%.0f/s", f) })
		out = append(out, v)
	}
	return out
}

func lastSample(h map[int32][]admin.NodeUsage) time.Time {
	var t time.Time
	for _, s := range h {
		if at := s[len(s)-1].At; at.After(t) {
			t = at
		}
	}
	return t
}

func sortedInt32Keys[V any](m map[int32]V) []int32 {
	out := make([]int32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// maxChartPoints bounds the points of a node chart.
const maxChartPoints = 120

// seriesChart draws a small inline SVG line of vs over at, its top value
// labelled with label.
func seriesChart(at []time.Time, vs []float64, aria string, label func(float64) string) template.HTML {
	const w, ht = 240.0, 50.0
	if len(vs) == 0 {
		return ""
	}
	top := 0.0
	for _, v := range vs {
		top = max(top, v)
	}
	scale := top
	if scale <= 0 {
		scale = 1
	}
	span := at[len(at)-1].Sub(at[0]).Seconds()
	var pts []string
	step := (len(vs) + maxChartPoints - 1) / maxChartPoints // a page's size stays small
	for i, v := range vs {
		if i%step != 0 && i != len(vs)-1 {
			continue
		}
		x := w
		if span > 0 {
			x = at[i].Sub(at[0]).Seconds() / span * w
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, ht-v/scale*ht))
	}
	if len(pts) == 1 {
		pts = append([]string{fmt.Sprintf("0,%.1f", ht-vs[0]/scale*ht)}, pts...)
	}
	return template.HTML(fmt.Sprintf(`<svg class="spark" viewBox="-2 -12 %g %g" role="img" aria-label="%s">`+
		`<text x="0" y="-3">%s</text><line x1="0" y1="%g" x2="%g" y2="%g" class="axis"/><polyline points="%s" class="series"/></svg>`,
		w+4, ht+16, template.HTMLEscapeString(aria), template.HTMLEscapeString("max "+label(top)), ht, w, ht, strings.Join(pts, " ")))
}

func (c *Console) clusterPage(ctx context.Context, r *http.Request) (any, error) {
	cl, err := c.cl.ClusterStatus(ctx)
	if err != nil {
		return nil, err
	}
	c.visibleTopics(r, cl)
	v := clusterView{Cluster: cl}
	for _, t := range cl.Topics {
		for _, p := range t.Partitions {
			v.Partitions++
			if p.Leader < 0 {
				v.Offline++
			} else if len(p.ISR) < len(p.Replicas) {
				v.UnderReplicated++
			}
		}
	}
	if gs, err := c.cl.ListGroups(ctx); err == nil {
		v.Groups = len(c.visibleGroups(r, gs))
	}
	if c.allowed(r, auth.OpDescribe, auth.ResourceCluster, auth.ClusterName) {
		v.Usage = c.usage(ctx)
	} else {
		v.UsageErr = fmt.Sprintf("%s may not DESCRIBE the CLUSTER (CLUSTER_AUTHORIZATION_FAILED): no disk and throughput per node", userName(r))
	}
	return v, nil
}

// --- what the user may see ---

// allowed reports whether the request's user may perform op on the
// resource, by the broker's own rule (broker.Authorized): the console
// reads as this node and shows a user what that user's Kafka client
// would be shown. Yes for everything when the console asks nobody.
func (c *Console) allowed(r *http.Request, op auth.Operation, typ auth.ResourceType, name string) bool {
	id, ok := userOf(r)
	if !ok {
		return true
	}
	return c.cfg.Gate.cfg.Authorized(id.principal, id.host, op, typ, name)
}

// visibleTopics drops the topics the user may not DESCRIBE (Metadata's
// rule: they are hidden, not refused).
func (c *Console) visibleTopics(r *http.Request, cl *admin.Cluster) {
	cl.Topics = slices.DeleteFunc(cl.Topics, func(t admin.Topic) bool {
		return !c.allowed(r, auth.OpDescribe, auth.ResourceTopic, t.Name)
	})
}

// visibleGroups is ListGroups' rule: every group for DESCRIBE on the
// CLUSTER, else the groups the user may DESCRIBE.
func (c *Console) visibleGroups(r *http.Request, gs []kadm.ListedGroup) []kadm.ListedGroup {
	if c.allowed(r, auth.OpDescribe, auth.ResourceCluster, auth.ClusterName) {
		return gs
	}
	return slices.DeleteFunc(gs, func(g kadm.ListedGroup) bool {
		return !c.allowed(r, auth.OpDescribe, auth.ResourceGroup, g.Group)
	})
}

// mayTopic refuses a named topic to a user who may not op on it: Kafka's
// TOPIC_AUTHORIZATION_FAILED (403).
func (c *Console) mayTopic(r *http.Request, op auth.Operation, topic string) error {
	if !c.allowed(r, op, auth.ResourceTopic, topic) {
		return fmt.Errorf("topic %s: %s may not %s it: %w", topic, userName(r), op, kerr.TopicAuthorizationFailed)
	}
	return nil
}

func userName(r *http.Request) string {
	id, _ := userOf(r)
	return id.principal.String()
}

// --- topics ---

type topicRow struct {
	Name                     string
	Internal                 bool
	Partitions, Replication  int
	UnderReplicated, Offline int
	Records                  int64 // high watermark - log start, summed
	LocalSize                int64
	LocalPartitions          int
}

func (c *Console) topicsPage(ctx context.Context, r *http.Request) (any, error) {
	cl, err := c.cl.ClusterStatus(ctx)
	if err != nil {
		return nil, err
	}
	c.visibleTopics(r, cl)
	var names []string
	for _, t := range cl.Topics {
		names = append(names, t.Name)
	}
	offs, _ := c.cl.TopicOffsets(ctx, names...)
	local := c.local()
	var rows []topicRow
	for _, t := range cl.Topics {
		r := topicRow{Name: t.Name, Internal: t.Internal, Partitions: len(t.Partitions)}
		for _, p := range t.Partitions {
			r.Replication = max(r.Replication, len(p.Replicas))
			if p.Leader < 0 {
				r.Offline++
			} else if len(p.ISR) < len(p.Replicas) {
				r.UnderReplicated++
			}
			if o, ok := offs[t.Name][p.Partition]; ok {
				r.Records += o.End - o.Start
			}
			if lp, ok := local[t.Name][p.Partition]; ok {
				r.LocalSize += lp.SizeBytes
				r.LocalPartitions++
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

type replicaView struct {
	ID                   int32
	Role                 string
	InISR, Offline       bool
	Acked                int64 // -1 unknown
	Local                bool
	End, Committed, Sync int64
	Size                 int64
}

type partitionView struct {
	admin.Partition
	Start, End int64
	Replicas   []replicaView
}

// remoteView is a tiered partition's remote log and upload lag, as the
// node serving the page sees them (for its own replicas).
type remoteView struct {
	Partition int32
	tiered.PartitionRemote
}

type topicView struct {
	Name       string
	Internal   bool
	Partitions []partitionView
	Remote     []remoteView // partitions of a tiered topic with a replica here
	Configs    []admin.Config
	ConfigErr  string
}

func (c *Console) topicPage(ctx context.Context, r *http.Request) (any, error) {
	name := r.PathValue("topic")
	if err := c.mayTopic(r, auth.OpDescribe, name); err != nil {
		return nil, err
	}
	cl, err := c.cl.ClusterStatus(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(cl.Topics) != 1 {
		return nil, fmt.Errorf("topic %s: not found", name)
	}
	t := cl.Topics[0]
	offs, _ := c.cl.TopicOffsets(ctx, name)
	local := c.local()[name]
	me := c.cfg.Broker.Config().NodeID
	v := topicView{Name: t.Name, Internal: t.Internal}
	for _, p := range t.Partitions {
		pv := partitionView{Partition: p, Start: -1, End: -1}
		if o, ok := offs[name][p.Partition]; ok {
			pv.Start, pv.End = o.Start, o.End
		}
		for _, id := range p.Replicas {
			rv := replicaView{ID: id, Role: "follower", Acked: -1, InISR: slices.Contains(p.ISR, id), Offline: slices.Contains(p.Offline, id)}
			if id == p.Leader {
				rv.Role = "leader"
			}
			if a, ok := p.Acked[id]; ok {
				rv.Acked = a
			}
			if lp, ok := local[p.Partition]; ok && id == me {
				rv.Local, rv.End, rv.Committed, rv.Sync, rv.Size = true, lp.LogEnd, lp.HighWatermark, lp.Durable, lp.SizeBytes
			}
			pv.Replicas = append(pv.Replicas, rv)
		}
		v.Partitions = append(v.Partitions, pv)
		if lp, ok := local[p.Partition]; ok && lp.Remote != nil {
			v.Remote = append(v.Remote, remoteView{Partition: p.Partition, PartitionRemote: *lp.Remote})
		}
	}
	if err := c.mayTopic(r, auth.OpDescribeConfigs, name); err != nil {
		v.ConfigErr = err.Error()
	} else if v.Configs, err = c.cl.TopicConfigs(ctx, name); err != nil {
		v.ConfigErr = err.Error()
	}
	return v, nil
}

// --- groups ---

func (c *Console) groupsPage(ctx context.Context, r *http.Request) (any, error) {
	gs, err := c.cl.ListGroups(ctx)
	if err != nil {
		return nil, err
	}
	gs = c.visibleGroups(r, gs)
	var names []string
	for _, g := range gs {
		if g.ProtocolType != "share" { // share groups have no committed offsets or lag to show here
			names = append(names, g.Group)
		}
	}
	if len(names) == 0 {
		return []admin.Group(nil), nil
	}
	groups, err := c.cl.Groups(ctx, false, names...)
	for i := range groups {
		c.visibleOffsets(r, &groups[i])
	}
	return groups, err
}

// visibleOffsets drops a group's offsets in topics the user may not
// DESCRIBE (OffsetFetch's rule), and reports whether any were.
func (c *Console) visibleOffsets(r *http.Request, g *admin.Group) (hidden bool) {
	n := len(g.Partitions)
	g.Partitions = slices.DeleteFunc(g.Partitions, func(p admin.GroupPartition) bool {
		return !c.allowed(r, auth.OpDescribe, auth.ResourceTopic, p.Topic)
	})
	if len(g.Partitions) == n {
		return false
	}
	g.TotalLag, g.MaxTimeLag = 0, 0
	lag := map[string]int64{}
	for _, p := range g.Partitions {
		if p.Lag > 0 {
			g.TotalLag += p.Lag
			lag[p.Member] += p.Lag
		}
		g.MaxTimeLag = max(g.MaxTimeLag, p.TimeLag)
	}
	for i := range g.Members {
		g.Members[i].Lag = lag[g.Members[i].ID]
	}
	return true
}

type groupView struct {
	admin.Group
	Chart   template.HTML
	Samples int
}

func (c *Console) groupPage(ctx context.Context, r *http.Request) (any, error) {
	name := r.PathValue("group")
	if !c.allowed(r, auth.OpDescribe, auth.ResourceGroup, name) {
		return nil, fmt.Errorf("group %s: %s may not DESCRIBE it: %w", name, userName(r), kerr.GroupAuthorizationFailed)
	}
	gs, err := c.cl.Groups(ctx, true, name)
	if err != nil {
		return nil, err
	}
	if len(gs) != 1 || gs[0].Err != "" {
		return nil, fmt.Errorf("group %s: %s", name, gs[0].Err)
	}
	g := gs[0]
	c.record(g.Name, g.TotalLag) // a view is a sample too
	if c.visibleOffsets(r, &g) {
		// The samples sum every topic's lag, hidden ones too.
		return groupView{Group: g}, nil
	}
	h := c.lagHistory(g.Name)
	return groupView{Group: g, Chart: lagChart(h), Samples: len(h)}, nil
}

// lagChart draws the lag history as an inline SVG line.
func lagChart(h []lagSample) template.HTML {
	const w, ht = 600.0, 120.0
	if len(h) == 0 {
		return ""
	}
	var top int64 = 1
	for _, s := range h {
		top = max(top, s.Lag)
	}
	t0, t1 := h[0].At, h[len(h)-1].At
	span := t1.Sub(t0).Seconds()
	var pts []string
	for i, s := range h {
		x := 0.0
		if span > 0 {
			x = s.At.Sub(t0).Seconds() / span * w
		} else if len(h) > 1 {
			x = float64(i) / float64(len(h)-1) * w
		}
		y := ht - float64(s.Lag)/float64(top)*ht
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
	}
	if len(pts) == 1 {
		pts = append(pts, fmt.Sprintf("%.1f,%s", w, strings.Split(pts[0], ",")[1]))
	}
	return template.HTML(fmt.Sprintf(`<svg class="chart" viewBox="-40 -10 %g %g" role="img" aria-label="lag over time">`+
		`<text x="-36" y="4">%d</text><text x="-36" y="%g">0</text>`+
		`<line x1="0" y1="%g" x2="%g" y2="%g" class="axis"/>`+
		`<polyline points="%s" class="lag"/>`+
		`<text x="0" y="%g">%s</text><text x="%g" y="%g" text-anchor="end">%s</text></svg>`,
		w+50, ht+30, top, ht, ht, w, ht, strings.Join(pts, " "),
		ht+16, t0.UTC().Format("15:04:05"), w, ht+16, t1.UTC().Format("15:04:05")))
}

// --- messages ---

type messageRow struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       string
	Headers   []string
	Value     string
	Size      int
}

type messagesView struct {
	Topics                    []string
	Topic, Offset, At, Format string
	PartitionArg              string // as asked: "" for all
	Partition                 int32  // -1: all
	Max, Partitions           int
	Start, End                int64
	Rows                      []messageRow
	Searched                  bool
	Offsets                   []partitionOffsets
	// The search: substrings of the key, the value, a header (name=value).
	Key, Value, Header string
	Search             bool
	Scan, Scanned      int
	ReadPartitions     int
	Bounded            bool
}

type partitionOffsets struct {
	Partition  int32
	Start, End int64
}

// Message browser limits.
const (
	maxBrowse      = 500   // records shown
	defaultScan    = 1000  // records scanned by a search
	maxScan        = 10000 // the most a search may scan
	browseDeadline = 3 * time.Second
)

func (c *Console) messagesPage(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	v := messagesView{Topic: q.Get("topic"), Offset: q.Get("offset"), At: q.Get("timestamp"), Format: q.Get("format"), Max: 50, Start: -1, End: -1,
		PartitionArg: strings.TrimSpace(q.Get("partition")), Partition: -1, Key: q.Get("key"), Value: q.Get("value"), Header: q.Get("header"), Scan: defaultScan}
	if v.Format == "" {
		v.Format = "text"
	}
	if n, err := strconv.Atoi(q.Get("max")); err == nil && n > 0 {
		v.Max = min(n, maxBrowse)
	}
	if n, err := strconv.Atoi(q.Get("scan")); err == nil && n > 0 {
		v.Scan = min(n, maxScan)
	}
	v.Search = v.Key != "" || v.Value != "" || v.Header != ""
	if v.PartitionArg != "" && v.PartitionArg != "all" {
		n, err := strconv.ParseInt(v.PartitionArg, 10, 32)
		if err != nil || n < 0 {
			return v, fmt.Errorf("partition %q: want a partition number, or nothing for all", v.PartitionArg)
		}
		v.Partition = int32(n)
	}
	ts, err := c.cl.A.ListTopics(ctx)
	if err != nil {
		return v, err
	}
	for _, t := range ts.Sorted() {
		if !c.allowed(r, auth.OpDescribe, auth.ResourceTopic, t.Topic) {
			continue
		}
		v.Topics = append(v.Topics, t.Topic)
		if t.Topic == v.Topic {
			v.Partitions = len(t.Partitions)
		}
	}
	if v.Topic == "" {
		return v, nil
	}
	if err := c.mayTopic(r, auth.OpRead, v.Topic); err != nil {
		v.Partitions = 0
		return v, err
	}
	if offs, err := c.cl.TopicOffsets(ctx, v.Topic); err == nil {
		if o, ok := offs[v.Topic][v.Partition]; ok {
			v.Start, v.End = o.Start, o.End
		}
		for p, o := range offs[v.Topic] {
			v.Offsets = append(v.Offsets, partitionOffsets{p, o.Start, o.End})
		}
		slices.SortFunc(v.Offsets, func(a, b partitionOffsets) int { return int(a.Partition - b.Partition) })
	}
	spec := admin.TopicRead{Topic: v.Topic, Max: v.Max, Offset: -int64(v.Max)}
	if v.Partition >= 0 {
		spec.Partitions = []int32{v.Partition}
	}
	if v.Search {
		spec.Scan = v.Scan
		key, val, hdr := []byte(v.Key), []byte(v.Value), []byte(v.Header)
		spec.Match = func(rec *kgo.Record) bool {
			if len(key) > 0 && !bytes.Contains(rec.Key, key) || len(val) > 0 && !bytes.Contains(rec.Value, val) {
				return false
			}
			if len(hdr) == 0 {
				return true
			}
			for _, h := range rec.Headers {
				if bytes.Contains([]byte(h.Key+"="+string(h.Value)), hdr) {
					return true
				}
			}
			return false
		}
	}
	switch {
	case v.At != "":
		t, err := parseTime(v.At)
		if err != nil {
			return v, err
		}
		spec.Time = t
	case v.Offset == "earliest":
		spec.Offset = 0
	case v.Offset != "" && v.Offset != "latest":
		n, err := strconv.ParseInt(v.Offset, 10, 64)
		if err != nil || n < 0 {
			return v, fmt.Errorf("offset %q: want a number, earliest or latest", v.Offset)
		}
		spec.Offset = n
	}
	v.Searched = true
	rctx, cancel := context.WithTimeout(ctx, browseDeadline)
	defer cancel()
	res, err := c.cl.ReadTopic(rctx, spec)
	v.Scanned, v.ReadPartitions, v.Bounded = res.Scanned, res.Partitions, res.Bounded
	for _, rec := range res.Records {
		row := messageRow{Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp, Key: format(rec.Key, "text"), Value: format(rec.Value, v.Format), Size: len(rec.Value)}
		for _, h := range rec.Headers {
			row.Headers = append(row.Headers, h.Key+"="+format(h.Value, "text"))
		}
		v.Rows = append(v.Rows, row)
	}
	return v, err
}

// format shows a key, value or header as text (invalid UTF-8 as hex),
// indented JSON (or the text when it is not JSON), or a hex dump.
func format(b []byte, how string) string {
	if b == nil {
		return "null"
	}
	switch how {
	case "hex":
		return hex.Dump(b)
	case "json":
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") == nil {
			return out.String()
		}
	}
	if !utf8.Valid(b) {
		return "0x" + hex.EncodeToString(b)
	}
	return string(b)
}

// --- configs ---

type nodeConfigs struct {
	Node    int32
	Configs []admin.Config
	Err     string
}

func (c *Console) configsPage(ctx context.Context, r *http.Request) (any, error) {
	nodes, err := c.cl.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []nodeConfigs
	for _, n := range nodes {
		nc := nodeConfigs{Node: n.ID}
		if !c.allowed(r, auth.OpDescribeConfigs, auth.ResourceCluster, auth.ClusterName) {
			nc.Err = fmt.Sprintf("%s may not DESCRIBE_CONFIGS on the CLUSTER: %v", userName(r), kerr.ClusterAuthorizationFailed)
			out = append(out, nc)
			continue
		}
		rcs, err := c.cl.A.DescribeBrokerConfigs(ctx, n.ID)
		if err == nil {
			var rc = rcs[0]
			if rc.Err != nil {
				err = rc.Err
			}
			for _, cf := range rc.Configs {
				nc.Configs = append(nc.Configs, admin.Config{Name: cf.Key, Value: cf.MaybeValue(), Source: admin.ConfigSource(cf), Sensitive: cf.Sensitive})
			}
			slices.SortFunc(nc.Configs, func(a, b admin.Config) int { return strings.Compare(a.Name, b.Name) })
		}
		if err != nil {
			nc.Err = err.Error()
		}
		out = append(out, nc)
	}
	return out, nil
}
