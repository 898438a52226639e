package cluster

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/metadata"
	"holdfast/internal/raft"
	"holdfast/internal/storage"
)

// metaWith is a metadata store with brokers registered (id -> rack) and
// the fenced ones fenced, applied directly (no Raft group: placement only
// reads the store).
func metaWith(t *testing.T, racks map[int32]string, fenced ...int32) *metadata.Store {
	t.Helper()
	s, err := metadata.Open(t.TempDir(), storage.OSFS(), slog.New(slog.NewTextHandler(io.Discard, nil)), "test-cluster")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	end := int64(0)
	apply := func(c metadata.Command) {
		t.Helper()
		end++
		if _, err := s.Apply(end, c); err != nil {
			t.Fatalf("apply %s: %v", c.Op, err)
		}
	}
	apply(metadata.Command{Op: metadata.OpInit, ClusterID: "test-cluster"})
	ids := make([]int32, 0, len(racks))
	for id := range racks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		apply(metadata.Command{Op: metadata.OpRegister, Broker: &metadata.BrokerInfo{ID: id, Host: "h", Port: 9000 + id, Rack: racks[id]}})
	}
	if len(fenced) > 0 {
		apply(metadata.Command{Op: metadata.OpFence, IDs: fenced})
	}
	return s
}

func kafkaCode(err error) int16 {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return 0
}

