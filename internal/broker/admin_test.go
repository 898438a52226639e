package broker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/storage"
	"holdfast/internal/wire"
)

func adminCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func cval(c kadm.Config) string { return c.MaybeValue() }

func mustNil(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func wantErr(t testing.TB, what string, got, want error) {
	t.Helper()
	if !errors.Is(got, want) {
		t.Fatalf("%s: error %v, want %v", what, got, want)
	}
}

func TestAdminCreateListDeleteTopics(t *testing.T) {
	n := brokertest.Start(t)
	adm := n.Admin()
	ctx := adminCtx(t)

	resp, err := adm.CreateTopic(ctx, 3, 1, map[string]*string{"retention.ms": kadm.StringPtr("60000")}, "orders")
	mustNil(t, "create orders", err)
	if resp.ID == (kadm.TopicID{}) || resp.NumPartitions != 3 || resp.ReplicationFactor != 1 {
		t.Fatalf("create response %+v: want an id, 3 partitions, RF 1", resp)
	}
	if c := resp.Configs["retention.ms"]; cval(c) != "60000" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Fatalf("create response config retention.ms = %+v", c)
	}
	if c := resp.Configs["cleanup.policy"]; cval(c) != "delete" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("create response config cleanup.policy = %+v", c)
	}
	_, err = adm.CreateTopic(ctx, -1, -1, nil, "defaults")
	mustNil(t, "create with defaults", err)

	// Refusals, each with Kafka's error code.
	for _, tc := range []struct {
		name       string
		partitions int32
		rf         int16
		configs    map[string]*string
		want       error
	}{
		{"orders", 1, 1, nil, kerr.TopicAlreadyExists},
		{"", 1, 1, nil, kerr.InvalidTopicException},
		{".", 1, 1, nil, kerr.InvalidTopicException},
		{"..", 1, 1, nil, kerr.InvalidTopicException},
		{"bad/name", 1, 1, nil, kerr.InvalidTopicException},
		{"bad name", 1, 1, nil, kerr.InvalidTopicException},
		{strings.Repeat("x", 250), 1, 1, nil, kerr.InvalidTopicException},
		{"rf2", 1, 2, nil, kerr.InvalidReplicationFactor},
		{"rf0", 1, 0, nil, kerr.InvalidReplicationFactor},
		{"p0", 0, 1, nil, kerr.InvalidPartitions},
		{"p-2", -2, 1, nil, kerr.InvalidPartitions},
		{"huge", 1 << 20, 1, nil, kerr.PolicyViolation},
		{"unknown-config", 1, 1, map[string]*string{"no.such.config": kadm.StringPtr("1")}, kerr.InvalidConfig},
		{"bad-value", 1, 1, map[string]*string{"retention.ms": kadm.StringPtr("soon")}, kerr.InvalidConfig},
		{"bad-enum", 1, 1, map[string]*string{"message.timestamp.type": kadm.StringPtr("Now")}, kerr.InvalidConfig},
		{"bad-policy", 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("delete,shred")}, kerr.InvalidConfig},
		{"orders.x", 1, 1, nil, nil},                        // control: legal
		{"orders_x", 1, 1, nil, kerr.InvalidTopicException}, // collides with orders.x
	} {
		_, err := adm.CreateTopic(ctx, tc.partitions, tc.rf, tc.configs, tc.name)
		if tc.want == nil {
			mustNil(t, "create "+tc.name, err)
			continue
		}
		wantErr(t, "create "+tc.name, err, tc.want)
	}
	name249 := strings.Repeat("y", 249)
	_, err = adm.CreateTopic(ctx, 1, 1, nil, name249)
	mustNil(t, "create a 249-character name", err)

	// Validate-only: the full answer, nothing created.
	vresp, err := adm.ValidateCreateTopics(ctx, 4, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, "dry-run")
	mustNil(t, "validate-only create", err)
	if r := vresp["dry-run"]; r.Err != nil || r.NumPartitions != 4 || cval(r.Configs["cleanup.policy"]) != "compact" {
		t.Fatalf("validate-only response %+v", r)
	}
	vresp, err = adm.ValidateCreateTopics(ctx, 1, 3, nil, "dry-run")
	mustNil(t, "validate-only request", err)
	wantErr(t, "validate-only RF 3", vresp["dry-run"].Err, kerr.InvalidReplicationFactor)

	topics, err := adm.ListTopics(ctx)
	mustNil(t, "list", err)
	for _, want := range []string{"orders", "defaults", "orders.x", name249} {
		if _, ok := topics[want]; !ok {
			t.Fatalf("list: %s missing from %v", want, topics.Names())
		}
	}
	if _, ok := topics["dry-run"]; ok {
		t.Fatal("validate-only create created the topic")
	}
	od := topics["orders"]
	if od.ID != resp.ID || len(od.Partitions) != 3 {
		t.Fatalf("metadata for orders: id %v partitions %d, want %v and 3", od.ID, len(od.Partitions), resp.ID)
	}
	for _, p := range od.Partitions {
		if p.Err != nil || p.Leader != n.Cfg.NodeID || len(p.Replicas) != 1 || len(p.ISR) != 1 || p.LeaderEpoch < 0 {
			t.Fatalf("partition %+v: want led by node %d with replicas = isr = [node]", p, n.Cfg.NodeID)
		}
	}
	if d := topics["defaults"]; len(d.Partitions) != int(n.Cfg.NumPartitions) {
		t.Fatalf("defaults: %d partitions, want num.partitions=%d", len(d.Partitions), n.Cfg.NumPartitions)
	}

	// Produce to orders, delete it by name, recreate it: a fresh, empty log.
	cl := n.Client()
	mustNil(t, "produce", cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 0, Value: []byte("old")}).FirstErr())
	dresp, err := adm.DeleteTopic(ctx, "orders")
	mustNil(t, "delete orders", err)
	if dresp.Err != nil {
		t.Fatal(dresp.Err)
	}
	_, err = adm.DeleteTopic(ctx, "orders")
	wantErr(t, "delete orders twice", err, kerr.UnknownTopicOrPartition)
	for i := int32(0); i < 3; i++ {
		if _, err := os.Stat(filepath.Join(n.Cfg.DataDir, "orders-"+strconv.Itoa(int(i)))); !os.IsNotExist(err) {
			t.Fatalf("orders-%d still on disk after delete: %v", i, err)
		}
	}
	again, err := adm.CreateTopic(ctx, 1, 1, nil, "orders")
	mustNil(t, "recreate orders", err)
	if again.ID == resp.ID {
		t.Fatal("recreated topic got the old id")
	}
	ends, err := adm.ListEndOffsets(ctx, "orders")
	mustNil(t, "end offsets", err)
	if o, _ := ends.Lookup("orders", 0); o.Err != nil || o.Offset != 0 {
		t.Fatalf("recreated orders ends at %d (%v), want an empty log", o.Offset, o.Err)
	}

	// Delete by topic id (v6), and the id-specific errors.
	req := kmsg.NewPtrDeleteTopicsRequest()
	byID := kmsg.NewDeleteTopicsRequestTopic()
	byID.TopicID = again.ID
	unknown := kmsg.NewDeleteTopicsRequestTopic()
	unknown.TopicID = [16]byte{1, 2, 3}
	req.Topics = append(req.Topics, byID, unknown)
	dr, err := req.RequestWith(ctx, cl)
	mustNil(t, "delete by id", err)
	if len(dr.Topics) != 2 || dr.Topics[0].ErrorCode != 0 || dr.Topics[0].Topic == nil || *dr.Topics[0].Topic != "orders" {
		t.Fatalf("delete by id response %+v", dr.Topics)
	}
	if dr.Topics[1].ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("delete of unknown id: code %d, want UNKNOWN_TOPIC_ID", dr.Topics[1].ErrorCode)
	}
	if mt := topicMeta(t, n, "orders"); mt.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("orders after delete by id: code %d, want UNKNOWN_TOPIC_OR_PARTITION", mt.ErrorCode)
	}
}

