package broker_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/quota"
	"holdfast/internal/wire"
)

func strp(s string) *string { return &s }

// quotaSet is a kadm entry setting one key of an entity.
func quotaSet(entity kadm.ClientQuotaEntity, key string, v float64) kadm.AlterClientQuotaEntry {
	return kadm.AlterClientQuotaEntry{Entity: entity, Ops: []kadm.AlterClientQuotaOp{{Key: key, Value: v}}}
}

// describedQuotas renders a describe answer as sorted "entity: key=value" lines.
func describedQuotas(d kadm.DescribedClientQuotas) []string {
	var out []string
	for _, e := range d {
		var vals []string
		for _, v := range e.Values {
			vals = append(vals, fmt.Sprintf("%s=%g", v.Key, v.Value))
		}
		sort.Strings(vals)
		out = append(out, strings.Trim(e.Entity.String(), "{}")+": "+strings.Join(vals, ","))
	}
	sort.Strings(out)
	return out
}

func describeAll(t testing.TB, adm *kadm.Client, strict bool, comps ...kadm.DescribeClientQuotaComponent) []string {
	t.Helper()
	d, err := adm.DescribeClientQuotas(adminCtx(t), strict, comps)
	mustNil(t, "describe client quotas", err)
	return describedQuotas(d)
}

