package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/metadata"
	"holdfast/internal/storage"
)

// newTestManager is a manager of node 1 over a fresh metadata store and
// data directory, with no Raft host: enough for the paths that decide
// without a Raft group (no replica open here).
func newTestManager(t *testing.T, fs storage.FS) (*Manager, *metadata.Store) {
	t.Helper()
	dir := t.TempDir()
	meta, err := metadata.Open(filepath.Join(dir, "meta"), storage.OSFS(), slog.New(slog.DiscardHandler), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { meta.Close() })
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := New(Config{NodeID: 1, DataDir: filepath.Join(dir, "data"), FS: fs, Logger: slog.New(slog.DiscardHandler)}, meta, nil, nil)
	return m, meta
}

func applyCmd(t *testing.T, meta *metadata.Store, c metadata.Command) metadata.Topic {
	t.Helper()
	tp, err := meta.Apply(meta.Applied()+1, c)
	if err != nil {
		t.Fatalf("apply %s: %v", c.Op, err)
	}
	return tp
}

func createTopic(t *testing.T, meta *metadata.Store, name string, replicas ...[]int32) metadata.Topic {
	t.Helper()
	return applyCmd(t, meta, metadata.Command{Op: metadata.OpCreateTopic, Topic: &metadata.Topic{
		Name: name, ID: metadata.NewTopicID(), Partitions: int32(len(replicas)), Replicas: replicas}})
}

// The repair pause starts at repairEvery, doubles after every attempt and
// stops at repairMaxPause; an attempt inside the pause is refused.
func TestRepairBackoff(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &repairState{pause: repairEvery}
	now := t0
	var pauses []time.Duration
	for range 10 {
		if !r.due(now) {
			t.Fatalf("not due at %v (next %v)", now.Sub(t0), r.next.Sub(t0))
		}
		gap := r.next.Sub(now)
		pauses = append(pauses, gap)
		if r.due(now.Add(gap - time.Nanosecond)) {
			t.Fatalf("due %v into a pause of %v", gap-time.Nanosecond, gap)
		}
		now = now.Add(gap)
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second,
		64 * time.Second, 128 * time.Second, 256 * time.Second, 5 * time.Minute, 5 * time.Minute}
	if !slices.Equal(pauses, want) {
		t.Fatalf("pauses %v, want %v", pauses, want)
	}
	if r.pause != repairMaxPause {
		t.Fatalf("pause %v, want the cap %v", r.pause, repairMaxPause)
	}
}

// A replica's backoff is forgotten only after it stayed healthy for as
// long as its last pause beyond the next allowed attempt.
func TestRepairHealed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &repairState{pause: repairEvery}
	r.due(t0) // next = t0+2s, pause now 4s
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{
		{0, false},
		{2 * time.Second, false},
		{6 * time.Second, false}, // exactly next+pause: not after it
		{6*time.Second + time.Nanosecond, true},
		{time.Hour, true},
	} {
		if got := r.healed(t0.Add(c.at)); got != c.want {
			t.Errorf("healed at +%v = %v, want %v", c.at, got, c.want)
		}
	}
}

// freeFS reports a fixed number of free bytes (storage.FreeBytes asks
// an FS that can tell).
type freeFS struct {
	storage.FS
	free int64
	ok   bool
}

func (f *freeFS) FreeBytes(string) (int64, bool) { return f.free, f.ok }

// A replica that failed for a full disk is recopied only once its
// filesystem has recopyReserve plus an eighth of what it held; every
// refusal is counted, the first one logged.
func TestRoomToRecopy(t *testing.T) {
	const size = 800 << 20 // needs 16 MiB + 100 MiB
	need := int64(recopyReserve + size/8)
	for _, c := range []struct {
		name     string
		noSpace  bool
		free     int64
		ok       bool
		want     bool
		deferred int64
	}{
		{"not a full disk", false, 0, true, true, 0},
		{"one byte short", true, need - 1, true, false, 1},
		{"exactly enough", true, need, true, true, 0},
		{"plenty", true, 1 << 40, true, true, 0},
		{"nothing free", true, 0, true, false, 1},
		{"statfs cannot tell", true, 0, false, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := &freeFS{FS: storage.OSFS(), free: c.free, ok: c.ok}
			m, _ := newTestManager(t, fs)
			r := &repairState{pause: repairEvery, noSpace: c.noSpace, size: size}
			if got := m.roomToRecopy(r, "t", 0); got != c.want {
				t.Fatalf("roomToRecopy = %v, want %v", got, c.want)
			}
			if got := m.RepairsDeferred(); got != c.deferred {
				t.Fatalf("RepairsDeferred = %d, want %d", got, c.deferred)
			}
			if r.waiting != !c.want {
				t.Fatalf("waiting = %v after a check that returned %v", r.waiting, c.want)
			}
		})
	}
}