func TestAdminInternalTopicsProtected(t *testing.T) {
	n := brokertest.Start(t)
	adm := n.Admin()
	ctx := adminCtx(t)
	topics, err := adm.ListTopicsWithInternal(ctx)
	mustNil(t, "list", err)
	off, ok := topics["__consumer_offsets"]
	if !ok {
		t.Skip("__consumer_offsets is not created at start-up by this build")
	}
	if !off.IsInternal {
		t.Fatal("__consumer_offsets is not flagged internal")
	}
	_, err = adm.DeleteTopic(ctx, "__consumer_offsets")
	wantErr(t, "delete __consumer_offsets", err, kerr.TopicDeletionDisabled)
	resp, err := adm.UpdatePartitions(ctx, 100, "__consumer_offsets")
	mustNil(t, "create partitions request", err)
	wantErr(t, "grow __consumer_offsets", resp["__consumer_offsets"].Err, kerr.InvalidRequest)
	_, err = adm.CreateTopic(ctx, 1, 1, nil, "__transaction_state")
	wantErr(t, "create __transaction_state", err, kerr.InvalidRequest)
}

func TestAdminCreatePartitions(t *testing.T) {
	n := brokertest.Start(t)
	adm := n.Admin()
	ctx := adminCtx(t)
	n.CreateTopic("grow", 2, nil)

	check := func(what string, resp kadm.CreatePartitionsResponses, err error, want error) {
		t.Helper()
		mustNil(t, what, err)
		r := resp["grow"]
		if want == nil {
			mustNil(t, what, r.Err)
			return
		}
		wantErr(t, what, r.Err, want)
	}
	resp, err := adm.ValidateUpdatePartitions(ctx, 5, "grow")
	check("validate-only grow", resp, err, nil)
	if mt := topicMeta(t, n, "grow"); len(mt.Partitions) != 2 {
		t.Fatalf("validate-only changed the partition count to %d", len(mt.Partitions))
	}
	resp, err = adm.UpdatePartitions(ctx, 2, "grow")
	check("same count", resp, err, kerr.InvalidPartitions)
	resp, err = adm.UpdatePartitions(ctx, 1, "grow")
	check("decrease", resp, err, kerr.InvalidPartitions)
	resp, err = adm.CreatePartitions(ctx, 3, "grow")
	check("add 3", resp, err, nil)
	resp, err = adm.UpdatePartitions(ctx, 3, "missing")
	mustNil(t, "unknown topic request", err)
	wantErr(t, "unknown topic", resp["missing"].Err, kerr.UnknownTopicOrPartition)

	if got := len(topicMeta(t, n, "grow").Partitions); got != 5 {
		t.Fatalf("grow has %d partitions, want 5", got)
	}
	// The new partitions take writes at once.
	cl := n.Client()
	mustNil(t, "produce to partition 4", cl.ProduceSync(ctx, &kgo.Record{Topic: "grow", Partition: 4, Value: []byte("x")}).FirstErr())

	// A manual assignment naming another broker is refused.
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = "grow", 6
	a := kmsg.NewCreatePartitionsRequestTopicAssignment()
	a.Replicas = []int32{n.Cfg.NodeID + 1}
	rt.Assignment = append(rt.Assignment, a)
	req.Topics = append(req.Topics, rt)
	cr, err := req.RequestWith(ctx, cl)
	mustNil(t, "create partitions with assignment", err)
	if cr.Topics[0].ErrorCode != kerr.InvalidReplicaAssignment.Code {
		t.Fatalf("assignment to a missing broker: code %d, want INVALID_REPLICA_ASSIGNMENT", cr.Topics[0].ErrorCode)
	}
}

