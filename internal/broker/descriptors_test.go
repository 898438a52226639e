package broker_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/wire"
)

// TestMaxBrokerPartitions: a CreateTopics or CreatePartitions that would
// give a broker more partition replicas than max.broker.partitions is
// refused with POLICY_VIOLATION and a message naming the limit; up to it,
// creation works.
func TestMaxBrokerPartitions(t *testing.T) {
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.MaxBrokerPartitions = 8 })
	cl := n.Client()
	create := func(name string, parts int32) (int16, string) {
		t.Helper()
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 10000
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, parts, -1
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(testCtx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		r := resp.Topics[0]
		msg := ""
		if r.ErrorMessage != nil {
			msg = *r.ErrorMessage
		}
		return r.ErrorCode, msg
	}
	if code, msg := create("five", 5); code != 0 {
		t.Fatalf("5 of 8: %v %s", kerr.ErrorForCode(code), msg)
	}
	code, msg := create("four", 4)
	if code != kerr.PolicyViolation.Code || !strings.Contains(msg, "max.broker.partitions (8)") {
		t.Fatalf("9 of 8: %v %q, want POLICY_VIOLATION naming max.broker.partitions (8)", kerr.ErrorForCode(code), msg)
	}
	grow := func(count int32) (int16, string) {
		t.Helper()
		req := kmsg.NewPtrCreatePartitionsRequest()
		req.TimeoutMillis = 10000
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = "five", count
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(testCtx(t), cl)
		if err != nil {
			t.Fatal(err)
		}
		r := resp.Topics[0]
		msg := ""
		if r.ErrorMessage != nil {
			msg = *r.ErrorMessage
		}
		return r.ErrorCode, msg
	}
	if code, msg := grow(9); code != kerr.PolicyViolation.Code || !strings.Contains(msg, "max.broker.partitions") {
		t.Fatalf("CreatePartitions to 9 of 8: %v %q, want POLICY_VIOLATION", kerr.ErrorForCode(code), msg)
	}
	if code, msg := grow(8); code != 0 {
		t.Fatalf("CreatePartitions to 8 of 8: %v %s", kerr.ErrorForCode(code), msg)
	}
	if code, msg := create("one", 1); code != kerr.PolicyViolation.Code {
		t.Fatalf("a ninth replica: %v %s", kerr.ErrorForCode(code), msg)
	}
	// Deleting frees the places.
	dreq := kmsg.NewPtrDeleteTopicsRequest()
	dreq.TimeoutMillis = 10000
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.Topic = kmsg.StringPtr("five")
	dreq.Topics = append(dreq.Topics, dt)
	dreq.TopicNames = []string{"five"}
	dresp, err := dreq.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatal(err)
	}
	if code := dresp.Topics[0].ErrorCode; code != 0 {
		t.Fatalf("delete: %v", kerr.ErrorForCode(code))
	}
	if code, msg := create("four", 4); code != 0 {
		t.Fatalf("after the delete: %v %s", kerr.ErrorForCode(code), msg)
	}
}

// TestDescriptorsLeftForConnections: with a low open-file limit (set for
// this process while the test runs) and more partitions than it could
// hold, the data files stop at their budget (log.max.open.files): the
// partitions past it stay offline, while the node keeps accepting every
// connection and serving the partitions that opened (its own files, the
// Raft journal and the metadata, are outside the budget). Without the
// budget the partition files took every descriptor and accept failed
// (EMFILE).
func TestDescriptorsLeftForConnections(t *testing.T) {
	const (
		budget  = 40  // data files
		reserve = 300 // descriptors left for connections and the rest
		parts   = 400 // partitions asked for: more than budget+reserve
		conns   = 80  // client connections: 160 descriptors in-process
	)
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skip(err)
	}
	n := brokertest.Start(t, func(c *broker.Config, _ *wire.Limits) { c.MaxOpenFiles = budget })
	n.CreateTopic("small", 1, nil)
	cl := n.Client(kgo.DefaultProduceTopic("small"))
	if err := cl.ProduceSync(testCtx(t), &kgo.Record{Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The limit: what is open now plus the budget and the reserve. Set
	// after the node started (restored before it closes: cleanups run
	// newest first).
	lim := old
	lim.Cur = uint64(openDescriptors(t) + budget + reserve)
	if lim.Cur > old.Cur {
		t.Skipf("the open-file limit %d is already below what the test sets", old.Cur)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })

	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "big", parts, 1
	req.Topics = append(req.Topics, rt)
	if _, err := req.RequestWith(testCtx(t), cl); err != nil {
		t.Fatal(err)
	}
	// The opens run in the background; wait until the budget is full.
	brokertest.Await(t, "the data files to reach their budget", func() error {
		if open, _ := n.B.OpenFiles(); open < budget {
			return fmt.Errorf("%d data files open", open)
		}
		return nil
	})

	// Every connection is accepted and answered.
	var clients []*kgo.Client
	for i := range conns {
		c, err := kgo.NewClient(kgo.SeedBrokers(n.Addr))
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		if err := c.Ping(testCtx(t)); err != nil {
			t.Fatalf("connection %d of %d: %v", i+1, conns, err)
		}
	}
	for _, c := range clients {
		c.Close()
	}
	if err := cl.ProduceSync(testCtx(t), &kgo.Record{Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatalf("producing to a partition that opened: %v", err)
	}
	rd := n.Client(kgo.ConsumeTopics("small"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	ctx := testCtx(t)
	for len(got) < 2 && ctx.Err() == nil {
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if len(got) != 2 || got[0] != "before" || got[1] != "after" {
		t.Fatalf("consumed %q, want [before after]", got)
	}
	// A raw dial too, past Ping's pooled connection.
	c, err := net.DialTimeout("tcp", n.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// openDescriptors counts this process's open descriptors.
func openDescriptors(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no /proc/self/fd")
	}
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestDescriptorBudget: connections and the reserve come first, the data
// files get the rest and partitions three quarters of that; a limit too
// low for the connections gives the data files half.
func TestDescriptorBudget(t *testing.T) {
	for _, c := range []struct {
		nofile       uint64
		conns        int
		files, parts int
		covered      bool
	}{
		{20000, 10000, 9744, 7308, true}, // the limit issue 27 measured at
		{1 << 20, 10000, 1<<20 - 10256, (1<<20 - 10256) * 3 / 4, true},
		{1024, 10000, 512, 384, false},
		{1024, 100, 668, 501, true},
	} {
		files, parts, covered := broker.DescriptorBudget(c.nofile, c.conns)
		if files != c.files || parts != c.parts || covered != c.covered {
			t.Errorf("DescriptorBudget(%d, %d) = %d, %d, %v; want %d, %d, %v", c.nofile, c.conns, files, parts, covered, c.files, c.parts, c.covered)
		}
	}
}