func sameLines(t testing.TB, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// TestClientQuotasAdmin: AlterClientQuotas and DescribeClientQuotas through
// kadm, with Kafka's validation, filters and errors, and the quotas
// surviving a restart.
func TestClientQuotasAdmin(t *testing.T) {
	n := brokertest.Start(t)
	adm := n.Admin()
	ctx := adminCtx(t)
	alice := kadm.ClientQuotaEntity{{Type: "user", Name: strp("alice")}}
	aliceAnyClient := kadm.ClientQuotaEntity{{Type: "user", Name: strp("alice")}, {Type: "client-id"}}
	app := kadm.ClientQuotaEntity{{Type: "client-id", Name: strp("app")}}
	defClient := kadm.ClientQuotaEntity{{Type: "client-id"}}

	res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		quotaSet(alice, "producer_byte_rate", 1024),
		{Entity: aliceAnyClient, Ops: []kadm.AlterClientQuotaOp{{Key: "consumer_byte_rate", Value: 2048}, {Key: "request_percentage", Value: 12.5}}},
		quotaSet(app, "request_percentage", 50.5),
		quotaSet(defClient, "controller_mutation_rate", 10),
	})
	mustNil(t, "alter", err)
	for _, r := range res {
		mustNil(t, "alter "+r.Entity.String(), r.Err)
	}
	all := []string{
		"client-id=<default>: controller_mutation_rate=10",
		"client-id=app: request_percentage=50.5",
		"user=alice, client-id=<default>: consumer_byte_rate=2048,request_percentage=12.5",
		"user=alice: producer_byte_rate=1024",
	}
	sameLines(t, "everything", describeAll(t, adm, false), all...)

	// Validate-only changes nothing; bad entries get Kafka's errors and
	// leave the good ones of the same request alone.
	res, err = adm.ValidateAlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{quotaSet(app, "producer_byte_rate", 99)})
	mustNil(t, "validate-only", err)
	mustNil(t, "validate-only entry", res[0].Err)
	bad := map[string]kadm.AlterClientQuotaEntry{
		"fractional byte rate": quotaSet(app, "producer_byte_rate", 1.5),
		"unknown key":          quotaSet(app, "bananas_per_second", 1),
		"zero rate":            quotaSet(app, "consumer_byte_rate", 0),
		"ip with user":         quotaSet(kadm.ClientQuotaEntity{{Type: "ip", Name: strp("10.0.0.1")}, {Type: "user", Name: strp("a")}}, "connection_creation_rate", 5),
		"ip host name":         quotaSet(kadm.ClientQuotaEntity{{Type: "ip", Name: strp("not-an-address")}}, "connection_creation_rate", 5),
		"byte rate of an ip":   quotaSet(kadm.ClientQuotaEntity{{Type: "ip", Name: strp("10.0.0.1")}}, "producer_byte_rate", 5),
		"fractional conn rate": quotaSet(kadm.ClientQuotaEntity{{Type: "ip"}}, "connection_creation_rate", 2.5),
		"conn rate of a user":  quotaSet(alice, "connection_creation_rate", 5),
		"unknown entity type":  quotaSet(kadm.ClientQuotaEntity{{Type: "group", Name: strp("g")}}, "producer_byte_rate", 5),
		"empty name":           quotaSet(kadm.ClientQuotaEntity{{Type: "user", Name: strp("")}}, "producer_byte_rate", 5),
		"duplicate type":       quotaSet(kadm.ClientQuotaEntity{{Type: "user", Name: strp("a")}, {Type: "user", Name: strp("b")}}, "producer_byte_rate", 5),
		"duplicate key":        {Entity: app, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 5}, {Key: "producer_byte_rate", Remove: true}}},
	}
	for what, e := range bad {
		res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{e, quotaSet(kadm.ClientQuotaEntity{{Type: "user", Name: strp("good-" + strings.ReplaceAll(what, " ", "-"))}}, "producer_byte_rate", 7)})
		mustNil(t, what, err)
		if len(res) != 2 || !errors.Is(res[0].Err, kerr.InvalidRequest) || res[1].Err != nil {
			t.Fatalf("%s: results %+v, want INVALID_REQUEST then success", what, res)
		}
	}
	sameLines(t, "after refused alterations", describeAll(t, adm, false, kadm.DescribeClientQuotaComponent{Type: "client-id", MatchName: strp("app")}),
		"client-id=app: request_percentage=50.5")

	// Filters: exact, default, any; strict drops entities with more types.
	sameLines(t, "user=alice", describeAll(t, adm, false, kadm.DescribeClientQuotaComponent{Type: "user", MatchName: strp("alice")}), all[2:]...)
	sameLines(t, "user=alice strict", describeAll(t, adm, true, kadm.DescribeClientQuotaComponent{Type: "user", MatchName: strp("alice")}), all[3])
	sameLines(t, "client-id default", describeAll(t, adm, false, kadm.DescribeClientQuotaComponent{Type: "client-id", MatchType: kmsg.QuotasMatchTypeDefault}), all[0], all[2])
	sameLines(t, "any client-id, strict", describeAll(t, adm, true, kadm.DescribeClientQuotaComponent{Type: "client-id", MatchType: kmsg.QuotasMatchTypeAny}), all[0], all[1])
	sameLines(t, "user alice and any client-id", describeAll(t, adm, true,
		kadm.DescribeClientQuotaComponent{Type: "user", MatchName: strp("alice")},
		kadm.DescribeClientQuotaComponent{Type: "client-id", MatchType: kmsg.QuotasMatchTypeAny}), all[2])
	sameLines(t, "no such user", describeAll(t, adm, false, kadm.DescribeClientQuotaComponent{Type: "user", MatchName: strp("bob")}))

	for what, c := range map[string]struct {
		comps []kmsg.DescribeClientQuotasRequestComponent
		want  error
	}{
		"duplicate type":     {[]kmsg.DescribeClientQuotasRequestComponent{{EntityType: "user", MatchType: 2}, {EntityType: "user", MatchType: 1}}, kerr.InvalidRequest},
		"unknown type":       {[]kmsg.DescribeClientQuotasRequestComponent{{EntityType: "topic", MatchType: 2}}, kerr.UnsupportedVersion},
		"exact without name": {[]kmsg.DescribeClientQuotasRequestComponent{{EntityType: "user", MatchType: 0}}, kerr.InvalidRequest},
		"ip with user":       {[]kmsg.DescribeClientQuotasRequestComponent{{EntityType: "ip", MatchType: 2}, {EntityType: "user", MatchType: 2}}, kerr.InvalidRequest},
	} {
		req := kmsg.NewPtrDescribeClientQuotasRequest()
		req.Components = c.comps
		resp, err := req.RequestWith(ctx, n.Client())
		mustNil(t, what, err)
		if got := kerr.ErrorForCode(resp.ErrorCode); !errors.Is(got, c.want) || resp.ErrorMessage == nil {
			t.Fatalf("%s: error %v (%v), want %v", what, got, resp.ErrorMessage, c.want)
		}
	}

	// ip entities (KIP-612, kafka-configs --entity-type ips): a named
	// address and the default, alone, connection_creation_rate only;
	// filtered by type like the others, never with user or client-id.
	ip, defIP := kadm.ClientQuotaEntity{{Type: "ip", Name: strp("10.0.0.1")}}, kadm.ClientQuotaEntity{{Type: "ip"}}
	res, err = adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{quotaSet(ip, "connection_creation_rate", 5), quotaSet(defIP, "connection_creation_rate", 100)})
	mustNil(t, "alter ip", err)
	for _, r := range res {
		mustNil(t, "alter "+r.Entity.String(), r.Err)
	}
	sameLines(t, "any ip", describeAll(t, adm, false, kadm.DescribeClientQuotaComponent{Type: "ip", MatchType: kmsg.QuotasMatchTypeAny}),
		"ip=10.0.0.1: connection_creation_rate=5", "ip=<default>: connection_creation_rate=100")
	sameLines(t, "ip default", describeAll(t, adm, false, kadm.DescribeClientQuotaComponent{Type: "ip", MatchType: kmsg.QuotasMatchTypeDefault}),
		"ip=<default>: connection_creation_rate=100")
	sameLines(t, "ip exact", describeAll(t, adm, true, kadm.DescribeClientQuotaComponent{Type: "ip", MatchName: strp("10.0.0.1")}),
		"ip=10.0.0.1: connection_creation_rate=5")
	sameLines(t, "user=alice leaves ips out", describeAll(t, adm, false, kadm.DescribeClientQuotaComponent{Type: "user", MatchName: strp("alice")}), all[2:]...)

	// Removing the last key forgets the entity.
	res, err = adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{Entity: alice, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Remove: true}}}})
	mustNil(t, "remove", err)
	mustNil(t, "remove entry", res[0].Err)
	sameLines(t, "user=alice strict after remove", describeAll(t, adm, true, kadm.DescribeClientQuotaComponent{Type: "user", MatchName: strp("alice")}))

	// The quotas are in the metadata: a restart keeps them, and the
	// broker throttles from them again.
	before := describeAll(t, adm, false)
	n.Restart()
	sameLines(t, "after restart", describeAll(t, n.Admin(), false), before...)
	if !strings.Contains(strings.Join(before, "\n"), "ip=10.0.0.1: connection_creation_rate=5") {
		t.Fatalf("the ip quota was not among those that survived the restart: %q", before)
	}
}

