package group

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/records"
)

// txnMemLog adds the transactional append to memLog.
type txnMemLog struct{ *memLog }

func (l txnMemLog) AppendTxn(b []byte) (int64, error) { return l.Append(b) }

// marker appends a commit or abort control batch for pid, as the
// transaction coordinator would.
func (l txnMemLog) marker(t *testing.T, pid int64, commit bool) {
	t.Helper()
	k := kmsg.NewControlRecordKey()
	if commit {
		k.Type = kmsg.ControlRecordKeyTypeCommit
	}
	v := kmsg.NewEndTxnMarker()
	b, err := records.Build(records.Batch{ProducerID: pid, BaseSequence: -1, Transactional: true, Control: true},
		[]records.Record{{Timestamp: time.Now().UnixMilli(), Key: k.AppendTo(nil), Value: v.AppendTo(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(b); err != nil {
		t.Fatal(err)
	}
}

func txnCommit(c *Coordinator, group string, pid int64, p int32, off int64) int16 {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.Version = 3
	req.Group, req.ProducerID, req.Generation = group, pid, -1
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = p, off
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := c.TxnOffsetCommit(req)(context.Background()).(*kmsg.TxnOffsetCommitResponse)
	return resp.Topics[0].Partitions[0].ErrorCode
}

func committed(t *testing.T, c *Coordinator, group string, p int32, stable bool) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 7
	req.Group, req.RequireStable = group, stable
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = "t", []int32{p}
	req.Topics = append(req.Topics, rt)
	resp := c.OffsetFetch(req)(context.Background()).(*kmsg.OffsetFetchResponse)
	if resp.ErrorCode != 0 {
		return -1, resp.ErrorCode
	}
	// UNSTABLE_OFFSET_COMMIT is per partition, as Kafka.
	rp := resp.Topics[0].Partitions[0]
	return rp.Offset, rp.ErrorCode
}

// TestTxnOffsetsPendingUntilMarker: transactional offsets are invisible
// until the commit marker, dropped by an abort, and replay rebuilds all
// three cases (committed, aborted, still pending) from the log.
func TestTxnOffsetsPendingUntilMarker(t *testing.T) {
	l := txnMemLog{&memLog{}}
	c := newTestCoordinator(t, []Log{l})
	if code := txnCommit(c, "g", 7, 0, 10); code != 0 {
		t.Fatal(kerr.ErrorForCode(code))
	}
	if off, _ := committed(t, c, "g", 0, false); off != -1 {
		t.Fatalf("pending offset visible: %d", off)
	}
	if _, code := committed(t, c, "g", 0, true); code != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("RequireStable with a pending commit: %v", kerr.ErrorForCode(code))
	}
	l.marker(t, 7, true)
	c.CompleteTxn(0, 7, true)
	if off, code := committed(t, c, "g", 0, true); off != 10 || code != 0 {
		t.Fatalf("after commit: %d %v", off, kerr.ErrorForCode(code))
	}

	txnCommit(c, "g", 8, 1, 20) // aborted
	l.marker(t, 8, false)
	c.CompleteTxn(0, 8, false)
	if off, _ := committed(t, c, "g", 1, true); off != -1 {
		t.Fatalf("aborted offset applied: %d", off)
	}
	txnCommit(c, "g", 9, 2, 30) // left open

	c2 := newTestCoordinator(t, []Log{l})
	for p, want := range map[int32]int64{0: 10, 1: -1, 2: -1} {
		if off, _ := committed(t, c2, "g", p, false); off != want {
			t.Fatalf("after replay partition %d: %d, want %d", p, off, want)
		}
	}
	if _, code := committed(t, c2, "g", 2, true); code != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("after replay the open transaction is not pending: %v", kerr.ErrorForCode(code))
	}
	l.marker(t, 9, true)
	c2.CompleteTxn(0, 9, true)
	if off, code := committed(t, c2, "g", 2, true); off != 30 || code != 0 {
		t.Fatalf("after the late commit: %d %v", off, kerr.ErrorForCode(code))
	}
}
