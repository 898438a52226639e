package replica

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"holdfast/internal/metadata"
	"holdfast/internal/storage"
	"holdfast/internal/testwait"
)

// openJobs lists this node's replicas (node 1) from the given partition
// on, skipping partitions with no assignment.
func TestOpenJobs(t *testing.T) {
	m, meta := newTestManager(t, storage.OSFS())
	tp := createTopic(t, meta, "t", []int32{1, 2}, []int32{2, 3}, []int32{3, 1}, []int32{1})
	for _, c := range []struct {
		from int32
		want []int32
	}{
		{0, []int32{0, 2, 3}},
		{1, []int32{2, 3}},
		{3, []int32{3}},
		{4, nil},
	} {
		var got []int32
		for _, j := range m.openJobs(tp, c.from) {
			if j.drop {
				t.Errorf("from %d: partition %d to drop", c.from, j.i)
			}
			got = append(got, j.i)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("openJobs(from %d) = %v, want %v", c.from, got, c.want)
		}
	}
	short := tp
	short.Partitions = 6 // more partitions than assignments: the rest skipped
	if n := len(m.openJobs(short, 0)); n != 3 {
		t.Errorf("openJobs with 6 partitions and 4 assignments: %d jobs, want 3", n)
	}
	none := createTopic(t, meta, "elsewhere", []int32{2}, []int32{3})
	m.QueueOpenTopic(none, 0)
	if m.openQueued("elsewhere", 0) || len(m.opens.jobs) != 0 || m.opens.workers != 0 {
		t.Fatal("queued opens of a topic with no replica here")
	}
}