// TestClientQuotasSaramaAndKafkaGo: the other two clients' admin APIs
// set and read the same quotas.
func TestClientQuotasSaramaAndKafkaGo(t *testing.T) {
	n := brokertest.Start(t)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	ca, err := sarama.NewClusterAdmin([]string{n.Addr}, cfg)
	mustNil(t, "sarama admin", err)
	defer ca.Close()
	mustNil(t, "sarama alter", ca.AlterClientQuotas(
		[]sarama.QuotaEntityComponent{{EntityType: sarama.QuotaEntityUser, MatchType: sarama.QuotaMatchExact, Name: "carol"}},
		sarama.ClientQuotasOp{Key: "producer_byte_rate", Value: 4096}, false))
	mustNil(t, "sarama alter default client", ca.AlterClientQuotas(
		[]sarama.QuotaEntityComponent{{EntityType: sarama.QuotaEntityClientID, MatchType: sarama.QuotaMatchDefault}},
		sarama.ClientQuotasOp{Key: "consumer_byte_rate", Value: 8192}, false))
	err = ca.AlterClientQuotas([]sarama.QuotaEntityComponent{{EntityType: sarama.QuotaEntityUser, MatchType: sarama.QuotaMatchExact, Name: "carol"}},
		sarama.ClientQuotasOp{Key: "producer_byte_rate", Value: 1.25}, false)
	if err == nil || !strings.Contains(err.Error(), "must be a Long value") { // sarama returns the message alone
		t.Fatalf("sarama fractional byte rate: %v, want Kafka's INVALID_REQUEST message", err)
	}
	entries, err := ca.DescribeClientQuotas([]sarama.QuotaFilterComponent{{EntityType: sarama.QuotaEntityUser, MatchType: sarama.QuotaMatchExact, Match: "carol"}}, false)
	mustNil(t, "sarama describe", err)
	if len(entries) != 1 || entries[0].Entity[0].Name != "carol" || entries[0].Values["producer_byte_rate"] != 4096 {
		t.Fatalf("sarama describe: %+v", entries)
	}

	cl := &kafkago.Client{Addr: kafkago.TCP(n.Addr), Timeout: 30 * time.Second}
	ctx := adminCtx(t)
	ares, err := cl.AlterClientQuotas(ctx, &kafkago.AlterClientQuotasRequest{Entries: []kafkago.AlterClientQuotaEntry{{
		Entities: []kafkago.AlterClientQuotaEntity{{EntityType: "client-id", EntityName: "dave-app"}},
		Ops:      []kafkago.AlterClientQuotaOps{{Key: "request_percentage", Value: 25}},
	}}})
	mustNil(t, "kafka-go alter", err)
	if len(ares.Entries) != 1 || ares.Entries[0].Error != nil {
		t.Fatalf("kafka-go alter: %+v", ares.Entries)
	}
	dres, err := cl.DescribeClientQuotas(ctx, &kafkago.DescribeClientQuotasRequest{
		Components: []kafkago.DescribeClientQuotasRequestComponent{{EntityType: "client-id", MatchType: 0, Match: "dave-app"}}})
	mustNil(t, "kafka-go describe", err)
	if dres.Error != nil || len(dres.Entries) != 1 || len(dres.Entries[0].Values) != 1 || dres.Entries[0].Values[0].Value != 25 {
		t.Fatalf("kafka-go describe: %+v", dres)
	}
	// And each sees the others' quotas.
	sameLines(t, "kadm sees all", describeAll(t, n.Admin(), false),
		"client-id=<default>: consumer_byte_rate=8192",
		"client-id=dave-app: request_percentage=25",
		"user=carol: producer_byte_rate=4096")
}