func configOf(t testing.TB, rcs kadm.ResourceConfigs, key string) kadm.Config {
	t.Helper()
	if len(rcs) != 1 {
		t.Fatalf("%d resources, want 1", len(rcs))
	}
	mustNil(t, "describe "+rcs[0].Name, rcs[0].Err)
	for _, c := range rcs[0].Configs {
		if c.Key == key {
			return c
		}
	}
	t.Fatalf("%s has no config %s", rcs[0].Name, key)
	return kadm.Config{}
}

func TestAdminConfigs(t *testing.T) {
	n := brokertest.Start(t)
	adm := n.Admin()
	ctx := adminCtx(t)
	n.CreateTopic("cfg", 1, map[string]*string{"segment.bytes": kadm.StringPtr("1048576")})

	rcs, err := adm.DescribeTopicConfigs(ctx, "cfg")
	mustNil(t, "describe", err)
	if c := configOf(t, rcs, "segment.bytes"); c.MaybeValue() != "1048576" || c.Source != kmsg.ConfigSourceDynamicTopicConfig ||
		len(c.Synonyms) < 2 || c.Synonyms[len(c.Synonyms)-1].Key != "log.segment.bytes" {
		t.Fatalf("segment.bytes = %+v", c)
	}
	if c := configOf(t, rcs, "retention.bytes"); c.MaybeValue() != "-1" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("retention.bytes = %+v", c)
	}
	if c := configOf(t, rcs, "max.message.bytes"); c.MaybeValue() != "1048588" {
		t.Fatalf("max.message.bytes = %+v", c)
	}

	// Incremental: SET, APPEND/SUBTRACT on a list, DELETE back to default.
	alter := func(what string, ops ...kadm.AlterConfig) error {
		t.Helper()
		resp, err := adm.AlterTopicConfigs(ctx, ops, "cfg")
		mustNil(t, what, err)
		return resp[0].Err
	}
	mustNil(t, "set retention.ms", alter("set", kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("3600000")}))
	mustNil(t, "append compact", alter("append", kadm.AlterConfig{Op: kadm.AppendConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")}))
	rcs, _ = adm.DescribeTopicConfigs(ctx, "cfg")
	if c := configOf(t, rcs, "cleanup.policy"); c.MaybeValue() != "delete,compact" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Fatalf("cleanup.policy after APPEND = %+v", c)
	}
	if c := configOf(t, rcs, "retention.ms"); c.MaybeValue() != "3600000" {
		t.Fatalf("retention.ms after SET = %+v", c)
	}
	mustNil(t, "subtract delete", alter("subtract", kadm.AlterConfig{Op: kadm.SubtractConfig, Name: "cleanup.policy", Value: kadm.StringPtr("delete")}))
	mustNil(t, "delete segment.bytes", alter("delete", kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "segment.bytes"}))
	rcs, _ = adm.DescribeTopicConfigs(ctx, "cfg")
	if c := configOf(t, rcs, "cleanup.policy"); c.MaybeValue() != "compact" {
		t.Fatalf("cleanup.policy after SUBTRACT = %+v", c)
	}
	if c := configOf(t, rcs, "segment.bytes"); c.Source != kmsg.ConfigSourceDefaultConfig || c.MaybeValue() != "1073741824" {
		t.Fatalf("segment.bytes after DELETE = %+v", c)
	}

	wantErr(t, "append to a non-list", alter("append int", kadm.AlterConfig{Op: kadm.AppendConfig, Name: "retention.ms", Value: kadm.StringPtr("1")}), kerr.InvalidConfig)
	wantErr(t, "bad value", alter("bad", kadm.AlterConfig{Op: kadm.SetConfig, Name: "segment.bytes", Value: kadm.StringPtr("12")}), kerr.InvalidConfig)
	wantErr(t, "unknown name", alter("unknown", kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.minutes", Value: kadm.StringPtr("1")}), kerr.InvalidConfig)
	vresp, err := adm.ValidateAlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("1")}}, "cfg")
	mustNil(t, "validate-only alter", err)
	mustNil(t, "validate-only alter", vresp[0].Err)
	rcs, _ = adm.DescribeTopicConfigs(ctx, "cfg")
	if c := configOf(t, rcs, "retention.ms"); c.MaybeValue() != "3600000" {
		t.Fatalf("validate-only alter changed retention.ms to %s", c.MaybeValue())
	}

	// Legacy AlterConfigs replaces the whole set.
	sresp, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr("2048")}}, "cfg")
	mustNil(t, "alter state", err)
	mustNil(t, "alter state", sresp[0].Err)
	rcs, _ = adm.DescribeTopicConfigs(ctx, "cfg")
	if c := configOf(t, rcs, "retention.ms"); c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("retention.ms survived a legacy AlterConfigs that did not list it: %+v", c)
	}
	if c := configOf(t, rcs, "max.message.bytes"); c.MaybeValue() != "2048" {
		t.Fatalf("max.message.bytes = %+v", c)
	}

	// Unknown topic, and broker configs (described, not alterable).
	rcs, err = adm.DescribeTopicConfigs(ctx, "nope")
	if err == nil {
		err = rcs[0].Err
	}
	wantErr(t, "describe unknown topic", err, kerr.UnknownTopicOrPartition)
	brcs, err := adm.DescribeBrokerConfigs(ctx, n.Cfg.NodeID)
	mustNil(t, "describe broker", err)
	if c := configOf(t, brcs, "log.retention.ms"); c.MaybeValue() != "604800000" {
		t.Fatalf("log.retention.ms = %+v", c)
	}
	if c := configOf(t, brcs, "holdfast.flush.policy"); c.MaybeValue() != "sync" {
		t.Fatalf("holdfast.flush.policy = %+v", c)
	}
	if c := configOf(t, brcs, "log.direct.io"); c.MaybeValue() != "false" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("log.direct.io = %+v", c)
	}
	// Only the topic defaults are dynamic (TestClusterDynamicBrokerConfigs).
	bresp, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "log.dirs", Value: kadm.StringPtr("/elsewhere")}}, n.Cfg.NodeID)
	mustNil(t, "alter broker request", err)
	wantErr(t, "alter static broker config", bresp[0].Err, kerr.InvalidConfig)
}

