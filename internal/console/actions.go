package console

// Actions: the forms that change the cluster (create, alter and delete
// topics, add partitions, produce a test record, delete records, reset a
// group's offsets, manage ACLs, SCRAM users and client quotas). Each goes
// through the Kafka API on the console's own client, after the user's
// rights are checked by the broker's own rule (broker.Authorized, as for
// the pages): the right the Kafka request itself needs, so a user can do
// here exactly what that user's Kafka client could. Without a gate (the
// cluster's clients need no login) anyone who reaches the console may act,
// as anyone who reaches the Kafka listener may.
//
// Every action is a POST: same origin only, a Host that is an address or
// a name of this console (a rebound name is refused), and with a gate the
// session's CSRF token. A destructive one (delete a topic, delete records,
// reset offsets, delete an ACL or a user) is done only when the form
// carries confirm = the name of what it destroys: without it the answer is
// a page that says what would happen and asks for the name to be typed.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/admin"
	"holdfast/internal/auth"
)

// Action limits.
const (
	// maxActionForm bounds an action's form (a test record's value is
	// most of it).
	maxActionForm = 1 << 20
	// maxCreatePartitions bounds a topic's partitions made from the
	// console.
	maxCreatePartitions = 10000
	// actionTimeout bounds an action's Kafka requests.
	actionTimeout = 15 * time.Second
)

// actionError is a refused action and its HTTP status.
type actionError struct {
	status int
	msg    string
}

func (e *actionError) Error() string { return e.msg }

func refuse(status int, format string, a ...any) error {
	return &actionError{status, fmt.Sprintf(format, a...)}
}

// field is a form field sent again by a confirmation form.
type field struct{ Name, Value string }

// actionView is an action's answer: what was done, or the confirmation it
// needs.
type actionView struct {
	Title string
	Done  string
	Back  string // the page to go back to
	Reset []admin.ResetRow
	// Confirm: nothing was done; the form to send again with the name
	// typed.
	Confirm *confirmView
}

type confirmView struct {
	Action string // POST path
	What   string // what would happen
	Name   string // to type
	Wrong  string // what was typed, when it did not match
	Fields []field
}

// act serves a POST action: h runs with the form parsed and its answer is
// rendered as the "action" page.
func (c *Console) act(h func(ctx context.Context, r *http.Request, who string) (actionView, error)) http.Handler {
	return c.cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.cfg.ReadOnly {
			c.render(w, r, "action", actionView{Title: "Refused"}, errors.New("the console's actions are turned off (holdfast serve --console-actions=false): it only shows"), http.StatusForbidden)
			return
		}
		if !c.hostAllowed(r.Host) {
			c.render(w, r, "action", actionView{Title: "Refused"}, fmt.Errorf("Host %q is not a name of this console: state changes are accepted for IP addresses, localhost and this machine's names", r.Host), http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxActionForm)
		if err := r.ParseForm(); err != nil {
			c.render(w, r, "action", actionView{Title: "Refused"}, fmt.Errorf("the form does not read: %v", err), http.StatusBadRequest)
			return
		}
		who := "anonymous from " + remoteIP(r)
		if id, ok := userOf(r); ok {
			who = id.principal.String() + " from " + remoteIP(r)
		}
		ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
		defer cancel()
		v, err := h(ctx, r, who)
		status := http.StatusOK
		var ae *actionError
		switch {
		case err == nil:
			if v.Done != "" {
				c.cfg.Logger.Info("console: "+v.Done, "by", who)
			}
		case errors.As(err, &ae):
			status = ae.status
		case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.GroupAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
			status = http.StatusForbidden
		case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.GroupIDNotFound):
			status = http.StatusNotFound
		default:
			var ke *kerr.Error
			if errors.As(err, &ke) {
				status = http.StatusConflict // the cluster refused it: the request is the problem
			} else {
				status = http.StatusBadGateway
			}
		}
		if err != nil && status != http.StatusForbidden {
			c.cfg.Logger.Info("console: action failed", "path", r.URL.Path, "by", who, "err", err)
		}
		c.render(w, r, "action", v, err, status)
	}))
}

// must refuses the request (403) unless its user may perform op on the
// resource, by the broker's rule.
func (c *Console) must(r *http.Request, op auth.Operation, typ auth.ResourceType, name string) error {
	if c.allowed(r, op, typ, name) {
		return nil
	}
	code := map[auth.ResourceType]string{auth.ResourceTopic: "TOPIC_AUTHORIZATION_FAILED", auth.ResourceGroup: "GROUP_AUTHORIZATION_FAILED",
		auth.ResourceCluster: "CLUSTER_AUTHORIZATION_FAILED"}[typ]
	if code == "" {
		code = "AUTHORIZATION_FAILED"
	}
	return refuse(http.StatusForbidden, "%v: %s may not %s the %s %s (%s): nothing was done", ErrDenied, userName(r), op, typ, name, code)
}

