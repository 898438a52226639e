package metadata

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"holdfast/internal/storage"
	"holdfast/internal/testwait"
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

	closeStore(t, s)
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

// closeStore stops s cleanly: Close writes the last snapshot.
func closeStore(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// waitSnapshots waits until no snapshot is being written.
func waitSnapshots(s *Store) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.snap.writing {
		s.snap.idle.Wait()
	}
}

// summary is what a test compares of two stores: every topic, the
// pending deletions, the fenced brokers, the applied offset.
func summary(s *Store) string {
	var b strings.Builder
	for _, t := range s.Topics() {
		fmt.Fprintf(&b, "%s %x %d %v %v %v;", t.Name, t.ID, t.Partitions, t.Replicas, t.Configs, t.Dirs)
	}
	for _, t := range s.Deleting() {
		fmt.Fprintf(&b, "deleting %s %x;", t.Name, t.ID)
	}
	fmt.Fprintf(&b, "fenced %v applied %d", s.FencedBrokers(), s.Applied())
	return b.String()
}

// metaLog stands in for the metadata Raft log: the commands, entry i
// ending at offset i+1, as their encoded bytes (so DecodeCommand gives
// each its size, as the apply loop's do).
type metaLog [][]byte

func (l *metaLog) apply(t *testing.T, s *Store, c Command) (Topic, error) {
	t.Helper()
	data, err := EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	*l = append(*l, data)
	dc, err := DecodeCommand(data)
	if err != nil {
		t.Fatal(err)
	}
	return s.Apply(int64(len(*l)), dc)
}

// replay applies the entries after the store's applied offset, as
// cluster.Node.OpenMetadata does at start; it returns how many.
func (l metaLog) replay(t *testing.T, s *Store) int {
	t.Helper()
	from := s.Applied()
	for i := from; i < int64(len(l)); i++ {
		c, err := DecodeCommand(l[i])
		if err != nil {
			t.Fatal(err)
		}
		s.Apply(i+1, c) // a refused command fails again, as it did
	}
	return len(l) - int(from)
}

