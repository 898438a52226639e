package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"holdfast/internal/brokertest"
	"holdfast/internal/cluster"
)

// TestFenceForShutdownControllerGone: FenceForShutdown tells a controller
// that went first (as when the whole cluster stops together: its
// connection closed or refused, or no controller elected yet) from a fence
// that failed against a live controller, so that serve and dev-cluster log
// the expected case quietly and the other loudly.
func TestFenceForShutdownControllerGone(t *testing.T) {
	nodes := brokertest.StartCluster(t, 3)
	var ctrl, other *brokertest.Node
	brokertest.Await(t, "a controller", func() error {
		md, err := nodes[0].Metadata()
		if err != nil {
			return err
		}
		ctrl, other = nil, nil
		for _, n := range nodes {
			if n.Cfg.NodeID == md.ControllerID {
				ctrl = n
			} else if other == nil {
				other = n
			}
		}
		if ctrl == nil || len(md.Brokers) != len(nodes) {
			return fmt.Errorf("controller %d, %d brokers registered", md.ControllerID, len(md.Brokers))
		}
		return nil
	})
	// A live controller, a fence that cannot finish: not the quiet case.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := other.B.FenceForShutdown(done); err == nil || errors.Is(err, cluster.ErrControllerGone) {
		t.Fatalf("fence with the controller up and the context done: %v, want a failure that is not ErrControllerGone", err)
	}

	// The controller stops first: the other node's fence either finds it
	// gone, or succeeds with the controller it handed over to as it
	// stopped (controlled shutdown moves the metadata group too).
	ctrl.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	err := other.B.FenceForShutdown(ctx)
	if err != nil && !errors.Is(err, cluster.ErrControllerGone) {
		t.Fatalf("fence after the controller stopped: %v, want nil or ErrControllerGone", err)
	}
	t.Logf("fence after the controller stopped: %v (%v)", err, time.Since(start))
}