// confirmed reports whether the form carries confirm = name; if not, v
// gets the confirmation form (the request's fields sent again).
func confirmed(r *http.Request, v *actionView, name, what string) bool {
	got := r.PostForm.Get("confirm")
	if got == name {
		return true
	}
	cv := &confirmView{Action: r.URL.Path, What: what, Name: name, Wrong: got}
	for _, k := range sortedKeys(r.PostForm) {
		if k == csrfField || k == "confirm" {
			continue
		}
		for _, val := range r.PostForm[k] {
			cv.Fields = append(cv.Fields, field{k, val})
		}
	}
	v.Confirm = cv
	return false
}

// kafkaErr is a per-resource error of a Kafka answer, with its message.
func kafkaErr(what string, err error, msg string) error {
	if err == nil {
		return nil
	}
	if msg != "" && !strings.Contains(err.Error(), msg) {
		return fmt.Errorf("%s: %w: %s", what, err, msg)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// --- topics ---

func (c *Console) newTopicPage(ctx context.Context, r *http.Request) (any, error) {
	return struct{}{}, nil
}

// createTopic: POST /topics with name, partitions and replication (empty:
// the broker's defaults) and configs (NAME=VALUE lines).
func (c *Console) createTopic(ctx context.Context, r *http.Request, _ string) (actionView, error) {
	f := r.PostForm
	name := strings.TrimSpace(f.Get("name"))
	v := actionView{Title: "Create topic " + name, Back: "/topics"}
	if name == "" {
		return v, refuse(http.StatusBadRequest, "a topic needs a name")
	}
	if !c.allowed(r, auth.OpCreate, auth.ResourceCluster, auth.ClusterName) {
		if err := c.must(r, auth.OpCreate, auth.ResourceTopic, name); err != nil {
			return v, err
		}
	}
	parts, err := formInt(f.Get("partitions"), -1, 1, maxCreatePartitions, "partitions")
	if err != nil {
		return v, err
	}
	rf, err := formInt(f.Get("replication"), -1, 1, 32767, "replication factor")
	if err != nil {
		return v, err
	}
	configs, err := parseConfigs(f.Get("configs"))
	if err != nil {
		return v, err
	}
	resp, err := c.cl.A.CreateTopic(ctx, int32(parts), int16(rf), configs, name)
	if err != nil {
		return v, err
	}
	if err := kafkaErr("topic "+name, resp.Err, resp.ErrMessage); err != nil {
		return v, err
	}
	v.Done, v.Back = fmt.Sprintf("created topic %s: %d partitions, replication factor %d", name, resp.NumPartitions, resp.ReplicationFactor), "/topics/"+name
	return v, nil
}

// formInt reads an int field; "" gives def.
func formInt(s string, def, lo, hi int64, what string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, refuse(http.StatusBadRequest, "%s %q: want a number from %d to %d", what, s, lo, hi)
	}
	return n, nil
}

// parseConfigs reads NAME=VALUE lines.
func parseConfigs(s string) (map[string]*string, error) {
	out := map[string]*string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, val, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, refuse(http.StatusBadRequest, "config %q: want NAME=VALUE, one a line", line)
		}
		val = strings.TrimSpace(val)
		out[strings.TrimSpace(k)] = &val
	}
	return out, nil
}

type editView struct {
	Name       string
	Partitions int
	Configs    []admin.Config
	ConfigErr  string
}

// editTopicPage: GET /topics/{topic}/edit, the topic's forms.
func (c *Console) editTopicPage(ctx context.Context, r *http.Request) (any, error) {
	name := r.PathValue("topic")
	if err := c.mayTopic(r, auth.OpDescribe, name); err != nil {
		return nil, err
	}
	md, err := c.cl.A.ListTopics(ctx, name)
	if err != nil {
		return nil, err
	}
	td, ok := md[name]
	if !ok || td.Err != nil {
		return nil, fmt.Errorf("topic %s: %w", name, kerr.UnknownTopicOrPartition)
	}
	v := editView{Name: name, Partitions: len(td.Partitions)}
	if err := c.mayTopic(r, auth.OpDescribeConfigs, name); err != nil {
		v.ConfigErr = err.Error()
	} else if v.Configs, err = c.cl.TopicConfigs(ctx, name); err != nil {
		v.ConfigErr = err.Error()
	}
	return v, nil
}