// throttleCounter counts the throttled responses a client sees.
type throttleCounter struct {
	n   atomic.Int64
	max atomic.Int64
}

func (c *throttleCounter) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	c.n.Add(1)
	for {
		old := c.max.Load()
		if int64(d) <= old || c.max.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// The quota windows the throttle tests run with: Kafka's eleven samples,
// of 50 ms instead of a second, so that a burst the window allows is small
// against the measured span.
func testQuotaWindows(c *broker.Config, _ *wire.Limits) {
	c.Quotas = quota.Config{WindowNum: 11, WindowSize: 50 * time.Millisecond}
}

// awaitQuota waits until every node's metadata has the quota.
func awaitQuota(t testing.TB, nodes []*brokertest.Node, client, key string) {
	brokertest.Await(t, "the quota on every node", func() error {
		for _, n := range nodes {
			req := kmsg.NewPtrDescribeClientQuotasRequest()
			req.Components = []kmsg.DescribeClientQuotasRequestComponent{{EntityType: "client-id", MatchType: 0, Match: &client}}
			resp, err := n.Request(req)
			if err != nil {
				return err
			}
			d := resp.(*kmsg.DescribeClientQuotasResponse)
			if len(d.Entries) != 1 || len(d.Entries[0].Values) != 1 || d.Entries[0].Values[0].Key != key {
				return fmt.Errorf("node %d: %+v", n.Cfg.NodeID, d.Entries)
			}
		}
		return nil
	})
}

// ackedRate produces 1000-byte records as fast as the broker lets a client
// with this id, for warm+span, and returns the value bytes per second
// acknowledged within the last span.
func ackedRate(t *testing.T, addrs []string, topic, clientID string, warm, span time.Duration, hooks *throttleCounter) float64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ClientID(clientID), kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchMaxBytes(16<<10), kgo.ProducerLinger(0), kgo.WithHooks(hooks), kgo.RequestRetries(100),
		kgo.ProducerBatchCompression(kgo.NoCompression())) // the quota counts request bytes: what is measured must be what is sent
	mustNil(t, "client", err)
	defer cl.Close()
	var (
		mu       sync.Mutex
		inSpan   int64
		failures int
	)
	start := time.Now()
	from, until := start.Add(warm), start.Add(warm+span)
	val := make([]byte, 1000)
	rand.Read(val)
	sem := make(chan struct{}, 64)
	for time.Now().Before(until) {
		sem <- struct{}{}
		cl.Produce(context.Background(), &kgo.Record{Value: val}, func(_ *kgo.Record, err error) {
			<-sem
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures++
				return
			}
			if now.After(from) && now.Before(until) {
				inSpan += int64(len(val))
			}
		})
	}
	cl.Flush(context.Background())
	if failures > 0 {
		t.Fatalf("%s: %d records failed", clientID, failures)
	}
	return float64(inSpan) / span.Seconds()
}

