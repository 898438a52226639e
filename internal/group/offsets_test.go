package group

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitCodes commits one offset per (topic, partition) and returns each
// answer's code, by "topic/partition".
func commitCodes(t *testing.T, c *Coordinator, req *kmsg.OffsetCommitRequest) map[string]int16 {
	t.Helper()
	resp := c.OffsetCommit(req)(context.Background()).(*kmsg.OffsetCommitResponse)
	out := map[string]int16{}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			out[fmt.Sprintf("%s/%d", rt.Topic, rp.Partition)] = rp.ErrorCode
		}
	}
	return out
}

func commitOne(group, topic string, p int32, off int64, md *string) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version = 8
	req.Group, req.Generation = group, -1
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.Metadata, rp.LeaderEpoch = p, off, md, 7
	req.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{rp}}}
	return req
}

// TestOffsetCommitValidation: per-partition refusals leave the others
// committed; the metadata limit; unknown topics and partitions.
func TestOffsetCommitValidation(t *testing.T) {
	c := newTopicTTestCoordinator(t, []Log{&memLog{}}, func(cfg *Config) { cfg.MaxMetadataBytes = 10 })
	ok, long := "short", strings.Repeat("m", 11)
	req := commitOne("g", "t", 0, 5, &ok)
	for _, p := range []struct {
		p  int32
		md *string
	}{{1, &long}, {topicT.Partitions, nil}, {-1, nil}, {2, nil}} {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.Metadata = p.p, 9, p.md
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, rp)
	}
	req.Topics = append(req.Topics, kmsg.OffsetCommitRequestTopic{Topic: "gone", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1}}})
	codes := commitCodes(t, c, req)
	for k, want := range map[string]int16{
		"t/0": 0, "t/1": kerr.OffsetMetadataTooLarge.Code, fmt.Sprintf("t/%d", topicT.Partitions): kerr.UnknownTopicOrPartition.Code,
		"t/-1": kerr.UnknownTopicOrPartition.Code, "t/2": 0, "gone/0": kerr.UnknownTopicOrPartition.Code,
	} {
		if codes[k] != want {
			t.Errorf("%s: %v, want %v", k, kerr.ErrorForCode(codes[k]), kerr.ErrorForCode(want))
		}
	}
	if off, md := fetch(t, c, "g", 0); off != 5 || md != "short" {
		t.Fatalf("t-0: %d %q", off, md)
	}
	if off, _ := fetch(t, c, "g", 1); off != -1 {
		t.Fatalf("the refused t-1 was committed: %d", off)
	}
	if off, _ := fetch(t, c, "g", 2); off != 9 {
		t.Fatalf("t-2 next to refused partitions: %d", off)
	}
	// A commit with a generation to a group that does not exist.
	req = commitOne("new", "t", 0, 1, nil)
	req.Generation = 3
	if codes := commitCodes(t, c, req); codes["t/0"] != kerr.IllegalGeneration.Code {
		t.Fatalf("generation 3 on no group: %v", kerr.ErrorForCode(codes["t/0"]))
	}
}

// TestOffsetCommitByMembers: in a live classic group only its members
// commit, in the current generation and not while the assignment is
// being handed out.
func TestOffsetCommitByMembers(t *testing.T) {
	c := newClassicCoordinator(t, nil)
	m := &classic{t: t, c: c, group: "g"}
	m.join()
	member := func(gen int32, id string) *kmsg.OffsetCommitRequest {
		req := commitOne("g", "t", 0, 3, nil)
		req.Generation, req.MemberID = gen, id
		return req
	}
	// Joined, not synced: CompletingRebalance.
	if codes := commitCodes(t, c, member(m.gen, m.id)); codes["t/0"] != kerr.RebalanceInProgress.Code {
		t.Fatalf("commit before the sync: %v", kerr.ErrorForCode(codes["t/0"]))
	}
	m.syncReply(map[string]string{m.id: "x"})(context.Background())
	for _, tc := range []struct {
		name string
		req  *kmsg.OffsetCommitRequest
		want int16
	}{
		{"the member", member(m.gen, m.id), 0},
		{"an old generation", member(m.gen-1, m.id), kerr.IllegalGeneration.Code},
		{"a stranger", member(m.gen, "stranger"), kerr.UnknownMemberID.Code},
		{"a simple commit to a live group", commitOne("g", "t", 0, 3, nil), kerr.UnknownMemberID.Code},
	} {
		if codes := commitCodes(t, c, tc.req); codes["t/0"] != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, kerr.ErrorForCode(codes["t/0"]), kerr.ErrorForCode(tc.want))
		}
	}
	if off, _ := fetch(t, c, "g", 0); off != 3 {
		t.Fatalf("the member's commit: %d", off)
	}
}