// alterConfig: POST /topics/{topic}/configs with name and value, or
// delete=1 to return it to the default (IncrementalAlterConfigs).
func (c *Console) alterConfig(ctx context.Context, r *http.Request, _ string) (actionView, error) {
	topic := r.PathValue("topic")
	key, val := strings.TrimSpace(r.PostForm.Get("name")), strings.TrimSpace(r.PostForm.Get("value"))
	v := actionView{Title: "Alter topic " + topic, Back: "/topics/" + topic}
	if err := c.must(r, auth.OpAlterConfigs, auth.ResourceTopic, topic); err != nil {
		return v, err
	}
	if key == "" {
		return v, refuse(http.StatusBadRequest, "name the config to set")
	}
	ac := kadm.AlterConfig{Op: kadm.SetConfig, Name: key, Value: &val}
	v.Done = fmt.Sprintf("topic %s: set %s=%s", topic, key, val)
	if r.PostForm.Get("delete") != "" {
		ac = kadm.AlterConfig{Op: kadm.DeleteConfig, Name: key}
		v.Done = fmt.Sprintf("topic %s: %s back to its default", topic, key)
	}
	resp, err := c.cl.A.AlterTopicConfigs(ctx, []kadm.AlterConfig{ac}, topic)
	if err != nil {
		return actionView{Title: v.Title, Back: v.Back}, err
	}
	for _, a := range resp {
		if err := kafkaErr("topic "+topic, a.Err, a.ErrMessage); err != nil {
			return actionView{Title: v.Title, Back: v.Back}, err
		}
	}
	return v, nil
}

// addPartitions: POST /topics/{topic}/partitions with count, the new
// total (CreatePartitions).
func (c *Console) addPartitions(ctx context.Context, r *http.Request, _ string) (actionView, error) {
	topic := r.PathValue("topic")
	v := actionView{Title: "Add partitions to " + topic, Back: "/topics/" + topic}
	if err := c.must(r, auth.OpAlter, auth.ResourceTopic, topic); err != nil {
		return v, err
	}
	n, err := formInt(r.PostForm.Get("count"), 0, 1, maxCreatePartitions, "partitions")
	if err != nil || n == 0 {
		return v, cmpErr(err, refuse(http.StatusBadRequest, "say how many partitions the topic should have"))
	}
	resp, err := c.cl.A.UpdatePartitions(ctx, int(n), topic)
	if err != nil {
		return v, err
	}
	for _, p := range resp {
		if err := kafkaErr("topic "+topic, p.Err, p.ErrMessage); err != nil {
			return v, err
		}
	}
	v.Done = fmt.Sprintf("topic %s now has %d partitions", topic, n)
	return v, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// deleteTopic: POST /topics/{topic}/delete, confirmed by the topic's name.
func (c *Console) deleteTopic(ctx context.Context, r *http.Request, _ string) (actionView, error) {
	topic := r.PathValue("topic")
	v := actionView{Title: "Delete topic " + topic, Back: "/topics/" + topic}
	if err := c.must(r, auth.OpDelete, auth.ResourceTopic, topic); err != nil {
		return v, err
	}
	if !confirmed(r, &v, topic, fmt.Sprintf("Delete topic %s and every record in it, for good.", topic)) {
		return v, nil
	}
	resp, err := c.cl.A.DeleteTopic(ctx, topic)
	if err != nil {
		return v, err
	}
	if err := kafkaErr("topic "+topic, resp.Err, resp.ErrMessage); err != nil {
		return v, err
	}
	v.Done, v.Back = "deleted topic "+topic, "/topics"
	return v, nil
}

// produce: POST /topics/{topic}/produce with key, value, headers
// (NAME=VALUE lines) and partition ("": the partitioner's choice), acks=all.
func (c *Console) produce(ctx context.Context, r *http.Request, _ string) (actionView, error) {
	topic := r.PathValue("topic")
	f := r.PostForm
	v := actionView{Title: "Produce to " + topic, Back: "/topics/" + topic + "/edit"}
	if err := c.must(r, auth.OpWrite, auth.ResourceTopic, topic); err != nil {
		return v, err
	}
	rec := &kgo.Record{Topic: topic, Value: []byte(f.Get("value"))}
	if k := f.Get("key"); k != "" {
		rec.Key = []byte(k)
	}
	for _, line := range strings.Split(f.Get("headers"), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, val, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return v, refuse(http.StatusBadRequest, "header %q: want NAME=VALUE, one a line", line)
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(val)})
	}
	partition := int64(-1)
	if s := strings.TrimSpace(f.Get("partition")); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 0 {
			return v, refuse(http.StatusBadRequest, "partition %q: want a partition number, or nothing for the partitioner's choice", s)
		}
		partition = n
	}
	got, err := c.produceOne(ctx, rec, int32(partition))
	if err != nil {
		return v, err
	}
	v.Done = fmt.Sprintf("produced a record to %s-%d at offset %d", topic, got.Partition, got.Offset)
	return v, nil
}

