package group

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// topicSet is a metadata the test changes: topics by name.
type topicSet struct {
	mu sync.Mutex
	ts map[string]TopicInfo
}

func (s *topicSet) set(name string, id byte, n int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ts[name] = TopicInfo{Name: name, ID: [16]byte{id}, Partitions: n}
}

func (s *topicSet) coordinator(t *testing.T) *Coordinator {
	c := New(DefaultConfig(), []Log{&memLog{}}, Options{
		Partitions: func(name string) int32 {
			s.mu.Lock()
			defer s.mu.Unlock()
			if tp, ok := s.ts[name]; ok {
				return tp.Partitions
			}
			return -1
		},
		Topic: func(name string) (TopicInfo, bool) {
			s.mu.Lock()
			defer s.mu.Unlock()
			tp, ok := s.ts[name]
			return tp, ok
		},
		Topics: func() []TopicInfo {
			s.mu.Lock()
			defer s.mu.Unlock()
			var out []TopicInfo
			for _, tp := range s.ts {
				out = append(out, tp)
			}
			return out
		},
	})
	if err := c.Load(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// subMember heartbeats with its subscription and keeps what it is given,
// by topic id.
type subMember struct {
	id       string
	epoch    int32
	names    []string
	regex    *string
	assignor *string
	owned    map[[16]byte][]int32
}

func (m *subMember) beat(t *testing.T, c *Coordinator) *kmsg.ConsumerGroupHeartbeatResponse {
	t.Helper()
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version = 1
	req.Group, req.MemberID, req.MemberEpoch = "g", m.id, m.epoch
	req.RebalanceTimeoutMillis = 30000
	req.SubscribedTopicNames, req.SubscribedTopicRegex, req.ServerAssignor = m.names, m.regex, m.assignor
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	for id, ps := range m.owned {
		req.Topics = append(req.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: id, Partitions: ps})
	}
	if m.epoch == 0 {
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	}
	resp := c.ConsumerGroupHeartbeat(req, "cli", "/10.0.0.9")(context.Background()).(*kmsg.ConsumerGroupHeartbeatResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("%s: %v", m.id, kerr.ErrorForCode(resp.ErrorCode))
	}
	m.epoch = resp.MemberEpoch
	if resp.Assignment != nil {
		m.owned = map[[16]byte][]int32{}
		for _, tp := range resp.Assignment.Topics {
			m.owned[tp.TopicID] = slices.Sorted(slices.Values(tp.Partitions))
		}
	}
	return resp
}

func (m *subMember) count() int {
	n := 0
	for _, ps := range m.owned {
		n += len(ps)
	}
	return n
}

// TestConsumerRegexSubscriptionAndGrowth: a regex subscription resolves
// against the topics that exist; a named one only its names; a topic
// that grows is handed out at the next heartbeat; the assignor is the
// one most members ask for.
func TestConsumerRegexSubscriptionAndGrowth(t *testing.T) {
	s := &topicSet{ts: map[string]TopicInfo{}}
	s.set("orders", 1, 2)
	s.set("orders-eu", 2, 1)
	s.set("billing", 3, 3)
	c := s.coordinator(t)
	re, rangeName := "orders.*", "range"
	a := &subMember{id: "a", regex: &re, assignor: &rangeName}
	b := &subMember{id: "b", names: []string{"billing"}, assignor: &rangeName}
	a.beat(t, c)
	b.beat(t, c)
	for range 3 {
		a.beat(t, c)
		b.beat(t, c)
	}
	if !slices.Equal(a.owned[[16]byte{1}], []int32{0, 1}) || !slices.Equal(a.owned[[16]byte{2}], []int32{0}) || len(a.owned[[16]byte{3}]) != 0 {
		t.Fatalf("a (orders.*) owns %v", a.owned)
	}
	if !slices.Equal(b.owned[[16]byte{3}], []int32{0, 1, 2}) || b.count() != 3 {
		t.Fatalf("b (billing) owns %v", b.owned)
	}
	dreq := kmsg.NewPtrConsumerGroupDescribeRequest()
	dreq.Groups = []string{"g"}
	d := c.ConsumerGroupDescribe(dreq)(context.Background()).(*kmsg.ConsumerGroupDescribeResponse).Groups[0]
	if d.AssignorName != "range" {
		t.Fatalf("assignor %q, want the one both asked for", d.AssignorName)
	}
	for _, m := range d.Members {
		if m.MemberID == "a" && (m.SubscribedTopicRegex == nil || *m.SubscribedTopicRegex != re || len(m.SubscribedTopics) != 0) {
			t.Fatalf("a described: %+v", m)
		}
	}
	// billing grows to 5: b gets the new partitions.
	s.set("billing", 3, 5)
	epoch := b.epoch
	for range 3 {
		b.beat(t, c)
		a.beat(t, c)
	}
	if !slices.Equal(b.owned[[16]byte{3}], []int32{0, 1, 2, 3, 4}) || b.epoch <= epoch {
		t.Fatalf("after billing grew: b epoch %d (was %d) owns %v", b.epoch, epoch, b.owned)
	}
	// b switches to the regex too: the orders partitions are shared out.
	b.names, b.regex = nil, &re
	for range 6 {
		b.beat(t, c)
		a.beat(t, c)
	}
	if a.count()+b.count() != 3 || len(b.owned[[16]byte{3}]) != 0 {
		t.Fatalf("both on orders.*: a %v b %v", a.owned, b.owned)
	}
}
