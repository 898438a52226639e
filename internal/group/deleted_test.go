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

// gatedLog is a memLog whose Scan waits for open: a replay in progress.
type gatedLog struct {
	*memLog
	open chan struct{}
}

func (l gatedLog) Scan(fn func([]byte) error) error {
	<-l.open
	return l.memLog.Scan(fn)
}

// TestTopicDeletedWhileLoading: a topic deleted while this node replays
// the group's partition loses its offsets once the replay ends (and for
// good: the next replay agrees); a topic deleted then and already
// re-created by the end of the replay keeps them, since a late-applied
// deletion must not remove a live topic's offsets.
func TestTopicDeletedWhileLoading(t *testing.T) {
	var mu sync.Mutex
	exists := map[string]bool{"t": true, "u": true, "v": true}
	opts := Options{Partitions: func(topic string) int32 {
		mu.Lock()
		defer mu.Unlock()
		if exists[topic] {
			return 1
		}
		return -1
	}}
	mem := &memLog{}
	c := New(DefaultConfig(), []Log{mem}, opts)
	if err := c.Load(false); err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 9
	req.Group = "g"
	for _, topic := range []string{"t", "u", "v"} {
		tp := kmsg.NewOffsetCommitRequestTopicPartition()
		tp.Offset = 4
		req.Topics = append(req.Topics, kmsg.OffsetCommitRequestTopic{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{tp}})
	}
	resp := c.OffsetCommit(req)(context.Background()).(*kmsg.OffsetCommitResponse)
	for _, rt := range resp.Topics {
		if code := rt.Partitions[0].ErrorCode; code != 0 {
			t.Fatalf("commit %s: %v", rt.Topic, kerr.ErrorForCode(code))
		}
	}
	c.Close()

	gated := gatedLog{mem, make(chan struct{})}
	r := New(DefaultConfig(), []Log{gated}, opts)
	t.Cleanup(func() { r.Close() })
	if err := r.Load(true); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	delete(exists, "t")
	delete(exists, "u")
	mu.Unlock()
	r.TopicDeleted("t")
	r.TopicDeleted("u")
	mu.Lock()
	exists["u"] = true // re-created before the replay ends
	mu.Unlock()
	close(gated.open)
	testwait.Until(t, 10*time.Second, "partition 0 loaded", func() bool { return r.Loaded(0) })
	got := func(c *Coordinator) map[string]int64 {
		code, fts := c.fetchOffsets("g", nil, true, nil, -1)
		if code != 0 {
			t.Fatalf("fetch: %v", kerr.ErrorForCode(code))
		}
		out := map[string]int64{}
		for _, ft := range fts {
			for _, fp := range ft.partitions {
				out[ft.topic] = fp.o.offset
			}
		}
		return out
	}
	want := map[string]int64{"u": 4, "v": 4}
	if g := got(r); len(g) != 2 || g["u"] != 4 || g["v"] != 4 {
		t.Fatalf("after the replay: %v, want %v", g, want)
	}
	again := newTestCoordinator(t, []Log{mem})
	if g := got(again); len(g) != 2 || g["u"] != 4 || g["v"] != 4 {
		t.Fatalf("after another replay: %v, want %v", g, want)
	}
}