// produceOne writes one record with acks=all on a producer of its own
// (the console's client is not one, and a manual partition needs its own
// partitioner).
func (c *Console) produceOne(ctx context.Context, rec *kgo.Record, partition int32) (*kgo.Record, error) {
	opts := append([]kgo.Opt{kgo.SeedBrokers(c.cfg.Seeds...), kgo.ClientID("holdfast-console"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProduceRequestTimeout(10 * time.Second), kgo.RecordDeliveryTimeout(actionTimeout)}, c.cfg.ClientOpts...)
	if partition >= 0 {
		rec.Partition = partition
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	p, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.ProduceSync(ctx, rec).First()
}

// deleteRecords: POST /topics/{topic}/delete-records with partition and
// offset (every record before it goes; "" or "end": all), confirmed by the
// topic's name.
func (c *Console) deleteRecords(ctx context.Context, r *http.Request, _ string) (actionView, error) {
	topic := r.PathValue("topic")
	f := r.PostForm
	v := actionView{Title: "Delete records of " + topic, Back: "/topics/" + topic}
	if err := c.must(r, auth.OpDelete, auth.ResourceTopic, topic); err != nil {
		return v, err
	}
	p, err := strconv.ParseInt(strings.TrimSpace(f.Get("partition")), 10, 32)
	if err != nil || p < 0 {
		return v, refuse(http.StatusBadRequest, "partition %q: want a partition number", f.Get("partition"))
	}
	before := int64(-1) // DeleteRecords' "the high watermark"
	what := fmt.Sprintf("Delete every record of %s-%d, for good.", topic, p)
	if s := strings.TrimSpace(f.Get("offset")); s != "" && s != "end" {
		if before, err = strconv.ParseInt(s, 10, 64); err != nil || before < 0 {
			return v, refuse(http.StatusBadRequest, "offset %q: want an offset, or end for every record", s)
		}
		what = fmt.Sprintf("Delete the records of %s-%d before offset %d, for good.", topic, p, before)
	}
	if !confirmed(r, &v, topic, what) {
		return v, nil
	}
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: topic, Partition: int32(p), At: before, LeaderEpoch: -1})
	resp, err := c.cl.A.DeleteRecords(ctx, os)
	if err != nil {
		return v, err
	}
	dr, ok := resp.Lookup(topic, int32(p))
	if !ok {
		return v, fmt.Errorf("%s-%d: no answer: %w", topic, p, kerr.UnknownTopicOrPartition)
	}
	if dr.Err != nil {
		return v, fmt.Errorf("%s-%d: %w", topic, p, dr.Err)
	}
	v.Done = fmt.Sprintf("deleted the records of %s-%d before offset %d: the log now starts there", topic, p, dr.LowWatermark)
	return v, nil
}

// --- groups ---

type resetFormView struct {
	Group  string
	Topics []string
}

// resetPage: GET /groups/{group}/reset.
func (c *Console) resetPage(ctx context.Context, r *http.Request) (any, error) {
	group := r.PathValue("group")
	if !c.allowed(r, auth.OpDescribe, auth.ResourceGroup, group) {
		return nil, fmt.Errorf("group %s: %s may not DESCRIBE it: %w", group, userName(r), kerr.GroupAuthorizationFailed)
	}
	v := resetFormView{Group: group}
	if offs, err := c.cl.A.FetchOffsets(ctx, group); err == nil {
		for t := range offs {
			if c.allowed(r, auth.OpDescribe, auth.ResourceTopic, t) {
				v.Topics = append(v.Topics, t)
			}
		}
		slices.Sort(v.Topics)
	}
	return v, nil
}

