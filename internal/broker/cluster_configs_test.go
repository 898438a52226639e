package broker_test

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
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
			req := kmsg.NewPtrIncrementalAlterConfigsRequest()
			rr := kmsg.NewIncrementalAlterConfigsRequestResource()
			rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "cfg"
			cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
			cfg.Name, cfg.Value, cfg.Op = "retention.ms", &want, kmsg.IncrementalAlterConfigOpSet
			rr.Configs = append(rr.Configs, cfg)
			req.Resources = append(req.Resources, rr)
			resp, err := n.Request(req)
			if err != nil {
				t.Fatal(err)
			}
			r := resp.(*kmsg.IncrementalAlterConfigsResponse).Resources[0]
			code, msg = r.ErrorCode, r.ErrorMessage
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