// An altered max.message.bytes applies to the open log at once.
func TestAdminAlteredMaxMessageBytesTakesEffect(t *testing.T) {
	n := brokertest.Start(t)
	adm := n.Admin()
	ctx := adminCtx(t)
	n.CreateTopic("limits", 1, nil)
	cl := n.Client(kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordRetries(0))
	big := &kgo.Record{Topic: "limits", Value: make([]byte, 4096)}
	mustNil(t, "4 KiB record under the default limit", cl.ProduceSync(ctx, big).FirstErr())

	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("1024")}}, "limits")
	mustNil(t, "alter", err)
	mustNil(t, "alter", resp[0].Err)
	big = &kgo.Record{Topic: "limits", Value: make([]byte, 4096)}
	wantErr(t, "4 KiB record over max.message.bytes=1024", cl.ProduceSync(ctx, big).FirstErr(), kerr.MessageTooLarge)
	mustNil(t, "small record", cl.ProduceSync(ctx, &kgo.Record{Topic: "limits", Value: []byte("ok")}).FirstErr())
}

// An altered retention.bytes makes the retention loop delete old segments.
func TestAdminAlteredRetentionBytesTakesEffect(t *testing.T) {
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.RetentionCheckInterval = 20 * time.Millisecond })
	adm := n.Admin()
	ctx := adminCtx(t)
	n.CreateTopic("retained", 1, map[string]*string{"segment.bytes": kadm.StringPtr("1024")})
	cl := n.Client()
	for i := 0; i < 40; i++ {
		mustNil(t, "produce", cl.ProduceSync(ctx, &kgo.Record{Topic: "retained", Value: make([]byte, 200)}).FirstErr())
	}
	starts, err := adm.ListStartOffsets(ctx, "retained")
	mustNil(t, "start offsets", err)
	if o, _ := starts.Lookup("retained", 0); o.Offset != 0 {
		t.Fatalf("log start %d before retention was set, want 0", o.Offset)
	}
	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.bytes", Value: kadm.StringPtr("2048")}}, "retained")
	mustNil(t, "alter", err)
	mustNil(t, "alter", resp[0].Err)
	for {
		starts, err := adm.ListStartOffsets(ctx, "retained")
		mustNil(t, "start offsets", err)
		if o, _ := starts.Lookup("retained", 0); o.Offset > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("retention.bytes=2048 never deleted a segment of a ~10 KiB log")
		case <-time.After(20 * time.Millisecond):
		}
	}
	ends, err := adm.ListEndOffsets(ctx, "retained")
	mustNil(t, "end offsets", err)
	if o, _ := ends.Lookup("retained", 0); o.Offset != 40 {
		t.Fatalf("end offset %d after retention, want 40", o.Offset)
	}
}

