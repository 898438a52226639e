package group

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/testwait"
)

var topicT = TopicInfo{Name: "t", ID: [16]byte{1}, Partitions: 4}

func newConsumerTestCoordinator(t *testing.T, logs []Log, assignor string) *Coordinator {
	return newTopicTTestCoordinator(t, logs, func(cfg *Config) {
		if assignor != "" {
			cfg.ConsumerAssignors = []string{assignor}
		}
	})
}

// newTopicTTestCoordinator is a loaded coordinator over logs that knows one
// topic, topicT; edit adjusts the default config.
func newTopicTTestCoordinator(t *testing.T, logs []Log, edit func(*Config)) *Coordinator {
	cfg := DefaultConfig()
	edit(&cfg)
	c := New(cfg, logs, Options{
		Partitions: func(topic string) int32 {
			if topic == "t" {
				return topicT.Partitions
			}
			return -1
		},
		Topic: func(name string) (TopicInfo, bool) {
			if name == "t" {
				return topicT, true
			}
			return TopicInfo{}, false
		},
		Topics: func() []TopicInfo { return []TopicInfo{topicT} },
	})
	if err := c.Load(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// cgClient is a consumer-protocol member as a client would run it: it owns
// what the last answer assigned and reports it.
type cgClient struct {
	id    string
	epoch int32
	owned map[int32]bool
}

func (m *cgClient) beat(t *testing.T, c *Coordinator) *kmsg.ConsumerGroupHeartbeatResponse {
	t.Helper()
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group, req.MemberID, req.MemberEpoch = "g", m.id, m.epoch
	req.RebalanceTimeoutMillis = 30000
	req.SubscribedTopicNames = []string{"t"}
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	if m.epoch > 0 {
		var ps []int32
		for p := range m.owned {
			ps = append(ps, p)
		}
		if len(ps) > 0 {
			req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: topicT.ID, Partitions: ps}}
		}
	}
	resp := c.ConsumerGroupHeartbeat(req, "client", "/127.0.0.1")(context.Background()).(*kmsg.ConsumerGroupHeartbeatResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("member %s heartbeat: %v", m.id, kerr.ErrorForCode(resp.ErrorCode))
	}
	m.epoch = resp.MemberEpoch
	if resp.Assignment != nil {
		m.owned = map[int32]bool{}
		for _, tp := range resp.Assignment.Topics {
			for _, p := range tp.Partitions {
				m.owned[p] = true
			}
		}
	}
	return resp
}

// TestConsumerGroupRevokesBeforeReassigning: at no point do two members own
// one partition, whatever order they heartbeat in, and the group converges
// to an even split.
func TestConsumerGroupRevokesBeforeReassigning(t *testing.T) {
	for _, assignor := range []string{"uniform", "range"} {
		t.Run(assignor, func(t *testing.T) {
			c := newConsumerTestCoordinator(t, []Log{&memLog{}}, assignor)
			a := &cgClient{id: "a"}
			a.beat(t, c)
			if len(a.owned) != 4 {
				t.Fatalf("a alone owns %v", a.owned)
			}
			b := &cgClient{id: "b"}
			members := []*cgClient{a, b}
			check := func() {
				t.Helper()
				seen := map[int32]string{}
				for _, m := range members {
					for p := range m.owned {
						if o, dup := seen[p]; dup {
							t.Fatalf("partition %d owned by %s and %s", p, o, m.id)
						}
						seen[p] = m.id
					}
				}
			}
			b.beat(t, c) // joins: its share is still a's
			check()
			if len(b.owned) != 0 {
				t.Fatalf("b got %v before a revoked", b.owned)
			}
			for i := 0; i < 4; i++ {
				b.beat(t, c)
				check()
				a.beat(t, c)
				check()
			}
			b.beat(t, c)
			check()
			if len(a.owned) != 2 || len(b.owned) != 2 {
				t.Fatalf("not converged: a %v, b %v", a.owned, b.owned)
			}
			c.mu.Lock()
			g := c.groups["g"]
			state, epoch := g.state, g.consumer.epoch
			c.mu.Unlock()
			if state != Stable || a.epoch != epoch || b.epoch != epoch {
				t.Fatalf("state %s, epochs a %d b %d group %d", state, a.epoch, b.epoch, epoch)
			}
		})
	}
}