// checkProduceQuota: a producer over its producer_byte_rate is held to
// it, measured by what the client gets acknowledged over a span much
// longer than the quota window; a producer with another client id on the
// same brokers is never throttled.
func checkProduceQuota(t *testing.T, nodes []*brokertest.Node) {
	const q = 256 << 10
	adm := nodes[0].Admin()
	res, err := adm.AlterClientQuotas(adminCtx(t), []kadm.AlterClientQuotaEntry{
		quotaSet(kadm.ClientQuotaEntity{{Type: "client-id", Name: strp("slow")}}, "producer_byte_rate", q)})
	mustNil(t, "set quota", err)
	mustNil(t, "set quota entry", res[0].Err)
	awaitQuota(t, nodes, "slow", "producer_byte_rate")

	var slowHooks, fastHooks throttleCounter
	var wg sync.WaitGroup
	wg.Go(func() {
		// Meanwhile, a client with no quota on the same brokers and topic.
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokertest.Addrs(nodes)...), kgo.ClientID("fast"),
			kgo.DefaultProduceTopic("quota-t"), kgo.WithHooks(&fastHooks))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		val := make([]byte, 1000)
		for range 20 {
			rs := make([]*kgo.Record, 100)
			for i := range rs {
				rs[i] = &kgo.Record{Value: val}
			}
			if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	// Kafka's sampled rate lets a client burst up to a window span's worth
	// (11 x 50 ms) whenever old samples expire: over any span T the excess
	// is at most span/T, here 0.55/12 < 5 %.
	rate := ackedRate(t, brokertest.Addrs(nodes), "quota-t", "slow", time.Second, 12*time.Second, &slowHooks)
	wg.Wait()
	t.Logf("producer_byte_rate %d B/s: measured %.0f B/s (%.3f of the quota) over 12 s; %d throttled responses, longest %v",
		q, rate, rate/q, slowHooks.n.Load(), time.Duration(slowHooks.max.Load()))
	if slowHooks.n.Load() == 0 {
		t.Fatal("the producer over its quota was never throttled")
	}
	if rate > q*1.1 {
		t.Fatalf("producer over its quota acknowledged %.0f B/s, more than 1.1 x %d", rate, q)
	}
	if n := fastHooks.n.Load(); n != 0 {
		t.Fatalf("the producer without a quota saw %d throttled responses", n)
	}
}

func TestProduceQuotaThrottles(t *testing.T) {
	n := brokertest.Start(t, testQuotaWindows)
	n.CreateTopic("quota-t", 1, nil)
	checkProduceQuota(t, []*brokertest.Node{n})

	// consumer_byte_rate: a consumer of what was just produced is held
	// to its rate too; throttled fetches come back empty, nothing is
	// skipped.
	const q = 256 << 10
	res, err := n.Admin().AlterClientQuotas(adminCtx(t), []kadm.AlterClientQuotaEntry{
		quotaSet(kadm.ClientQuotaEntity{{Type: "client-id", Name: strp("slowc")}}, "consumer_byte_rate", q)})
	mustNil(t, "set consumer quota", err)
	mustNil(t, "set consumer quota entry", res[0].Err)
	var hooks throttleCounter
	// Fetches well under a window's worth (the quota caps one at 10
	// windows, 128 KiB here): with responses that large, each must wait
	// for the previous one's sample to expire.
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr), kgo.ClientID("slowc"), kgo.ConsumeTopics("quota-t"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithHooks(&hooks),
		kgo.FetchMaxBytes(32<<10), kgo.FetchMaxPartitionBytes(32<<10))
	mustNil(t, "consumer", err)
	defer cl.Close()
	start := time.Now()
	from, until := start.Add(time.Second), start.Add(9*time.Second)
	var inSpan int64
	next := int64(0)
	for time.Now().Before(until) {
		ctx, cancel := context.WithDeadline(context.Background(), until)
		fs := cl.PollFetches(ctx)
		cancel()
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != next {
				t.Fatalf("consumed offset %d, want %d", r.Offset, next)
			}
			next++
			if now.After(from) && now.Before(until) {
				inSpan += int64(len(r.Value))
			}
		})
	}
	rate := float64(inSpan) / 8
	t.Logf("consumer_byte_rate %d B/s: measured %.0f B/s (%.3f of the quota) over 8 s; %d throttled responses", q, rate, rate/q, hooks.n.Load())
	if hooks.n.Load() == 0 {
		t.Fatal("the consumer over its quota was never throttled")
	}
	if rate > q*1.1 {
		t.Fatalf("consumer over its quota received %.0f B/s, more than 1.1 x %d", rate, q)
	}
}