func metadataReq(topics ...string) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	for _, name := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
	}
	return req
}

// topicMeta asks the broker itself (kadm answers from the client's metadata
// cache) about one topic, without auto-creating it.
func topicMeta(t testing.TB, n *brokertest.Node, topic string) kmsg.MetadataResponseTopic {
	t.Helper()
	req := metadataReq(topic)
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(adminCtx(t), n.Client())
	mustNil(t, "metadata "+topic, err)
	if len(resp.Topics) != 1 {
		t.Fatalf("metadata %s: %d topics", topic, len(resp.Topics))
	}
	return resp.Topics[0]
}

func TestMetadataAutoCreate(t *testing.T) {
	for _, tc := range []struct {
		name         string
		brokerAllows bool
		clientAllows bool
		want         int16
	}{
		{"both allow", true, true, 0},
		{"broker forbids", false, true, kerr.UnknownTopicOrPartition.Code},
		{"client forbids", true, false, kerr.UnknownTopicOrPartition.Code},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) {
				c.AutoCreateTopics = tc.brokerAllows
				c.NumPartitions = 3
			})
			ctx := adminCtx(t)
			cl := n.Client()
			req := metadataReq("auto", "bad name!")
			req.AllowAutoTopicCreation = tc.clientAllows
			resp, err := req.RequestWith(ctx, cl)
			mustNil(t, "metadata", err)
			if len(resp.Topics) != 2 {
				t.Fatalf("%d topics in the response, want 2", len(resp.Topics))
			}
			auto, bad := resp.Topics[0], resp.Topics[1]
			if auto.ErrorCode != tc.want {
				t.Fatalf("auto: code %d, want %d", auto.ErrorCode, tc.want)
			}
			if bad.ErrorCode != kerr.InvalidTopicException.Code {
				t.Fatalf("bad name: code %d, want INVALID_TOPIC_EXCEPTION", bad.ErrorCode)
			}
			if tc.want != 0 {
				if mt := topicMeta(t, n, "auto"); mt.ErrorCode != kerr.UnknownTopicOrPartition.Code {
					t.Fatalf("topic was created although auto-creation is off (code %d)", mt.ErrorCode)
				}
				return
			}
			if len(auto.Partitions) != 3 || auto.TopicID == [16]byte{} {
				t.Fatalf("auto-created topic: %d partitions, id %x; want num.partitions=3 and an id", len(auto.Partitions), auto.TopicID)
			}
			if *resp.ClusterID == "" || resp.ControllerID != n.Cfg.NodeID || len(resp.Brokers) != 1 || resp.Brokers[0].Port != n.Cfg.AdvertisedPort {
				t.Fatalf("cluster part of the response: %+v", resp)
			}
			// v12: the same topic by id.
			byID := kmsg.NewPtrMetadataRequest()
			rt := kmsg.NewMetadataRequestTopic()
			rt.TopicID = auto.TopicID
			missing := kmsg.NewMetadataRequestTopic()
			missing.TopicID = [16]byte{9}
			byID.Topics = append(byID.Topics, rt, missing)
			r2, err := byID.RequestWith(ctx, cl)
			mustNil(t, "metadata by id", err)
			if r2.Topics[0].ErrorCode != 0 || r2.Topics[0].Topic == nil || *r2.Topics[0].Topic != "auto" {
				t.Fatalf("metadata by id: %+v", r2.Topics[0])
			}
			if r2.Topics[1].ErrorCode != kerr.UnknownTopicID.Code {
				t.Fatalf("metadata by unknown id: code %d, want UNKNOWN_TOPIC_ID", r2.Topics[1].ErrorCode)
			}
		})
	}
}