// A delete applied after a create wins over the create's queued opens:
// each queued open re-reads the metadata under the lifecycle lock and
// opens nothing of a topic gone since. WaitOpened waits for the queue.
func TestQueuedOpensOfDeletedTopic(t *testing.T) {
	m, meta := newTestManager(t, storage.OSFS())
	tp := createTopic(t, meta, "t", []int32{1}, []int32{1}, []int32{2})
	m.Lock() // the metadata apply's lock: the workers wait for it
	m.QueueOpenTopic(tp, 0)
	for i, want := range []bool{true, true, false} {
		if got := m.openQueued("t", int32(i)); got != want {
			t.Fatalf("openQueued(t, %d) = %v, want %v", i, got, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if err := m.WaitOpened(ctx, "t"); err != context.DeadlineExceeded {
		t.Fatalf("WaitOpened with opens held back: %v, want %v", err, context.DeadlineExceeded)
	}
	cancel()
	if err := m.WaitOpened(context.Background(), "other"); err != nil {
		t.Fatalf("WaitOpened of a topic with nothing queued: %v", err)
	}
	applyCmd(t, meta, metadata.Command{Op: metadata.OpDeleteTopic, Name: "t"})
	m.Unlock()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.WaitOpened(ctx, "t"); err != nil {
		t.Fatalf("WaitOpened: %v", err)
	}
	for i := range int32(3) {
		if m.openQueued("t", i) || m.Get("t", i) != nil {
			t.Fatalf("partition %d: queued %v, open %v after its topic was deleted", i, m.openQueued("t", i), m.Get("t", i) != nil)
		}
	}
	if m.opensAbandoned() {
		t.Fatal("opens abandoned without a stop")
	}
}

// StopBackground's stopOpens drops the queued opens (remembered as
// abandoned), waits for those under way, and refuses later ones.
func TestStopOpensDropsQueue(t *testing.T) {
	m, meta := newTestManager(t, storage.OSFS())
	reps := make([][]int32, openParallelism+8)
	for i := range reps {
		reps[i] = []int32{1}
	}
	tp := createTopic(t, meta, "t", reps...)
	m.Lock()
	m.QueueOpenTopic(tp, 0)
	if got := m.opens.workers; got != openParallelism {
		t.Fatalf("%d workers, want %d", got, openParallelism)
	}
	// Every worker takes a job and waits for the lock; 8 stay queued.
	waitFor(t, func() bool {
		m.opens.mu.Lock()
		defer m.opens.mu.Unlock()
		return len(m.opens.jobs) == 8
	})
	stopped := make(chan struct{})
	go func() { m.stopOpens(); close(stopped) }()
	// stopOpens drops the queue at once, then waits for the workers.
	waitFor(t, func() bool { return m.opensAbandoned() })
	for i := range int32(len(reps)) {
		if want := i < openParallelism; m.openQueued("t", i) != want {
			t.Fatalf("partition %d queued %v after the queue was dropped, want %v", i, !want, want)
		}
	}
	select {
	case <-stopped:
		t.Fatal("stopOpens returned with workers under way")
	default:
	}
	applyCmd(t, meta, metadata.Command{Op: metadata.OpDeleteTopic, Name: "t"})
	m.Unlock()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("stopOpens did not return once the workers could finish")
	}
	for i := range int32(len(reps)) {
		if m.openQueued("t", i) {
			t.Fatalf("partition %d still queued after stopOpens", i)
		}
	}
	if m.opens.workers != 0 {
		t.Fatalf("%d workers left", m.opens.workers)
	}
	again := createTopic(t, meta, "u", []int32{1})
	m.QueueOpenTopic(again, 0)
	if m.openQueued("u", 0) || m.opens.workers != 0 {
		t.Fatal("an open queued after stopOpens")
	}
}

// waitFor polls cond (cheap, in-memory) until it holds or 5 s pass.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testwait.Until(t, 5*time.Second, "the condition", cond)
}

// A promoted open (a request asked for a replica not yet open) is taken
// before the rest of the queue, once; the rest keep their order, and an
// open already taken is not promoted.
func TestPromotedOpenFirst(t *testing.T) {
	var m Manager
	q := &m.opens
	q.byTP = map[topicPartition]*queuedOpen{}
	tp := metadata.Topic{Name: "t"}
	for i := range int32(5) {
		o := &queuedOpen{job: openJob{t: tp, i: i}}
		q.jobs = append(q.jobs, o)
		q.byTP[topicPartition{"t", i}] = o
	}
	take := func() int32 {
		t.Helper()
		q.mu.Lock()
		defer q.mu.Unlock()
		o := q.nextLocked()
		if o == nil {
			return -1
		}
		return o.job.i
	}
	if got := take(); got != 0 {
		t.Fatalf("first open %d, want 0", got)
	}
	m.Promote("t", 3)
	m.Promote("t", 3) // asked twice: queued once
	m.Promote("t", 0) // taken already
	m.Promote("u", 1) // nothing queued
	var got []int32
	for i := take(); i >= 0; i = take() {
		got = append(got, i)
	}
	if want := []int32{3, 1, 2, 4}; !slices.Equal(got, want) {
		t.Fatalf("opens taken in order %v, want %v", got, want)
	}
}

// Lookup of a replica whose open is queued answers NOT_LEADER_OR_FOLLOWER
// (retriable) and promotes the open.
func TestLookupPromotesQueuedOpen(t *testing.T) {
	m, _, reps := queueBehindLockedWorkers(t, 1)
	last := int32(len(reps) - 1)
	if p, code := m.Lookup("t", last); p != nil || code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("Lookup of a queued replica: %v, code %d; want none, NOT_LEADER_OR_FOLLOWER", p, code)
	}
	m.opens.mu.Lock()
	urgent := len(m.opens.urgent) == 1 && m.opens.urgent[0].job.i == last
	m.opens.mu.Unlock()
	if !urgent {
		t.Fatal("Lookup did not promote the queued open")
	}
	m.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.WaitOpened(ctx, "t"); err != nil {
		t.Fatal(err)
	}
}

