package group

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// clock is a fake time for Options.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestOffsetRetentionRules (offsets.retention.minutes): a live group's
// offsets never expire; an empty group's expire a retention after it
// emptied (not after the commit); each offset on its own clock in a
// simple group; the group goes with its last offset.
func TestOffsetRetentionRules(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	cfg := DefaultConfig()
	cfg.InitialRebalanceDelay, cfg.OffsetRetention = 0, time.Hour
	c := New(cfg, []Log{&memLog{}}, Options{Now: clk.Now, Partitions: func(string) int32 { return 4 },
		Topic: func(string) (TopicInfo, bool) { return topicT, true }, Topics: func() []TopicInfo { return []TopicInfo{topicT} }})
	if err := c.Load(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// A simple group: two offsets committed half an hour apart.
	commitCodes(t, c, commitOne("simple", "t", 0, 1, nil))
	clk.add(30 * time.Minute)
	commitCodes(t, c, commitOne("simple", "t", 1, 2, nil))
	// A classic group with a member, committing.
	m := &classic{t: t, c: c, group: "live"}
	m.join()
	m.syncReply(map[string]string{m.id: "x"})(context.Background())
	req := commitOne("live", "t", 0, 9, nil)
	req.Generation, req.MemberID = m.gen, m.id
	if codes := commitCodes(t, c, req); codes["t/0"] != 0 {
		t.Fatal(codes)
	}
	clk.add(45 * time.Minute) // 75 min after simple's first commit, 45 after the rest
	if code := m.heartbeat(m.gen); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	c.ExpireNow()
	if off, _ := fetch(t, c, "simple", 0); off != -1 {
		t.Fatalf("simple t-0 past retention: %d", off)
	}
	if off, _ := fetch(t, c, "simple", 1); off != 2 {
		t.Fatalf("simple t-1 within retention: %d", off)
	}
	clk.add(2 * time.Hour)
	if code := m.heartbeat(m.gen); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	c.ExpireNow()
	if off, _ := fetch(t, c, "live", 0); off != 9 {
		t.Fatalf("a live group's offset expired: %d", off)
	}
	if c.GroupType("simple") != "" {
		t.Fatal("simple outlived its last offset")
	}
	// live empties: its offsets count from then.
	if code := m.leave(); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	clk.add(59 * time.Minute)
	c.ExpireNow()
	if off, _ := fetch(t, c, "live", 0); off != 9 {
		t.Fatalf("expired before a retention since the group emptied: %d", off)
	}
	clk.add(2 * time.Minute)
	c.ExpireNow()
	if off, _ := fetch(t, c, "live", 0); off != -1 {
		t.Fatalf("not expired a retention after the group emptied: %d", off)
	}
}

// TestClassicRebalanceTimeout: a member that does not rejoin within the
// rebalance timeout is dropped from the generation, and the others go on
// without it.
func TestClassicRebalanceTimeout(t *testing.T) {
	c := newClassicCoordinator(t, func(cfg *Config) { cfg.MinSessionTimeout = time.Millisecond })
	join := func(m *classic, session int32) *kmsg.JoinGroupResponse {
		req := m.joinReq()
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = session, 200
		return c.JoinGroup(req, "client", "/10.0.0.1")(context.Background()).(*kmsg.JoinGroupResponse)
	}
	a := &classic{t: t, c: c, group: "g"}
	r := join(a, 60000)
	a.id, a.gen = r.MemberID, r.Generation
	a.syncReply(map[string]string{a.id: "x"})(context.Background())
	// b joins; a never comes back to rejoin (it stops heartbeating too),
	// so b's join completes once a's rebalance timeout passes.
	b := &classic{t: t, c: c, group: "g"}
	done := make(chan *kmsg.JoinGroupResponse, 1)
	go func() { done <- join(b, 60000) }()
	var rb *kmsg.JoinGroupResponse
	select {
	case rb = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("b's join never completed without a")
	}
	if rb.ErrorCode != 0 || rb.LeaderID != rb.MemberID || rb.Generation != 2 || len(rb.Members) != 1 {
		t.Fatalf("b's join: %+v", rb)
	}
	if code := a.heartbeat(a.gen); code != kerr.UnknownMemberID.Code {
		t.Fatalf("a after the timeout: %v", kerr.ErrorForCode(code))
	}
}