// resetOffsets: POST /groups/{group}/reset with to (earliest, latest,
// offset, timestamp, shift), value, topic ("": every topic with committed
// offsets) and partitions ("": all). Without confirm = the group's name
// it shows the new offsets (a dry run) and asks; with it, commits them
// (admin.ResetOffsets: refused while the group has members). Needs READ on
// the group and on every topic reset (OffsetCommit's rule).
func (c *Console) resetOffsets(ctx context.Context, r *http.Request, _ string) (actionView, error) {
	group := r.PathValue("group")
	f := r.PostForm
	v := actionView{Title: "Reset the offsets of group " + group, Back: "/groups/" + group}
	if err := c.must(r, auth.OpRead, auth.ResourceGroup, group); err != nil {
		return v, err
	}
	spec := admin.ResetSpec{}
	val := strings.TrimSpace(f.Get("value"))
	switch to := f.Get("to"); to {
	case "earliest":
		spec.Earliest = true
	case "latest":
		spec.Latest = true
	case "offset", "shift":
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || to == "offset" && n < 0 {
			return v, refuse(http.StatusBadRequest, "%s %q: want a number", to, val)
		}
		spec.Offset, spec.Shift, spec.Shifting = n, n, to == "shift"
	case "timestamp":
		t, err := parseTime(val)
		if err != nil {
			return v, refuse(http.StatusBadRequest, "%v", err)
		}
		spec.At = t
	default:
		return v, refuse(http.StatusBadRequest, "to %q: want earliest, latest, offset, timestamp or shift", to)
	}
	var topics []string
	var parts map[string]map[int32]bool
	if t := strings.TrimSpace(f.Get("topic")); t != "" {
		topics = []string{t}
		if ps := strings.TrimSpace(f.Get("partitions")); ps != "" {
			parts = map[string]map[int32]bool{t: {}}
			for _, s := range strings.Split(ps, ",") {
				n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
				if err != nil || n < 0 {
					return v, refuse(http.StatusBadRequest, "partition %q: want numbers, comma separated", s)
				}
				parts[t][int32(n)] = true
			}
		}
	}
	plan, err := c.cl.ResetOffsets(ctx, group, topics, parts, spec, false)
	if err != nil {
		return v, inputErr(ctx, err)
	}
	topics = nil
	for _, row := range plan {
		if !slices.Contains(topics, row.Topic) {
			if err := c.must(r, auth.OpRead, auth.ResourceTopic, row.Topic); err != nil {
				return v, err
			}
			topics = append(topics, row.Topic)
		}
	}
	v.Reset = plan
	if !confirmed(r, &v, group, fmt.Sprintf("Commit these offsets for group %s (the consumers will read from them).", group)) {
		return v, nil
	}
	if parts == nil {
		parts = map[string]map[int32]bool{}
		for _, row := range plan { // exactly the partitions shown
			if parts[row.Topic] == nil {
				parts[row.Topic] = map[int32]bool{}
			}
			parts[row.Topic][row.Partition] = true
		}
	}
	rows, err := c.cl.ResetOffsets(ctx, group, topics, parts, spec, true)
	v.Reset = rows
	if err != nil {
		var ga *admin.ErrGroupActive
		if errors.As(err, &ga) {
			return v, refuse(http.StatusConflict, "%v; nothing was committed", err)
		}
		return v, err
	}
	v.Done = fmt.Sprintf("group %s: committed %d offsets", group, len(rows))
	return v, nil
}

// inputErr: an error of admin's own (no committed offset to shift, no
// such partition) is the request's (400); the cluster's stay as they are.
func inputErr(ctx context.Context, err error) error {
	var ke *kerr.Error
	if errors.As(err, &ke) || ctx.Err() != nil {
		return err
	}
	return refuse(http.StatusBadRequest, "%v", err)
}

// parseTime reads a time as RFC 3339 or as <input type=datetime-local>
// sends it (UTC).
func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("timestamp %q: want RFC 3339 (2026-01-02T15:04:05Z) or 2026-01-02T15:04 (UTC)", s)
}

// --- ACLs, users, quotas ---

type aclRow struct {
	Principal, Host, Resource, Name, Pattern, Operation, Permission string
}

type userRow struct {
	User       string
	Mechanisms []string
}

type quotaRow struct {
	Entity     string // user=alice,client-id=<default>
	EntityType string // user
	EntityName string // alice; "" the default
	Key        string
	Value      float64
}

type securityView struct {
	ACLs                        []aclRow
	Users                       []userRow
	Quotas                      []quotaRow
	ACLErr, UserErr, QuotaErr   string
	MayACLs, MayUsers, MayQuota bool
}

