package broker_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/brokertest"
)

// TestClusterAlterConfigsAnyNode: clients send AlterConfigs and
// IncrementalAlterConfigs for topics to any broker (Kafka's brokers pass
// them on to the controller, KIP-590). Every node takes them, and every
// node then describes the new value.
func TestClusterAlterConfigsAnyNode(t *testing.T) {
	c := brokertest.NewCluster(t, 3)
	c.CreateTopic("cfg", 1, 3, nil)
	for i, n := range c.Nodes {
		want := fmt.Sprint(3600000 + i)
		var code int16
		var msg *string
		if i%2 == 0 {
			var m string
			code, m = incrementalAlter(t, n, kmsg.ConfigResourceTypeTopic, "cfg", "retention.ms", &want, kmsg.IncrementalAlterConfigOpSet)
			msg = &m
		} else {
			req := kmsg.NewPtrAlterConfigsRequest()
			rr := kmsg.NewAlterConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "cfg"
			cfg := kmsg.NewAlterConfigsRequestResourceConfig()
			cfg.Name, cfg.Value = "retention.ms", &want
			rr.Configs = append(rr.Configs, cfg)
			req.Resources = append(req.Resources, rr)
			resp, err := n.Request(req)
			if err != nil {
				t.Fatal(err)
			}
			r := resp.(*kmsg.AlterConfigsResponse).Resources[0]
			code, msg = r.ErrorCode, r.ErrorMessage
		}
		if code != 0 {
			t.Fatalf("altering a topic config through node %d: %v (%v)", n.Cfg.NodeID, kerr.ErrorForCode(code), deref(msg))
		}
		// The node that took the request shows the change at once; the
		// others once they applied it.
		for _, m := range append([]*brokertest.Node{n}, c.Nodes...) {
			brokertest.Await(t, fmt.Sprintf("node %d to describe retention.ms=%s", m.Cfg.NodeID, want), func() error {
				req := kmsg.NewPtrDescribeConfigsRequest()
				rr := kmsg.NewDescribeConfigsRequestResource()
				rr.ResourceType, rr.ResourceName, rr.ConfigNames = kmsg.ConfigResourceTypeTopic, "cfg", []string{"retention.ms"}
				req.Resources = append(req.Resources, rr)
				resp, err := m.Request(req)
				if err != nil {
					return err
				}
				res := resp.(*kmsg.DescribeConfigsResponse).Resources[0]
				if len(res.Configs) != 1 || res.Configs[0].Value == nil || *res.Configs[0].Value != want {
					return fmt.Errorf("described %+v", res.Configs)
				}
				return nil
			})
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestClusterDynamicBrokerConfigs: the topic defaults are dynamic broker
// configs, as kafka-configs.sh --entity-type brokers sets them: the
// cluster-wide default (--entity-default) through any node, a broker's own
// through that broker. Every node then describes them with Kafka's sources
// and acts on them (a record over the dynamic message.max.bytes is refused
// with MESSAGE_TOO_LARGE; a topic override still wins); they survive a
// restart; deleting them brings the static value back. Static configs and
// another broker's scope are refused.
func TestClusterDynamicBrokerConfigs(t *testing.T) {
	c := brokertest.NewCluster(t, 3)
	c.CreateTopic("dyn", 3, 3, nil)
	alter := func(n *brokertest.Node, scope, name string, value *string, op kmsg.IncrementalAlterConfigOp) (int16, string) {
		t.Helper()
		return incrementalAlter(t, n, kmsg.ConfigResourceTypeBroker, scope, name, value, op)
	}
	describe := func(n *brokertest.Node, typ kmsg.ConfigResourceType, name, config string) (kmsg.DescribeConfigsResponseResourceConfig, error) {
		req := kmsg.NewPtrDescribeConfigsRequest()
		req.IncludeSynonyms = true
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName, rr.ConfigNames = typ, name, []string{config}
		req.Resources = append(req.Resources, rr)
		resp, err := n.Request(req)
		if err != nil {
			return kmsg.DescribeConfigsResponseResourceConfig{}, err
		}
		res := resp.(*kmsg.DescribeConfigsResponse).Resources[0]
		if res.ErrorCode != 0 || len(res.Configs) != 1 {
			return kmsg.DescribeConfigsResponseResourceConfig{}, fmt.Errorf("describe %s %s: %v %+v", name, config, kerr.ErrorForCode(res.ErrorCode), res.Configs)
		}
		return res.Configs[0], nil
	}
	awaitValue := func(n *brokertest.Node, typ kmsg.ConfigResourceType, name, config, want string, src kmsg.ConfigSource) {
		t.Helper()
		brokertest.Await(t, fmt.Sprintf("node %d to describe %s %q %s=%s (%v)", n.Cfg.NodeID, typ, name, config, want, src), func() error {
			cfg, err := describe(n, typ, name, config)
			if err != nil {
				return err
			}
			if deref(cfg.Value) != want || cfg.Source != src {
				return fmt.Errorf("described %s=%s (%v)", config, deref(cfg.Value), cfg.Source)
			}
			return nil
		})
	}
	v := func(s string) *string { return &s }

	// The cluster-wide default, through a node that is not the controller
	// (passed on) and through the controller.
	for i, n := range c.Nodes {
		if code, msg := alter(n, "", "log.retention.ms", v(fmt.Sprint(3600000+i)), kmsg.IncrementalAlterConfigOpSet); code != 0 {
			t.Fatalf("setting the cluster default through node %d: %v %s", n.Cfg.NodeID, kerr.ErrorForCode(code), msg)
		}
	}
	want := fmt.Sprint(3600000 + len(c.Nodes) - 1)
	if code, msg := alter(c.Nodes[0], "", "message.max.bytes", v("1024"), kmsg.IncrementalAlterConfigOpSet); code != 0 {
		t.Fatalf("setting message.max.bytes: %v %s", kerr.ErrorForCode(code), msg)
	}
	for _, n := range c.Nodes {
		awaitValue(n, kmsg.ConfigResourceTypeTopic, "dyn", "retention.ms", want, kmsg.ConfigSourceDynamicDefaultBrokerConfig)
		awaitValue(n, kmsg.ConfigResourceTypeBroker, "", "log.retention.ms", want, kmsg.ConfigSourceDynamicDefaultBrokerConfig)
		awaitValue(n, kmsg.ConfigResourceTypeBroker, fmt.Sprint(n.Cfg.NodeID), "message.max.bytes", "1024", kmsg.ConfigSourceDynamicDefaultBrokerConfig)
	}

	// Acted on: every partition's leader refuses a 2 KiB record.
	big := &kgo.Record{Topic: "dyn", Value: make([]byte, 2048)}
	rand.Read(big.Value) // incompressible: the batch stays over 1 KiB
	cl := c.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for p := range int32(3) {
		big.Partition = p
		if err := cl.ProduceSync(ctx, big).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
			t.Fatalf("2 KiB record to partition %d under a dynamic message.max.bytes=1024: %v, want MESSAGE_TOO_LARGE", p, err)
		}
	}
	// A topic override wins over the dynamic default.
	if code, msg := alterTopic(t, c.Nodes[1], "dyn", "max.message.bytes", "4096"); code != 0 {
		t.Fatalf("topic override: %v %s", kerr.ErrorForCode(code), msg)
	}
	for _, n := range c.Nodes {
		awaitValue(n, kmsg.ConfigResourceTypeTopic, "dyn", "max.message.bytes", "4096", kmsg.ConfigSourceDynamicTopicConfig)
	}
	brokertest.Await(t, "a 2 KiB record accepted under the topic's max.message.bytes=4096", func() error {
		big.Partition = 0
		return cl.ProduceSync(ctx, big).FirstErr()
	})

	// A broker's own value, through that broker; not through another.
	n2 := c.Node(2)
	if code, msg := alter(n2, "2", "log.retention.ms", v("7200000"), kmsg.IncrementalAlterConfigOpSet); code != 0 {
		t.Fatalf("broker 2's own log.retention.ms: %v %s", kerr.ErrorForCode(code), msg)
	}
	awaitValue(n2, kmsg.ConfigResourceTypeTopic, "dyn", "retention.ms", "7200000", kmsg.ConfigSourceDynamicBrokerConfig)
	awaitValue(c.Node(1), kmsg.ConfigResourceTypeTopic, "dyn", "retention.ms", want, kmsg.ConfigSourceDynamicDefaultBrokerConfig)
	if code, _ := alter(c.Node(1), "2", "log.retention.ms", v("1"), kmsg.IncrementalAlterConfigOpSet); code != kerr.InvalidRequest.Code {
		t.Fatalf("broker 2's config through node 1: %v, want INVALID_REQUEST", kerr.ErrorForCode(code))
	}
	// Static configs and bad values are refused, and change nothing.
	for _, bad := range []struct{ name, value string }{{"log.dirs", "/elsewhere"}, {"num.io.threads", "4"}, {"log.retention.ms", "soon"}, {"min.insync.replicas", "0"}} {
		if code, _ := alter(c.Nodes[0], "", bad.name, v(bad.value), kmsg.IncrementalAlterConfigOpSet); code != kerr.InvalidConfig.Code {
			t.Fatalf("setting %s=%s: %v, want INVALID_CONFIG", bad.name, bad.value, kerr.ErrorForCode(code))
		}
	}
	awaitValue(c.Nodes[0], kmsg.ConfigResourceTypeBroker, "", "log.retention.ms", want, kmsg.ConfigSourceDynamicDefaultBrokerConfig)

	// APPEND starts from the static value of a list; a non-list refuses it.
	if code, msg := alter(c.Nodes[0], "", "log.cleanup.policy", v("compact"), kmsg.IncrementalAlterConfigOpAppend); code != 0 {
		t.Fatalf("appending to log.cleanup.policy: %v %s", kerr.ErrorForCode(code), msg)
	}
	awaitValue(c.Nodes[0], kmsg.ConfigResourceTypeBroker, "", "log.cleanup.policy", "delete,compact", kmsg.ConfigSourceDynamicDefaultBrokerConfig)
	if code, msg := alter(c.Nodes[0], "", "log.cleanup.policy", nil, kmsg.IncrementalAlterConfigOpDelete); code != 0 {
		t.Fatalf("deleting log.cleanup.policy: %v %s", kerr.ErrorForCode(code), msg)
	}
	if code, _ := alter(c.Nodes[0], "", "log.retention.ms", v("1"), kmsg.IncrementalAlterConfigOpAppend); code != kerr.InvalidConfig.Code {
		t.Fatalf("appending to log.retention.ms: %v, want INVALID_CONFIG", kerr.ErrorForCode(code))
	}

	// Kept in the metadata log: a restarted node still has them.
	n3 := c.Node(3)
	n3.Stop()
	n3.Restart()
	awaitValue(n3, kmsg.ConfigResourceTypeTopic, "dyn", "retention.ms", want, kmsg.ConfigSourceDynamicDefaultBrokerConfig)

	// Deleted: the static value is back everywhere.
	// Through the restarted node: until it knows the controller it says
	// NOT_CONTROLLER, which clients retry.
	brokertest.Await(t, "the cluster default deleted through the restarted node", func() error {
		switch code, msg := alter(n3, "", "log.retention.ms", nil, kmsg.IncrementalAlterConfigOpDelete); code {
		case 0:
			return nil
		case kerr.NotController.Code:
			return fmt.Errorf("%v %s", kerr.ErrorForCode(code), msg)
		default:
			t.Fatalf("deleting the cluster default: %v %s", kerr.ErrorForCode(code), msg)
			return nil
		}
	})
	for _, n := range c.Nodes {
		if n == n2 {
			continue // its own value stays
		}
		awaitValue(n, kmsg.ConfigResourceTypeTopic, "dyn", "retention.ms", "604800000", kmsg.ConfigSourceDefaultConfig)
	}
}

// alterTopic sets one topic config through node n.
func alterTopic(t *testing.T, n *brokertest.Node, topic, name, value string) (int16, string) {
	t.Helper()
	return incrementalAlter(t, n, kmsg.ConfigResourceTypeTopic, topic, name, &value, kmsg.IncrementalAlterConfigOpSet)
}

// incrementalAlter sends one IncrementalAlterConfigs operation to node n
// and returns its answer's error code and message.
func incrementalAlter(t *testing.T, n *brokertest.Node, typ kmsg.ConfigResourceType, resource, name string, value *string, op kmsg.IncrementalAlterConfigOp) (int16, string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = typ, resource
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Value, cfg.Op = name, value, op
	rr.Configs = append(rr.Configs, cfg)
	req.Resources = append(req.Resources, rr)
	resp, err := n.Request(req)
	if err != nil {
		t.Fatal(err)
	}
	r := resp.(*kmsg.IncrementalAlterConfigsResponse).Resources[0]
	return r.ErrorCode, deref(r.ErrorMessage)
}
