package tiered_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"holdfast/internal/broker"
	"holdfast/internal/brokertest"
	"holdfast/internal/tiered"
	"holdfast/internal/wire"
)

// TestTieredDeletionSurvivesRestart: DeleteRecords on a tiered topic while
// the object store is down commits the new remote log start and, with
// it, the deletion of the objects below it (the manifest's deleting
// list); the deletion cannot be carried out. The node restarts (the
// deletion is only in the partition's log now), the store comes back, and
// the restarted leader deletes those objects and no others. Before
// deletions were recorded in the log, the objects were left behind for
// ever (the list was the old process's memory).
//
// Then the topic is deleted while the store is down, the node restarts
// again, and once the store is back every object of the topic goes (the
// deletion is in the metadata log). Before, the node that handled
// DeleteTopics deleted them from memory, once.
func TestTieredDeletionSurvivesRestart(t *testing.T) {
	s := startObjectStore(t)
	n := brokertest.Start(t, withTiered(s))
	const topic, records = "tiered-delete", 1000
	n.CreateTopic(topic, 1, tieredTopic())
	produce(t, n.Client(), topic, 0, records)
	brokertest.Await(t, "the local tier to delete uploaded segments", func() error {
		if local := listOffset(t, n, topic, -4); local < records/2 {
			return fmt.Errorf("local log start %d", local)
		}
		return nil
	})
	if !s.hasBase(0) {
		t.Fatal("no segment object at offset 0")
	}
	before := s.segmentObjects()

	s.kill()
	const cut = 300 // past the first segment (4096 bytes hold fewer records)
	dr, err := n.Admin().DeleteRecords(context.Background(), kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: cut}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := dr.Lookup(topic, 0); !ok || r.Err != nil || r.LowWatermark != cut {
		t.Fatalf("delete records with the store down: %+v", r)
	}
	if earliest := listOffset(t, n, topic, -2); earliest != cut {
		t.Fatalf("earliest offset %d after deleting records below %d", earliest, cut)
	}
	if !s.hasBase(0) {
		t.Fatal("the object of offset 0 went while the store was down")
	}
	n.Restart()
	s.start()
	brokertest.Await(t, "the recorded deletion to be carried out after the restart", func() error {
		if s.hasBase(0) {
			return fmt.Errorf("the object of offset 0 is still there: %v", s.segmentObjects())
		}
		return nil
	})
	// Every segment above the cut is still there (an object whose upload
	// never committed may have been swept and uploaded again under the
	// restarted leader's epoch: its base stays).
	after := s.segmentObjects()
	for _, o := range before {
		if b := segmentBase(o); b >= cut && !s.hasBase(b) {
			t.Fatalf("%s, above the cut, is gone: %v", o, after)
		}
	}
	if earliest := listOffset(t, n, topic, -2); earliest != cut {
		t.Fatalf("earliest offset %d after the restart, want %d", earliest, cut)
	}
	consumeAll(t, n, topic, records, cut)

	s.kill()
	if _, err := n.Admin().DeleteTopics(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	if s.objects() == 0 {
		t.Fatal("objects deleted while the store was down")
	}
	n.Restart()
	s.start()
	brokertest.Await(t, "the deleted topic's objects to go after the restart", func() error {
		if got := s.segmentObjects(); len(got) > 0 {
			return fmt.Errorf("objects left: %v", got)
		}
		return nil
	})
}

func containsString(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// segmentBase is the base offset in a segment object's name.
func segmentBase(name string) int64 {
	var base int64
	fmt.Sscanf(name, "%d-", &base)
	return base
}

// TestTieredOrphanObjectsSwept: objects under a partition's key directory
// that no committed manifest names and that lie below the remote log's end
// (an upload whose manifest never committed: a leader killed between the
// upload and the commit) are deleted by the leader's sweep; one at or
// above the end (an upload that may yet commit) and every named one stay,
// and every record is still read from offset 0.
func TestTieredOrphanObjectsSwept(t *testing.T) {
	s := startObjectStore(t)
	n := brokertest.Start(t, withTiered(s), func(c *broker.Config, _ *wire.Limits) { c.Tiered.OrphanSweepInterval = 100 * time.Millisecond })
	const topic, records = "tiered-orphans", 600
	n.CreateTopic(topic, 1, tieredTopic())
	produce(t, n.Client(), topic, 0, records)
	brokertest.Await(t, "the local tier to delete uploaded segments", func() error {
		if local := listOffset(t, n, topic, -4); local < records/2 {
			return fmt.Errorf("local log start %d", local)
		}
		return nil
	})
	named := s.segmentObjects()
	md, err := n.Metadata(topic)
	if err != nil {
		t.Fatal(err)
	}
	dir := fmt.Sprintf("cluster-a/%s-%s/0/", topic, base64.RawURLEncoding.EncodeToString(md.Topics[0].TopicID[:]))
	store, err := tiered.NewS3(s.config())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	orphan, pending := fmt.Sprintf("%020d-%d", 0, 99), fmt.Sprintf("%020d-%d", 1<<40, 99)
	for _, k := range []string{orphan + ".log", orphan + ".index", pending + ".log"} {
		if err := store.Put(ctx, dir+k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	brokertest.Await(t, "the orphan swept", func() error {
		if got := s.segmentObjects(); containsString(got, orphan+".log") {
			return fmt.Errorf("still there: %v", got)
		}
		return nil
	})
	got := s.segmentObjects()
	for _, o := range named {
		if !containsString(got, o) {
			t.Fatalf("%s, named by the manifest, was deleted: %v", o, got)
		}
	}
	if !containsString(got, pending+".log") {
		t.Fatalf("an object above the remote log's end was deleted: %v", got)
	}
	consumeAll(t, n, topic, records, 0)
}