// securityPage: GET /security, the ACLs, SCRAM users and client quotas
// (DescribeAcls and DescribeUserScramCredentials need DESCRIBE on the
// CLUSTER, DescribeClientQuotas DESCRIBE_CONFIGS), with their forms.
func (c *Console) securityPage(ctx context.Context, r *http.Request) (any, error) {
	v := securityView{
		MayACLs:  c.allowed(r, auth.OpAlter, auth.ResourceCluster, auth.ClusterName),
		MayUsers: c.allowed(r, auth.OpAlter, auth.ResourceCluster, auth.ClusterName),
		MayQuota: c.allowed(r, auth.OpAlterConfigs, auth.ResourceCluster, auth.ClusterName),
	}
	describe := c.allowed(r, auth.OpDescribe, auth.ResourceCluster, auth.ClusterName)
	if !describe {
		msg := fmt.Sprintf("%s may not DESCRIBE the CLUSTER (CLUSTER_AUTHORIZATION_FAILED)", userName(r))
		v.ACLErr, v.UserErr = msg, msg
	} else {
		if res, err := c.cl.A.DescribeACLs(ctx, kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternAny).Operations(kadm.OpAny).AllowHosts().DenyHosts().
			Allow().Deny()); err != nil {
			v.ACLErr = err.Error()
		} else {
			for _, d := range res {
				if errors.Is(d.Err, kerr.SecurityDisabled) {
					v.ACLErr, v.MayACLs = "no authorizer is configured (authorizer.class.name): the cluster enforces no ACLs", false
					continue
				}
				if d.Err != nil {
					v.ACLErr = kafkaErr("ACLs", d.Err, d.ErrMessage).Error()
					continue
				}
				for _, a := range d.Described {
					v.ACLs = append(v.ACLs, aclRow{a.Principal, a.Host, a.Type.String(), a.Name, a.Pattern.String(), a.Operation.String(), a.Permission.String()})
				}
			}
			slices.SortFunc(v.ACLs, func(a, b aclRow) int {
				return strings.Compare(a.Principal+"\x00"+a.Resource+"\x00"+a.Name+"\x00"+a.Operation, b.Principal+"\x00"+b.Resource+"\x00"+b.Name+"\x00"+b.Operation)
			})
		}
		if us, err := c.cl.A.DescribeUserSCRAMs(ctx); err != nil {
			v.UserErr = err.Error()
		} else {
			for _, u := range us.Sorted() {
				row := userRow{User: u.User}
				for _, ci := range u.CredInfos {
					row.Mechanisms = append(row.Mechanisms, fmt.Sprintf("%s (%d iterations)", ci.Mechanism, ci.Iterations))
				}
				v.Users = append(v.Users, row)
			}
		}
	}
	if !c.allowed(r, auth.OpDescribeConfigs, auth.ResourceCluster, auth.ClusterName) {
		v.QuotaErr = fmt.Sprintf("%s may not DESCRIBE_CONFIGS on the CLUSTER (CLUSTER_AUTHORIZATION_FAILED)", userName(r))
	} else if qs, err := c.cl.A.DescribeClientQuotas(ctx, false, nil); err != nil {
		v.QuotaErr = err.Error()
	} else {
		for _, q := range qs {
			var ents []string
			for _, e := range q.Entity {
				ents = append(ents, e.String())
			}
			row := quotaRow{Entity: strings.Join(ents, ",")}
			if len(q.Entity) == 1 {
				row.EntityType = q.Entity[0].Type
				if q.Entity[0].Name != nil {
					row.EntityName = *q.Entity[0].Name
				}
			}
			for _, qv := range q.Values {
				row.Key, row.Value = qv.Key, qv.Value
				v.Quotas = append(v.Quotas, row)
			}
		}
		slices.SortFunc(v.Quotas, func(a, b quotaRow) int { return strings.Compare(a.Entity+"\x00"+a.Key, b.Entity+"\x00"+b.Key) })
	}
	return v, nil
}

func derefStr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// aclForm reads one ACL from the form: principal, host ("" = *),
// resource (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID), name, pattern
// (LITERAL, PREFIXED), operation, permission (ALLOW, DENY).
func aclForm(r *http.Request) (kmsg.ACLResourceType, kmsg.ACLResourcePatternType, kmsg.ACLOperation, kmsg.ACLPermissionType, aclRow, error) {
	f := r.PostForm
	row := aclRow{Principal: strings.TrimSpace(f.Get("principal")), Host: strings.TrimSpace(f.Get("host")), Resource: f.Get("resource"),
		Name: strings.TrimSpace(f.Get("name")), Pattern: f.Get("pattern"), Operation: f.Get("operation"), Permission: f.Get("permission")}
	if row.Host == "" {
		row.Host = "*"
	}
	if row.Pattern == "" {
		row.Pattern = "LITERAL"
	}
	if row.Permission == "" {
		row.Permission = "ALLOW"
	}
	bad := func(format string, a ...any) (kmsg.ACLResourceType, kmsg.ACLResourcePatternType, kmsg.ACLOperation, kmsg.ACLPermissionType, aclRow, error) {
		return 0, 0, 0, 0, row, refuse(http.StatusBadRequest, format, a...)
	}
	if _, err := auth.ParsePrincipal(row.Principal); err != nil {
		return bad("principal %q: want TYPE:NAME (User:alice)", row.Principal)
	}
	rt, err := kmsg.ParseACLResourceType(row.Resource)
	if err != nil || rt < kmsg.ACLResourceTypeTopic {
		return bad("resource %q: want TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID", row.Resource)
	}
	if rt == kmsg.ACLResourceTypeCluster && row.Name == "" {
		row.Name = auth.ClusterName
	}
	if row.Name == "" {
		return bad("an ACL needs a resource name (* for every one)")
	}
	pt, err := kmsg.ParseACLResourcePatternType(row.Pattern)
	if err != nil || pt != kmsg.ACLResourcePatternTypeLiteral && pt != kmsg.ACLResourcePatternTypePrefixed {
		return bad("pattern %q: want LITERAL or PREFIXED", row.Pattern)
	}
	op, err := kmsg.ParseACLOperation(row.Operation)
	if err != nil || op < kmsg.ACLOperationAll {
		return bad("operation %q: want one of ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE", row.Operation)
	}
	perm, err := kmsg.ParseACLPermissionType(row.Permission)
	if err != nil || perm < kmsg.ACLPermissionTypeDeny {
		return bad("permission %q: want ALLOW or DENY", row.Permission)
	}
	row.Resource, row.Pattern, row.Operation, row.Permission = rt.String(), pt.String(), op.String(), perm.String()
	return rt, pt, op, perm, row, nil
}

