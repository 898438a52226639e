package share

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"holdfast/internal/partition"
	"holdfast/internal/records"
)

// dataLog is a data partition in memory: batches of n records each, the
// high watermark at the end of the last, a log start, a leader epoch.
type dataLog struct {
	mu      sync.Mutex
	batches [][]byte
	firsts  []int64
	start   int64
	end     int64
	epoch   int32
}

func (l *dataLog) append(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	recs := make([]records.Record, n)
	for i := range recs {
		recs[i] = records.Record{Offset: int64(i), Timestamp: 1, Value: []byte{byte(i)}}
	}
	b, err := records.Build(records.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, BaseOffset: l.end}, recs)
	if err != nil {
		t.Fatal(err)
	}
	l.batches, l.firsts = append(l.batches, b), append(l.firsts, l.end)
	l.end += int64(n)
}

func (l *dataLog) LeaderEpoch() int32 { l.mu.Lock(); defer l.mu.Unlock(); return l.epoch }
func (l *dataLog) HighWatermark() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.end
}
func (l *dataLog) LogStartOffset() int64   { l.mu.Lock(); defer l.mu.Unlock(); return l.start }
func (l *dataLog) Notify() <-chan struct{} { return nil }

func (l *dataLog) Read(offset int64, maxBytes int, _ bool) (partition.ReadResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if offset < l.start || offset > l.end {
		return partition.ReadResult{}, partition.ErrOffsetOutOfRange
	}
	var out []byte
	for i, b := range l.batches {
		last := l.end - 1
		if i+1 < len(l.firsts) {
			last = l.firsts[i+1] - 1
		}
		if last < offset {
			continue
		}
		if len(out) > 0 && len(out)+len(b) > maxBytes {
			break
		}
		out = append(out, b...)
	}
	return partition.ReadResult{Records: out, HighWatermark: l.end, LogStartOffset: l.start}, nil
}

// memPersister is the share state at the coordinator: snapshots by key,
// with a write that can be made to fail or be fenced.
type memPersister struct {
	mu     sync.Mutex
	snaps  map[Key]Snapshot
	fail   error
	writes int
}

func (p *memPersister) Read(_ context.Context, k Key, _ int32) (Snapshot, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.snaps[k]
	return s, ok, nil
}

func (p *memPersister) Write(_ context.Context, k Key, snap Snapshot) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	if p.snaps == nil {
		p.snaps = map[Key]Snapshot{}
	}
	p.snaps[k] = snap
	p.writes++
	return nil
}

func (p *memPersister) snap(k Key) Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snaps[k]
}

func (p *memPersister) failWith(err error) {
	p.mu.Lock()
	p.fail = err
	p.mu.Unlock()
}

