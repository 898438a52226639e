package share

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// testTopics is a fake metadata: topics by name, changed by the test.
type testTopics map[string]TopicInfo

func (tt testTopics) add(name string, partitions int32) {
	id := [16]byte{byte(len(tt) + 1)}
	if t, ok := tt[name]; ok {
		id = t.ID
	}
	tt[name] = TopicInfo{Name: name, ID: id, Partitions: partitions}
}

func (tt testTopics) lookup(name string) (TopicInfo, bool) { t, ok := tt[name]; return t, ok }

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func newTestGroups(tt testTopics, clock *fakeClock) *Groups {
	return NewGroups(GroupsConfig{
		SessionTimeout: 10 * time.Second, MaxSize: 4, Topic: tt.lookup, Now: clock.Now,
		Partition: func(g string) int32 { return int32(len(g) % 3) },
	})
}

func join(t *testing.T, gs *Groups, group, member string, topics ...string) HeartbeatResult {
	t.Helper()
	if topics == nil {
		topics = []string{}
	}
	r, err := gs.Heartbeat(Heartbeat{Group: group, Member: member, Epoch: 0, Subscribed: topics})
	if err != nil {
		t.Fatalf("join %s/%s: %v", group, member, err)
	}
	return r
}

// beat heartbeats member at its current epoch, without subscriptions.
func beat(t *testing.T, gs *Groups, group, member string, epoch int32) HeartbeatResult {
	t.Helper()
	r, err := gs.Heartbeat(Heartbeat{Group: group, Member: member, Epoch: epoch})
	if err != nil {
		t.Fatalf("heartbeat %s/%s@%d: %v", group, member, epoch, err)
	}
	return r
}

func TestShareHeartbeatRefusals(t *testing.T) {
	tt := testTopics{}
	tt.add("t", 2)
	gs := newTestGroups(tt, &fakeClock{time.Unix(100, 0)})
	for _, c := range []struct {
		name string
		h    Heartbeat
		want error
	}{
		{"no member id", Heartbeat{Group: "g", Epoch: 0, Subscribed: []string{"t"}}, ErrInvalidHeartbeat},
		{"join without subscriptions", Heartbeat{Group: "g", Member: "a", Epoch: 0}, ErrInvalidHeartbeat},
		{"unknown group at epoch 3", Heartbeat{Group: "g", Member: "a", Epoch: 3}, ErrUnknownMember},
	} {
		if _, err := gs.Heartbeat(c.h); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	r := join(t, gs, "g", "a", "t")
	if r.Epoch != 1 {
		t.Fatalf("first member's epoch %d", r.Epoch)
	}
	if _, err := gs.Heartbeat(Heartbeat{Group: "g", Member: "b", Epoch: 1}); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("unknown member: %v", err)
	}
	if _, err := gs.Heartbeat(Heartbeat{Group: "g", Member: "a", Epoch: 7}); !errors.Is(err, ErrFencedMemberEpoch) {
		t.Fatalf("wrong epoch: %v", err)
	}
	// Leaving twice, or as a stranger, is no error.
	for range 2 {
		if r, err := gs.Heartbeat(Heartbeat{Group: "g", Member: "zz", Epoch: -1}); err != nil || r.Epoch != -1 {
			t.Fatalf("leave of a stranger: %v %v", r, err)
		}
	}
	// group.share.max.size (4 here).
	for _, m := range []string{"b", "c", "d"} {
		join(t, gs, "g", m, "t")
	}
	if _, err := gs.Heartbeat(Heartbeat{Group: "g", Member: "e", Epoch: 0, Subscribed: []string{"t"}}); !errors.Is(err, ErrGroupMaxSize) {
		t.Fatalf("fifth member: %v", err)
	}
	// A member already in the group may rejoin at epoch 0 when full.
	if r, err := gs.Heartbeat(Heartbeat{Group: "g", Member: "d", Epoch: 0, Subscribed: []string{"t"}}); err != nil || r.Assignment == nil {
		t.Fatalf("rejoin when full: %v %v", r, err)
	}
}

