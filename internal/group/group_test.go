package group

import (
	"context"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/records"
)

// memLog is an in-memory __consumer_offsets partition: the coordinator's
// storage seam, not the thing under test.
type memLog struct {
	mu      sync.Mutex
	batches [][]byte
	next    int64
}

func (l *memLog) Append(b []byte) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, err := records.Validate(b, 1<<20)
	if err != nil {
		return 0, err
	}
	records.SetBaseOffset(b, l.next)
	l.next += int64(h.LastOffsetDelta) + 1
	l.batches = append(l.batches, append([]byte(nil), b...))
	return l.next, nil
}

func (l *memLog) WaitCommitted(context.Context, int64) error { return nil }

func (l *memLog) Scan(fn func([]byte) error) error {
	l.mu.Lock()
	bs := append([][]byte(nil), l.batches...)
	l.mu.Unlock()
	for _, b := range bs {
		if err := fn(b); err != nil {
			return err
		}
	}
	return nil
}

func TestPartitionForMatchesKafka(t *testing.T) {
	// Java: "hello".hashCode() == 99162322; "polygenelubricants" hashes to
	// Integer.MIN_VALUE, which Kafka's Utils.abs maps to 0.
	if h := javaStringHash("hello"); h != 99162322 {
		t.Fatalf("hash(hello) = %d", h)
	}
	if p := PartitionFor("polygenelubricants", 50); p != 0 {
		t.Fatalf("MIN_VALUE hash placed in %d", p)
	}
	if p := PartitionFor("hello", 50); p != 99162322%50 {
		t.Fatalf("hello placed in %d", p)
	}
}

func newTestCoordinator(t *testing.T, logs []Log) *Coordinator {
	c := New(DefaultConfig(), logs, Options{Partitions: func(topic string) int32 {
		if topic == "t" {
			return 4
		}
		return -1
	}})
	if err := c.Load(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func commitReq(group string, p int32, off int64, md string) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 9
	req.Group = group
	tp := kmsg.NewOffsetCommitRequestTopicPartition()
	tp.Partition, tp.Offset, tp.Metadata = p, off, &md
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{tp}}}
	return req
}

func fetch(t *testing.T, c *Coordinator, group string, p int32) (int64, string) {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 8
	req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: group, Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t", Partitions: []int32{p}}}}}
	resp := c.OffsetFetch(req)(context.Background()).(*kmsg.OffsetFetchResponse)
	g := resp.Groups[0]
	if g.ErrorCode != 0 {
		t.Fatalf("fetch %s: %v", group, kerr.ErrorForCode(g.ErrorCode))
	}
	rp := g.Topics[0].Partitions[0]
	return rp.Offset, *rp.Metadata
}

// TestReplayRebuildsOffsetsAndDeletes commits, overwrites and deletes
// offsets, then checks a fresh coordinator replaying the same log agrees.
func TestReplayRebuildsOffsetsAndDeletes(t *testing.T) {
	logs := []Log{&memLog{}, &memLog{}, &memLog{}}
	c := newTestCoordinator(t, logs)
	commit := func(group string, p int32, off int64, md string) {
		resp := c.OffsetCommit(commitReq(group, p, off, md))(context.Background()).(*kmsg.OffsetCommitResponse)
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Fatalf("commit: %v", kerr.ErrorForCode(code))
		}
	}
	commit("a", 0, 10, "x")
	commit("a", 0, 20, "y") // the last value wins
	commit("a", 1, 5, "")
	commit("b", 2, 7, "")
	commit("gone", 3, 1, "")
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{"gone"}
	if code := c.DeleteGroups(del)(context.Background()).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode; code != 0 {
		t.Fatalf("delete: %v", kerr.ErrorForCode(code))
	}
	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = "a"
	od.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 1}}}}
	if code := c.OffsetDelete(od)(context.Background()).(*kmsg.OffsetDeleteResponse).ErrorCode; code != 0 {
		t.Fatalf("offset delete: %v", kerr.ErrorForCode(code))
	}

	r := newTestCoordinator(t, logs)
	for _, want := range []struct {
		group string
		p     int32
		off   int64
		md    string
	}{{"a", 0, 20, "y"}, {"a", 1, -1, ""}, {"b", 2, 7, ""}, {"gone", 3, -1, ""}} {
		if off, md := fetch(t, r, want.group, want.p); off != want.off || md != want.md {
			t.Errorf("%s/%d after replay: %d %q, want %d %q", want.group, want.p, off, md, want.off, want.md)
		}
	}
	lg := r.ListGroups(kmsg.NewPtrListGroupsRequest())(context.Background()).(*kmsg.ListGroupsResponse)
	if len(lg.Groups) != 2 {
		t.Fatalf("groups after replay: %+v", lg.Groups)
	}
}

// TestOffsetExpiry: offsets of an empty simple group expire after the
// retention, and the group goes with them.
func TestOffsetExpiry(t *testing.T) {
	logs := []Log{&memLog{}}
	c := newTestCoordinator(t, logs)
	c.OffsetCommit(commitReq("old", 0, 3, ""))(context.Background())
	c.cfg.OffsetRetention = 0
	c.ExpireNow()
	if off, _ := fetch(t, c, "old", 0); off != -1 {
		t.Fatalf("expired offset still %d", off)
	}
	r := newTestCoordinator(t, logs)
	if off, _ := fetch(t, r, "old", 0); off != -1 {
		t.Fatalf("expired offset back after replay: %d", off)
	}
}
