// Package console is the web console served on the admin listener (with
// /metrics): server-rendered HTML pages of the cluster's nodes, topics and
// partitions (leader, epoch, replicas and their offsets), consumer groups
// (members, lag, lag over time), a message browser, the configs and the
// durability lab's results as a chart (lab.go), forms that change the
// cluster through the Kafka API (actions.go), with a little JavaScript
// that refreshes the page in place every few seconds. Everything is
// embedded in the binary: no CDN, no build step.
//
// The pages read the cluster through the Kafka protocol (internal/admin,
// as the CLI does), from this node's own listener, so any node's console
// shows the whole cluster; this node's own replicas add what only it
// knows (its end, committed and fsynced offsets and size on disk).
package console

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/admin"
	"holdfast/internal/broker"
	"holdfast/internal/clock"
	"holdfast/internal/lab"
)

//go:embed assets
var assets embed.FS

// Config is what the console needs.
type Config struct {
	Broker *broker.Broker // this node: its local replicas' offsets
	Seeds  []string       // a Kafka listener of this node
	// ClientOpts are added to the console's Kafka client (TLS, SASL when
	// the listener needs them).
	ClientOpts []kgo.Opt
	// LagSampleInterval is how often consumer group lag is sampled for the
	// lag-over-time charts (default 10 s); LagSamples how many samples are
	// kept per group (default 360: an hour at 10 s).
	LagSampleInterval time.Duration
	LagSamples        int
	Logger            *slog.Logger
	// Clock drives the lag sampling (and stamps its samples); nil: the
	// broker's Config.Clock, the wall clock if that is nil too.
	Clock clock.Clock

	// LabRun runs the durability lab for the lab page (holdfast serve:
	// `holdfast lab` as a child process). nil: the page shows the kept
	// results only, and nothing can be started, cancelled or loaded.
	LabRun func(context.Context, lab.Config) (lab.Result, error)
	// LabDir keeps the last lab results (a file in it), so they survive a
	// restart; "": in memory only.
	LabDir string
	// LabTempDir is where runs put their clusters, as shown on the page
	// ("": the system's temporary directory).
	LabTempDir string
	// Gate, when the console asks who users are (the cluster's clients
	// authenticate, or holdfast serve --admin-auth=required), makes every
	// page need a login and shows each user what the broker's authorizer lets
	// that user see (login.go); starting, cancelling and loading lab runs
	// then need ALTER on the CLUSTER. nil: anyone who reaches the console
	// sees everything, as this node does.
	Gate *Gate
	// ReadOnly turns the actions off (actions.go): the pages only show.
	ReadOnly bool
	// ActionHosts are Host names accepted on state-changing requests
	// besides IP addresses and localhost (a page whose name was rebound
	// to this console's address sends its own name).
	ActionHosts []string
}

// maxSampledGroups bounds the groups whose lag history is kept.
const maxSampledGroups = 200

// Console serves the pages.
type Console struct {
	cfg   Config
	cl    *admin.Client
	pages *template.Template
	mux   *http.ServeMux
	// handler is mux behind the gate's logins.
	handler http.Handler

	cop *http.CrossOriginProtection

	mu      sync.Mutex
	history map[string][]lagSample      // group -> oldest first
	nodes   map[int32][]admin.NodeUsage // node -> oldest first
	stop    chan struct{}
	done    chan struct{}

	lab       labState
	closeOnce sync.Once
}

type lagSample struct {
	At  time.Time
	Lag int64
}