func TestTopicsSurviveRestart(t *testing.T) {
	n := brokertest.Start(t)
	ctx := adminCtx(t)
	adm := n.Admin()
	n.CreateTopic("keep", 4, map[string]*string{"retention.ms": kadm.StringPtr("123456")})
	n.CreateTopic("gone", 2, nil)
	_, err := adm.UpdatePartitions(ctx, 6, "keep")
	mustNil(t, "grow keep", err)
	mustNil(t, "produce", n.Client().ProduceSync(ctx, &kgo.Record{Topic: "gone", Partition: 1, Value: []byte("x")}).FirstErr())
	before, err := adm.ListTopics(ctx)
	mustNil(t, "list", err)
	_, err = adm.DeleteTopic(ctx, "gone")
	mustNil(t, "delete gone", err)

	mc, err := adm.BrokerMetadata(ctx)
	mustNil(t, "cluster metadata", err)
	n.Restart()
	adm = n.Admin()
	k := topicMeta(t, n, "keep")
	if kadm.TopicID(k.TopicID) != before["keep"].ID || len(k.Partitions) != 6 {
		t.Fatalf("keep after restart: id %x, %d partitions; want %v and 6", k.TopicID, len(k.Partitions), before["keep"].ID)
	}
	if mt := topicMeta(t, n, "gone"); mt.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("deleted topic is back after restart (code %d)", mt.ErrorCode)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "keep")
	mustNil(t, "describe", err)
	if c := configOf(t, rcs, "retention.ms"); c.MaybeValue() != "123456" {
		t.Fatalf("retention.ms after restart = %+v", c)
	}
	mc2, err := adm.BrokerMetadata(ctx)
	mustNil(t, "cluster metadata after restart", err)
	if mc2.Cluster != mc.Cluster || mc.Cluster == "" {
		t.Fatalf("cluster id %q -> %q across restart", mc.Cluster, mc2.Cluster)
	}
	// The recreated topic starts empty, with a new id.
	n.CreateTopic("gone", 2, nil)
	ends, err := adm.ListEndOffsets(ctx, "gone")
	mustNil(t, "end offsets", err)
	if o, _ := ends.Lookup("gone", 1); o.Offset != 0 {
		t.Fatalf("recreated topic has end offset %d, want 0", o.Offset)
	}
	if kadm.TopicID(topicMeta(t, n, "gone").TopicID) == before["gone"].ID {
		t.Fatal("recreated topic reused the deleted topic's id")
	}
}

func TestDescribeCluster(t *testing.T) {
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.Rack = "r1" })
	ctx := adminCtx(t)
	req := kmsg.NewPtrDescribeClusterRequest()
	req.EndpointType = 1
	resp, err := req.RequestWith(ctx, n.Client())
	mustNil(t, "describe cluster", err)
	if resp.ErrorCode != 0 || resp.ClusterID == "" || resp.ControllerID != n.Cfg.NodeID || len(resp.Brokers) != 1 ||
		resp.Brokers[0].Rack == nil || *resp.Brokers[0].Rack != "r1" || resp.Brokers[0].Host != n.Cfg.AdvertisedHost {
		t.Fatalf("describe cluster: %+v", resp)
	}
	req.EndpointType = 2
	resp, err = req.RequestWith(ctx, n.Client())
	mustNil(t, "describe cluster (controllers)", err)
	if resp.ErrorCode != kerr.UnsupportedEndpointType.Code {
		t.Fatalf("controller endpoints from a broker: code %d, want UNSUPPORTED_ENDPOINT_TYPE", resp.ErrorCode)
	}
}

