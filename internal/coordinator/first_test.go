package coordinator_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/group"
	"holdfast/internal/txn"
	"holdfast/internal/wire"
)

// internalPartitions is the partition count of both internal topics in
// these tests: enough partitions that some are still electing or loading
// when the first FindCoordinator answers, if nothing waits for them.
const internalPartitions = 16

func internalTopics(c *broker.Config, _ *wire.Limits) {
	c.OffsetsTopicPartitions = internalPartitions
	c.Txn.StatePartitions = internalPartitions
}

// TestFirstRequestsAfterCreation: on a fresh node, the FindCoordinator
// that creates an internal topic, and the JoinGroup / InitProducerId sent
// to the coordinator it names right after, for a key of every partition.
// None may answer NOT_COORDINATOR: the node named is the partition's
// leader, so it coordinates the key, loaded or loading
// (COORDINATOR_LOAD_IN_PROGRESS, which clients retry in place).
func TestFirstRequestsAfterCreation(t *testing.T) {
	n := brokertest.Start(t, internalTopics)
	nodes := []*brokertest.Node{n}
	checkFirstRequests(t, nodes, coordGroup)
	checkFirstRequests(t, nodes, coordTxn)
}

// TestClusterFirstRequestsAfterCreation is TestFirstRequestsAfterCreation
// on three nodes, each asked in turn (the controller creates the topics;
// the others forward the first FindCoordinator to it).
func TestClusterFirstRequestsAfterCreation(t *testing.T) {
	nodes := brokertest.StartCluster(t, 3, internalTopics)
	checkFirstRequests(t, nodes, coordGroup)
	checkFirstRequests(t, nodes, coordTxn)
}

const (
	coordGroup int8 = 0
	coordTxn   int8 = 1
)

// keysPerPartition is one key of each internal-topic partition.
func keysPerPartition(typ int8) []string {
	keys := make([]string, internalPartitions)
	found := 0
	for i := 0; found < internalPartitions; i++ {
		k := "first-" + strconv.Itoa(i)
		p := group.PartitionFor(k, internalPartitions)
		if typ == coordTxn {
			p = txn.PartitionFor(k, internalPartitions)
		}
		if keys[p] == "" {
			keys[p] = k
			found++
		}
	}
	return keys
}

// checkFirstRequests asks FindCoordinator for every partition's key (the
// first request creates the internal topic), and each key's coordinator,
// as soon as it is named, the key's first request: JoinGroup or
// InitProducerId. It fails on NOT_COORDINATOR, and waits for every key
// to be served.
func checkFirstRequests(t *testing.T, nodes []*brokertest.Node, typ int8) {
	t.Helper()
	// clients is shared by the goroutines that send each key's first
	// request, so it has its own lock.
	var clientsMu sync.Mutex
	clients := map[string]*kgo.Client{}
	client := func(addr string) *kgo.Client {
		clientsMu.Lock()
		defer clientsMu.Unlock()
		if cl, ok := clients[addr]; ok {
			return cl
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		clients[addr] = cl
		return cl
	}
	request := func(addr string, req kmsg.Request) kmsg.Response {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := client(addr).SeedBrokers()[0].Request(ctx, req)
		if err != nil {
			t.Errorf("%T to %s: %v", req, addr, err)
			return nil
		}
		return resp
	}
	// first is the key's first request to its coordinator, and the code
	// of its answer.
	first := func(addr, key string) int16 {
		if typ == coordGroup {
			req := kmsg.NewPtrJoinGroupRequest()
			req.Group, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis, req.ProtocolType = key, 10000, 10000, "consumer"
			req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 0}}}
			resp := request(addr, req)
			if resp == nil {
				return -1
			}
			return resp.(*kmsg.JoinGroupResponse).ErrorCode
		}
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID, req.TransactionTimeoutMillis = kmsg.StringPtr(key), 60000
		resp := request(addr, req)
		if resp == nil {
			return -1
		}
		return resp.(*kmsg.InitProducerIDResponse).ErrorCode
	}
	served := kerr.MemberIDRequired.Code // a v4+ JoinGroup's first answer
	if typ == coordTxn {
		served = 0
	}

	pending := keysPerPartition(typ)
	var (
		mu      sync.Mutex
		retries = map[int16]int{}
		// findRetries counts COORDINATOR_NOT_AVAILABLE answers to
		// FindCoordinator: the topic is being created, or a partition has
		// no leader yet.
		findRetries int
		done        = map[string]bool{}
	)
	deadline := time.Now().Add(90 * time.Second)
	for round := 0; len(pending) > 0; round++ {
		if time.Now().After(deadline) || t.Failed() {
			t.Fatalf("keys not served: %v (retried codes %v)", pending, retries)
		}
		find := kmsg.NewPtrFindCoordinatorRequest()
		find.CoordinatorType, find.CoordinatorKeys = typ, pending
		resp := request(nodes[round%len(nodes)].Addr, find)
		if resp == nil {
			t.FailNow()
		}
		var wg sync.WaitGroup
		for _, c := range resp.(*kmsg.FindCoordinatorResponse).Coordinators {
			if c.ErrorCode != 0 {
				if c.ErrorCode != kerr.CoordinatorNotAvailable.Code {
					t.Fatalf("FindCoordinator %q: %v", c.Key, kerr.ErrorForCode(c.ErrorCode))
				}
				mu.Lock()
				findRetries++
				mu.Unlock()
				continue
			}
			addr := net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
			wg.Go(func() {
				// Retried while the coordinator loads or picks a
				// producer id block, as clients do.
				for time.Now().Before(deadline) {
					code := first(addr, c.Key)
					switch code {
					case served:
						mu.Lock()
						done[c.Key] = true
						mu.Unlock()
						return
					case kerr.NotCoordinator.Code:
						t.Errorf("key %q: node %d answered %v right after FindCoordinator named it", c.Key, c.NodeID, kerr.ErrorForCode(code))
						return
					case kerr.CoordinatorLoadInProgress.Code, kerr.CoordinatorNotAvailable.Code:
						mu.Lock()
						retries[code]++
						mu.Unlock()
						time.Sleep(50 * time.Millisecond) // a client's retry backoff: the retry is what is tested
					default:
						t.Errorf("key %q: first request answered %v", c.Key, kerr.ErrorForCode(code))
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		var still []string
		for _, k := range pending {
			if !done[k] {
				still = append(still, k)
			}
		}
		pending = still
		if len(pending) > 0 {
			time.Sleep(50 * time.Millisecond) // a client's retry backoff before asking FindCoordinator again
		}
	}
	t.Logf("type %d: %d FindCoordinator retries; retried first requests %v", typ, findRetries, retries)
}