// TestPlaceReplicas: every partition gets rf distinct registered
// brokers, its first (the preferred leader) unfenced, the unfenced ones
// before any fenced one, the preferred leaders spread evenly, and the
// refusals Kafka (and a Raft group's majority) call for.
func TestPlaceReplicas(t *testing.T) {
	three := map[int32]string{1: "", 2: "", 3: ""}
	// Racks of equal size: with uneven ones (a, a, b, b, c) the
	// round-robin over rackOrder's list can give a partition two replicas
	// in one rack while a third rack has room ([2 4 1]): the simplified
	// placement does not promise more than this.
	six := map[int32]string{1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
	for _, c := range []struct {
		name     string
		racks    map[int32]string
		fenced   []int32
		peers    int
		rf       int16
		count    int32
		wantCode int16
		wantRF   int
	}{
		{"rf 3 of 3", three, nil, 3, 3, 12, 0, 3},
		{"default rf: min(3, peers)", three, nil, 3, -1, 6, 0, 3},
		{"default rf on a single node", map[int32]string{1: ""}, nil, 1, 0, 4, 0, 1},
		{"rf 1 of 3", three, nil, 3, 1, 9, 0, 1},
		{"rf 3, one fenced: placed, the fenced last", three, []int32{3}, 3, 3, 9, 0, 3},
		{"rf 3, two fenced: no majority", three, []int32{2, 3}, 3, 3, 3, kerr.InvalidReplicationFactor.Code, 0},
		{"all fenced", three, []int32{1, 2, 3}, 3, 1, 3, kerr.InvalidReplicationFactor.Code, 0},
		{"rf above the brokers", three, nil, 3, 4, 3, kerr.InvalidReplicationFactor.Code, 0},
		{"racks: rf 3 of 6", six, nil, 3, 3, 24, 0, 3},
		{"racks: rf 2 of 6", six, nil, 3, 2, 24, 0, 2},
		{"racks: rf 5 of 6, two fenced", six, []int32{1, 4}, 3, 5, 10, 0, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			meta := metaWith(t, c.racks, c.fenced...)
			peers := map[int32]string{}
			for i := range c.peers {
				peers[int32(i+1)] = ""
			}
			n := &Node{meta: meta, cfg: Config{Peers: peers}}
			// placeReplicas starts at a random broker: try it often.
			for range 20 {
				reps, err := n.placeReplicas(c.count, c.rf)
				if c.wantCode != 0 {
					if kafkaCode(err) != c.wantCode {
						t.Fatalf("err %v, want code %d", err, c.wantCode)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				checkPlacement(t, reps, c.count, c.wantRF, c.racks, c.fenced)
			}
		})
	}
}

func checkPlacement(t *testing.T, reps [][]int32, count int32, rf int, racks map[int32]string, fenced []int32) {
	t.Helper()
	if len(reps) != int(count) {
		t.Fatalf("%d partitions placed, want %d", len(reps), count)
	}
	leaders := map[int32]int{}
	unfenced := 0
	for id := range racks {
		if !slices.Contains(fenced, id) {
			unfenced++
		}
	}
	distinctRacks := map[string]bool{}
	for _, r := range racks {
		distinctRacks[r] = true
	}
	for i, rs := range reps {
		if len(rs) != rf {
			t.Fatalf("partition %d: %v, want %d replicas", i, rs, rf)
		}
		seen := map[int32]bool{}
		sawFenced := false
		rackSeen := map[string]int{}
		for _, id := range rs {
			if _, ok := racks[id]; !ok || seen[id] {
				t.Fatalf("partition %d: %v: unregistered or repeated broker %d", i, rs, id)
			}
			seen[id] = true
			f := slices.Contains(fenced, id)
			if !f && sawFenced {
				t.Fatalf("partition %d: %v: an unfenced broker after a fenced one", i, rs)
			}
			sawFenced = sawFenced || f
			if !f {
				rackSeen[racks[id]]++
			}
		}
		if slices.Contains(fenced, rs[0]) {
			t.Fatalf("partition %d: %v: preferred leader %d is fenced", i, rs, rs[0])
		}
		// Rack-aware: with every replica unfenced and no more of them than
		// racks, each replica is on a rack of its own.
		if rf <= len(distinctRacks) && unfenced >= rf && len(rackSeen) < rf {
			t.Fatalf("partition %d: %v spans racks %v", i, rs, rackSeen)
		}
		leaders[rs[0]]++
	}
	// Round-robin: preferred leaders differ by at most one partition.
	lo, hi := int(count), 0
	for id := range racks {
		if slices.Contains(fenced, id) {
			continue
		}
		lo, hi = min(lo, leaders[id]), max(hi, leaders[id])
	}
	if hi-lo > 1 {
		t.Fatalf("preferred leaders %v: uneven", leaders)
	}
}

func TestRackOrder(t *testing.T) {
	for _, c := range []struct {
		brokers []metadata.BrokerInfo
		want    []int32
	}{
		{nil, nil},
		{[]metadata.BrokerInfo{{ID: 1}, {ID: 2}, {ID: 3}}, []int32{1, 2, 3}},
		{[]metadata.BrokerInfo{{ID: 1, Rack: "a"}, {ID: 2, Rack: "a"}, {ID: 3, Rack: "b"}, {ID: 4, Rack: "b"}}, []int32{1, 3, 2, 4}},
		// Racks in name order, each rack's brokers in the order given.
		{[]metadata.BrokerInfo{{ID: 9, Rack: "z"}, {ID: 5, Rack: "a"}, {ID: 7, Rack: "z"}, {ID: 6, Rack: "m"}}, []int32{5, 6, 9, 7}},
		{[]metadata.BrokerInfo{{ID: 1, Rack: "a"}, {ID: 2, Rack: "a"}, {ID: 3, Rack: "a"}, {ID: 4, Rack: "b"}}, []int32{1, 4, 2, 3}},
	} {
		if got := rackOrder(c.brokers); !slices.Equal(got, c.want) {
			t.Errorf("rackOrder(%v) = %v, want %v", c.brokers, got, c.want)
		}
	}
}

// TestCheckBrokerPartitions: max.broker.partitions counts what a broker
// holds plus what the request adds, per broker; 0 is no limit.
func TestCheckBrokerPartitions(t *testing.T) {
	meta := metaWith(t, map[int32]string{1: "", 2: ""})
	if _, err := meta.Apply(meta.Applied()+1, metadata.Command{Op: metadata.OpCreateTopic, Topic: &metadata.Topic{
		Name: "held", ID: metadata.NewTopicID(), Partitions: 3, Replicas: [][]int32{{1, 2}, {1, 2}, {1}},
	}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		limit int
		reps  [][]int32
		want  string
	}{
		{0, [][]int32{{1, 2}, {1, 2}, {1, 2}}, ""},
		{4, [][]int32{{1}}, ""},
		{4, [][]int32{{1}, {1}}, "Broker 1 would hold 5 partition replicas, more than max.broker.partitions (4): it holds 3 and this request adds 2"},
		{4, [][]int32{{2}, {2}}, ""},
		{4, [][]int32{{2}, {2}, {2}}, "Broker 2 would hold 5"},
		{3, [][]int32{{3}, {3}, {3}}, ""}, // broker 3 holds nothing
	} {
		n := &Node{meta: meta, cfg: Config{MaxBrokerPartitions: c.limit}}
		err := n.checkBrokerPartitions(c.reps)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || kafkaCode(err) != kerr.PolicyViolation.Code) {
			t.Errorf("limit %d, %v: %v, want %q", c.limit, c.reps, err, c.want)
		}
	}
}

func TestTransferable(t *testing.T) {
	st := raft.Status{Node: 1, Leader: 1, CommitOffset: 50, Voters: []uint64{1, 2, 3, 4},
		Replicas: []raft.ReplicaStatus{
			{ID: 2, MatchOffset: 50, State: raft.ProgressReplicate, Active: true},
			{ID: 3, MatchOffset: 49, State: raft.ProgressReplicate, Active: true},
			{ID: 4, MatchOffset: 50, State: raft.ProgressReplicate, Active: false},
			{ID: 5, MatchOffset: 50, State: raft.ProgressReplicate, Active: true, Learner: true},
		}}
	for _, c := range []struct {
		target uint64
		want   string
		behind bool
	}{
		{2, "", false},
		{3, "is not caught up (acknowledged 49 of 50)", true},
		{4, "is down", false},
		{5, "is not a voter", false},
		{1, "unknown to the leader", false},
	} {
		err := Transferable(st, c.target)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Transferable(%d) = %v, want %q", c.target, err, c.want)
		}
		if errors.Is(err, ErrBehind) != c.behind {
			t.Errorf("Transferable(%d) = %v: ErrBehind %v", c.target, err, !c.behind)
		}
	}
	st.Replicas[0].State = raft.ProgressProbe
	if err := Transferable(st, 2); !errors.Is(err, ErrBehind) {
		t.Errorf("a probing replica: %v, want ErrBehind", err)
	}
}

// TestLivenessSessions: the controller's session table belongs to its
// term; a new term starts every broker with a full session. The beat of a
// fenced broker (not stopping) is quick, so it is unfenced soon after it
// starts.
func TestLivenessSessions(t *testing.T) {
	lv := &liveness{interval: 2 * time.Second, now: time.Now}
	s := lv.sessions(3)
	s[2] = time.Unix(1, 0)
	if got := lv.sessions(3); got[2] != time.Unix(1, 0) {
		t.Fatal("same term: the sessions were reset")
	}
	if got := lv.sessions(4); len(got) != 0 || lv.term != 4 || lv.since.IsZero() {
		t.Fatalf("new term: %v (term %d)", got, lv.term)
	}
	for _, c := range []struct {
		shutdown, fenced bool
		interval, want   time.Duration
	}{
		{false, false, 2 * time.Second, 2 * time.Second},
		{false, true, 2 * time.Second, fencedBeat},
		{true, true, 2 * time.Second, 2 * time.Second},
		{true, false, 2 * time.Second, 2 * time.Second},
		{false, true, 50 * time.Millisecond, 50 * time.Millisecond},
	} {
		lv.interval = c.interval
		if got := lv.next(c.shutdown, c.fenced); got != c.want {
			t.Errorf("next(shutdown %v, fenced %v) at %v = %v, want %v", c.shutdown, c.fenced, c.interval, got, c.want)
		}
	}
}

func TestNodeConfigHelpers(t *testing.T) {
	for _, c := range []struct {
		cfg        Config
		voter2     bool
		brokerOnly bool
		rf         int16
	}{
		{Config{NodeID: 1, Peers: map[int32]string{1: ""}}, false, false, 1},
		{Config{NodeID: 1, Peers: map[int32]string{1: "a", 2: "b"}}, true, false, 2},
		{Config{NodeID: 4, Peers: map[int32]string{1: "a", 2: "b", 3: "c"}}, true, true, 3},
		{Config{NodeID: 1, Peers: map[int32]string{1: "a", 2: "b", 3: "c", 4: "d", 5: "e"}}, true, false, 3},
		{Config{NodeID: 1, Peers: map[int32]string{1: "a", 2: "b", 3: "c"}, DefaultReplicationFactor: 2}, true, false, 2},
	} {
		n := &Node{cfg: c.cfg}
		if n.IsVoter(2) != c.voter2 || n.BrokerOnly() != c.brokerOnly || n.DefaultReplicationFactor() != c.rf {
			t.Errorf("%+v: voter(2) %v broker-only %v rf %d", c.cfg.Peers, n.IsVoter(2), n.BrokerOnly(), n.DefaultReplicationFactor())
		}
	}
	n := &Node{cfg: Config{NodeID: 7, InterBrokerListener: "INTERNAL"}}
	if n.ClientID() != BrokerClientPrefix+"7" {
		t.Fatalf("ClientID = %q", n.ClientID())
	}
	br := metadata.BrokerInfo{ID: 2, Host: "x", Port: 1, Listeners: []metadata.Endpoint{
		{Name: "EXTERNAL", Host: "ext", Port: 9092}, {Name: "INTERNAL", Host: "10.0.0.2", Port: 9093}}}
	if addr, ok := n.BrokerAddr(br); !ok || addr != "10.0.0.2:9093" {
		t.Fatalf("BrokerAddr = %q %v", addr, ok)
	}
	n.cfg.InterBrokerListener = "REPLICATION"
	if addr, ok := n.BrokerAddr(br); ok {
		t.Fatalf("BrokerAddr on a missing listener = %q", addr)
	}
	for scope, want := range map[string]string{"": "cluster default", "3": "broker 3"} {
		if got := brokerScope(scope); got != want {
			t.Errorf("brokerScope(%q) = %q", scope, got)
		}
	}
}