// The clean shutdown marker counts only if it says exactly what Close
// writes for this data directory (or the older wording, same meaning): a
// torn or damaged one, or one written for another directory (a data
// directory copied over another, a marker restored from a backup), means
// a full recovery of every log. Whatever it says, it is gone after.
func TestCleanShutdownMarker(t *testing.T) {
	m, _ := newTestManager(t, storage.OSFS())
	m.cfg.DirectoryID = "dir-a"
	other := &Manager{cfg: Config{DirectoryID: "dir-b"}}
	valid := string(m.cleanShutdownContent())
	for _, c := range []struct {
		name    string
		content *string
		clean   bool
	}{
		{"none", nil, false},
		{"written by this directory's Close", &valid, true},
		{"the older wording", ptr(legacyCleanShutdown), true},
		{"torn", ptr(valid[:len(valid)/2]), false},
		{"empty", ptr(""), false},
		{"another directory's", ptr(string(other.cleanShutdownContent())), false},
		{"damaged", ptr(strings.Replace(valid, "v1", "v7", 1)), false},
	} {
		if c.content != nil {
			if err := os.WriteFile(m.cleanShutdownPath(), []byte(*c.content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		clean, err := m.takeCleanShutdown()
		if err != nil || clean != c.clean {
			t.Errorf("%s: clean %v (%v), want %v", c.name, clean, err, c.clean)
		}
		if _, err := os.Stat(m.cleanShutdownPath()); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: the marker is still there (%v)", c.name, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// What a peer or a client asks about opens next: a Raft message for the
// replica's group (PromoteGroup, from raft.Host.SetWantedHook) and a
// Metadata question about its partition (State, LEADER_NOT_AVAILABLE
// while it is queued) promote its queued open as a request's Lookup does.
func TestPeerAndMetadataPromoteQueuedOpens(t *testing.T) {
	m, tp, reps := queueBehindLockedWorkers(t, 1, 2, 3)
	last, before := int32(len(reps)-1), int32(len(reps)-2)
	m.PromoteGroup(Group(tp.ID, last))
	m.PromoteGroup(Group(tp.ID, last)) // asked twice: promoted once
	m.PromoteGroup(Group(tp.ID, 0))    // taken already
	m.PromoteGroup(12345)              // no such group queued
	if st := m.State(tp, before); st.Err != kerr.LeaderNotAvailable.Code {
		t.Fatalf("State of a queued replica: %+v, want LEADER_NOT_AVAILABLE", st)
	}
	m.opens.mu.Lock()
	var urgent []int32
	for _, o := range m.opens.urgent {
		urgent = append(urgent, o.job.i)
	}
	m.opens.mu.Unlock()
	if want := []int32{last, before}; !slices.Equal(urgent, want) {
		t.Fatalf("promoted opens %v, want %v", urgent, want)
	}
	m.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.WaitOpened(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	m.opens.mu.Lock()
	defer m.opens.mu.Unlock()
	if len(m.opens.byGroup) != 0 || len(m.opens.byTP) != 0 {
		t.Fatalf("after every open: %d by group, %d by partition left", len(m.opens.byGroup), len(m.opens.byTP))
	}
}

// queueBehindLockedWorkers queues the opens of a topic of
// openParallelism+8 partitions (replicas on the given nodes) while the
// manager's lock is held: every worker takes a job and waits for the
// lock, and 8 opens stay queued. The caller unlocks.
func queueBehindLockedWorkers(t *testing.T, nodes ...int32) (*Manager, metadata.Topic, [][]int32) {
	t.Helper()
	m, meta := newTestManager(t, storage.OSFS())
	reps := make([][]int32, openParallelism+8)
	for i := range reps {
		reps[i] = nodes
	}
	tp := createTopic(t, meta, "t", reps...)
	m.Lock()
	m.QueueOpenTopic(tp, 0)
	waitFor(t, func() bool {
		m.opens.mu.Lock()
		defer m.opens.mu.Unlock()
		return len(m.opens.jobs) == 8
	})
	return m, tp, reps
}