// TestStoreCrashReplay: between snapshots the metadata log is the record.
// A power cut after any command - with snapshots written every few
// commands, one of them failing - leaves the last snapshot, and replaying
// the log after its applied offset gives exactly the state before the
// cut. A deletion this node finished (FinishDelete, not in the log) stays
// finished across the replay, so a new topic of the same name is not
// taken for the deleted one's leftover data.
func TestStoreCrashReplay(t *testing.T) {
	fs := storage.NewCrashFS(1)
	dir := "/data/meta"
	policy := SnapshotPolicy{MaxBytes: 600} // a snapshot every few commands
	s := open(t, fs, dir)
	s.SetSnapshotPolicy(policy)
	var log metaLog
	reps := func(n int) [][]int32 {
		r := make([][]int32, n)
		for i := range r {
			r[i] = []int32{1, 2}
		}
		return r
	}
	var ids [][16]byte
	steps := []func() error{}
	for i := range 6 {
		steps = append(steps, func() error {
			id := NewTopicID()
			ids = append(ids, id)
			_, err := log.apply(t, s, Command{Op: OpCreateTopic, Topic: &Topic{Name: fmt.Sprintf("t%d", i), ID: id, Partitions: int32(i + 1), Replicas: reps(i + 1)}})
			return err
		})
	}
	steps = append(steps,
		func() error {
			_, err := log.apply(t, s, Command{Op: OpTopicConfigs, Name: "t1", Configs: map[string]string{"retention.ms": "1000"}})
			return err
		},
		func() error {
			_, err := log.apply(t, s, Command{Op: OpAddPartitions, Name: "t2", Partitions: 5, Replicas: reps(2)})
			return err
		},
		func() error {
			_, err := log.apply(t, s, Command{Op: OpFence, IDs: []int32{2}})
			return err
		},
		func() error {
			_, err := log.apply(t, s, Command{Op: OpDeleteTopic, Name: "t0"})
			return err
		},
		func() error {
			// Refused on every node: only the applied offset moves.
			if _, err := log.apply(t, s, Command{Op: OpCreateTopic, Topic: &Topic{Name: "t1", ID: NewTopicID(), Partitions: 1, Replicas: reps(1)}}); !errors.Is(err, ErrTopicExists) {
				return fmt.Errorf("duplicate create: %v", err)
			}
			return nil
		},
		func() error {
			// A snapshot write fails: the log still has everything.
			fs.InjectError(storage.OpRename, fileName, syscall.EIO)
			for i := range 4 {
				if _, err := log.apply(t, s, Command{Op: OpTopicConfigs, Name: "t3", Configs: map[string]string{"segment.bytes": fmt.Sprint(4096 + i)}}); err != nil {
					return err
				}
			}
			waitSnapshots(s)
			fs.ClearErrors()
			return nil
		},
	)
	replayed, snapshotted := 0, 0
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want := summary(s)
		waitSnapshots(s)
		fs.CrashTorn()
		s = open(t, fs, dir)
		s.SetSnapshotPolicy(policy)
		if s.Applied() > 0 {
			snapshotted++
		}
		if n := log.replay(t, s); n > 0 {
			replayed++
		}
		if got := summary(s); got != want {
			t.Fatalf("step %d: after a crash and replay\n got %s\nwant %s", i, got, want)
		}
	}
	if replayed == 0 || snapshotted == 0 {
		t.Fatalf("crashes replayed entries %d times and found a snapshot %d times: both paths must be exercised", replayed, snapshotted)
	}

	// The data of deleted t0 is removed and a new t0 is created, with no
	// snapshot since: a replay re-applies the delete, which must not make
	// the new t0's data look like the old one's leftovers.
	s.SetSnapshotPolicy(SnapshotPolicy{MaxBytes: 1 << 30})
	if d := s.Deleting(); len(d) != 1 || d[0].ID != ids[0] {
		t.Fatalf("Deleting = %+v, want t0", d)
	}
	if err := s.FinishDelete(ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := log.apply(t, s, Command{Op: OpCreateTopic, Topic: &Topic{Name: "t0", ID: NewTopicID(), Partitions: 1, Replicas: reps(1)}}); err != nil {
		t.Fatal(err)
	}
	want := summary(s)
	fs.CrashTorn()
	s = open(t, fs, dir)
	if n := log.replay(t, s); n == 0 {
		t.Fatal("nothing replayed: the case needs the delete in the replay")
	}
	if got := summary(s); got != want {
		t.Fatalf("after FinishDelete, a new t0, a crash and replay\n got %s\nwant %s", got, want)
	}
	// A clean stop snapshots: nothing to replay, and the finished
	// deletions are trimmed.
	closeStore(t, s)
	s = open(t, fs, dir)
	if n := log.replay(t, s); n != 0 || summary(s) != want {
		t.Fatalf("after a clean stop: %d entries replayed, state %s", n, summary(s))
	}
	if _, err := readFile(fs, join(dir, finishedName)); !isNotExist(err) {
		t.Fatalf("finished deletions kept after a snapshot holding them: %v", err)
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
	closeStore(t, s)
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

// TestStoreSnapshotPolicy: a snapshot is written once the commands since
// the last one add up to MaxBytes of log (not before), and after
// MaxInterval when anything changed.
func TestStoreSnapshotPolicy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	fs := storage.OSFS()
	s := open(t, fs, dir)
	onDisk := func() int64 {
		t.Helper()
		data, err := readFile(fs, join(dir, fileName))
		if err != nil {
			t.Fatal(err)
		}
		st, err := decode(data)
		if err != nil {
			t.Fatal(err)
		}
		return st.Applied
	}
	var log metaLog
	fence := Command{Op: OpFence, IDs: []int32{7}}
	data, _ := EncodeCommand(fence)
	s.SetSnapshotPolicy(SnapshotPolicy{MaxBytes: int64(10 * len(data))})
	for i := range 9 {
		log.apply(t, s, fence)
		waitSnapshots(s)
		if got := onDisk(); got != 0 {
			t.Fatalf("after %d commands of %d bytes (policy %d bytes): snapshot at %d", i+1, len(data), 10*len(data), got)
		}
	}
	log.apply(t, s, fence)
	waitSnapshots(s)
	if got := onDisk(); got != 10 {
		t.Fatalf("after 10 commands: snapshot at %d, want 10", got)
	}
	s.SetSnapshotPolicy(SnapshotPolicy{MaxBytes: 1 << 30, MaxInterval: time.Millisecond})
	log.apply(t, s, fence)
	testwait.Until(t, 10*time.Second, "a snapshot after MaxInterval", func() bool { return onDisk() == 11 })
	closeStore(t, s)
}

// TestImageSharedSafely: readers holding older images, and snapshots
// encoded in the background, while commands change the same topics: under
// the race detector (CI's race run) any write into a structure an older
// image shares is reported; without it, every image read must still say
// what it said when it was taken.
func TestImageSharedSafely(t *testing.T) {
	s := open(t, storage.OSFS(), filepath.Join(t.TempDir(), "meta"))
	s.SetSnapshotPolicy(SnapshotPolicy{MaxBytes: 1}) // a snapshot after every command
	var log metaLog
	reps := [][]int32{{1, 2}, {2, 3}}
	for _, name := range []string{"a", "b"} {
		if _, err := log.apply(t, s, Command{Op: OpCreateTopic, Topic: &Topic{Name: name, ID: NewTopicID(), Partitions: 2, Replicas: reps}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := log.apply(t, s, Command{Op: OpRegister, Broker: &BrokerInfo{ID: 4, Host: "h", Port: 1}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		for {
			select {
			case <-done:
				return
			default:
			}
			img := s.Image()
			a, _ := img.Topic("a")
			want := fmt.Sprint(a.Partitions, a.Replicas, a.Configs, a.Dirs, a.Reassigning)
			for range 3 {
				s.Topics()
				if got := fmt.Sprint(a.Partitions, a.Replicas, a.Configs, a.Dirs, a.Reassigning); got != want {
					errs <- fmt.Errorf("an image's topic changed under its reader: %s, was %s", got, want)
					return
				}
			}
		}
	}()
	for i := range 60 {
		var c Command
		switch i % 4 {
		case 0:
			c = Command{Op: OpTopicConfigs, Name: "a", Configs: map[string]string{"retention.ms": fmt.Sprint(i)}}
		case 1:
			c = Command{Op: OpAddPartitions, Name: "a", Partitions: int32(3 + i/4), Replicas: [][]int32{{1, 2}}}
		case 2:
			c = Command{Op: OpReassign, Name: "a", Partition: 0, Target: []int32{4, 2}}
		case 3:
			if i%8 == 3 {
				c = Command{Op: OpReassignDone, Name: "a", Partition: 0, Target: []int32{4, 2}}
			} else {
				c = Command{Op: OpReassign, Name: "a", Partition: 0} // cancel
			}
		}
		log.apply(t, s, c) // some are refused (a move in progress): fine
	}
	close(done)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
}

// TestStoreRefusesNewerFormat: a cluster.json whose version is newer than
// this binary's (valid CRC, fields this binary may not even parse), or a
// finished-deletes.json in the object form a later version is to use, is
// refused with an error naming the file, the version found and the
// versions known - not read as corrupt - and neither file changes. The
// bare-array finished-deletes.json of today opens.
func TestStoreRefusesNewerFormat(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		content    func(cluster []byte) []byte
		want       string // "" opens
	}{
		{"cluster.json version 2", fileName, func(c []byte) []byte {
			return withCRC(bytes.Replace(c, []byte(`"version": 1`), []byte(`"version": 2`), 1))
		}, "version: format version 2, this binary reads version 1"},
		{"cluster.json version 2, changed types", fileName, func([]byte) []byte {
			return withCRC([]byte(`{"version": 2, "cluster_id": 7, "topics": "elsewhere"}` + "\n"))
		}, "version: format version 2, this binary reads version 1"},
		{"finished-deletes.json version 2", finishedName, func([]byte) []byte {
			return []byte(`{"version": 2, "finished": []}`)
		}, "version: format version 2, this binary reads version 1"},
		{"finished-deletes.json array", finishedName, func([]byte) []byte {
			return []byte(`[{"id":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"applied_offset":1}]`)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, storage.OSFS(), dir)
			if _, err := createTopic(s, "x", 1, nil, false); err != nil {
				t.Fatal(err)
			}
			closeStore(t, s)
			cluster, err := os.ReadFile(filepath.Join(dir, fileName))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, tc.file)
			content := tc.content(cluster)
			if err := os.WriteFile(path, content, 0o644); err != nil {
				t.Fatal(err)
			}
			s, err = Open(dir, storage.OSFS(), nil, "")
			if got, _ := os.ReadFile(path); !bytes.Equal(got, content) {
				t.Fatalf("%s changed: %q", tc.file, got)
			}
			if tc.want == "" {
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				closeStore(t, s)
				return
			}
			if err == nil {
				closeStore(t, s)
				t.Fatal("opened a metadata store of a newer format")
			}
			if !errors.Is(err, storage.ErrUnknownFormat) || errors.Is(err, errCorruptMetaDoc) {
				t.Fatalf("open: %v: want ErrUnknownFormat, not corrupt", err)
			}
			for _, w := range []string{path, tc.want} {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("open: %q does not say %q", err, w)
				}
			}
		})
	}
}

// withCRC appends cluster.json's CRC trailer to a JSON body.
func withCRC(body []byte) []byte {
	i := bytes.LastIndex(body, []byte("crc32c "))
	if i >= 0 {
		body = body[:i]
	}
	return fmt.Appendf(body, "crc32c %08x\n", crc32.Checksum(body, castagnoli))
}

// TestRemoteDeletingSurvivesCrash: deleting a topic with
// remote.storage.enable=true records, in the metadata log, that its
// objects in the object store are to be deleted (RemoteDeleting); a crash
// before they are gone keeps the record, and FinishRemoteDelete (node
// local, durable) drops it for good, also across a replay of the delete,
// independently of the local data's Deleting.
func TestRemoteDeletingSurvivesCrash(t *testing.T) {
	fs := storage.NewCrashFS(1)
	dir := "/data/meta"
	s := open(t, fs, dir)
	s.SetSnapshotPolicy(SnapshotPolicy{MaxBytes: 1 << 30}) // the delete stays in the replay
	var log metaLog
	tiered, plain := NewTopicID(), NewTopicID()
	for _, c := range []Command{
		{Op: OpCreateTopic, Topic: &Topic{Name: "tiered", ID: tiered, Partitions: 1, Replicas: [][]int32{{1}}, Configs: map[string]string{"remote.storage.enable": "true"}}},
		{Op: OpCreateTopic, Topic: &Topic{Name: "plain", ID: plain, Partitions: 1, Replicas: [][]int32{{1}}}},
		{Op: OpDeleteTopic, Name: "tiered"},
		{Op: OpDeleteTopic, Name: "plain"},
	} {
		if _, err := log.apply(t, s, c); err != nil {
			t.Fatal(err)
		}
	}
	remote := func() [][16]byte {
		var ids [][16]byte
		for _, d := range s.RemoteDeleting() {
			ids = append(ids, d.ID)
		}
		return ids
	}
	if r := remote(); len(r) != 1 || r[0] != tiered {
		t.Fatalf("RemoteDeleting = %x, want the tiered topic only", r)
	}
	crash := func() {
		waitSnapshots(s)
		fs.CrashTorn()
		s = open(t, fs, dir)
		s.SetSnapshotPolicy(SnapshotPolicy{MaxBytes: 1 << 30})
		log.replay(t, s)
	}
	crash()
	if r := remote(); len(r) != 1 || r[0] != tiered {
		t.Fatalf("after a crash RemoteDeleting = %x, want the tiered topic", r)
	}
	if err := s.FinishRemoteDelete(tiered); err != nil {
		t.Fatal(err)
	}
	crash()
	if r := remote(); len(r) != 0 {
		t.Fatalf("after FinishRemoteDelete and a crash RemoteDeleting = %x, want none", r)
	}
	if d := s.Deleting(); len(d) != 2 {
		t.Fatalf("the local data's Deleting = %+v, want both topics", d)
	}
	closeStore(t, s)
	s = open(t, fs, dir)
	if r := remote(); len(r) != 0 {
		t.Fatalf("after a clean stop RemoteDeleting = %x", r)
	}
}
