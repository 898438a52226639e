package group

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// assignInput is a random group: members, their subscriptions, topics.
type assignInput struct {
	cg     *consumerGroup
	per    map[string]map[string]bool
	topics map[string]TopicInfo
}

func randomAssignInput(rng *rand.Rand, all bool) assignInput {
	in := assignInput{cg: newConsumerGroup(), per: map[string]map[string]bool{}, topics: map[string]TopicInfo{}}
	for i := range 1 + rng.IntN(4) {
		name := fmt.Sprintf("t%d", i)
		in.topics[name] = TopicInfo{Name: name, ID: [16]byte{byte(i + 1)}, Partitions: int32(1 + rng.IntN(9))}
	}
	for i := range 1 + rng.IntN(7) {
		id := fmt.Sprintf("m%02d", i)
		m := &cmember{id: id}
		if rng.IntN(4) == 0 {
			inst := fmt.Sprintf("i%02d", 10-i)
			m.instanceID = &inst
		}
		in.cg.members[id] = m
		in.per[id] = map[string]bool{}
		for n := range in.topics {
			if all || rng.IntN(3) > 0 {
				in.per[id][n] = true
			}
		}
	}
	return in
}

// checkAssignment: every partition of a topic someone subscribes to is
// assigned to exactly one member subscribed to it, and nothing else is.
func checkAssignment(t *testing.T, what string, in assignInput, out map[string]assignment) {
	t.Helper()
	byID := map[[16]byte]string{}
	for n, tp := range in.topics {
		byID[tp.ID] = n
	}
	owners := map[tpKey]string{}
	for id, a := range out {
		a.each(func(tid [16]byte, p int32) {
			n, ok := byID[tid]
			if !ok || !in.per[id][n] || p < 0 || p >= in.topics[n].Partitions {
				t.Fatalf("%s: %s got %s-%d (subscribed %v)", what, id, n, p, in.per[id])
			}
			if prev, dup := owners[tpKey{tid, p}]; dup {
				t.Fatalf("%s: %s-%d to both %s and %s", what, n, p, prev, id)
			}
			owners[tpKey{tid, p}] = id
		})
	}
	for n, tp := range in.topics {
		wanted := false
		for _, subs := range in.per {
			wanted = wanted || subs[n]
		}
		for p := range tp.Partitions {
			if _, ok := owners[tpKey{tp.ID, p}]; ok != wanted {
				t.Fatalf("%s: %s-%d assigned %v, subscribed by someone %v", what, n, p, ok, wanted)
			}
		}
	}
}

// TestAssignorsCoverEveryPartitionOnce, over random groups from a fixed
// seed, for both assignors; and both are deterministic.
func TestAssignorsCoverEveryPartitionOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 30))
	for round := range 300 {
		in := randomAssignInput(rng, false)
		for _, name := range []string{"uniform", "range", "no-such (the default: uniform)"} {
			out := assign(name, in.cg, in.per, in.topics)
			checkAssignment(t, fmt.Sprintf("round %d %s", round, name), in, out)
			if again := assign(name, in.cg, in.per, in.topics); !reflect.DeepEqual(normalize(out), normalize(again)) {
				t.Fatalf("round %d %s: not deterministic", round, name)
			}
		}
	}
	if out := assign("uniform", newConsumerGroup(), map[string]map[string]bool{}, map[string]TopicInfo{"t": {Partitions: 3}}); len(out) != 0 {
		t.Fatalf("no members: %v", out)
	}
}

func normalize(out map[string]assignment) map[string]map[[16]byte][]int32 {
	n := map[string]map[[16]byte][]int32{}
	for id, a := range out {
		n[id] = map[[16]byte][]int32{}
		for tid, ps := range a {
			n[id][tid] = slices.Sorted(slices.Values(ps))
		}
	}
	return n
}

// TestUniformBalancedAndSticky: with everyone subscribed to everything,
// the uniform assignor's counts differ by at most one; when a member
// joins or leaves, every member keeps what it had up to its new share.
func TestUniformBalancedAndSticky(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	for round := range 200 {
		in := randomAssignInput(rng, true)
		out := assign("uniform", in.cg, in.per, in.topics)
		checkBalanced(t, round, out)
		for id, a := range out {
			in.cg.members[id].target = a
		}
		// One member more, or one fewer.
		if rng.IntN(2) == 0 || len(in.per) == 1 {
			id := "zz"
			in.cg.members[id] = &cmember{id: id}
			in.per[id] = map[string]bool{}
			for n := range in.topics {
				in.per[id][n] = true
			}
		} else {
			for id := range in.per {
				delete(in.per, id)
				delete(in.cg.members, id)
				break
			}
		}
		next := assign("uniform", in.cg, in.per, in.topics)
		checkAssignment(t, fmt.Sprintf("round %d after the change", round), in, next)
		checkBalanced(t, round, next)
		total := 0
		for _, tp := range in.topics {
			total += int(tp.Partitions)
		}
		floor := total / len(in.per)
		for id, a := range next {
			prev, ok := out[id]
			if !ok {
				continue
			}
			kept := 0
			a.each(func(tid [16]byte, p int32) {
				if prev.has(tid, p) {
					kept++
				}
			})
			if want := min(prev.count(), floor); kept < want {
				t.Fatalf("round %d: %s kept %d of its %d partitions, share %d", round, id, kept, prev.count(), floor)
			}
		}
	}
}