// New starts the console's Kafka client and lag sampler; Close stops them.
func New(cfg Config) (*Console, error) {
	if cfg.LagSampleInterval <= 0 {
		cfg.LagSampleInterval = 10 * time.Second
	}
	if cfg.LagSamples <= 0 {
		cfg.LagSamples = 360
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil && cfg.Broker != nil {
		cfg.Clock = cfg.Broker.Config().Clock
	}
	cfg.Clock = clock.OrReal(cfg.Clock)
	// A short metadata age: a topic just created or grown on a form is
	// found at once by the next page (a refresh happens only on a miss).
	cl, err := admin.NewClient(cfg.Seeds, append([]kgo.Opt{kgo.ClientID("holdfast-console"), kgo.RetryTimeout(5 * time.Second),
		kgo.MetadataMinAge(250 * time.Millisecond)}, cfg.ClientOpts...)...)
	if err != nil {
		return nil, err
	}
	pages, err := template.New("").Funcs(funcs).ParseFS(assets, "assets/*.html")
	if err != nil {
		cl.Close()
		return nil, err
	}
	c := &Console{cfg: cfg, cl: cl, pages: pages, mux: http.NewServeMux(), history: map[string][]lagSample{}, nodes: map[int32][]admin.NodeUsage{},
		stop: make(chan struct{}), done: make(chan struct{}), cop: http.NewCrossOriginProtection()}
	c.loadLab()
	static, _ := fs.Sub(assets, "assets")
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET /{$}", c.page("cluster", c.clusterPage))
	c.mux.HandleFunc("GET /topics", c.page("topics", c.topicsPage))
	c.mux.HandleFunc("GET /topics/{topic}", c.page("topic", c.topicPage))
	c.mux.HandleFunc("GET /new-topic", c.page("topicnew", c.newTopicPage))
	c.mux.HandleFunc("GET /topics/{topic}/edit", c.page("topicedit", c.editTopicPage))
	c.mux.Handle("POST /topics", c.act(c.createTopic))
	c.mux.Handle("POST /topics/{topic}/configs", c.act(c.alterConfig))
	c.mux.Handle("POST /topics/{topic}/partitions", c.act(c.addPartitions))
	c.mux.Handle("POST /topics/{topic}/produce", c.act(c.produce))
	c.mux.Handle("POST /topics/{topic}/delete-records", c.act(c.deleteRecords))
	c.mux.Handle("POST /topics/{topic}/delete", c.act(c.deleteTopic))
	c.mux.HandleFunc("GET /groups", c.page("groups", c.groupsPage))
	c.mux.HandleFunc("GET /groups/{group}", c.page("group", c.groupPage))
	c.mux.HandleFunc("GET /groups/{group}/reset", c.page("groupreset", c.resetPage))
	c.mux.Handle("POST /groups/{group}/reset", c.act(c.resetOffsets))
	c.mux.HandleFunc("GET /security", c.page("security", c.securityPage))
	c.mux.Handle("POST /security/acls", c.act(c.createACL))
	c.mux.Handle("POST /security/acls/delete", c.act(c.deleteACL))
	c.mux.Handle("POST /security/users", c.act(c.upsertUser))
	c.mux.Handle("POST /security/users/delete", c.act(c.deleteUser))
	c.mux.Handle("POST /security/quotas", c.act(c.alterQuota))
	c.mux.HandleFunc("GET /messages", c.page("messages", c.messagesPage))
	c.mux.HandleFunc("GET /configs", c.page("configs", c.configsPage))
	c.mux.HandleFunc("GET /lab", c.page("lab", c.labPage))
	c.mux.HandleFunc("GET /lab/status", c.labStatusJSON)
	c.mux.HandleFunc("GET /lab/results.json", c.labJSON)
	c.mux.Handle("POST /lab/run", c.action(c.startLab))
	c.mux.Handle("POST /lab/cancel", c.action(c.cancelLab))
	c.mux.Handle("POST /lab/results", c.action(c.loadResults))
	c.handler = cfg.Gate.Pages(c.mux)
	go c.sampleLoop()
	return c, nil
}

// ServeHTTP serves the console's pages under /.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

// Close cancels a lab run in progress and stops the sampler and the
// client.
func (c *Console) Close() {
	c.closeOnce.Do(func() {
		c.stopLab()
		close(c.stop)
		<-c.done
		c.cl.Close()
	})
}

// page wraps a page's data function: it renders the whole page, or with
// the X-Console-Fragment header only its <main> (the live refresh).
func (c *Console) page(name string, data func(context.Context, *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 8*time.Second)
		defer cancel()
		d, err := data(ctx, r)
		status := http.StatusOK
		switch {
		case err == nil:
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			status = http.StatusNotFound
		case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.GroupAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
			status = http.StatusForbidden
		default:
			status = http.StatusBadGateway // the cluster did not answer as asked
		}
		c.render(w, r, name, d, err, status)
	}
}