// TestShareAssignment: every partition of a subscribed topic goes to a
// member subscribed to it; with no more members than partitions each
// partition to exactly one, spread evenly; with more members, each member
// gets one partition. Checked over random groups from a fixed seed.
func TestShareAssignment(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 30))
	for round := range 200 {
		tt := testTopics{}
		ntopics := 1 + rng.IntN(3)
		names := make([]string, ntopics)
		for i := range names {
			names[i] = fmt.Sprintf("t%d", i)
			tt.add(names[i], int32(1+rng.IntN(6)))
		}
		gs := NewGroups(GroupsConfig{Topic: tt.lookup, MaxSize: 100, Partition: func(string) int32 { return 0 }})
		nmembers := 1 + rng.IntN(8)
		subs := map[string][]string{}
		for i := range nmembers {
			m := fmt.Sprintf("m%d", i)
			var s []string
			for _, n := range names {
				if rng.IntN(3) > 0 {
					s = append(s, n)
				}
			}
			subs[m] = s
			join(t, gs, "g", m, s...)
		}
		g, _ := gs.Describe("g")
		for _, name := range names {
			tp := tt[name]
			var subscribed []string
			for m, s := range subs {
				if slices.Contains(s, name) {
					subscribed = append(subscribed, m)
				}
			}
			owners := make([]int, tp.Partitions)
			perMember := map[string]int{}
			for m, mem := range g.Members {
				for _, p := range mem.Assignment[tp.ID] {
					if !slices.Contains(subscribed, m) {
						t.Fatalf("round %d: %s got %s-%d without subscribing", round, m, name, p)
					}
					owners[p]++
					perMember[m]++
				}
			}
			if len(subscribed) == 0 {
				continue
			}
			for p, n := range owners {
				if n == 0 {
					t.Fatalf("round %d: %s-%d unassigned (%d subscribed)", round, name, p, len(subscribed))
				}
				if len(subscribed) <= int(tp.Partitions) && n != 1 {
					t.Fatalf("round %d: %s-%d has %d owners with %d members for %d partitions", round, name, p, n, len(subscribed), tp.Partitions)
				}
			}
			lo, hi := int(tp.Partitions), 0
			for _, m := range subscribed {
				lo, hi = min(lo, perMember[m]), max(hi, perMember[m])
			}
			if hi-lo > 1 || len(subscribed) > int(tp.Partitions) && hi != 1 {
				t.Fatalf("round %d: %s spread %v over %d partitions", round, name, perMember, tp.Partitions)
			}
		}
	}
}