func (a aclRow) String() string {
	return fmt.Sprintf("%s %s %s on %s %s (%s) from host %s", a.Permission, a.Principal, a.Operation, a.Resource, a.Name, a.Pattern, a.Host)
}

// createACL: POST /security/acls (CreateAcls: ALTER on the CLUSTER).
func (c *Console) createACL(ctx context.Context, r *http.Request, _ string) (actionView, error) {
	v := actionView{Title: "Create an ACL", Back: "/security"}
	if err := c.must(r, auth.OpAlter, auth.ResourceCluster, auth.ClusterName); err != nil {
		return v, err
	}
	rt, pt, op, perm, row, err := aclForm(r)
	if err != nil {
		return v, err
	}
	req := kmsg.NewPtrCreateACLsRequest()
	cr := kmsg.NewCreateACLsRequestCreation()
	cr.ResourceType, cr.ResourceName, cr.ResourcePatternType = rt, row.Name, pt
	cr.Principal, cr.Host, cr.Operation, cr.PermissionType = row.Principal, row.Host, op, perm
	req.Creations = append(req.Creations, cr)
	resp, err := req.RequestWith(ctx, c.cl.K)
	if err != nil {
		return v, err
	}
	for _, res := range resp.Results {
		if err := kafkaErr("ACL", kerr.ErrorForCode(res.ErrorCode), derefStr(res.ErrorMessage)); err != nil {
			return v, err
		}
	}
	v.Done = "created the ACL " + row.String()
	return v, nil
}

// deleteACL: POST /security/acls/delete, exactly the ACL the form names,
// confirmed by its principal (DeleteAcls: ALTER on the CLUSTER).
func (c *Console) deleteACL(ctx context.Context, r *http.Request, _ string) (actionView, error) {
	v := actionView{Title: "Delete an ACL", Back: "/security"}
	if err := c.must(r, auth.OpAlter, auth.ResourceCluster, auth.ClusterName); err != nil {
		return v, err
	}
	rt, pt, op, perm, row, err := aclForm(r)
	if err != nil {
		return v, err
	}
	if !confirmed(r, &v, row.Principal, "Delete the ACL "+row.String()+".") {
		return v, nil
	}
	req := kmsg.NewPtrDeleteACLsRequest()
	fl := kmsg.NewDeleteACLsRequestFilter()
	fl.ResourceType, fl.ResourceName, fl.ResourcePatternType = rt, &row.Name, pt
	fl.Principal, fl.Host, fl.Operation, fl.PermissionType = &row.Principal, &row.Host, op, perm
	req.Filters = append(req.Filters, fl)
	resp, err := req.RequestWith(ctx, c.cl.K)
	if err != nil {
		return v, err
	}
	n := 0
	for _, res := range resp.Results {
		if err := kafkaErr("ACL", kerr.ErrorForCode(res.ErrorCode), derefStr(res.ErrorMessage)); err != nil {
			return v, err
		}
		n += len(res.MatchingACLs)
	}
	if n == 0 {
		return v, refuse(http.StatusNotFound, "no ACL %s: nothing was deleted", row)
	}
	v.Done = "deleted the ACL " + row.String()
	return v, nil
}

// scramMechanism reads SCRAM-SHA-256 or SCRAM-SHA-512.
func scramMechanism(s string) (kadm.ScramMechanism, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "", "SCRAM-SHA-512":
		return kadm.ScramSha512, nil
	case "SCRAM-SHA-256":
		return kadm.ScramSha256, nil
	}
	return 0, refuse(http.StatusBadRequest, "mechanism %q: want SCRAM-SHA-256 or SCRAM-SHA-512", s)
}