// Waiting for room does not lengthen the pause, and the recopy is allowed
// at the first check that finds room.
func TestRoomToRecopyThenRoom(t *testing.T) {
	fs := &freeFS{FS: storage.OSFS(), free: 0, ok: true}
	m, _ := newTestManager(t, fs)
	r := &repairState{pause: repairEvery, noSpace: true, size: 0}
	for range 3 {
		if m.roomToRecopy(r, "t", 0) {
			t.Fatal("room with 0 bytes free")
		}
	}
	if got := m.RepairsDeferred(); got != 3 {
		t.Fatalf("RepairsDeferred = %d, want 3", got)
	}
	if r.pause != repairEvery || !r.next.IsZero() {
		t.Fatalf("waiting for room changed the backoff: pause %v next %v", r.pause, r.next)
	}
	fs.free = recopyReserve
	if !m.roomToRecopy(r, "t", 0) || r.waiting {
		t.Fatalf("no recopy with %d bytes free (waiting %v)", fs.free, r.waiting)
	}
}

// A corrupt replica is discarded before its reopen only if another
// replica can give its data back; any other failure reopens as it is.
func TestDiscardCorruptLocked(t *testing.T) {
	for _, c := range []struct {
		name     string
		err      error
		replicas []int32
		want     bool
	}{
		{"an I/O error, only replica", errors.New("input/output error"), []int32{1}, true},
		{"not offline", nil, []int32{1}, true},
		{"corrupt, only replica", fmt.Errorf("open: %w", storage.ErrCorrupt), []int32{1}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, meta := newTestManager(t, storage.OSFS())
			tp := createTopic(t, meta, "t", c.replicas)
			if c.err != nil {
				m.offline = map[topicPartition]error{{"t", 0}: c.err}
			}
			if got := m.discardCorruptLocked(tp, 0); got != c.want {
				t.Fatalf("discardCorruptLocked = %v, want %v", got, c.want)
			}
		})
	}
}

func TestCleanupDeletes(t *testing.T) {
	for _, c := range []struct {
		policy string
		want   bool
	}{
		{"delete", true},
		{"compact", false},
		{"compact,delete", true},
		{"delete,compact", true},
		{" compact , delete ", true},
		{"", false},
		{"deleted", false},
		{"Delete", false}, // Kafka's values are lower case
	} {
		if got := cleanupDeletes(c.policy); got != c.want {
			t.Errorf("cleanupDeletes(%q) = %v, want %v", c.policy, got, c.want)
		}
	}
}

// Group ids are stable, never the metadata group's small id, and differ
// by topic id and by partition.
func TestGroup(t *testing.T) {
	a, b := [16]byte{1}, [16]byte{2}
	seen := map[uint64]string{}
	for _, id := range [][16]byte{a, b} {
		for i := range int32(100) {
			g := Group(id, i)
			if g>>63 != 1 {
				t.Fatalf("Group(%x, %d) = %#x: top bit clear", id, i, g)
			}
			if g != Group(id, i) {
				t.Fatalf("Group(%x, %d) not stable", id, i)
			}
			k := fmt.Sprintf("%x-%d", id, i)
			if prev, dup := seen[g]; dup {
				t.Fatalf("Group(%s) = Group(%s)", k, prev)
			}
			seen[g] = k
		}
	}
	// Fixed values (FNV-1a of the id and the big-endian index, top bit
	// set): a change would move every replica to a new, empty group.
	for _, c := range []struct {
		id   [16]byte
		i    int32
		want uint64
	}{
		{[16]byte{}, 0, 0xee85fafd354b0935},
		{[16]byte{1}, 7, 0x8c593e1b0d138eb1},
	} {
		if got := Group(c.id, c.i); got != c.want {
			t.Errorf("Group(%x, %d) = %#x, want %#x", c.id, c.i, got, c.want)
		}
	}
}