// TestShareEpochs: a member's epoch moves only when its assignment
// changes; the answer carries the assignment only then (or on a full
// heartbeat); a topic growing, a member leaving or going silent moves the
// others.
func TestShareEpochs(t *testing.T) {
	tt := testTopics{}
	tt.add("t", 2)
	clock := &fakeClock{time.Unix(100, 0)}
	gs := newTestGroups(tt, clock)
	a := join(t, gs, "g", "a", "t", "t") // duplicates collapse
	if a.Epoch != 1 || !slices.Equal(a.Assignment[tt["t"].ID], []int32{0, 1}) {
		t.Fatalf("a joined: %+v", a)
	}
	b := join(t, gs, "g", "b", "t")
	if b.Epoch != 2 || len(b.Assignment[tt["t"].ID]) != 1 {
		t.Fatalf("b joined: %+v", b)
	}
	// a's assignment shrank: its heartbeat at the epoch it knows (1) is
	// answered with epoch 2 and the new assignment, not fenced.
	r := beat(t, gs, "g", "a", 1)
	if r.Epoch != 2 || len(r.Assignment[tt["t"].ID]) != 1 {
		t.Fatalf("a after b joined: %+v", r)
	}
	// Once told epoch 2, epoch 1 is a zombie's.
	if _, err := gs.Heartbeat(Heartbeat{Group: "g", Member: "a", Epoch: 1}); !errors.Is(err, ErrFencedMemberEpoch) {
		t.Fatalf("epoch 1 after a learned 2: %v", err)
	}
	// Nothing changed: same epoch, no assignment sent.
	if r := beat(t, gs, "g", "a", 2); r.Epoch != 2 || r.Assignment != nil {
		t.Fatalf("quiet heartbeat: %+v", r)
	}
	// The same subscriptions again is a full heartbeat: assignment sent,
	// epoch kept.
	if r, err := gs.Heartbeat(Heartbeat{Group: "g", Member: "a", Epoch: 2, Subscribed: []string{"t"}}); err != nil || r.Epoch != 2 || r.Assignment == nil {
		t.Fatalf("full heartbeat: %+v %v", r, err)
	}
	// The topic grows to 4: both get two partitions at a new epoch.
	tt.add("t", 4)
	r = beat(t, gs, "g", "a", 2)
	g, _ := gs.Describe("g")
	if r.Epoch != g.Epoch || len(r.Assignment[tt["t"].ID]) != 2 || g.Epoch != 3 {
		t.Fatalf("after growth: %+v, group epoch %d", r, g.Epoch)
	}
	// b goes silent past the session timeout: a gets everything.
	clock.now = clock.now.Add(8 * time.Second)
	beat(t, gs, "g", "a", r.Epoch)
	clock.now = clock.now.Add(3 * time.Second)
	r = beat(t, gs, "g", "a", r.Epoch)
	if !slices.Equal(r.Assignment[tt["t"].ID], []int32{0, 1, 2, 3}) {
		t.Fatalf("after b expired: %+v", r)
	}
	if _, err := gs.Heartbeat(Heartbeat{Group: "g", Member: "b", Epoch: b.Epoch}); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("expired member's heartbeat: %v", err)
	}
	// a leaves: the group is empty and may be deleted.
	if err := gs.Delete("g"); !errors.Is(err, ErrNonEmptyShareGroup) {
		t.Fatalf("delete with a member: %v", err)
	}
	if r, err := gs.Heartbeat(Heartbeat{Group: "g", Member: "a", Epoch: -1}); err != nil || r.Epoch != -1 {
		t.Fatalf("leave: %+v %v", r, err)
	}
	if g, ok := gs.Describe("g"); !ok || g.State() != "Empty" {
		t.Fatalf("after leave: %+v %v", g, ok)
	}
	if err := gs.Delete("g"); err != nil || gs.Exists("g") {
		t.Fatalf("delete empty: %v, exists %v", err, gs.Exists("g"))
	}
}

// TestShareGroupsBookkeeping: Mark, List, Describe's copy, member
// details, UnloadPartition.
func TestShareGroupsBookkeeping(t *testing.T) {
	tt := testTopics{}
	tt.add("t", 1)
	gs := newTestGroups(tt, &fakeClock{time.Unix(100, 0)})
	gs.Mark("zz") // partition 2
	gs.Mark("a")  // partition 1
	rack := "r1"
	if _, err := gs.Heartbeat(Heartbeat{Group: "a", Member: "m", Epoch: 0, Subscribed: []string{"t", "missing"}, Rack: &rack, ClientID: "c", ClientHost: "/1.2.3.4"}); err != nil {
		t.Fatal(err)
	}
	gs.Mark("a") // marking a live group changes nothing
	var names []string
	for _, g := range gs.List() {
		names = append(names, g.ID+"/"+g.State())
	}
	if !slices.Equal(names, []string{"a/Stable", "zz/Empty"}) {
		t.Fatalf("List: %v", names)
	}
	g, _ := gs.Describe("a")
	m := g.Members["m"]
	if m.ClientID != "c" || m.ClientHost != "/1.2.3.4" || m.Rack == nil || *m.Rack != "r1" || !slices.Equal(m.Subscribed, []string{"missing", "t"}) {
		t.Fatalf("member %+v", m)
	}
	// A topic that does not exist is assigned nothing.
	if len(m.Assignment) != 1 {
		t.Fatalf("assignment %v", m.Assignment)
	}
	m.Epoch = 99 // Describe returned a copy
	if g2, _ := gs.Describe("a"); g2.Members["m"].Epoch == 99 {
		t.Fatal("Describe shares its members")
	}
	gs.UnloadPartition(int32(len("a") % 3))
	if gs.Exists("a") || !gs.Exists("zz") {
		t.Fatalf("after unloading a's partition: a %v zz %v", gs.Exists("a"), gs.Exists("zz"))
	}
	if gs.HeartbeatInterval() != 5*time.Second {
		t.Fatalf("default heartbeat interval %v", gs.HeartbeatInterval())
	}
}