func TestProduceQuotaThrottlesCluster(t *testing.T) {
	c := brokertest.NewCluster(t, 3, testQuotaWindows)
	brokertest.CreateClusterTopic(t, c.Nodes, "quota-t", 1, 3, nil)
	checkProduceQuota(t, c.Nodes)
}

// TestRequestPercentageQuota: a client over its request_percentage gets
// throttle_time_ms; another client is not throttled.
func TestRequestPercentageQuota(t *testing.T) {
	n := brokertest.Start(t, testQuotaWindows)
	res, err := n.Admin().AlterClientQuotas(adminCtx(t), []kadm.AlterClientQuotaEntry{
		quotaSet(kadm.ClientQuotaEntity{{Type: "client-id", Name: strp("chatty")}}, "request_percentage", 0.001)})
	mustNil(t, "set quota", err)
	mustNil(t, "set quota entry", res[0].Err)
	throttled := func(clientID string, tries int) int32 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr), kgo.ClientID(clientID))
		mustNil(t, "client", err)
		defer cl.Close()
		for range tries {
			resp, err := kmsg.NewPtrMetadataRequest().RequestWith(adminCtx(t), cl)
			mustNil(t, "metadata", err)
			if resp.ThrottleMillis > 0 {
				return resp.ThrottleMillis
			}
		}
		return 0
	}
	if ms := throttled("chatty", 500); ms <= 0 || ms > 50 {
		t.Fatalf("client over request_percentage: throttle %d ms, want 1..50 (one window)", ms)
	}
	if ms := throttled("quiet", 200); ms != 0 {
		t.Fatalf("client without a quota throttled %d ms", ms)
	}
}

// TestControllerMutationQuota: KIP-599. CreateTopics over the burst is
// accepted once, then refused with THROTTLING_QUOTA_EXCEEDED (strict
// versions) until the bucket refills; other clients are not affected.
func TestControllerMutationQuota(t *testing.T) {
	n := brokertest.Start(t)
	res, err := n.Admin().AlterClientQuotas(adminCtx(t), []kadm.AlterClientQuotaEntry{
		quotaSet(kadm.ClientQuotaEntity{{Type: "client-id", Name: strp("creator")}}, "controller_mutation_rate", 1)})
	mustNil(t, "set quota", err)
	mustNil(t, "set quota entry", res[0].Err)
	create := func(cl *kgo.Client, topics ...string) *kmsg.CreateTopicsResponse {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 30000
		for _, tp := range topics {
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = tp, 15, 1
			req.Topics = append(req.Topics, rt)
		}
		resp, err := cl.Request(adminCtx(t), req)
		mustNil(t, "create topics", err)
		return resp.(*kmsg.CreateTopicsResponse)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr), kgo.ClientID("creator"))
	mustNil(t, "client", err)
	defer cl.Close()
	// The burst is 11 windows of 1 s at 1/s: 11 partitions. 15 are
	// accepted (the bucket goes 4 into debt), the next topic is not.
	resp := create(cl, "mut-a", "mut-b")
	if resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("first topic: %v", kerr.ErrorForCode(resp.Topics[0].ErrorCode))
	}
	if got := kerr.ErrorForCode(resp.Topics[1].ErrorCode); !errors.Is(got, kerr.ThrottlingQuotaExceeded) {
		t.Fatalf("second topic: %v, want THROTTLING_QUOTA_EXCEEDED", got)
	}
	if resp.ThrottleMillis < 3000 || resp.ThrottleMillis > 4000 {
		t.Fatalf("throttle %d ms, want about 4000 (4 partitions in debt at 1/s)", resp.ThrottleMillis)
	}
	// Another client id has no quota.
	other, err := kgo.NewClient(kgo.SeedBrokers(n.Addr), kgo.ClientID("other"))
	mustNil(t, "client", err)
	defer other.Close()
	if resp := create(other, "mut-c"); resp.Topics[0].ErrorCode != 0 || resp.ThrottleMillis != 0 {
		t.Fatalf("other client: %v, throttle %d", kerr.ErrorForCode(resp.Topics[0].ErrorCode), resp.ThrottleMillis)
	}
}

