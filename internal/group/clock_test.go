package group

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	iclock "holdfast/internal/clock"
	"holdfast/internal/testwait"
)

// TestSessionTimeoutOnTheClock: a classic member that stops heartbeating
// is removed when its session.timeout.ms (10 minutes here) has passed on
// Options.Clock, a fake clock that also tells the deadlines' time: the
// group's timer is the clock's. With the timers on time.AfterFunc (before
// the clock seam) the member stayed for ten real minutes and the test
// timed out.
func TestSessionTimeoutOnTheClock(t *testing.T) {
	clk := iclock.NewFake(time.Unix(1_000_000, 0))
	cfg := DefaultConfig()
	cfg.InitialRebalanceDelay = 0
	cfg.RetentionCheckInterval = time.Hour // the offset expiry (also on the clock) would remove the empty group
	c := New(cfg, []Log{&memLog{}}, Options{Clock: clk, Partitions: func(string) int32 { return 4 },
		Topic: func(string) (TopicInfo, bool) { return topicT, true }, Topics: func() []TopicInfo { return []TopicInfo{topicT} }})
	if err := c.Load(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m := &classic{t: t, c: c, group: "g"}
	req := m.joinReq()
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 600_000, 600_000
	resp := c.JoinGroup(req, "client", "/10.0.0.1")(context.Background()).(*kmsg.JoinGroupResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("join: %d", resp.ErrorCode)
	}
	m.id, m.gen = resp.MemberID, resp.Generation
	m.syncReply(map[string]string{m.id: "x"})(context.Background())
	state := func() (State, int) {
		c.mu.Lock()
		defer c.mu.Unlock()
		g := c.groups["g"]
		return g.state, len(g.members)
	}
	if s, n := state(); s != Stable || n != 1 {
		t.Fatalf("group %s with %d members after the join", s, n)
	}
	clk.Advance(10*time.Minute - time.Second)
	if s, n := state(); s != Stable || n != 1 {
		t.Fatalf("group %s with %d members before the session timed out", s, n)
	}
	clk.Advance(time.Second)
	testwait.Until(t, 10*time.Second, "the silent member removed at its session timeout", func() bool {
		s, n := state()
		return s == Empty && n == 0
	})
}
