package broker_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/brokertest"
)

// TestApiVersionsFeatures: ApiVersions v3+ finalizes metadata.version at
// Kafka 4's floor, group.version 1 (KIP-848 is served), transaction.version
// 2 (KIP-890 part 2, txnv2_test.go) and kraft.version 1 (KIP-853: the
// controller quorum changes online, AddRaftVoter / RemoveRaftVoter), and
// only at 1: Kafka's static quorum (0) is not offered.
func TestApiVersionsFeatures(t *testing.T) {
	n := brokertest.Start(t)
	cl := n.Client()
	{
		req := kmsg.NewPtrApiVersionsRequest()
		req.ClientSoftwareName, req.ClientSoftwareVersion = "holdfast-test", "1"
		kresp, err := cl.Broker(int(n.Cfg.NodeID)).Request(adminCtx(t), req)
		mustNil(t, "ApiVersions", err)
		resp := kresp.(*kmsg.ApiVersionsResponse)
		v := resp.Version
		supported := map[string][2]int16{}
		for _, f := range resp.SupportedFeatures {
			supported[f.Name] = [2]int16{f.MinVersion, f.MaxVersion}
		}
		finalized := map[string]int16{}
		for _, f := range resp.FinalizedFeatures {
			finalized[f.Name] = f.MaxVersionLevel
			if f.MinVersionLevel != f.MaxVersionLevel {
				t.Fatalf("v%d: %s finalized %d..%d", v, f.Name, f.MinVersionLevel, f.MaxVersionLevel)
			}
		}
		if supported["metadata.version"] != [2]int16{7, 7} || finalized["metadata.version"] != 7 || resp.FinalizedFeaturesEpoch < 0 {
			t.Fatalf("v%d: supported %v finalized %v epoch %d", v, supported, finalized, resp.FinalizedFeaturesEpoch)
		}
		if supported["group.version"] != [2]int16{0, 1} || finalized["group.version"] != 1 {
			t.Fatalf("v%d: group.version supported %v finalized %d, want 0..1 and 1", v, supported["group.version"], finalized["group.version"])
		}
		if supported["transaction.version"] != [2]int16{0, 2} || finalized["transaction.version"] != 2 {
			t.Fatalf("v%d: transaction.version supported %v finalized %d, want 0..2 and 2", v, supported["transaction.version"], finalized["transaction.version"])
		}
		if supported["kraft.version"] != [2]int16{1, 1} || finalized["kraft.version"] != 1 {
			t.Fatalf("v%d: kraft.version supported %v finalized %d, want 1..1 and 1", v, supported["kraft.version"], finalized["kraft.version"])
		}
	}
}
