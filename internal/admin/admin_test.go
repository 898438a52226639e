package admin_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/admin"
	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

func TestFormatAge(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{-1, "-"},
		{-time.Hour, "-"},
		{0, "0s"},
		{1, "0s"}, // a nanosecond rounds to 0 ms
		{1499 * time.Microsecond, "1ms"},
		{1500 * time.Microsecond, "2ms"},
		{999 * time.Millisecond, "999ms"},
		{time.Second, "1s"},
		{1499 * time.Millisecond, "1s"},
		{1500 * time.Millisecond, "2s"},
		{90 * time.Minute, "1h30m0s"},
		{25*time.Hour + 400*time.Millisecond, "25h0m0s"},
	} {
		if got := admin.FormatAge(c.d); got != c.want {
			t.Errorf("FormatAge(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestSourceName(t *testing.T) {
	for _, c := range []struct {
		s    kmsg.ConfigSource
		want string
	}{
		{kmsg.ConfigSourceDynamicTopicConfig, "topic"},
		{kmsg.ConfigSourceDefaultConfig, "default"},
		{kmsg.ConfigSourceStaticBrokerConfig, "broker"},
		{kmsg.ConfigSourceDynamicBrokerConfig, "broker (dynamic)"},
		{kmsg.ConfigSourceDynamicDefaultBrokerConfig, "broker (dynamic)"},
		{kmsg.ConfigSourceDynamicBrokerLoggerConfig, "dynamic_broker_logger_config"},
	} {
		if got := admin.SourceName(c.s); got != c.want {
			t.Errorf("SourceName(%v) = %q, want %q", c.s, got, c.want)
		}
	}
}

func TestErrGroupActive(t *testing.T) {
	err := error(&admin.ErrGroupActive{Group: "g", State: "Stable", Members: 2})
	if got, want := err.Error(), "group g is Stable with 2 members: stop its consumers before resetting"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// node is a single in-process broker and an admin client of it.
func node(t *testing.T) (*brokertest.Node, *admin.Client) {
	t.Helper()
	// Members join at once (group.initial.rebalance.delay.ms 0).
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.Groups.InitialRebalanceDelay = 0 })
	c, err := admin.NewClient([]string{n.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return n, c
}

func ctx5(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// produce writes records to explicit partitions with explicit timestamps
// and values "p<partition>-<n>" (n counts per partition from 0).
func produce(t *testing.T, n *brokertest.Node, topic string, recs ...struct {
	p  int32
	ts time.Time
}) {
	t.Helper()
	cl := n.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic))
	count := map[int32]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, r := range recs {
		// One batch each: a time lookup finds a batch, and the first
		// offset of a batch whose newest record is at or after the time.
		kr := &kgo.Record{Partition: r.p, Timestamp: r.ts, Value: fmt.Appendf(nil, "p%d-%d", r.p, count[r.p])}
		count[r.p]++
		if err := cl.ProduceSync(ctx, kr).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

type rec = struct {
	p  int32
	ts time.Time
}

func fill(p int32, n int, ts time.Time) []rec {
	var out []rec
	for range n {
		out = append(out, rec{p, ts})
	}
	return out
}

// poll polls a group member briefly: joining happens in its polls, and a
// poll with nothing to fetch would otherwise wait for the whole deadline.
func poll(cl *kgo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	cl.PollRecords(ctx, 1)
}

func commit(t *testing.T, c *admin.Client, group string, offs map[string]map[int32]int64) {
	t.Helper()
	var o kadm.Offsets
	for topic, ps := range offs {
		for p, at := range ps {
			o.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
		}
	}
	resp, err := c.A.CommitOffsets(ctx5(t), group, o)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

func committed(t *testing.T, c *admin.Client, group, topic string, parts int32) []int64 {
	t.Helper()
	resp, err := c.A.FetchOffsets(ctx5(t), group)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, parts)
	for p := range parts {
		out[p] = -1
		if o, ok := resp.Lookup(topic, p); ok && o.Err == nil {
			out[p] = o.At
		}
	}
	return out
}

func rowsString(rows []admin.ResetRow) string {
	s := ""
	for _, r := range rows {
		s += fmt.Sprintf("%s-%d:%d->%d ", r.Topic, r.Partition, r.Current, r.New)
	}
	return s
}

// ResetOffsets computes each partition's target (earliest, latest, an
// offset or a shift clamped to the log, a time) in topic and partition
// order, commits only with execute, and refuses a group with members.
func TestResetOffsets(t *testing.T) {
	n, c := node(t)
	n.CreateTopic("a", 2, nil)
	n.CreateTopic("b", 1, nil)
	base := time.UnixMilli(1_700_000_000_000)
	var rs []rec
	for i := range 10 { // a-0: 10 records, one second apart
		rs = append(rs, rec{0, base.Add(time.Duration(i) * time.Second)})
	}
	rs = append(rs, fill(1, 4, base)...)
	produce(t, n, "a", rs...)
	produce(t, n, "b", fill(0, 3, base)...)
	// Delete the first two records of a-0: earliest is 2 there.
	dr, err := c.A.DeleteRecords(ctx5(t), kadm.Offsets{"a": {0: {Topic: "a", Partition: 0, At: 2}}})
	if err == nil {
		err = dr.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	commit(t, c, "g", map[string]map[int32]int64{"a": {0: 5, 1: 1}, "b": {0: 3}})

	for _, tc := range []struct {
		name   string
		topics []string
		parts  map[string]map[int32]bool
		spec   admin.ResetSpec
		want   string
	}{
		{"earliest, all topics", nil, nil, admin.ResetSpec{Earliest: true}, "a-0:5->2 a-1:1->0 b-0:3->0 "},
		{"latest", []string{"a"}, nil, admin.ResetSpec{Latest: true}, "a-0:5->10 a-1:1->4 "},
		{"current", []string{"b", "a"}, nil, admin.ResetSpec{Current: true}, "a-0:5->5 a-1:1->1 b-0:3->3 "},
		{"offset clamped", []string{"a"}, nil, admin.ResetSpec{Offset: 7}, "a-0:5->7 a-1:1->4 "},
		{"offset below start", []string{"a"}, nil, admin.ResetSpec{Offset: 0}, "a-0:5->2 a-1:1->0 "},
		{"shift back clamped", []string{"a"}, nil, admin.ResetSpec{Shifting: true, Shift: -4}, "a-0:5->2 a-1:1->0 "},
		{"shift forward clamped", []string{"a"}, nil, admin.ResetSpec{Shifting: true, Shift: 3}, "a-0:5->8 a-1:1->4 "},
		{"one partition", []string{"a"}, map[string]map[int32]bool{"a": {1: true}}, admin.ResetSpec{Latest: true}, "a-1:1->4 "},
		{"at a time", []string{"a"}, nil, admin.ResetSpec{At: base.Add(6500 * time.Millisecond)}, "a-0:5->7 a-1:1->4 "},
		{"at the first time", []string{"a"}, nil, admin.ResetSpec{At: base}, "a-0:5->2 a-1:1->0 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := c.ResetOffsets(ctx5(t), "g", tc.topics, tc.parts, tc.spec, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := rowsString(rows); got != tc.want {
				t.Fatalf("rows %s, want %s", got, tc.want)
			}
		})
	}
	if got := committed(t, c, "g", "a", 2); !slices.Equal(got, []int64{5, 1}) {
		t.Fatalf("a dry run committed: %v", got)
	}

	// Errors: a partition the topic lacks, no commit to shift, no commits.
	if _, err := c.ResetOffsets(ctx5(t), "g", []string{"a"}, map[string]map[int32]bool{"a": {5: true}}, admin.ResetSpec{Latest: true}, false); err == nil ||
		err.Error() != "a-5: UNKNOWN_TOPIC_OR_PARTITION: the topic has no partition 5" {
		t.Fatalf("partition 5 of 2: %v", err)
	}
	n.CreateTopic("c", 1, nil)
	if _, err := c.ResetOffsets(ctx5(t), "g", []string{"c"}, nil, admin.ResetSpec{Shifting: true, Shift: 1}, false); err == nil ||
		err.Error() != "c-0: the group has no committed offset to shift" {
		t.Fatalf("shift without a commit: %v", err)
	}
	// A group with no commits and no members does not exist
	// (DescribeGroups v6 says so, as Kafka 4 does).
	if _, err := c.ResetOffsets(ctx5(t), "nobody", nil, nil, admin.ResetSpec{Earliest: true}, false); !errors.Is(err, kerr.GroupIDNotFound) {
		t.Fatalf("an unknown group: %v", err)
	}

	// Execute commits the rows.
	rows, err := c.ResetOffsets(ctx5(t), "g", []string{"a"}, nil, admin.ResetSpec{Offset: 3}, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rowsString(rows), "a-0:5->3 a-1:1->3 "; got != want {
		t.Fatalf("rows %s, want %s", got, want)
	}
	if got := committed(t, c, "g", "a", 2); !slices.Equal(got, []int64{3, 3}) {
		t.Fatalf("committed %v after reset, want [3 3]", got)
	}

	// A group with a live member is refused with execute, computed without.
	commit(t, c, "live", map[string]map[int32]int64{"b": {0: 1}}) // before it has members
	member := n.Client(kgo.ConsumerGroup("live"), kgo.ConsumeTopics("b"))
	for deadline := time.Now().Add(5 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal("the member did not join within 5 s")
		}
		poll(member) // joins the group
		dg, err := c.A.DescribeGroups(ctx5(t), "live")
		if err != nil {
			t.Fatal(err)
		}
		if dg["live"].State == "Stable" {
			break
		}
	}
	_, err = c.ResetOffsets(ctx5(t), "live", []string{"b"}, nil, admin.ResetSpec{Earliest: true}, true)
	var active *admin.ErrGroupActive
	if !errors.As(err, &active) || active.State != "Stable" || active.Members != 1 {
		t.Fatalf("reset of a live group: %v", err)
	}
	if _, err := c.ResetOffsets(ctx5(t), "live", []string{"b"}, nil, admin.ResetSpec{Earliest: true}, false); err != nil {
		t.Fatalf("dry run of a live group: %v", err)
	}
}

// Groups reports lag per partition and member (-1 with no commit), and
// the time lag: the age of the next record to read, zero when caught up.
func TestGroupsLag(t *testing.T) {
	n, c := node(t)
	n.CreateTopic("t", 3, nil)
	old := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	produce(t, n, "t", append(append(fill(0, 10, old), fill(1, 5, old)...), fill(2, 2, old)...)...)
	commit(t, c, "g", map[string]map[int32]int64{"t": {0: 4, 1: 5}})

	gs, err := c.Groups(ctx5(t), false, "g")
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 {
		t.Fatalf("%d groups", len(gs))
	}
	g := gs[0]
	if g.Name != "g" || g.State != "Empty" || g.Err != "" || len(g.Members) != 0 {
		t.Fatalf("group %+v", g)
	}
	type row struct {
		p                   int32
		committed, end, lag int64
		timeLag             time.Duration
	}
	var got []row
	for _, p := range g.Partitions {
		if p.Topic != "t" || p.Member != "-" {
			t.Fatalf("partition %+v", p)
		}
		got = append(got, row{p.Partition, p.Committed, p.End, p.Lag, p.TimeLag})
	}
	// Kadm's Lag lists every partition of a topic the group committed in.
	want := []row{{0, 4, 10, 6, -1}, {1, 5, 5, 0, 0}, {2, -1, 2, -1, -1}}
	if !slices.Equal(got, want) {
		t.Fatalf("partitions %v, want %v", got, want)
	}
	if g.TotalLag != 6 || g.MaxTimeLag != -1 {
		t.Fatalf("total lag %d, max time lag %v; want 6, -1", g.TotalLag, g.MaxTimeLag)
	}

	// With time lag: t-0's next record (offset 4) is an hour old.
	start := time.Now()
	gs, err = c.Groups(ctx5(t), true, "g")
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	g = gs[0]
	if tl := g.Partitions[0].TimeLag; tl < start.Sub(old) || tl > start.Sub(old)+elapsed {
		t.Fatalf("time lag of t-0: %v, want %v..%v", tl, start.Sub(old), start.Sub(old)+elapsed)
	}
	if g.Partitions[1].TimeLag != 0 || g.Partitions[2].TimeLag != -1 {
		t.Fatalf("time lags %v, %v; want 0, -1", g.Partitions[1].TimeLag, g.Partitions[2].TimeLag)
	}
	if g.MaxTimeLag != g.Partitions[0].TimeLag {
		t.Fatalf("max time lag %v, want t-0's %v", g.MaxTimeLag, g.Partitions[0].TimeLag)
	}
}

// A caught-up group's lag and time lag are zero; a live member owns its
// partitions' lag.
func TestGroupsMemberLag(t *testing.T) {
	n, c := node(t)
	n.CreateTopic("t", 2, nil)
	produce(t, n, "t", append(fill(0, 3, time.Now()), fill(1, 2, time.Now())...)...)
	commit(t, c, "g", map[string]map[int32]int64{"t": {0: 1, 1: 2}}) // before it has members
	member := n.Client(kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"), kgo.ClientID("lagger"), kgo.DisableAutoCommit())
	var g admin.Group
	for deadline := time.Now().Add(5 * time.Second); g.State != "Stable" || len(g.Members) != 1 || len(g.Members[0].Assigned) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the member did not join within 5 s: %+v", g)
		}
		poll(member)
		gs, err := c.Groups(ctx5(t), false, "g")
		if err != nil {
			t.Fatal(err)
		}
		g = gs[0]
	}
	m := g.Members[0]
	if m.ClientID != "lagger" || m.Lag != 2 || len(m.Assigned) != 1 || m.Assigned[0] != "t[0 1]" && m.Assigned[0] != "t[1 0]" {
		t.Fatalf("member %+v; want client lagger, lag 2, assigned t[0 1]", m)
	}
	for _, p := range g.Partitions {
		if p.Member != m.ID {
			t.Fatalf("partition %d owned by %q, want %q", p.Partition, p.Member, m.ID)
		}
	}
	if g.TotalLag != 2 {
		t.Fatalf("total lag %d", g.TotalLag)
	}
	commit(t, c, "g2", map[string]map[int32]int64{"t": {0: 3, 1: 2}})
	gs, err := c.Groups(ctx5(t), true, "g2")
	if err != nil {
		t.Fatal(err)
	}
	if gs[0].TotalLag != 0 || gs[0].MaxTimeLag != 0 {
		t.Fatalf("caught up: lag %d, time lag %v", gs[0].TotalLag, gs[0].MaxTimeLag)
	}
}

// ReadTopic merges partitions by timestamp, then partition, then offset:
// the first Max from an offset or a time, the last Max from before the
// end; Match filters, Scan bounds what is read.
func TestReadTopic(t *testing.T) {
	n, c := node(t)
	n.CreateTopic("t", 3, nil)
	base := time.UnixMilli(1_700_000_000_000)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	// p0: t=0,3,6; p1: t=1,3,5,7; p2: t=3. Ties at 3 s order by partition.
	produce(t, n, "t",
		rec{0, at(0)}, rec{0, at(3)}, rec{0, at(6)},
		rec{1, at(1)}, rec{1, at(3)}, rec{1, at(5)}, rec{1, at(7)},
		rec{2, at(3)})
	values := func(res admin.TopicReadResult) string {
		var s []string
		for _, r := range res.Records {
			s = append(s, string(r.Value))
		}
		return fmt.Sprint(s)
	}
	for _, tc := range []struct {
		name    string
		spec    admin.TopicRead
		want    string
		scanned int
		parts   int
		bounded bool
	}{
		{"all from 0", admin.TopicRead{Topic: "t", Max: 100},
			"[p0-0 p1-0 p0-1 p1-1 p2-0 p1-2 p0-2 p1-3]", 8, 3, false},
		{"first 3", admin.TopicRead{Topic: "t", Max: 3, Scan: 100},
			"[p0-0 p1-0 p0-1]", 8, 3, false},
		{"the last 3", admin.TopicRead{Topic: "t", Offset: -3, Max: 3},
			"[p1-2 p0-2 p1-3]", 7, 3, false},
		{"the last 1 of each", admin.TopicRead{Topic: "t", Offset: -1, Max: 2},
			"[p0-2 p1-3]", 3, 3, false},
		{"from a time", admin.TopicRead{Topic: "t", Time: at(4), Max: 100},
			"[p1-2 p0-2 p1-3]", 3, 3, false},
		{"partitions 1 and 2", admin.TopicRead{Topic: "t", Partitions: []int32{2, 1}, Max: 100},
			"[p1-0 p1-1 p2-0 p1-2 p1-3]", 5, 2, false},
		{"match", admin.TopicRead{Topic: "t", Max: 100, Match: func(r *kgo.Record) bool { return r.Timestamp.Equal(at(3)) }},
			"[p0-1 p1-1 p2-0]", 8, 3, false},
		{"scan bound", admin.TopicRead{Topic: "t", Max: 100, Scan: 3},
			"[p0-0 p1-0 p2-0]", 3, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := c.ReadTopic(ctx5(t), tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got := values(res); got != tc.want {
				t.Fatalf("records %s, want %s", got, tc.want)
			}
			if res.Scanned != tc.scanned || res.Partitions != tc.parts || res.Bounded != tc.bounded {
				t.Fatalf("scanned %d partitions %d bounded %v; want %d %d %v", res.Scanned, res.Partitions, res.Bounded, tc.scanned, tc.parts, tc.bounded)
			}
		})
	}
	if _, err := c.ReadTopic(ctx5(t), admin.TopicRead{Topic: "t", Partitions: []int32{3}}); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("partition 3 of 3: %v", err)
	}
	if _, err := c.ReadTopic(ctx5(t), admin.TopicRead{Topic: "none"}); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("a missing topic: %v", err)
	}
}

