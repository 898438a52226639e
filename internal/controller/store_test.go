package controller

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"holdfast/internal/storage"
)

// The store changes only through committed commands; these apply the
// commands the broker proposes.
func apply(s *Store, c Command) (Topic, error) { return s.Apply(s.Applied()+1, c) }

func createTopic(s *Store, name string, partitions int32, configs map[string]string, internal bool) (Topic, error) {
	reps := make([][]int32, max(partitions, 0))
	for i := range reps {
		reps[i] = []int32{1}
	}
	return apply(s, Command{Op: OpCreateTopic, Topic: &Topic{Name: name, ID: NewTopicID(), Partitions: partitions,
		Configs: configs, Internal: internal, Replicas: reps}})
}

func deleteTopic(s *Store, name string) (Topic, error) {
	return apply(s, Command{Op: OpDeleteTopic, Name: name})
}

func addPartitions(s *Store, name string, total int32) (Topic, error) {
	cur, _ := s.Topic(name)
	reps := make([][]int32, max(total-cur.Partitions, 0))
	for i := range reps {
		reps[i] = []int32{1}
	}
	return apply(s, Command{Op: OpAddPartitions, Name: name, Partitions: total, Replicas: reps})
}

func setTopicConfigs(s *Store, name string, configs map[string]string) (Topic, error) {
	return apply(s, Command{Op: OpTopicConfigs, Name: name, Configs: configs})
}

func open(t *testing.T, fs storage.FS, dir string) *Store {
	t.Helper()
	s, err := Open(dir, fs, nil, "")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestStoreSurvivesReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	fs := storage.OSFS()
	s := open(t, fs, dir)
	cid := s.ClusterID()
	if len(cid) != 22 {
		t.Fatalf("cluster id %q: want 22 characters of base64", cid)
	}
	a, err := createTopic(s, "a", 3, map[string]string{"retention.ms": "1000"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := createTopic(s, "a", 1, nil, false); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("duplicate create: %v, want ErrTopicExists", err)
	}
	if _, err := createTopic(s, "__consumer_offsets", 5, nil, true); err != nil {
		t.Fatal(err)
	}
	if _, err := addPartitions(s, "a", 3); !errors.Is(err, ErrInvalidCount) {
		t.Fatalf("AddPartitions to the same count: %v, want ErrInvalidCount", err)
	}
	if _, err := addPartitions(s, "a", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := setTopicConfigs(s, "a", map[string]string{"segment.bytes": "4096"}); err != nil {
		t.Fatal(err)
	}
	b, _ := createTopic(s, "b", 1, nil, false)
	if _, err := deleteTopic(s, "b"); err != nil {
		t.Fatal(err)
	}

	s = open(t, fs, dir)
	if s.ClusterID() != cid {
		t.Fatalf("cluster id changed across reopen: %q -> %q", cid, s.ClusterID())
	}
	got, ok := s.Topic("a")
	if !ok || got.ID != a.ID || got.Partitions != 5 || len(got.Configs) != 1 || got.Configs["segment.bytes"] != "4096" {
		t.Fatalf("topic a after reopen: %+v, want id %x, 5 partitions, segment.bytes=4096 only", got, a.ID)
	}
	if byID, ok := s.TopicByID(a.ID); !ok || byID.Name != "a" {
		t.Fatalf("TopicByID: %+v %v", byID, ok)
	}
	if off, _ := s.Topic("__consumer_offsets"); !off.Internal {
		t.Fatal("internal flag lost")
	}
	if _, ok := s.Topic("b"); ok {
		t.Fatal("deleted topic b is back")
	}
	if d := s.Deleting(); len(d) != 1 || d[0].ID != b.ID {
		t.Fatalf("Deleting = %+v, want b pending", d)
	}
	if err := s.FinishDelete(b.ID); err != nil {
		t.Fatal(err)
	}
	nb, err := createTopic(s, "b", 1, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if nb.ID == b.ID {
		t.Fatal("recreated topic reused the old id")
	}
}

// Every mutation is durable when it returns, and a power cut at any point
// leaves the old or the new state, never a torn one.
func TestStoreCrashAtomicity(t *testing.T) {
	fs := storage.NewCrashFS(1)
	dir := "/data/meta"
	s := open(t, fs, dir)
	cid := s.ClusterID()
	for i, name := range []string{"t0", "t1", "t2", "t3"} {
		if _, err := createTopic(s, name, int32(i+1), nil, false); err != nil {
			t.Fatal(err)
		}
		fs.CrashTorn()
		s = open(t, fs, dir)
		if s.ClusterID() != cid {
			t.Fatalf("cluster id changed after crash")
		}
		if n := len(s.Topics()); n != i+1 {
			t.Fatalf("after crash: %d topics, want %d (acknowledged creates lost)", n, i+1)
		}
	}

	// A failed write (disk full) changes nothing, in memory or on disk.
	fs.SetCapacity(0)
	if _, err := createTopic(s, "full", 1, nil, false); err == nil {
		t.Fatal("create succeeded on a full disk")
	}
	fs.ClearErrors()
	if _, ok := s.Topic("full"); ok {
		t.Fatal("failed create is visible")
	}
	fs.InjectError(storage.OpRename, "cluster.json", syscall.EIO)
	if _, err := deleteTopic(s, "t0"); err == nil {
		t.Fatal("delete succeeded although the rename failed")
	}
	fs.ClearErrors()
	if _, ok := s.Topic("t0"); !ok {
		t.Fatal("failed delete took effect in memory")
	}
	fs.Crash()
	s = open(t, fs, dir)
	if _, ok := s.Topic("t0"); !ok || len(s.Topics()) != 4 {
		t.Fatalf("after failed writes and a crash: %d topics", len(s.Topics()))
	}
}

func TestStoreDetectsCorruption(t *testing.T) {
	dir := t.TempDir()
	s := open(t, storage.OSFS(), dir)
	if _, err := createTopic(s, "x", 1, nil, false); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, fileName)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x20
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, storage.OSFS(), nil, ""); err == nil {
		t.Fatal("Open accepted a corrupted metadata file")
	}
}

// Fencing is replicated state: applied in log order, persisted, and a
// malformed command changes nothing but the applied offset.
func TestStoreFencing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	fs := storage.OSFS()
	s := open(t, fs, dir)
	apply := func(end int64, op string, ids ...int32) error {
		t.Helper()
		_, err := s.Apply(end, Command{Op: op, IDs: ids})
		return err
	}
	if err := apply(1, OpFence, 3, 2); err != nil {
		t.Fatal(err)
	}
	if err := apply(2, OpFence, 2); err != nil {
		t.Fatal(err)
	}
	if err := apply(3, OpUnfence); err == nil {
		t.Fatal("unfence without ids applied")
	}
	if got := s.FencedBrokers(); !slices.Equal(got, []int32{2, 3}) {
		t.Fatalf("fenced %v, want [2 3]", got)
	}
	if err := apply(4, OpUnfence, 3); err != nil {
		t.Fatal(err)
	}
	s = open(t, fs, dir)
	if got := s.FencedBrokers(); !slices.Equal(got, []int32{2}) || !s.Fenced(2) || s.Fenced(3) || s.Applied() != 4 {
		t.Fatalf("after reopen: fenced %v, applied %d; want [2], 4", got, s.Applied())
	}
	if err := apply(4, OpUnfence, 2); err != nil || !s.Fenced(2) {
		t.Fatalf("an entry at the applied offset was applied again (err %v)", err)
	}
}