// sarama's ClusterAdmin drives the same APIs with its own encoder and
// version choices.
func TestSaramaClusterAdmin(t *testing.T) {
	n := brokertest.Start(t)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	ca, err := sarama.NewClusterAdmin([]string{n.Addr}, cfg)
	mustNil(t, "sarama admin", err)
	defer ca.Close()

	retention := "86400000"
	mustNil(t, "create", ca.CreateTopic("sarama-t", &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"retention.ms": &retention}}, false))
	err = ca.CreateTopic("sarama-t", &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}, false)
	wantErr(t, "create twice", err, sarama.ErrTopicAlreadyExists)
	err = ca.CreateTopic("sarama-rf3", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 3}, false)
	wantErr(t, "create RF 3", err, sarama.ErrInvalidReplicationFactor)
	mustNil(t, "validate-only", ca.CreateTopic("sarama-dry", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, true))

	topics, err := ca.ListTopics()
	mustNil(t, "list", err)
	if d, ok := topics["sarama-t"]; !ok || d.NumPartitions != 2 || d.ReplicationFactor != 1 {
		t.Fatalf("list: sarama-t = %+v (present %v)", d, ok)
	}
	if _, ok := topics["sarama-dry"]; ok {
		t.Fatal("validate-only create created the topic")
	}
	if d := topics["sarama-t"]; d.ConfigEntries["retention.ms"] == nil || *d.ConfigEntries["retention.ms"] != retention {
		t.Fatalf("list: sarama-t configs %v", d.ConfigEntries)
	}

	mustNil(t, "create partitions", ca.CreatePartitions("sarama-t", 4, nil, false))
	err = ca.CreatePartitions("sarama-t", 3, nil, false)
	wantErr(t, "shrink", err, sarama.ErrInvalidPartitions)
	meta, err := ca.DescribeTopics([]string{"sarama-t"})
	mustNil(t, "describe topics", err)
	if len(meta) != 1 || len(meta[0].Partitions) != 4 {
		t.Fatalf("describe topics: %+v", meta)
	}

	//lint:ignore SA1019 deprecated in sarama, but what applications built on it still call
	entries, err := ca.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: "sarama-t"})
	mustNil(t, "describe config", err)
	found := false
	for _, e := range entries {
		if e.Name == "retention.ms" {
			found = true
			if e.Value != retention || e.Source != sarama.SourceTopic {
				t.Fatalf("retention.ms = %+v", e)
			}
		}
	}
	if !found {
		t.Fatal("retention.ms missing from DescribeConfig")
	}
	seg := "2097152"
	mustNil(t, "incremental alter", ca.IncrementalAlterConfig(sarama.TopicResource, "sarama-t",
		map[string]sarama.IncrementalAlterConfigsEntry{"segment.bytes": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &seg}}, false))
	//lint:ignore SA1019 as above
	entries, err = ca.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: "sarama-t", ConfigNames: []string{"segment.bytes"}})
	mustNil(t, "describe config", err)
	if len(entries) != 1 || entries[0].Value != seg {
		t.Fatalf("segment.bytes after alter: %+v", entries)
	}
	bad := "-5"
	err = ca.AlterConfig(sarama.TopicResource, "sarama-t", map[string]*string{"segment.bytes": &bad}, false)
	wantErr(t, "alter to an invalid value", err, sarama.ErrInvalidConfig)

	brokers, controller, err := ca.DescribeCluster()
	mustNil(t, "describe cluster", err)
	if len(brokers) != 1 || controller != n.Cfg.NodeID {
		t.Fatalf("describe cluster: %d brokers, controller %d", len(brokers), controller)
	}

	mustNil(t, "delete", ca.DeleteTopic("sarama-t"))
	err = ca.DeleteTopic("sarama-t")
	wantErr(t, "delete twice", err, sarama.ErrUnknownTopicOrPartition)
}

// A compact-only topic keeps every segment whatever retention says: it
// relies on compaction, which would be the only thing allowed to drop
// records from it.
func TestRetentionSkipsCompactedTopics(t *testing.T) {
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.RetentionCheckInterval = 20 * time.Millisecond })
	adm := n.Admin()
	ctx := adminCtx(t)
	small := map[string]*string{"segment.bytes": kadm.StringPtr("1024"), "retention.bytes": kadm.StringPtr("1024")}
	compact := map[string]*string{"segment.bytes": kadm.StringPtr("1024"), "retention.bytes": kadm.StringPtr("1024"), "cleanup.policy": kadm.StringPtr("compact")}
	n.CreateTopic("deleting", 1, small)
	n.CreateTopic("compacted", 1, compact)
	cl := n.Client()
	for i := 0; i < 30; i++ {
		for _, topic := range []string{"compacted", "deleting"} {
			mustNil(t, "produce", cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("k"), Value: make([]byte, 200)}).FirstErr())
		}
	}
	// A pass visits topics in name order, so once retention has trimmed
	// "deleting" it has been over "compacted" in the same pass.
	for {
		starts, err := adm.ListStartOffsets(ctx, "deleting", "compacted")
		mustNil(t, "start offsets", err)
		if o, _ := starts.Lookup("deleting", 0); o.Offset > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("retention never ran")
		case <-time.After(20 * time.Millisecond):
		}
	}
	starts, err := adm.ListStartOffsets(ctx, "compacted")
	mustNil(t, "start offsets", err)
	if o, _ := starts.Lookup("compacted", 0); o.Offset != 0 {
		t.Fatalf("retention deleted from a compact-only topic: log start %d", o.Offset)
	}
}