// TestOffsetFetchShapes: all of a group's offsets (no topics asked), the
// leader epoch kept, several groups in one v8 request, unknown groups
// answering -1.
func TestOffsetFetchShapes(t *testing.T) {
	c := newTopicTTestCoordinator(t, []Log{&memLog{}}, func(*Config) {})
	for p := range int32(3) {
		if codes := commitCodes(t, c, commitOne("a", "t", p, int64(10+p), nil)); codes[fmt.Sprintf("t/%d", p)] != 0 {
			t.Fatal(codes)
		}
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version = 8
	req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "a"}, {Group: "unknown", Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t", Partitions: []int32{0}}}}}
	resp := c.OffsetFetch(req)(context.Background()).(*kmsg.OffsetFetchResponse)
	if len(resp.Groups) != 2 {
		t.Fatalf("%d groups", len(resp.Groups))
	}
	got := map[int32]int64{}
	for _, rt := range resp.Groups[0].Topics {
		for _, rp := range rt.Partitions {
			got[rp.Partition] = rp.Offset
			if rp.LeaderEpoch != 7 {
				t.Errorf("t-%d leader epoch %d, want 7", rp.Partition, rp.LeaderEpoch)
			}
		}
	}
	if len(got) != 3 || got[0] != 10 || got[2] != 12 {
		t.Fatalf("all of a's offsets: %v", got)
	}
	u := resp.Groups[1]
	if u.ErrorCode != 0 || u.Topics[0].Partitions[0].Offset != -1 {
		t.Fatalf("unknown group: %+v", u)
	}
	// v1: the old shape, one group.
	old := kmsg.NewPtrOffsetFetchRequest()
	old.Version = 1
	old.Group = "a"
	old.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "t", Partitions: []int32{1, 3}}}
	or := c.OffsetFetch(old)(context.Background()).(*kmsg.OffsetFetchResponse)
	offs := []int64{or.Topics[0].Partitions[0].Offset, or.Topics[0].Partitions[1].Offset}
	if !slices.Equal(offs, []int64{11, -1}) {
		t.Fatalf("v1 fetch: %v", offs)
	}
}

// TestOffsetDeleteRules: a group with members may not drop the offsets
// of a topic it consumes; an empty group may; unknown groups and topics
// answer their codes.
func TestOffsetDeleteRules(t *testing.T) {
	c := newClassicCoordinator(t, nil)
	commitCodes(t, c, commitOne("idle", "t", 0, 4, nil))
	del := func(group string, parts ...int32) *kmsg.OffsetDeleteResponse {
		req := kmsg.NewPtrOffsetDeleteRequest()
		req.Group = group
		rt := kmsg.OffsetDeleteRequestTopic{Topic: "t"}
		for _, p := range parts {
			rt.Partitions = append(rt.Partitions, kmsg.OffsetDeleteRequestTopicPartition{Partition: p})
		}
		req.Topics = []kmsg.OffsetDeleteRequestTopic{rt}
		return c.OffsetDelete(req)(context.Background()).(*kmsg.OffsetDeleteResponse)
	}
	if r := del("nope", 0); r.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("unknown group: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	r := del("idle", 0, 99)
	if r.ErrorCode != 0 || r.Topics[0].Partitions[0].ErrorCode != 0 || r.Topics[0].Partitions[1].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("empty group: %+v", r)
	}
	if off, _ := fetch(t, c, "idle", 0); off != -1 {
		t.Fatalf("deleted offset still %d", off)
	}
	// A live classic group of another protocol type: NON_EMPTY_GROUP.
	m := &classic{t: t, c: c, group: "conn"}
	req := m.joinReq()
	req.ProtocolType = "connect"
	resp := c.JoinGroup(req, "client", "/10.0.0.1")(context.Background()).(*kmsg.JoinGroupResponse)
	if resp.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(resp.ErrorCode))
	}
	if r := del("conn", 0); r.ErrorCode != kerr.NonEmptyGroup.Code {
		t.Fatalf("a live connect group: %v", kerr.ErrorForCode(r.ErrorCode))
	}
}