// upsertUser: POST /security/users with user, password, mechanism and
// iterations (AlterUserScramCredentials: ALTER on the CLUSTER).
func (c *Console) upsertUser(ctx context.Context, r *http.Request, _ string) (actionView, error) {
	f := r.PostForm
	user := strings.TrimSpace(f.Get("user"))
	v := actionView{Title: "Set the password of " + user, Back: "/security"}
	if err := c.must(r, auth.OpAlter, auth.ResourceCluster, auth.ClusterName); err != nil {
		return v, err
	}
	mech, err := scramMechanism(f.Get("mechanism"))
	if err != nil {
		return v, err
	}
	iters, err := formInt(f.Get("iterations"), 8192, 4096, 16384, "iterations")
	if err != nil {
		return v, err
	}
	if user == "" || f.Get("password") == "" {
		return v, refuse(http.StatusBadRequest, "a SCRAM user needs a name and a password")
	}
	res, err := c.cl.A.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: user, Mechanism: mech, Iterations: int32(iters), Password: f.Get("password")}})
	if err != nil {
		return v, err
	}
	if a, ok := res[user]; ok {
		if err := kafkaErr("user "+user, a.Err, a.ErrMessage); err != nil {
			return v, err
		}
	}
	v.Done = fmt.Sprintf("set the %s password of %s", mech, user)
	return v, nil
}

// deleteUser: POST /security/users/delete with user and mechanism,
// confirmed by the user's name.
func (c *Console) deleteUser(ctx context.Context, r *http.Request, _ string) (actionView, error) {
	user := strings.TrimSpace(r.PostForm.Get("user"))
	v := actionView{Title: "Delete user " + user, Back: "/security"}
	if err := c.must(r, auth.OpAlter, auth.ResourceCluster, auth.ClusterName); err != nil {
		return v, err
	}
	mech, err := scramMechanism(r.PostForm.Get("mechanism"))
	if err != nil {
		return v, err
	}
	if user == "" {
		return v, refuse(http.StatusBadRequest, "name the user")
	}
	if !confirmed(r, &v, user, fmt.Sprintf("Delete the %s credential of %s: its clients can no longer log in with it.", mech, user)) {
		return v, nil
	}
	res, err := c.cl.A.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: user, Mechanism: mech}}, nil)
	if err != nil {
		return v, err
	}
	if a, ok := res[user]; ok {
		if err := kafkaErr("user "+user, a.Err, a.ErrMessage); err != nil {
			return v, err
		}
	}
	v.Done = fmt.Sprintf("deleted the %s credential of %s", mech, user)
	return v, nil
}

// alterQuota: POST /security/quotas with entity (user, client-id or ip),
// name ("": the default), key, value, or remove=1 (AlterClientQuotas:
// ALTER_CONFIGS on the CLUSTER, the broker's rule and Kafka's).
func (c *Console) alterQuota(ctx context.Context, r *http.Request, _ string) (actionView, error) {
	f := r.PostForm
	v := actionView{Title: "Client quota", Back: "/security"}
	if err := c.must(r, auth.OpAlterConfigs, auth.ResourceCluster, auth.ClusterName); err != nil {
		return v, err
	}
	typ, key := f.Get("entity"), strings.TrimSpace(f.Get("key"))
	if typ != "user" && typ != "client-id" && typ != "ip" {
		return v, refuse(http.StatusBadRequest, "entity %q: want user, client-id or ip", typ)
	}
	if key == "" {
		return v, refuse(http.StatusBadRequest, "name the quota (producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate, connection_creation_rate)")
	}
	ent := kadm.ClientQuotaEntityComponent{Type: typ}
	if name := strings.TrimSpace(f.Get("name")); name != "" {
		ent.Name = &name
	}
	op := kadm.AlterClientQuotaOp{Key: key, Remove: f.Get("remove") != ""}
	if !op.Remove {
		val, err := strconv.ParseFloat(strings.TrimSpace(f.Get("value")), 64)
		if err != nil || val < 0 {
			return v, refuse(http.StatusBadRequest, "value %q: want a number, 0 or more", f.Get("value"))
		}
		op.Value = val
	}
	res, err := c.cl.A.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{Entity: kadm.ClientQuotaEntity{ent}, Ops: []kadm.AlterClientQuotaOp{op}}})
	if err != nil {
		return v, err
	}
	for _, a := range res {
		if err := kafkaErr("quota "+ent.String(), a.Err, a.ErrMessage); err != nil {
			return v, err
		}
	}
	if op.Remove {
		v.Done = fmt.Sprintf("removed the quota %s of %s", key, ent)
	} else {
		v.Done = fmt.Sprintf("set the quota %s=%s for %s", key, strconv.FormatFloat(op.Value, 'f', -1, 64), ent)
	}
	return v, nil
}