// ReadRecords reads one partition from an offset, from before the end or
// from a time, up to Max.
func TestReadRecords(t *testing.T) {
	n, c := node(t)
	n.CreateTopic("t", 2, nil)
	base := time.UnixMilli(1_700_000_000_000)
	var rs []rec
	for i := range 6 {
		rs = append(rs, rec{1, base.Add(time.Duration(i) * time.Second)})
	}
	produce(t, n, "t", rs...)
	for _, tc := range []struct {
		name string
		spec admin.ReadSpec
		want []int64
	}{
		{"from 2, max 3", admin.ReadSpec{Topic: "t", Partition: 1, Offset: 2, Max: 3}, []int64{2, 3, 4}},
		{"the last 2", admin.ReadSpec{Topic: "t", Partition: 1, Offset: -2}, []int64{4, 5}},
		{"more than there is before the end", admin.ReadSpec{Topic: "t", Partition: 1, Offset: -100, Max: 2}, []int64{0, 1}},
		{"from a time", admin.ReadSpec{Topic: "t", Partition: 1, Time: base.Add(3500 * time.Millisecond)}, []int64{4, 5}},
		{"at the end", admin.ReadSpec{Topic: "t", Partition: 1, Offset: 6}, nil},
		{"an empty partition", admin.ReadSpec{Topic: "t", Partition: 0}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := c.ReadRecords(ctx5(t), tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, r := range recs {
				got = append(got, r.Offset)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("offsets %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := c.ReadRecords(ctx5(t), admin.ReadSpec{Topic: "t", Partition: 2}); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("partition 2 of 2: %v", err)
	}
}

// NodesUsage: the node's log bytes and volume, and the records of the
// partitions it holds (the sum of their high watermarks).
func TestNodesUsage(t *testing.T) {
	n, c := node(t)
	n.CreateTopic("t", 2, nil)
	produce(t, n, "t", append(fill(0, 7, time.Now()), fill(1, 5, time.Now())...)...)
	before := time.Now()
	us, err := c.NodesUsage(ctx5(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 {
		t.Fatalf("%d nodes", len(us))
	}
	u := us[0]
	if u.Node != n.Cfg.NodeID || u.Err != "" || u.At.Before(before) {
		t.Fatalf("usage %+v", u)
	}
	if u.Records != 12 {
		t.Fatalf("records %d, want 12", u.Records)
	}
	if u.Size <= 0 || u.Total <= 0 || u.Usable <= 0 || u.Usable > u.Total {
		t.Fatalf("size %d total %d usable %d", u.Size, u.Total, u.Usable)
	}
}

// ClusterStatus and TopicOffsets on one node: its id, the partitions in
// order with their leader, and each partition's start and end.
func TestClusterStatusAndOffsets(t *testing.T) {
	n, c := node(t)
	n.CreateTopic("b", 2, map[string]*string{"retention.ms": kmsg.StringPtr("3600000")})
	n.CreateTopic("a", 1, nil)
	produce(t, n, "b", fill(1, 3, time.Now())...)
	cl, err := c.ClusterStatus(ctx5(t), "b", "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(cl.Nodes) != 1 || cl.Nodes[0].ID != n.Cfg.NodeID || cl.Nodes[0].Fenced || cl.Nodes[0].Port != n.Cfg.AdvertisedPort {
		t.Fatalf("nodes %+v", cl.Nodes)
	}
	var names []string
	for _, tp := range cl.Topics {
		names = append(names, tp.Name)
		for i, p := range tp.Partitions {
			if p.Partition != int32(i) || p.Leader != n.Cfg.NodeID || !slices.Equal(p.Replicas, []int32{n.Cfg.NodeID}) || p.Err != "" {
				t.Fatalf("%s partition %d: %+v", tp.Name, i, p)
			}
		}
	}
	if !slices.Equal(names, []string{"a", "b"}) || len(cl.Topics[1].Partitions) != 2 {
		t.Fatalf("topics %v", names)
	}
	offs, err := c.TopicOffsets(ctx5(t), "b")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(offs), "map[b:map[0:{0 0} 1:{0 3}]]"; got != want {
		t.Fatalf("offsets %s, want %s", got, want)
	}
	cfgs, err := c.TopicConfigs(ctx5(t), "b")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(cfgs, func(c admin.Config) bool { return c.Name == "retention.ms" })
	if i < 0 || cfgs[i].Value != "3600000" || cfgs[i].Source != "topic" {
		t.Fatalf("retention.ms: %+v", cfgs)
	}
	if !slices.IsSortedFunc(cfgs, func(a, b admin.Config) int { return strings.Compare(a.Name, b.Name) }) {
		t.Fatal("configs not sorted by name")
	}
	nodes, err := c.Nodes(ctx5(t))
	if err != nil || len(nodes) != 1 || nodes[0].Host != "127.0.0.1" || nodes[0].Port != n.Cfg.AdvertisedPort {
		t.Fatalf("Nodes: %+v, %v", nodes, err)
	}
}