// livePages refresh themselves in place; the others hold forms (or a
// browse) that a refresh would wipe.
var livePages = map[string]bool{"cluster": true, "topics": true, "topic": true, "groups": true, "group": true, "configs": true, "lab": true}

// render writes page name with its data and error.
func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, d any, err error, status int) {
	view := struct {
		Page    string
		Data    any
		Err     string
		Node    int32
		Now     time.Time
		Refresh bool
		User    string // logged in as; "": the console asks nobody
		CSRF    string
		Actions bool // the forms that change the cluster are on
	}{Actions: !c.cfg.ReadOnly, Page: name, Data: d, Node: c.cfg.Broker.Config().NodeID, Now: time.Now(), Refresh: livePages[name]}
	if id, ok := userOf(r); ok {
		view.User, view.CSRF = id.principal.String(), id.csrf
	}
	if name == "lab" {
		view.Refresh = c.labRunning() // the page follows a run, and stops when it ends
	}
	if err != nil {
		view.Err = err.Error()
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	tmpl := "layout"
	if r.Header.Get("X-Console-Fragment") != "" {
		tmpl = "main"
	}
	if err := c.pages.ExecuteTemplate(w, tmpl, view); err != nil {
		c.cfg.Logger.Warn("console: rendering", "page", name, "err", err)
	}
}

// sampleLoop records each group's total lag for the lag-over-time charts.
func (c *Console) sampleLoop() {
	defer close(c.done)
	tick := c.cfg.Clock.NewTicker(c.cfg.LagSampleInterval)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.LagSampleInterval)
			c.sampleAll(ctx)
			cancel()
		}
	}
}

func (c *Console) sampleAll(ctx context.Context) {
	c.sampleNodes(ctx)
	gs, err := c.cl.ListGroups(ctx)
	if err != nil || len(gs) == 0 {
		return
	}
	var names []string
	for _, g := range gs {
		if len(names) < maxSampledGroups && g.ProtocolType != "share" {
			names = append(names, g.Group)
		}
	}
	groups, err := c.cl.Groups(ctx, false, names...)
	if err != nil {
		return
	}
	for _, g := range groups {
		if g.Err == "" {
			c.record(g.Name, g.TotalLag)
		}
	}
}

func (c *Console) record(group string, lag int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.history[group]
	if len(h) == 0 && len(c.history) >= maxSampledGroups {
		return
	}
	h = append(h, lagSample{c.cfg.Clock.Now(), lag})
	if len(h) > c.cfg.LagSamples {
		h = h[len(h)-c.cfg.LagSamples:]
	}
	c.history[group] = h
}

// sampleNodes records each node's disk use and records for the cluster
// page's charts; nodes no longer in the cluster are forgotten.
func (c *Console) sampleNodes(ctx context.Context) {
	us, err := c.cl.NodesUsage(ctx)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[int32]bool{}
	for _, u := range us {
		seen[u.Node] = true
		h := append(c.nodes[u.Node], u)
		if len(h) > c.cfg.LagSamples {
			h = h[len(h)-c.cfg.LagSamples:]
		}
		c.nodes[u.Node] = h
	}
	for n := range c.nodes {
		if !seen[n] {
			delete(c.nodes, n)
		}
	}
}

func (c *Console) nodeHistory() map[int32][]admin.NodeUsage {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int32][]admin.NodeUsage, len(c.nodes))
	for n, h := range c.nodes {
		out[n] = append([]admin.NodeUsage(nil), h...)
	}
	return out
}

func (c *Console) lagHistory(group string) []lagSample {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]lagSample(nil), c.history[group]...)
}

// local is this node's view of its own replicas.
func (c *Console) local() map[string]map[int32]broker.PartitionStats {
	out := map[string]map[int32]broker.PartitionStats{}
	for _, p := range c.cfg.Broker.PartitionStats() {
		if out[p.Topic] == nil {
			out[p.Topic] = map[int32]broker.PartitionStats{}
		}
		out[p.Topic][p.Partition] = p
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