// removalFailingFS fails every rename and removal of paths containing
// match while fail is set, so a topic's data cannot be removed.
type removalFailingFS struct {
	storage.FS
	match string
	fail  atomic.Bool
}

func (f *removalFailingFS) blocked(path string) bool {
	return f.fail.Load() && strings.Contains(path, f.match)
}

func (f *removalFailingFS) Rename(oldname, newname string) error {
	if f.blocked(oldname) {
		return &os.PathError{Op: "rename", Path: oldname, Err: syscall.EIO}
	}
	return f.FS.Rename(oldname, newname)
}

func (f *removalFailingFS) RemoveAll(dir string) error {
	if f.blocked(dir) {
		return &os.PathError{Op: "removeall", Path: dir, Err: syscall.EIO}
	}
	return f.FS.RemoveAll(dir)
}

func (f *removalFailingFS) Remove(name string) error {
	if f.blocked(name) {
		return &os.PathError{Op: "remove", Path: name, Err: syscall.EIO}
	}
	return f.FS.Remove(name)
}

// A delete whose data removal fails is finished later: before a replica of
// a topic of the same name opens (the repair loop retries it), and at
// start-up. Until then the new topic's partition is offline
// (KAFKA_STORAGE_ERROR); the old records never come back.
func TestDeleteFinishesInterruptedDataRemoval(t *testing.T) {
	fsys := &removalFailingFS{FS: storage.OSFS(), match: "victim-0"}
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.FS = fsys })
	ctx := adminCtx(t)
	produce := func(k int) {
		t.Helper()
		cl := n.Client()
		defer cl.Close()
		for range k {
			mustNil(t, "produce", cl.ProduceSync(ctx, &kgo.Record{Topic: "victim", Value: []byte("old")}).FirstErr())
		}
	}
	deleteStuck := func() {
		t.Helper()
		fsys.fail.Store(true)
		_, err := n.Admin().DeleteTopic(ctx, "victim")
		mustNil(t, "delete (metadata is removed even if the data is not yet)", err)
		if mt := topicMeta(t, n, "victim"); mt.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("deleted topic still listed (code %d)", mt.ErrorCode)
		}
		if _, err := os.Stat(filepath.Join(n.Cfg.DataDir, "victim-0")); err != nil {
			t.Fatalf("the injected failure did not keep the data: %v", err)
		}
	}
	endOffset := func() (int64, error) {
		ends, err := n.Admin().ListEndOffsets(ctx, "victim")
		if err != nil {
			return -1, err
		}
		o, _ := ends.Lookup("victim", 0)
		return o.Offset, o.Err
	}

	n.CreateTopic("victim", 1, nil)
	produce(5)
	deleteStuck()
	_, err := n.Admin().CreateTopic(ctx, 1, 1, nil, "victim")
	mustNil(t, "recreate while the old data cannot be removed", err)
	if _, err := endOffset(); !errors.Is(err, kerr.KafkaStorageError) {
		t.Fatalf("partition over another topic's data: %v, want KAFKA_STORAGE_ERROR", err)
	}
	fsys.fail.Store(false) // the repair loop removes the data and opens the replica
	waitFor(t, 30*time.Second, "the recreated partition to come online", func() bool {
		_, err := endOffset()
		return err == nil
	})
	if end, _ := endOffset(); end != 0 {
		t.Fatalf("recreated topic ends at %d: the deleted records came back", end)
	}

	produce(3)
	deleteStuck()
	fsys.fail.Store(false)
	n.Restart() // start-up finishes the removal
	if _, err := os.Stat(filepath.Join(n.Cfg.DataDir, "victim-0")); !os.IsNotExist(err) {
		t.Fatalf("deleted topic's data still on disk after restart: %v", err)
	}
	_, err = n.Admin().CreateTopic(ctx, 1, 1, nil, "victim")
	mustNil(t, "recreate after restart", err)
	if end, err := endOffset(); err != nil || end != 0 {
		t.Fatalf("recreated topic ends at %d (%v): the deleted records came back", end, err)
	}
}
