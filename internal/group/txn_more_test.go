package group

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func txnReq(group string, pid int64, gen int32, member string, topic string, p int32, off int64) *kmsg.TxnOffsetCommitRequest {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.Version = 3
	req.Group, req.ProducerID, req.Generation, req.MemberID = group, pid, gen, member
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = p, off
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func txnCode(c *Coordinator, req *kmsg.TxnOffsetCommitRequest) int16 {
	return c.TxnOffsetCommit(req)(context.Background()).(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
}

// TestTxnOffsetCommitChecks: a transactional commit is checked like a
// plain one against the group (members, generations) and the topic;
// HasPendingTxn follows it until its marker; one producer's abort does
// not touch another's pending offsets.
func TestTxnOffsetCommitChecks(t *testing.T) {
	l := txnMemLog{&memLog{}}
	c := New(DefaultConfig(), []Log{l}, Options{Partitions: func(topic string) int32 {
		if topic == "t" {
			return 4
		}
		return -1
	}})
	if err := c.Load(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, tc := range []struct {
		name string
		req  *kmsg.TxnOffsetCommitRequest
		want int16
	}{
		{"a generation on no group", txnReq("new", 1, 4, "", "t", 0, 1), kerr.IllegalGeneration.Code},
		{"an unknown topic", txnReq("g", 1, -1, "", "nope", 0, 1), kerr.UnknownTopicOrPartition.Code},
		{"a partition past the topic", txnReq("g", 1, -1, "", "t", 9, 1), kerr.UnknownTopicOrPartition.Code},
		{"no group id", txnReq("", 1, -1, "", "t", 0, 1), kerr.InvalidGroupID.Code},
	} {
		if code := txnCode(c, tc.req); code != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, kerr.ErrorForCode(code), kerr.ErrorForCode(tc.want))
		}
	}
	if c.HasPendingTxn("g") {
		t.Fatal("refused commits left a pending transaction")
	}
	// Two producers commit offsets for the same group.
	if code := txnCode(c, txnReq("g", 1, -1, "", "t", 0, 5)); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	if code := txnCode(c, txnReq("g", 2, -1, "", "t", 1, 6)); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	if !c.HasPendingTxn("g") || c.HasPendingTxn("other") {
		t.Fatal("HasPendingTxn")
	}
	l.marker(t, 1, false)
	c.CompleteTxn(0, 1, false)
	if !c.HasPendingTxn("g") {
		t.Fatal("producer 1's abort ended producer 2's transaction")
	}
	if _, code := committed(t, c, "g", 1, true); code != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("producer 2's partition: %v", kerr.ErrorForCode(code))
	}
	if off, code := committed(t, c, "g", 0, true); off != -1 || code != 0 {
		t.Fatalf("the aborted partition: %d %v", off, kerr.ErrorForCode(code))
	}
	l.marker(t, 2, true)
	c.CompleteTxn(0, 2, true)
	if c.HasPendingTxn("g") {
		t.Fatal("still pending after both markers")
	}
	if off, _ := committed(t, c, "g", 1, true); off != 6 {
		t.Fatalf("producer 2's committed offset: %d", off)
	}
	// A plain commit after the transaction's overrides it.
	commitCodes(t, c, commitOne("g", "t", 1, 8, nil))
	if off, _ := committed(t, c, "g", 1, true); off != 8 {
		t.Fatalf("after a plain commit: %d", off)
	}
}

// TestTxnOffsetCommitByClassicMember: inside a live classic group the
// member's id and generation are checked.
func TestTxnOffsetCommitByClassicMember(t *testing.T) {
	c := newTopicTTestCoordinator(t, []Log{txnMemLog{&memLog{}}}, func(cfg *Config) { cfg.InitialRebalanceDelay = 0 })
	m := &classic{t: t, c: c, group: "g"}
	m.join()
	m.syncReply(map[string]string{m.id: "x"})(context.Background())
	for _, tc := range []struct {
		name string
		req  *kmsg.TxnOffsetCommitRequest
		want int16
	}{
		{"a stranger", txnReq("g", 3, m.gen, "stranger", "t", 0, 1), kerr.UnknownMemberID.Code},
		{"an old generation", txnReq("g", 3, m.gen-1, m.id, "t", 0, 1), kerr.IllegalGeneration.Code},
		{"the member", txnReq("g", 3, m.gen, m.id, "t", 0, 1), 0},
	} {
		if code := txnCode(c, tc.req); code != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, kerr.ErrorForCode(code), kerr.ErrorForCode(tc.want))
		}
	}
}