// TestQuotaAndLogDirAuthorization: the new APIs ask what Kafka asks -
// ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster for client quotas,
// DESCRIBE on the cluster for DescribeLogDirs, DESCRIBE per topic for
// DescribeTopicPartitions - and a user quota applies to the SASL
// principal's name.
func TestQuotaAndLogDirAuthorization(t *testing.T) {
	s := newSecureSetup(t)
	n, _ := startSecureNode(t, s)
	ctx := testCtx(t)
	addr := n.Addrs["SASL"]
	adm := kadm.NewClient(scramClient(t, addr, "admin", adminPass))
	up, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "alice-secret"}})
	if err != nil || up.Error() != nil {
		t.Fatalf("creating alice: %v %v", err, up.Error())
	}
	for _, topic := range []string{"A", "B"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	mustACL(t, adm, kadm.NewACLs().Allow("User:alice").Topics("A").Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral))
	var hooks throttleCounter
	alice := scramClient(t, addr, "alice", "alice-secret", kgo.WithHooks(&hooks), kgo.DefaultProduceTopic("A"),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	aliceAdm := kadm.NewClient(alice)

	aliceEntity := kadm.ClientQuotaEntity{{Type: "user", Name: strp("alice")}}
	res, err := aliceAdm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{quotaSet(aliceEntity, "producer_byte_rate", 1000)})
	if err != nil || !errors.Is(res[0].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alice alters quotas: %v %+v", err, res)
	}
	if _, err := aliceAdm.DescribeClientQuotas(ctx, false, nil); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alice describes quotas: %v", err)
	}
	lreq := kmsg.NewPtrDescribeLogDirsRequest()
	// To the broker itself: kgo merges a DescribeLogDirs sent to the
	// client across brokers, and the top-level error with it.
	if kresp, err := alice.Broker(int(n.Cfg.NodeID)).Request(ctx, lreq); err != nil ||
		kresp.(*kmsg.DescribeLogDirsResponse).ErrorCode != kerr.ClusterAuthorizationFailed.Code || len(kresp.(*kmsg.DescribeLogDirsResponse).Dirs) != 0 {
		t.Fatalf("alice describes log dirs: %v %+v", err, kresp)
	}
	if got := page(describeTopicPartitions(t, alice, 100, nil)); got != "A:0 " {
		t.Fatalf("alice's DescribeTopicPartitions of every topic: %q, want A only", got)
	}
	if got := page(describeTopicPartitions(t, alice, 100, nil, "A", "B")); got != "A:0 B!TOPIC_AUTHORIZATION_FAILED: " {
		t.Fatalf("alice's DescribeTopicPartitions of A and B: %q", got)
	}

	// The admin sets alice's quota; it applies to her principal.
	res, err = adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{quotaSet(aliceEntity, "producer_byte_rate", 1000)})
	if err != nil || res[0].Err != nil {
		t.Fatalf("admin alters quotas: %v %+v", err, res)
	}
	if err := alice.ProduceSync(ctx, &kgo.Record{Value: make([]byte, 30000)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if hooks.n.Load() == 0 {
		t.Fatal("alice's produce over her user quota was not throttled")
	}
	// With DESCRIBE_CONFIGS and DESCRIBE on the cluster she can read both.
	mustACL(t, adm, kadm.NewACLs().Allow("User:alice").Clusters().Operations(kadm.OpDescribeConfigs, kadm.OpDescribe).ResourcePatternType(kadm.ACLPatternLiteral))
	other := kadm.NewClient(scramClient(t, addr, "alice", "alice-secret"))
	if d, err := other.DescribeClientQuotas(ctx, false, nil); err != nil || len(d) != 1 {
		t.Fatalf("alice with DESCRIBE_CONFIGS: %v %+v", err, d)
	}
	if dirs, err := other.DescribeBrokerLogDirs(ctx, n.Cfg.NodeID, nil); err != nil || dirs.Error() != nil || len(dirs) != 1 {
		t.Fatalf("alice with DESCRIBE on the cluster: %v %+v", err, dirs)
	}
}