// A TopicsCache answers what Topics does after every kind of change, and
// the same copy while nothing changed.
func TestTopicsCache(t *testing.T) {
	s := open(t, storage.OSFS(), filepath.Join(t.TempDir(), "meta"))
	c := s.NewTopicsCache()
	same := func(step string) {
		t.Helper()
		got, want := c.Topics(), s.Topics()
		if len(got) != len(want) {
			t.Fatalf("%s: cache has %d topics, the store %d", step, len(got), len(want))
		}
		for i := range got {
			if got[i].Name != want[i].Name || got[i].Partitions != want[i].Partitions || len(got[i].Replicas) != len(want[i].Replicas) ||
				got[i].Configs["retention.ms"] != want[i].Configs["retention.ms"] {
				t.Fatalf("%s: cache %+v, store %+v", step, got[i], want[i])
			}
		}
	}
	same("empty")
	if _, err := createTopic(s, "a", 3, nil, false); err != nil {
		t.Fatal(err)
	}
	same("created")
	first := c.Topics()
	if again := c.Topics(); &again[0] != &first[0] {
		t.Fatal("cloned again without a change")
	}
	if _, err := addPartitions(s, "a", 5); err != nil {
		t.Fatal(err)
	}
	same("partitions added")
	if _, err := setTopicConfigs(s, "a", map[string]string{"retention.ms": "1000"}); err != nil {
		t.Fatal(err)
	}
	same("configs set")
	b, _ := createTopic(s, "b", 1, nil, false)
	if _, err := deleteTopic(s, "b"); err != nil {
		t.Fatal(err)
	}
	same("deleted")
	if err := s.FinishDelete(b.ID); err != nil {
		t.Fatal(err)
	}
	same("deletion finished")
}

// TestTopicHeader: the header carries what Topic does except the
// per-partition assignment, by name and by id, and its configs are a copy;
// TopicName finds the name by id.
func TestTopicHeader(t *testing.T) {
	s := open(t, storage.OSFS(), filepath.Join(t.TempDir(), "meta"))
	if _, ok := s.TopicHeader("a"); ok {
		t.Fatal("header of a topic that does not exist")
	}
	if _, err := createTopic(s, "a", 3, map[string]string{"min.insync.replicas": "2"}, false); err != nil {
		t.Fatal(err)
	}
	full, _ := s.Topic("a")
	for _, get := range []func() (Topic, bool){
		func() (Topic, bool) { return s.TopicHeader("a") },
		func() (Topic, bool) { return s.TopicHeaderByID(full.ID) },
	} {
		h, ok := get()
		if !ok || h.Name != "a" || h.ID != full.ID || h.Partitions != 3 || h.Internal || h.Configs["min.insync.replicas"] != "2" {
			t.Fatalf("header %+v, topic %+v", h, full)
		}
		if h.Replicas != nil || h.Initial != nil || h.Dirs != nil || h.Reassigning != nil {
			t.Fatalf("header copied the assignment: %+v", h)
		}
		h.Configs["min.insync.replicas"] = "3"
	}
	if again, _ := s.Topic("a"); again.Configs["min.insync.replicas"] != "2" {
		t.Fatalf("changing a header's configs changed the store: %v", again.Configs)
	}
	if n, ok := s.TopicName(full.ID); !ok || n != "a" {
		t.Fatalf("TopicName(%x) = %q, %v", full.ID, n, ok)
	}
	if n, ok := s.TopicName([16]byte{1}); ok {
		t.Fatalf("TopicName of an unknown id = %q", n)
	}
	if _, err := createTopic(s, "b", 1, nil, false); err != nil {
		t.Fatal(err)
	}
	if h, ok := s.TopicHeader("b"); !ok || h.Configs == nil {
		t.Fatalf("header of a topic without overrides: %+v %v (Configs must be an empty map, as Topic's)", h, ok)
	}
}
