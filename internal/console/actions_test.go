package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/auth"
	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/console"
	"holdfast/internal/wire"
)

// actionsSetup: an in-process broker with ACLs (its plaintext clients, the
// console's and the test's, are the super user ANONYMOUS), a gated console,
// root allowed everything by ACLs, eve allowed to DESCRIBE topics and
// groups and nothing more; both logged in.
func actionsSetup(t *testing.T) (n *brokertest.Node, adm *kadm.Client, base string, root, eve *http.Client, rootToken, eveToken string) {
	n = brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
		c.Security.Authorizer = auth.NewAuthorizer([]auth.Principal{auth.Anonymous}, false)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm = kadm.NewClient(n.Client(kgo.MetadataMinAge(50 * time.Millisecond)))
	for _, b := range []*kadm.ACLBuilder{
		kadm.NewACLs().Allow("User:root").AllowHosts().Topics("*").Groups("*").Clusters().Operations(kadm.OpAll),
		kadm.NewACLs().Allow("User:eve").AllowHosts().Topics("*").Groups("*").Operations(kadm.OpDescribe),
	} {
		res, err := adm.CreateACLs(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	brokertest.Await(t, "the ACLs applied", func() error {
		if !n.B.Authorized(auth.User("root"), "127.0.0.1", auth.OpAlter, auth.ResourceCluster, auth.ClusterName) ||
			!n.B.Authorized(auth.User("eve"), "127.0.0.1", auth.OpDescribe, auth.ResourceTopic, "x") {
			return errors.New("not yet")
		}
		return nil
	})
	passwords := map[string]string{"root": "root-pw", "eve": "eve-pw"}
	gate, err := console.NewGate(console.GateConfig{Pages: true,
		Password:   func(u, p string) bool { return passwords[u] != "" && passwords[u] == p },
		Authorized: n.B.Authorized})
	if err != nil {
		t.Fatal(err)
	}
	c, err := console.New(console.Config{Broker: n.B, Seeds: []string{n.Addr}, Gate: gate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	srv := httptest.NewServer(gatedMux(gate, c))
	t.Cleanup(srv.Close)
	if root, rootToken, err = login(t, srv.URL, "root", "root-pw"); err != nil {
		t.Fatal(err)
	}
	if eve, eveToken, err = login(t, srv.URL, "eve", "eve-pw"); err != nil {
		t.Fatal(err)
	}
	return n, adm, srv.URL, root, eve, rootToken, eveToken
}

// form is a POST's fields; csrf is added when token is not "".
func form(token string, kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	if token != "" {
		v.Set("csrf", token)
	}
	return v
}

// expect posts and checks the status and that the body holds want.
func expect(t *testing.T, cl *http.Client, u string, f url.Values, status int, want string) string {
	t.Helper()
	code, body := postWith(t, cl, u, f)
	if code != status || !strings.Contains(body, want) {
		t.Fatalf("POST %s %v: %d, want %d with %q:\n%s", u, f, code, status, want, body)
	}
	return body
}

// TestConsoleTopicActions: create a topic, alter a config, add partitions,
// produce a record, delete records and delete the topic through the
// console. For each: eve (no right) gets 403 and nothing changes, a POST
// without the CSRF token gets 403 and nothing changes, root succeeds and
// the effect is seen through kadm; the destructive ones without the
// typed name only ask, and change nothing.
func TestConsoleTopicActions(t *testing.T) {
	n, adm, base, root, eve, rootToken, eveToken := actionsSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topicExists := func(name string) bool {
		td, err := adm.ListTopics(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		d, ok := td[name]
		return ok && d.Err == nil
	}

	// Create.
	create := []string{"name", "made", "partitions", "2", "replication", "1", "configs", "retention.ms=3600000\n"}
	expect(t, eve, base+"/topics", form(eveToken, create...), 403, "may not CREATE")
	expect(t, root, base+"/topics", form("", create...), 403, "CSRF")
	if topicExists("made") {
		t.Fatal("a refused create made the topic")
	}
	expect(t, root, base+"/topics", form(rootToken, create...), 200, "created topic made: 2 partitions")
	brokertest.Await(t, "the topic made", func() error {
		if !topicExists("made") {
			return errors.New("not yet")
		}
		return nil
	})
	configOf := func(key string) string {
		rc, err := adm.DescribeTopicConfigs(ctx, "made")
		if err != nil {
			t.Fatal(err)
		}
		c, _ := rc.On("made", nil)
		for _, cf := range c.Configs {
			if cf.Key == key {
				return cf.MaybeValue()
			}
		}
		return ""
	}
	if got := configOf("retention.ms"); got != "3600000" {
		t.Fatalf("retention.ms after create: %q", got)
	}

	// Alter a config.
	alter := []string{"name", "retention.ms", "value", "7200000"}
	expect(t, eve, base+"/topics/made/configs", form(eveToken, alter...), 403, "ALTER_CONFIGS")
	expect(t, root, base+"/topics/made/configs", form("", alter...), 403, "CSRF")
	if got := configOf("retention.ms"); got != "3600000" {
		t.Fatalf("retention.ms after refused alters: %q", got)
	}
	expect(t, root, base+"/topics/made/configs", form(rootToken, alter...), 200, "set retention.ms=7200000")
	if got := configOf("retention.ms"); got != "7200000" {
		t.Fatalf("retention.ms after the alter: %q", got)
	}

	// Add partitions.
	partitions := func() int {
		td, err := adm.ListTopics(ctx, "made")
		if err != nil {
			t.Fatal(err)
		}
		return len(td["made"].Partitions)
	}
	expect(t, eve, base+"/topics/made/partitions", form(eveToken, "count", "3"), 403, "ALTER")
	expect(t, root, base+"/topics/made/partitions", form("", "count", "3"), 403, "CSRF")
	if p := partitions(); p != 2 {
		t.Fatalf("partitions after refused adds: %d", p)
	}
	expect(t, root, base+"/topics/made/partitions", form(rootToken, "count", "3"), 200, "now has 3 partitions")
	brokertest.Await(t, "3 partitions", func() error {
		if p := partitions(); p != 3 {
			return fmt.Errorf("%d partitions", p)
		}
		return nil
	})

	// Produce.
	end := func(p int32) int64 {
		ends, err := adm.ListEndOffsets(ctx, "made")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup("made", p)
		return o.Offset
	}
	rec := []string{"partition", "2", "key", "k1", "value", "hello from the console", "headers", "source=console\ntrace=7"}
	expect(t, eve, base+"/topics/made/produce", form(eveToken, rec...), 403, "WRITE")
	expect(t, root, base+"/topics/made/produce", form("", rec...), 403, "CSRF")
	if e := end(2); e != 0 {
		t.Fatalf("partition 2 after refused produces: end %d", e)
	}
	for i := 0; i < 3; i++ {
		expect(t, root, base+"/topics/made/produce", form(rootToken, rec...), 200, fmt.Sprintf("produced a record to made-2 at offset %d", i))
	}
	cons := n.Client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"made": {2: kgo.NewOffset().AtStart()}}))
	defer cons.Close()
	fs := cons.PollRecords(ctx, 1)
	if err := fs.Err0(); err != nil || fs.NumRecords() == 0 {
		t.Fatalf("consuming what the console produced: %v", err)
	}
	r0 := fs.Records()[0]
	if string(r0.Key) != "k1" || string(r0.Value) != "hello from the console" || len(r0.Headers) != 2 || r0.Headers[1].Key != "trace" || string(r0.Headers[1].Value) != "7" {
		t.Fatalf("the record read back: key %q value %q headers %v", r0.Key, r0.Value, r0.Headers)
	}

	// Delete records (destructive: confirmed by the topic's name).
	start := func() int64 {
		s, err := adm.ListStartOffsets(ctx, "made")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := s.Lookup("made", 2)
		return o.Offset
	}
	del := []string{"partition", "2", "offset", "2"}
	expect(t, eve, base+"/topics/made/delete-records", form(eveToken, append(del, "confirm", "made")...), 403, "DELETE")
	expect(t, root, base+"/topics/made/delete-records", form("", append(del, "confirm", "made")...), 403, "CSRF")
	body := expect(t, root, base+"/topics/made/delete-records", form(rootToken, del...), 200, `id="confirm"`)
	if !strings.Contains(body, "before offset 2") || strings.Contains(body, "Done") {
		t.Fatalf("the confirmation page:\n%s", body)
	}
	expect(t, root, base+"/topics/made/delete-records", form(rootToken, append(del, "confirm", "mad")...), 200, "is not")
	if s := start(); s != 0 {
		t.Fatalf("log start after unconfirmed deletes: %d", s)
	}
	expect(t, root, base+"/topics/made/delete-records", form(rootToken, append(del, "confirm", "made")...), 200, "the log now starts there")
	if s := start(); s != 2 {
		t.Fatalf("log start after the delete: %d", s)
	}

	// Delete the topic.
	expect(t, eve, base+"/topics/made/delete", form(eveToken, "confirm", "made"), 403, "DELETE")
	expect(t, root, base+"/topics/made/delete", form("", "confirm", "made"), 403, "CSRF")
	expect(t, root, base+"/topics/made/delete", form(rootToken), 200, `id="confirm"`)
	expect(t, root, base+"/topics/made/delete", form(rootToken, "confirm", "other"), 200, "is not")
	if !topicExists("made") {
		t.Fatal("an unconfirmed delete deleted the topic")
	}
	expect(t, root, base+"/topics/made/delete", form(rootToken, "confirm", "made"), 200, "deleted topic made")
	brokertest.Await(t, "the topic gone", func() error {
		if topicExists("made") {
			return errors.New("still there")
		}
		return nil
	})

	// The forms' pages.
	for _, path := range []string{"/new-topic", "/security"} {
		if code, body := getWith(t, root, base+path); code != 200 || !strings.Contains(body, `name="csrf"`) {
			t.Errorf("GET %s: %d\n%s", path, code, body)
		}
	}
}

// TestConsoleResetOffsets: the reset form shows the new offsets and
// commits them only with the group's name typed; eve (no READ on the
// group) gets 403; a group with a live member is refused as
// kafka-consumer-groups.sh refuses it (admin.ResetOffsets, shared with the
// CLI), and its offsets stay.
func TestConsoleResetOffsets(t *testing.T) {
	n, adm, base, root, eve, rootToken, eveToken := actionsSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n.CreateTopic("rt", 1, nil)
	cl := n.Client()
	for i := 0; i < 5; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "rt", Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: "rt", Partition: 0, At: 1, LeaderEpoch: -1})
	for _, g := range []string{"idle", "live"} {
		if resp, err := adm.CommitOffsets(ctx, g, offs); err != nil || resp.Error() != nil {
			t.Fatal(err, resp.Error())
		}
	}
	committed := func(g string) int64 {
		o, err := adm.FetchOffsets(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := o.Lookup("rt", 0)
		return r.At
	}
	reset := []string{"to", "latest", "topic", "rt"}
	expect(t, eve, base+"/groups/idle/reset", form(eveToken, append(reset, "confirm", "idle")...), 403, "GROUP_AUTHORIZATION_FAILED")
	expect(t, root, base+"/groups/idle/reset", form("", append(reset, "confirm", "idle")...), 403, "CSRF")
	body := expect(t, root, base+"/groups/idle/reset", form(rootToken, reset...), 200, `id="confirm"`)
	if !strings.Contains(body, `<td class="n">1</td><td class="n new">5</td>`) {
		t.Fatalf("the dry run does not show 1 -> 5:\n%s", body)
	}
	if c := committed("idle"); c != 1 {
		t.Fatalf("committed after a dry run: %d", c)
	}
	expect(t, root, base+"/groups/idle/reset", form(rootToken, append(reset, "confirm", "idle")...), 200, "committed 1 offsets")
	if c := committed("idle"); c != 5 {
		t.Fatalf("committed after the reset: %d", c)
	}
	expect(t, root, base+"/groups/idle/reset", form(rootToken, "to", "offset", "value", "2", "topic", "rt", "partitions", "0", "confirm", "idle"), 200, "committed 1 offsets")
	if c := committed("idle"); c != 2 {
		t.Fatalf("committed after a reset to offset 2: %d", c)
	}

	expect(t, root, base+"/groups/idle/reset", form(rootToken, "to", "timestamp", "value", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "confirm", "idle"), 200, "committed 1 offsets")
	if c := committed("idle"); c != 0 {
		t.Fatalf("committed after a reset to an hour ago: %d", c)
	}
	expect(t, root, base+"/groups/idle/reset", form(rootToken, "to", "shift", "value", "3", "confirm", "idle"), 200, "committed 1 offsets")
	if c := committed("idle"); c != 3 {
		t.Fatalf("committed after a shift by 3: %d", c)
	}
	expect(t, root, base+"/groups/nobody/reset", form(rootToken, reset...), 404, "GROUP_ID_NOT_FOUND")
	expect(t, root, base+"/groups/idle/reset", form(rootToken, "to", "earliest", "topic", "rt", "partitions", "7"), 400, "UNKNOWN_TOPIC_OR_PARTITION")

	// A live member.
	member := n.Client(kgo.ConsumerGroup("live"), kgo.ConsumeTopics("rt"), kgo.DisableAutoCommit())
	defer member.Close()
	go func() {
		for ctx.Err() == nil {
			if member.PollFetches(ctx).IsClientClosed() {
				return
			}
		}
	}()
	brokertest.Await(t, "group live stable", func() error {
		dg, err := adm.DescribeGroups(ctx, "live")
		if err != nil {
			return err
		}
		if g := dg["live"]; g.State != "Stable" {
			return fmt.Errorf("state %s", g.State)
		}
		return nil
	})
	expect(t, root, base+"/groups/live/reset", form(rootToken, append(reset, "confirm", "live")...), 409, "stop its consumers")
	if c := committed("live"); c != 1 {
		t.Fatalf("a live group's offset after a refused reset: %d", c)
	}
}

// TestConsoleSecurityActions: ACLs, SCRAM users and client quotas through
// the console: eve (no ALTER / ALTER_CONFIGS on the CLUSTER) gets 403 and
// nothing changes, no CSRF token 403, root's changes are seen through
// kadm, deletes without the typed name change nothing.
func TestConsoleSecurityActions(t *testing.T) {
	_, adm, base, root, eve, rootToken, eveToken := actionsSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// ACLs.
	acl := []string{"principal", "User:carol", "host", "", "permission", "ALLOW", "operation", "WRITE", "resource", "TOPIC", "name", "logs-", "pattern", "PREFIXED"}
	carolACLs := func() int {
		res, err := adm.DescribeACLs(ctx, kadm.NewACLs().Allow("User:carol").AllowHosts().AnyResource().ResourcePatternType(kadm.ACLPatternAny).Operations(kadm.OpAny))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			n += len(r.Described)
		}
		return n
	}
	expect(t, eve, base+"/security/acls", form(eveToken, acl...), 403, "CLUSTER_AUTHORIZATION_FAILED")
	expect(t, root, base+"/security/acls", form("", acl...), 403, "CSRF")
	if n := carolACLs(); n != 0 {
		t.Fatalf("carol's ACLs after refused creates: %d", n)
	}
	expect(t, root, base+"/security/acls", form(rootToken, acl...), 200, "created the ACL ALLOW User:carol WRITE on TOPIC logs- (PREFIXED)")
	if n := carolACLs(); n != 1 {
		t.Fatalf("carol's ACLs after the create: %d", n)
	}
	if code, body := getWith(t, root, base+"/security"); code != 200 || !strings.Contains(body, "<td>User:carol</td><td>*</td><td>ALLOW</td><td>WRITE</td><td>TOPIC</td><td>logs-</td><td>PREFIXED</td>") {
		t.Fatalf("the security page: %d\n%s", code, body)
	}
	if code, body := getWith(t, eve, base+"/security"); code != 200 || strings.Contains(body, "User:carol") || !strings.Contains(body, "CLUSTER_AUTHORIZATION_FAILED") {
		t.Fatalf("eve's security page: %d\n%s", code, body)
	}
	expect(t, eve, base+"/security/acls/delete", form(eveToken, append(acl, "confirm", "User:carol")...), 403, "CLUSTER_AUTHORIZATION_FAILED")
	expect(t, root, base+"/security/acls/delete", form(rootToken, acl...), 200, `id="confirm"`)
	if n := carolACLs(); n != 1 {
		t.Fatalf("carol's ACLs after an unconfirmed delete: %d", n)
	}
	expect(t, root, base+"/security/acls/delete", form(rootToken, append(acl, "confirm", "User:carol")...), 200, "deleted the ACL")
	if n := carolACLs(); n != 0 {
		t.Fatalf("carol's ACLs after the delete: %d", n)
	}

	// SCRAM users.
	users := func() map[string]bool {
		us, err := adm.DescribeUserSCRAMs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for u, d := range us {
			if d.Err == nil && len(d.CredInfos) > 0 {
				out[u] = true
			}
		}
		return out
	}
	user := []string{"user", "carol", "password", "carol-pw", "mechanism", "SCRAM-SHA-256"}
	expect(t, eve, base+"/security/users", form(eveToken, user...), 403, "CLUSTER_AUTHORIZATION_FAILED")
	expect(t, root, base+"/security/users", form("", user...), 403, "CSRF")
	if users()["carol"] {
		t.Fatal("carol exists after refused creates")
	}
	expect(t, root, base+"/security/users", form(rootToken, user...), 200, "set the SCRAM-SHA-256 password of carol")
	if !users()["carol"] {
		t.Fatal("no carol after the create")
	}
	del := []string{"user", "carol", "mechanism", "SCRAM-SHA-256"}
	expect(t, eve, base+"/security/users/delete", form(eveToken, append(del, "confirm", "carol")...), 403, "CLUSTER_AUTHORIZATION_FAILED")
	expect(t, root, base+"/security/users/delete", form(rootToken, del...), 200, `id="confirm"`)
	if !users()["carol"] {
		t.Fatal("carol gone after an unconfirmed delete")
	}
	expect(t, root, base+"/security/users/delete", form(rootToken, append(del, "confirm", "carol")...), 200, "deleted the SCRAM-SHA-256 credential of carol")
	if users()["carol"] {
		t.Fatal("carol still there after the delete")
	}

	// Quotas.
	quota := func() float64 {
		name := "carol"
		qs, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "user", MatchName: &name}})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			for _, v := range q.Values {
				if v.Key == "producer_byte_rate" {
					return v.Value
				}
			}
		}
		return -1
	}
	q := []string{"entity", "user", "name", "carol", "key", "producer_byte_rate", "value", "1048576"}
	expect(t, eve, base+"/security/quotas", form(eveToken, q...), 403, "ALTER_CONFIGS")
	expect(t, root, base+"/security/quotas", form("", q...), 403, "CSRF")
	if v := quota(); v != -1 {
		t.Fatalf("carol's quota after refused sets: %v", v)
	}
	expect(t, root, base+"/security/quotas", form(rootToken, q...), 200, "set the quota producer_byte_rate=1048576 for user=carol")
	if v := quota(); v != 1048576 {
		t.Fatalf("carol's quota after the set: %v", v)
	}
	expect(t, root, base+"/security/quotas", form(rootToken, "entity", "user", "name", "carol", "key", "producer_byte_rate", "remove", "1"), 200, "removed the quota")
	if v := quota(); v != -1 {
		t.Fatalf("carol's quota after the remove: %v", v)
	}
}