func TestCleanerConfigValidate(t *testing.T) {
	ok := DefaultCleanerConfig()
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*CleanerConfig)
		want string // "" valid
	}{
		{"no threads", func(c *CleanerConfig) { c.Threads = 0 }, "log.cleaner.threads 0: want 1..64"},
		{"64 threads", func(c *CleanerConfig) { c.Threads = 64; c.DedupeBufferSize = 64 << 20 }, ""},
		{"65 threads", func(c *CleanerConfig) { c.Threads = 65; c.DedupeBufferSize = 65 << 20 }, "log.cleaner.threads 65: want 1..64"},
		{"1 MiB per thread", func(c *CleanerConfig) { c.Threads = 4; c.DedupeBufferSize = 4 << 20 }, ""},
		{"under 1 MiB per thread", func(c *CleanerConfig) { c.Threads = 4; c.DedupeBufferSize = 4<<20 - 1 }, "log.cleaner.dedupe.buffer.size 4194303: want at least 1 MiB per cleaner thread"},
		{"dedupe too large", func(c *CleanerConfig) { c.DedupeBufferSize = 1<<40 + 1 }, "log.cleaner.dedupe.buffer.size 1099511627777: too large"},
		{"io buffer 4 KiB", func(c *CleanerConfig) { c.IOBufferSize = 4 << 10 }, ""},
		{"io buffer too small", func(c *CleanerConfig) { c.IOBufferSize = 4<<10 - 1 }, "log.cleaner.io.buffer.size 4095: want 4 KiB..64 MiB"},
		{"io buffer too large", func(c *CleanerConfig) { c.IOBufferSize = 64<<20 + 1 }, "log.cleaner.io.buffer.size 67108865: want 4 KiB..64 MiB"},
		{"no backoff", func(c *CleanerConfig) { c.Backoff = 0 }, "log.cleaner.backoff.ms 0s: must be positive"},
	} {
		cfg := DefaultCleanerConfig()
		c.edit(&cfg)
		err := cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// State of a partition with no replica open here, as the metadata and the
// fenced brokers decide it.
func TestStateWithoutLocalReplica(t *testing.T) {
	none := []int32{}
	for _, c := range []struct {
		name     string
		replicas []int32
		fenced   []int32
		want     State
	}{
		{"first live replica leads", []int32{3, 2, 4}, nil,
			State{Leader: 3, LeaderEpoch: -1, Replicas: []int32{3, 2, 4}, ISR: []int32{3, 2, 4}, Offline: none}},
		{"a fenced preferred leader is skipped", []int32{3, 2, 4}, []int32{3},
			State{Leader: 2, LeaderEpoch: -1, Replicas: []int32{3, 2, 4}, ISR: []int32{2, 4}, Offline: []int32{3}}},
		{"every replica fenced", []int32{3, 2}, []int32{2, 3},
			State{Leader: -1, LeaderEpoch: -1, Replicas: []int32{3, 2}, ISR: none, Offline: []int32{3, 2}, Err: kerr.LeaderNotAvailable.Code}},
		{"ours, not open yet", []int32{2, 1}, nil,
			State{Leader: -1, LeaderEpoch: -1, Replicas: []int32{2, 1}, ISR: none, Offline: none, Err: kerr.LeaderNotAvailable.Code}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, meta := newTestManager(t, storage.OSFS())
			tp := createTopic(t, meta, "t", c.replicas)
			if len(c.fenced) > 0 {
				applyCmd(t, meta, metadata.Command{Op: metadata.OpFence, IDs: c.fenced})
			}
			got := m.State(tp, 0)
			if got.Leader != c.want.Leader || got.LeaderEpoch != c.want.LeaderEpoch || got.Err != c.want.Err ||
				!slices.Equal(got.Replicas, c.want.Replicas) || !slices.Equal(got.ISR, c.want.ISR) || !slices.Equal(got.Offline, c.want.Offline) {
				t.Fatalf("State = %+v, want %+v", got, c.want)
			}
		})
	}
	// A partition beyond the assignment: no replicas, no leader.
	m, meta := newTestManager(t, storage.OSFS())
	tp := createTopic(t, meta, "t", []int32{2})
	if got := m.State(tp, 5); got.Leader != -1 || len(got.Replicas) != 0 || got.Err != kerr.LeaderNotAvailable.Code {
		t.Fatalf("State of partition 5 of 1 = %+v", got)
	}
}