func checkBalanced(t *testing.T, round int, out map[string]assignment) {
	t.Helper()
	lo, hi := 1<<30, 0
	for _, a := range out {
		lo, hi = min(lo, a.count()), max(hi, a.count())
	}
	if hi-lo > 1 {
		t.Fatalf("round %d: counts from %d to %d: %v", round, lo, hi, normalize(out))
	}
}

// TestRangeCoPartitions: members subscribed to the same topics get the
// same partition numbers of each (Kafka's range assignor), contiguous,
// the first members one more when the count does not divide; static
// members come first, by instance id.
func TestRangeCoPartitions(t *testing.T) {
	cg := newConsumerGroup()
	per := map[string]map[string]bool{}
	for _, id := range []string{"a", "b", "c"} {
		cg.members[id] = &cmember{id: id}
		per[id] = map[string]bool{"x": true, "y": true}
	}
	inst := "00-static"
	cg.members["c"].instanceID = &inst
	topics := map[string]TopicInfo{"x": {Name: "x", ID: [16]byte{1}, Partitions: 7}, "y": {Name: "y", ID: [16]byte{2}, Partitions: 7}}
	out := assign("range", cg, per, topics)
	want := map[string][]int32{"c": {0, 1, 2}, "a": {3, 4}, "b": {5, 6}}
	for id, ps := range want {
		for _, tid := range [][16]byte{{1}, {2}} {
			if got := slices.Sorted(slices.Values(out[id][tid])); !slices.Equal(got, ps) {
				t.Fatalf("%s on topic %x: %v, want %v", id, tid[0], got, ps)
			}
		}
	}
	// More members than partitions: the last get nothing of that topic.
	topics["y"] = TopicInfo{Name: "y", ID: [16]byte{2}, Partitions: 2}
	out = assign("range", cg, per, topics)
	if len(out["b"][[16]byte{2}]) != 0 || len(out["c"][[16]byte{2}]) != 1 || len(out["a"][[16]byte{2}]) != 1 {
		t.Fatalf("y over three members: %v", normalize(out))
	}
}

func TestAssignmentHelpers(t *testing.T) {
	a := assignment{}
	a.add([16]byte{1}, 3)
	a.add([16]byte{1}, 1)
	a.add([16]byte{2}, 0)
	if a.count() != 3 || !a.has([16]byte{1}, 1) || a.has([16]byte{2}, 1) {
		t.Fatalf("assignment %v", a)
	}
	b := a.clone()
	b.add([16]byte{3}, 0)
	if a.count() != 3 || a.equal(b) || !a.equal(a.clone()) {
		t.Fatal("clone shares, or equal is wrong")
	}
	var seen []int32
	a.each(func(tid [16]byte, p int32) { seen = append(seen, int32(tid[0])*10+p) })
	if slices.Sort(seen); !slices.Equal(seen, []int32{11, 13, 20}) {
		t.Fatalf("each: %v", seen)
	}
}

// TestDefaultsAreKafkas: the group configs' defaults are Kafka's
// (group.*.ms, offsets.retention.minutes, group.consumer.*).
func TestDefaultsAreKafkas(t *testing.T) {
	c := DefaultConfig()
	for _, x := range []struct {
		name      string
		got, want any
	}{
		{"group.initial.rebalance.delay.ms", c.InitialRebalanceDelay.Milliseconds(), int64(3000)},
		{"group.min.session.timeout.ms", c.MinSessionTimeout.Milliseconds(), int64(6000)},
		{"group.max.session.timeout.ms", c.MaxSessionTimeout.Milliseconds(), int64(1800000)},
		{"offsets.retention.minutes", c.OffsetRetention.Minutes(), float64(10080)},
		{"offsets.retention.check.interval.ms", c.RetentionCheckInterval.Milliseconds(), int64(600000)},
		{"offset.metadata.max.bytes", c.MaxMetadataBytes, 4096},
		{"group.consumer.session.timeout.ms", c.ConsumerSessionTimeout.Milliseconds(), int64(45000)},
		{"group.consumer.heartbeat.interval.ms", c.ConsumerHeartbeatInterval.Milliseconds(), int64(5000)},
		{"group.consumer.assignors", fmt.Sprint(c.ConsumerAssignors), "[uniform range]"},
		{"group.consumer.migration.policy", c.ConsumerMigrationPolicy, MigrationBidirectional},
	} {
		if x.got != x.want {
			t.Errorf("%s = %v, want %v", x.name, x.got, x.want)
		}
	}
	if !slices.Equal(Assignors, []string{"uniform", "range"}) {
		t.Fatalf("Assignors %v", Assignors)
	}
}

// TestPartitionForSpread: every group lands in [0, n), the same group in
// the same partition, and a few hundred names use every partition.
func TestPartitionForSpread(t *testing.T) {
	for _, n := range []int{1, 3, 50} {
		used := map[int32]bool{}
		for i := range 500 {
			g := fmt.Sprintf("group-%d", i)
			p := PartitionFor(g, n)
			if p < 0 || int(p) >= n || PartitionFor(g, n) != p {
				t.Fatalf("PartitionFor(%s, %d) = %d", g, n, p)
			}
			used[p] = true
		}
		if len(used) != n {
			t.Fatalf("%d of %d partitions used", len(used), n)
		}
	}
	// Java's String.hashCode of a non-ASCII name (UTF-16 code units).
	if h := javaStringHash("ä"); h != 228 {
		t.Fatalf("hash(ä) = %d", h)
	}
}