// TestConsoleActionsNoGate: without logins (the cluster's clients need
// none) anyone who reaches the console may act, as on the Kafka listener;
// with ReadOnly (--console-actions=false) nothing may, and the pages offer
// no forms.
func TestConsoleActionsNoGate(t *testing.T) {
	n := brokertest.Start(t)
	adm := kadm.NewClient(n.Client(kgo.MetadataMinAge(50 * time.Millisecond)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, readOnly := range []bool{false, true} { // no topics yet: the topics page still offers to create one
		c, err := console.New(console.Config{Broker: n.B, Seeds: []string{n.Addr}, ReadOnly: readOnly})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(c)
		name := fmt.Sprintf("open-%v", readOnly)
		_, page := getWith(t, http.DefaultClient, srv.URL+"/topics")
		code, body := postWith(t, http.DefaultClient, srv.URL+"/topics", form("", "name", name, "partitions", "1"))
		srv.Close()
		c.Close()
		td, err := adm.ListTopics(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		d, made := td[name]
		made = made && d.Err == nil
		switch {
		case !readOnly && (code != 200 || !made || !strings.Contains(page, `id="create-topic"`)):
			t.Errorf("without a gate: %d, made %v\n%s\n%s", code, made, body, page)
		case readOnly && (code != 403 || made || strings.Contains(page, `id="create-topic"`) || !strings.Contains(body, "--console-actions=false")):
			t.Errorf("read-only: %d, made %v\n%s\n%s", code, made, body, page)
		}
	}
}