// TestConsumerGroupReplay: a coordinator that replays the log (a failover,
// a restart) has the same group: epochs, members, assignments, static
// mapping, and it goes on from there.
func TestConsumerGroupReplay(t *testing.T) {
	log := &memLog{}
	c := newConsumerTestCoordinator(t, []Log{log}, "")
	a, b := &cgClient{id: "a"}, &cgClient{id: "b"}
	a.beat(t, c)
	b.beat(t, c)
	for i := 0; i < 3; i++ {
		a.beat(t, c)
		b.beat(t, c)
	}
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version = 9
	commit.Group, commit.MemberID, commit.Generation = "g", "a", a.epoch
	var p int32
	for p = range a.owned {
		break
	}
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: p, Offset: 42, LeaderEpoch: -1}}}}
	if code := c.OffsetCommit(commit)(context.Background()).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("commit: %v", kerr.ErrorForCode(code))
	}

	c2 := newConsumerTestCoordinator(t, []Log{log}, "")
	c.mu.Lock()
	g1 := c.groups["g"]
	c.mu.Unlock()
	c2.mu.Lock()
	g2 := c2.groups["g"]
	c2.mu.Unlock()
	if g2 == nil || g2.consumer == nil {
		t.Fatal("consumer group not replayed")
	}
	if g1.consumer.epoch != g2.consumer.epoch || g1.consumer.assignmentEpoch != g2.consumer.assignmentEpoch || g2.state != Stable {
		t.Fatalf("replayed epoch %d/%d state %s, had %d/%d", g2.consumer.epoch, g2.consumer.assignmentEpoch, g2.state, g1.consumer.epoch, g1.consumer.assignmentEpoch)
	}
	for id, m1 := range g1.consumer.members {
		m2 := g2.consumer.members[id]
		if m2 == nil || m2.epoch != m1.epoch || !m2.assigned.equal(m1.assigned) || !m2.target.equal(m1.target) || m2.state != m1.state {
			t.Fatalf("member %s replayed as %+v, was %+v", id, m2, m1)
		}
		for k, e := range m1.assignedAt {
			if m2.assignedAt[k] != e {
				t.Fatalf("member %s assignment epoch of %v: %d, was %d", id, k, m2.assignedAt[k], e)
			}
		}
	}
	// The members heartbeat on at their epochs with the new coordinator.
	a.beat(t, c2)
	b.beat(t, c2)
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 9
	aid := "a"
	req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "g", MemberID: &aid, MemberEpoch: a.epoch, Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t", Partitions: []int32{p}}}}}
	fr := c2.OffsetFetch(req)(context.Background()).(*kmsg.OffsetFetchResponse)
	if fr.Groups[0].ErrorCode != 0 || fr.Groups[0].Topics[0].Partitions[0].Offset != 42 {
		t.Fatalf("offset after replay: %+v", fr.Groups[0])
	}
	req.Groups[0].MemberEpoch = a.epoch + 1
	if code := c2.OffsetFetch(req)(context.Background()).(*kmsg.OffsetFetchResponse).Groups[0].ErrorCode; code != kerr.StaleMemberEpoch.Code {
		t.Fatalf("fetch with a wrong epoch: %v", kerr.ErrorForCode(code))
	}

	// a leaves; replayed again, only b is left and owns everything once
	// it has reconciled.
	leave := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	leave.Version = 1
	leave.Group, leave.MemberID, leave.MemberEpoch = "g", "a", -1
	if code := c2.ConsumerGroupHeartbeat(leave, "client", "")(context.Background()).(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode; code != 0 {
		t.Fatalf("leave: %v", kerr.ErrorForCode(code))
	}
	c3 := newConsumerTestCoordinator(t, []Log{log}, "")
	c3.mu.Lock()
	n := len(c3.groups["g"].consumer.members)
	c3.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d members after a left and a replay", n)
	}
	b.beat(t, c3)
	b.beat(t, c3)
	if len(b.owned) != 4 {
		t.Fatalf("b owns %v after a left", b.owned)
	}
}

// TestConsumerGroupSessionTimeout: a member that stops heartbeating is
// removed and its partitions go to the others. The coordinator's clock is
// the test's: it moves only when the test moves it, so a busy machine
// that delays a's heartbeats cannot end a's session too (with a real 200
// ms session it did: both members removed, 1 of 20 runs at load 28).
func TestConsumerGroupSessionTimeout(t *testing.T) {
	cfg := DefaultConfig()
	const session = time.Second
	cfg.ConsumerSessionTimeout = session
	var clockMu sync.Mutex
	now := time.Now()
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	advance := func(d time.Duration) { clockMu.Lock(); defer clockMu.Unlock(); now = now.Add(d) }
	c := New(cfg, []Log{&memLog{}}, Options{
		Topic:  func(string) (TopicInfo, bool) { return topicT, true },
		Topics: func() []TopicInfo { return []TopicInfo{topicT} },
		Now:    clock,
	})
	if err := c.Load(false); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, b := &cgClient{id: "a"}, &cgClient{id: "b"}
	a.beat(t, c)
	b.beat(t, c)
	for i := 0; len(a.owned) != 2 || len(b.owned) != 2; i++ {
		if i > 10 {
			t.Fatalf("not converged: a %v, b %v", a.owned, b.owned)
		}
		a.beat(t, c)
		b.beat(t, c)
	}
	// b goes silent: past its session, not past a's (a heartbeat
	// between), then a's heartbeats pick up b's partitions once the
	// coordinator's timer ran.
	advance(session * 6 / 10)
	a.beat(t, c)
	advance(session * 6 / 10)
	testwait.Until(t, 30*time.Second, "a to own b's partitions after b went silent", func() bool {
		a.beat(t, c)
		return len(a.owned) == 4
	})
	c.mu.Lock()
	_, there := c.groups["g"].consumer.members["b"]
	c.mu.Unlock()
	if there {
		t.Fatal("b still a member")
	}
}