func newTestManager(t *testing.T, per *memPersister, s GroupSettings) *Manager {
	m := NewManager(ManagerConfig{Persister: per, Settings: func(string) GroupSettings { return s },
		MaxSessions: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(m.Close)
	return m
}

var testKey = Key{Group: "g", TopicID: [16]byte{1}, Partition: 0}

func acquire(t *testing.T, m *Manager, lg DataLog, member string, max int) Fetched {
	t.Helper()
	f, err := m.Acquire(context.Background(), testKey, lg, member, max, false, 1<<20)
	if err != nil {
		t.Fatalf("acquire for %s: %v", member, err)
	}
	return f
}

// TestManagerAutoReset: a share partition with no state starts at the
// log end (latest) or its start (earliest), and that start is stored at
// once so it does not follow the log end.
func TestManagerAutoReset(t *testing.T) {
	for _, c := range []struct {
		reset string
		first int64
	}{{"latest", 10}, {"earliest", 2}, {"", 10}} {
		lg := &dataLog{start: 0}
		lg.append(t, 10)
		lg.start = 2
		per := &memPersister{}
		m := newTestManager(t, per, GroupSettings{Settings: Settings{LockDuration: time.Minute, DeliveryCountLimit: 2, MaxInFlight: 100}, AutoReset: c.reset})
		f := acquire(t, m, lg, "a", 100)
		if c.first == 10 && len(f.Acquired) != 0 || c.first == 2 && !reflect.DeepEqual(f.Acquired, []Range{{2, 9, 1}}) {
			t.Fatalf("%s: acquired %v", c.reset, f.Acquired)
		}
		if s := per.snap(testKey); s.StartOffset != c.first {
			t.Fatalf("%s: stored start %d, want %d", c.reset, s.StartOffset, c.first)
		}
		lg.append(t, 3)
		f = acquire(t, m, lg, "a", 100)
		if !reflect.DeepEqual(f.Acquired, []Range{{10, 12, 1}}) {
			t.Fatalf("%s: then acquired %v, want 10-12", c.reset, f.Acquired)
		}
	}
}

// TestManagerAcquireAcknowledge: acquired offsets come with the whole
// batches that hold them; an acknowledgement is durable when it returns,
// and all or nothing.
func TestManagerAcquireAcknowledge(t *testing.T) {
	lg := &dataLog{}
	per := &memPersister{}
	m := newTestManager(t, per, GroupSettings{Settings: Settings{LockDuration: time.Minute, DeliveryCountLimit: 3, MaxInFlight: 100}, AutoReset: "earliest"})
	lg.append(t, 4)
	lg.append(t, 4)
	lg.append(t, 4)
	f := acquire(t, m, lg, "a", 5) // batch-optimized: whole batches, 8 offsets
	if !reflect.DeepEqual(f.Acquired, []Range{{0, 7, 1}}) {
		t.Fatalf("acquired %v", f.Acquired)
	}
	if want := append(slices.Clone(lg.batches[0]), lg.batches[1]...); !slices.Equal(f.Records, want) {
		t.Fatalf("records: %d bytes, want the first two batches (%d)", len(f.Records), len(want))
	}
	g := acquire(t, m, lg, "b", 100)
	if !reflect.DeepEqual(g.Acquired, []Range{{8, 11, 1}}) || !slices.Equal(g.Records, lg.batches[2]) {
		t.Fatalf("b acquired %v (%d bytes)", g.Acquired, len(g.Records))
	}
	if f := acquire(t, m, lg, "c", 100); len(f.Acquired) != 0 {
		t.Fatalf("c acquired %v with everything locked", f.Acquired)
	}
	ctx := context.Background()
	// b cannot acknowledge a's offsets; a batch of a's that fails undoes
	// the good batch before it.
	if err := m.Acknowledge(ctx, testKey, lg, "b", []AckBatch{{0, 0, []int8{AckAccept}}}); !errors.Is(err, ErrInvalidRecordState) {
		t.Fatalf("b acks a's offset: %v", err)
	}
	if err := m.Acknowledge(ctx, testKey, lg, "a", []AckBatch{{0, 3, []int8{AckAccept}}, {8, 8, []int8{AckAccept}}}); !errors.Is(err, ErrInvalidRecordState) {
		t.Fatalf("mixed batches: %v", err)
	}
	if st, _ := m.parts[testKey].p.State(0); st != Acquired {
		t.Fatalf("offset 0 is %d after a failed acknowledgement", st)
	}
	// A write that fails: nothing changes either.
	per.failWith(errors.New("disk on fire"))
	if err := m.Acknowledge(ctx, testKey, lg, "a", []AckBatch{{0, 3, []int8{AckAccept}}}); err == nil || err.Error() != "disk on fire" {
		t.Fatalf("ack with a failing write: %v", err)
	}
	if st, _ := m.parts[testKey].p.State(0); st != Acquired {
		t.Fatalf("offset 0 is %d after a failed write", st)
	}
	per.failWith(nil)
	if err := m.Acknowledge(ctx, testKey, lg, "a", []AckBatch{{0, 3, []int8{AckAccept}}, {4, 7, []int8{AckAccept, AckReject, AckGap, AckRelease}}}); err != nil {
		t.Fatal(err)
	}
	s := per.snap(testKey)
	if s.StartOffset != 7 {
		t.Fatalf("stored SPSO %d, want 7 (0-6 done, 7 released)", s.StartOffset)
	}
	st := m.Stats()
	if st.Acks != [4]int64{1, 5, 1, 1} || st.Partitions != 1 || st.Acquired != 4 {
		t.Fatalf("stats %+v", st)
	}
	// The released offset goes to the next member, delivery count 2.
	if f := acquire(t, m, lg, "c", 100); !reflect.DeepEqual(f.Acquired, []Range{{7, 7, 2}}) {
		t.Fatalf("c acquired %v", f.Acquired)
	}
}

// TestManagerFencedAndReloaded: a write fenced by a newer leader or a
// reset drops the in-memory share partition (ErrNotLeader); a new leader
// epoch of the data partition reloads the stored state, where acquired
// offsets come back available.
func TestManagerFencedAndReloaded(t *testing.T) {
	lg := &dataLog{epoch: 1}
	lg.append(t, 5)
	per := &memPersister{}
	m := newTestManager(t, per, GroupSettings{Settings: testSettings, AutoReset: "earliest"})
	if f := acquire(t, m, lg, "a", 100); len(f.Acquired) != 1 {
		t.Fatalf("acquired %v", f.Acquired)
	}
	ctx := context.Background()
	per.failWith(ErrFencedLeaderEpoch)
	if err := m.Acknowledge(ctx, testKey, lg, "a", []AckBatch{{0, 0, []int8{AckAccept}}}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("fenced write: %v", err)
	}
	if m.Available(testKey) != nil {
		t.Fatal("a fenced share partition is still loaded")
	}
	per.failWith(nil)
	// Reloaded from the store: the start written at load, nothing acked.
	f := acquire(t, m, lg, "b", 2)
	if len(f.Acquired) == 0 || f.Acquired[0].First != 0 {
		t.Fatalf("after reload b acquired %v", f.Acquired)
	}
	if err := m.Acknowledge(ctx, testKey, lg, "b", []AckBatch{{0, 4, []int8{AckAccept}}}); err != nil {
		t.Fatal(err)
	}
	lg.append(t, 3)
	if f := acquire(t, m, lg, "b", 100); len(f.Acquired) != 1 || f.Acquired[0].First != 5 {
		t.Fatalf("b acquired %v", f.Acquired)
	}
	// A new leader epoch: the stored state again, b's lock gone.
	lg.mu.Lock()
	lg.epoch = 2
	lg.mu.Unlock()
	if f := acquire(t, m, lg, "c", 100); !reflect.DeepEqual(f.Acquired, []Range{{5, 7, 1}}) {
		t.Fatalf("after the new epoch c acquired %v", f.Acquired)
	}
	// Retention past the SPSO moves it.
	lg.append(t, 2)
	lg.mu.Lock()
	lg.start = 9
	lg.mu.Unlock()
	if f := acquire(t, m, lg, "d", 100); len(f.Acquired) != 1 || f.Acquired[0].First != 9 {
		t.Fatalf("after the log start moved d acquired %v", f.Acquired)
	}
	m.Forget("g")
	if m.Available(testKey) != nil {
		t.Fatal("Forget left the share partition loaded")
	}
}

// TestManagerReleaseAndExpiry: closing a member's session releases what it
// holds and wakes waiting fetches; an acquisition lock that runs out is
// released by the expiry loop and stored.
func TestManagerReleaseAndExpiry(t *testing.T) {
	// In a synctest bubble: the lock's 30 s and the expiry loop's ticks
	// pass on the bubble's clock, at once and always in the same order.
	synctest.Test(t, func(t *testing.T) {
		lg := &dataLog{}
		lg.append(t, 4)
		per := &memPersister{}
		m := newTestManager(t, per, GroupSettings{Settings: Settings{LockDuration: 30 * time.Second, DeliveryCountLimit: 5, MaxInFlight: 100}, AutoReset: "earliest"})
		acquire(t, m, lg, "a", 100)
		avail := m.Available(testKey)
		if err := m.Release(context.Background(), testKey, "nobody"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-avail:
			t.Fatal("a release of nothing woke the fetches")
		default:
		}
		if err := m.Release(context.Background(), testKey, "a"); err != nil {
			t.Fatal(err)
		}
		<-avail // closed by the release
		if err := m.Release(context.Background(), Key{Group: "other"}, "a"); err != nil {
			t.Fatalf("release on a share partition not loaded: %v", err)
		}
		f := acquire(t, m, lg, "b", 100)
		if !reflect.DeepEqual(f.Acquired, []Range{{0, 3, 2}}) {
			t.Fatalf("b acquired %v", f.Acquired)
		}
		// b never acknowledges: the expiry loop releases its lock once
		// the lock duration has passed, not before.
		start := time.Now()
		avail = m.Available(testKey)
		<-avail
		if d := time.Since(start); d < 30*time.Second || d > 30*time.Second+2*expireEvery {
			t.Fatalf("the lock expired after %v, want 30 s (to the expiry loop's tick)", d)
		}
		synctest.Wait() // the expiry's write of the state
		if m.Stats().LockTimeouts != 4 {
			t.Fatalf("lock timeouts %d", m.Stats().LockTimeouts)
		}
		if s := per.snap(testKey); len(s.Batches) == 0 || s.Batches[0].State != Available {
			t.Fatalf("the expired lock's state was not stored: %+v", s)
		}
		if f := acquire(t, m, lg, "c", 100); !reflect.DeepEqual(f.Acquired, []Range{{0, 3, 3}}) {
			t.Fatalf("c acquired %v", f.Acquired)
		}
		if m.LockDuration("g") != 30*time.Second {
			t.Fatal("LockDuration")
		}
	})
}

// TestShareSessionIdleExpiry: a share session unused for SessionIdle is
// closed by the expiry loop and what its member held is released (in a
// synctest bubble: the two idle minutes pass at once).
func TestShareSessionIdleExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lg := &dataLog{}
		lg.append(t, 3)
		per := &memPersister{}
		m := NewManager(ManagerConfig{Persister: per, Settings: func(string) GroupSettings {
			return GroupSettings{Settings: Settings{LockDuration: time.Hour, DeliveryCountLimit: 5, MaxInFlight: 100}, AutoReset: "earliest"}
		}, SessionIdle: 2 * time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		defer m.Close()
		k := SessionKey{"g", "a"}
		tp := TP{TopicID: testKey.TopicID, Partition: testKey.Partition}
		if _, err := m.UseSession(k, 0, []TP{tp}, nil); err != nil {
			t.Fatal(err)
		}
		acquire(t, m, lg, "a", 100)
		time.Sleep(time.Minute) // fake time: half the idle limit
		synctest.Wait()
		if _, err := m.CheckSession(k, 1); err != nil {
			t.Fatalf("a session used within its idle limit: %v", err)
		}
		avail := m.Available(testKey)
		time.Sleep(2*time.Minute + time.Second) // fake time: past the idle limit
		synctest.Wait()
		if _, err := m.CheckSession(k, 2); !errors.Is(err, ErrSessionNotFound) {
			t.Fatalf("an idle session: %v", err)
		}
		select {
		case <-avail:
		default:
			t.Fatal("the idle member's records were not released")
		}
		if f := acquire(t, m, lg, "b", 100); !reflect.DeepEqual(f.Acquired, []Range{{0, 2, 2}}) {
			t.Fatalf("b acquired %v", f.Acquired)
		}
	})
}

// TestShareSessions: epoch 0 opens (within the limit), each request must
// carry the epoch the last one left, -1 closes and hands back the
// partitions to release, ShareAcknowledge may not open one.
func TestShareSessions(t *testing.T) {
	m := newTestManager(t, &memPersister{}, GroupSettings{Settings: testSettings})
	k := SessionKey{"g", "a"}
	tp := func(p int32) TP { return TP{TopicID: [16]byte{9}, Partition: p} }
	sorted := func(tps []TP) []int32 {
		var out []int32
		for _, x := range tps {
			out = append(out, x.Partition)
		}
		slices.Sort(out)
		return out
	}
	if _, err := m.UseSession(k, 1, nil, nil); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("epoch 1 without a session: %v", err)
	}
	if _, err := m.CheckSession(k, 0); !errors.Is(err, ErrInvalidSessionEpoch) {
		t.Fatalf("ShareAcknowledge at epoch 0: %v", err)
	}
	parts, err := m.UseSession(k, 0, []TP{tp(0), tp(1)}, nil)
	if err != nil || !slices.Equal(sorted(parts), []int32{0, 1}) {
		t.Fatalf("open: %v %v", parts, err)
	}
	if _, err := m.UseSession(k, 0+2, nil, nil); !errors.Is(err, ErrInvalidSessionEpoch) {
		t.Fatalf("skipped epoch: %v", err)
	}
	if parts, err = m.UseSession(k, 1, []TP{tp(2)}, []TP{tp(0)}); err != nil || !slices.Equal(sorted(parts), []int32{1, 2}) {
		t.Fatalf("epoch 1: %v %v", parts, err)
	}
	if parts, err = m.CheckSession(k, 2); err != nil || !slices.Equal(sorted(parts), []int32{1, 2}) {
		t.Fatalf("acknowledge at epoch 2: %v %v", parts, err)
	}
	// A second session fits (limit 2), a third does not; reopening an
	// existing one does.
	if _, err := m.UseSession(SessionKey{"g", "b"}, 0, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.UseSession(SessionKey{"g", "c"}, 0, nil, nil); !errors.Is(err, ErrSessionLimit) {
		t.Fatalf("third session: %v", err)
	}
	if m.Stats().Sessions != 2 {
		t.Fatalf("sessions %d", m.Stats().Sessions)
	}
	// Close: the session's partitions and the request's own come back.
	if parts, err = m.UseSession(k, -1, []TP{tp(7)}, nil); err != nil || !slices.Equal(sorted(parts), []int32{1, 2, 7}) {
		t.Fatalf("close: %v %v", parts, err)
	}
	if _, err := m.UseSession(k, 3, nil, nil); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("after close: %v", err)
	}
	// The epoch wraps to 1, never 0 or negative.
	m.mu.Lock()
	m.sessions[k] = &Session{Epoch: 1<<31 - 1, Parts: map[TP]bool{}}
	m.mu.Unlock()
	if _, err := m.UseSession(k, 1<<31-1, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.UseSession(k, 1, nil, nil); err != nil {
		t.Fatalf("after wrapping: %v", err)
	}
}
