package cluster_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"holdfast/internal/auth"
	"holdfast/internal/cluster"
	"holdfast/internal/clustertest"
	"holdfast/internal/metadata"
	"holdfast/internal/replica"
)

// TestApplyReachesReplicasAndHooks: what the apply loop does besides
// changing the metadata - a topic's new configs and the dynamic broker
// defaults reach its open partition logs, security and quota changes call
// the broker's hooks (the authorizer and the quota table follow them).
func TestApplyReachesReplicasAndHooks(t *testing.T) {
	var security, quotas atomic.Int32
	n := clustertest.Start(t, func(c *cluster.Config, _ *replica.Config) {
		c.OnSecurityChange = func() { security.Add(1) }
		c.OnQuotaChange = func() { quotas.Add(1) }
	})
	c := n.Cluster
	ctx := ctx5(t)
	if _, err := c.CreateTopic(ctx, "t", 1, -1, nil, nil, false, true); err != nil {
		t.Fatal(err)
	}
	logCfg := func() (time.Duration, bool) {
		cfg := n.Replicas.Get("t", 0).Log().Config()
		return cfg.RetentionMs, cfg.Compact
	}
	def, _ := logCfg()
	// The cluster-wide dynamic default stands in for the missing override.
	if err := c.SetBrokerConfigs("", map[string]string{"log.retention.ms": "60000"}); err != nil {
		t.Fatal(err)
	}
	if r, _ := logCfg(); r != time.Minute {
		t.Fatalf("retention after the dynamic default: %v (default %v)", r, def)
	}
	// The topic's override wins over it.
	if _, err := c.SetTopicConfigs("t", map[string]string{"retention.ms": "1000", "cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}
	if r, compact := logCfg(); r != time.Second || !compact {
		t.Fatalf("retention %v compact %v after the topic override", r, compact)
	}
	// Removing the override falls back to the dynamic default, then,
	// without it, to the static one.
	if _, err := c.SetTopicConfigs("t", nil); err != nil {
		t.Fatal(err)
	}
	if r, compact := logCfg(); r != time.Minute || compact {
		t.Fatalf("retention %v compact %v without the override", r, compact)
	}
	if err := c.SetBrokerConfigs("", nil); err != nil {
		t.Fatal(err)
	}
	if r, _ := logCfg(); r != def {
		t.Fatalf("retention %v without any dynamic default, want %v", r, def)
	}

	acl := auth.ACL{ResourceType: auth.ResourceTopic, ResourceName: "t", PatternType: auth.PatternLiteral,
		Principal: "User:alice", Host: "*", Operation: auth.OpRead, Permission: auth.PermAllow}
	for _, op := range []string{metadata.OpCreateACLs, metadata.OpDeleteACLs} {
		if err := c.Propose(ctx, metadata.Command{Op: op, ACLs: []auth.ACL{acl}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := security.Load(); got != 2 {
		t.Fatalf("security hook ran %d times, want 2", got)
	}
	user := "alice"
	if err := c.Propose(ctx, metadata.Command{Op: metadata.OpClientQuotas, Quotas: []metadata.QuotaAlteration{
		{Entity: metadata.QuotaEntity{"user": &user}, Set: map[string]float64{"producer_byte_rate": 1024}},
	}}); err != nil {
		t.Fatal(err)
	}
	if got := quotas.Load(); got != 1 || len(n.Meta.ClientQuotas()) != 1 {
		t.Fatalf("quota hook ran %d times, quotas %v", got, n.Meta.ClientQuotas())
	}
	if security.Load() != 2 {
		t.Fatal("a quota change ran the security hook")
	}
}

// TestOpenRefusals: the configurations cluster.Open refuses, each with
// an error that names the flag to fix, before it touches the directory.
func TestOpenRefusals(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  cluster.Config
		want string
	}{
		{"broker-only without --join", cluster.Config{NodeID: 4, Peers: map[int32]string{1: "127.0.0.1:1"}, RaftListen: "127.0.0.1:0"}, "needs --raft-listen and --join"},
		{"broker-only without --raft-listen", cluster.Config{NodeID: 4, Peers: map[int32]string{1: "127.0.0.1:1"}, Join: []string{"x:9092"}}, "needs --raft-listen and --join"},
		{"broker-only id too large", cluster.Config{NodeID: 1 << cluster.ProducerIDNodeBits, Peers: map[int32]string{1: "127.0.0.1:1"}, RaftListen: "127.0.0.1:0", Join: []string{"x:9092"}}, "must be in 1..1023"},
		{"peer id zero", cluster.Config{NodeID: 0, Peers: map[int32]string{0: ""}}, "peer id 0: must be in 1..1023"},
		{"peer id too large", cluster.Config{NodeID: 1, Peers: map[int32]string{1: "", 1024: "x"}}, "peer id 1024"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.DataDir = t.TempDir()
			n, err := cluster.Open(c.cfg)
			if err == nil {
				n.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}

// TestIdentityKeptAcrossRestarts: a single node forms its cluster once;
// its cluster and directory ids are what its data directory says from
// then on, and another directory is another cluster.
func TestIdentityKeptAcrossRestarts(t *testing.T) {
	a := clustertest.Start(t)
	id := a.Cluster.Identity()
	if id.ClusterID == "" || !id.BootstrapMember() || id.NodeID != 1 {
		t.Fatalf("identity %+v", id)
	}
	a.Stop()
	a.Restart()
	if got := a.Cluster.Identity(); got.ClusterID != id.ClusterID || got.DirectoryID != id.DirectoryID {
		t.Fatalf("after restart %+v, was %+v", got, id)
	}
	if a.Cluster.StartupHold() != 0 {
		t.Fatalf("a single node holds Metadata for %v", a.Cluster.StartupHold())
	}
	b := clustertest.Start(t)
	if b.Cluster.Identity().ClusterID == id.ClusterID {
		t.Fatal("two data directories formed the same cluster")
	}
	// The controller serves forwarded admin requests itself.
	if resp, forwarded, err := a.Cluster.ForwardToController(ctx5(t), nil); resp != nil || forwarded || err != nil {
		t.Fatalf("ForwardToController on the controller: %v %v %v", resp, forwarded, err)
	}
}
