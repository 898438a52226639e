package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"path/filepath"
	"testing"

	"holdfast/internal/records"
)

// jenv is a node's data directory on a CrashFS with the data journal on.
type jenv struct {
	t    testing.TB
	fs   *CrashFS
	root string
	cfg  Config
	opts JournalOptions
	j    *DataJournal
	sy   *Syncer
}

func newJEnv(t testing.TB, seed int64, cfg Config) *jenv {
	fs := NewCrashFS(seed)
	fs.SetSyncfs(true)
	fs.SetDirPrefix(true)
	return &jenv{t: t, fs: fs, root: "/data", cfg: cfg,
		opts: JournalOptions{FS: fs, Logger: quiet, Files: 4, FileBytes: 32 << 10, ManualCheckpoints: true}}
}

// start recovers the journal and starts a Syncer with it (what a broker's
// start-up does before any log opens).
func (e *jenv) start() error {
	j, err := OpenDataJournal(e.root, e.opts)
	if err != nil {
		return err
	}
	e.j = j
	e.sy = NewSyncer(quiet)
	e.sy.SetJournal(j)
	e.t.Cleanup(func() { e.sy.Close() })
	return nil
}

func (e *jenv) open(dir string) (*Log, error) {
	if err := MkdirAllDurable(e.fs, dir); err != nil {
		return nil, err
	}
	return Open(dir, e.cfg, Options{FS: e.fs, Syncer: e.sy, Logger: quiet})
}

// round is one store round over logs: SyncNow, as the Raft host does.
func (e *jenv) round(logs []*Log) error {
	return errors.Join(e.sy.SyncNow(logs)...)
}

// checkAgainst reports how l differs from m: every batch below bound
// there byte for byte, and nothing that m does not hold at its offset.
func checkAgainst(t testing.TB, l *Log, m *model, bound int64) error {
	if l.EndOffset() < bound {
		return fmt.Errorf("end %d below durable %d: acknowledged data lost", l.EndOffset(), bound)
	}
	var got [][]byte
	err := l.Scan(l.StartOffset(), func(h records.Header, b []byte) error {
		got = append(got, append([]byte(nil), b...))
		return nil
	})
	if err != nil {
		return err
	}
	byOff := map[int64][]byte{}
	for _, b := range m.batches {
		h, _ := records.ParseHeader(b)
		byOff[h.BaseOffset] = b
	}
	for _, b := range got {
		h, _ := records.ParseHeader(b)
		if want, ok := byOff[h.BaseOffset]; !ok || !bytes.Equal(want, b) {
			return fmt.Errorf("batch at %d is not what was appended there (stale or corrupt)", h.BaseOffset)
		}
	}
	return nil
}

// jslot is one log of a scenario and what the test knows of it.
type jslot struct {
	dir   string
	l     *Log
	m     *model
	cutAt int64 // a truncation in flight (-1: none): the bound is at most it
	// A re-creation in flight (the directory renamed aside and made
	// again): the old incarnation's model and bound, either may come back.
	old      *model
	oldBound int64
}

func (s *jslot) bound() int64 {
	if s.old != nil {
		return 0 // the new incarnation: nothing acknowledged yet
	}
	b := s.l.DurableOffset()
	if s.cutAt >= 0 {
		b = min(b, s.cutAt)
	}
	return b
}

// recreate removes the log's directory as the partition manager does
// (Forget, rename aside durably, remove) and opens a new, empty log at
// the same path: no byte of the old one may ever show up in it.
func (e *jenv) recreate(s *jslot) error {
	s.old, s.oldBound = s.m, s.bound()
	if err := s.l.Close(); err != nil {
		return err
	}
	s.m = &model{}
	if err := e.j.Forget(s.dir); err != nil {
		return err
	}
	aside := s.dir + ".x-delete"
	if err := e.fs.Rename(s.dir, aside); err != nil {
		return err
	}
	if err := e.fs.SyncDir(e.root); err != nil {
		return err
	}
	if err := e.fs.RemoveAll(aside); err != nil {
		return err
	}
	l, err := e.open(s.dir)
	if err != nil {
		return err
	}
	s.l, s.old = l, nil
	return nil
}

// verifyAfterCrash reboots, recovers the journal, reopens every slot's log
// and checks it.
func (e *jenv) verifyAfterCrash(t testing.TB, slots []*jslot, label string) {
	t.Helper()
	bounds := make([]int64, len(slots))
	for i, s := range slots {
		if s.l != nil {
			bounds[i] = s.bound()
		}
	}
	e.fs.Reboot()
	if err := e.start(); err != nil {
		t.Fatalf("%s: journal recovery: %v", label, err)
	}
	for i, s := range slots {
		l, err := e.open(s.dir)
		if err != nil {
			t.Fatalf("%s: reopen %s: %v", label, s.dir, err)
		}
		err = checkAgainst(t, l, s.m, bounds[i])
		if err != nil && s.old != nil {
			err = errors.Join(err, checkAgainst(t, l, s.old, s.oldBound))
			if checkAgainst(t, l, s.old, s.oldBound) == nil {
				err = nil
				s.m = s.old
			}
		}
		if err != nil {
			t.Fatalf("%s: %s: %v", label, s.dir, err)
		}
		// What survives is the model from here on.
		s.m.batches = readAll(t, l, l.StartOffset())
		s.l, s.old, s.cutAt = l, nil, -1
	}
}

// truncBatches drops the model's batches at and above off.
func truncBatches(m *model, off int64) {
	for i, b := range m.batches {
		if h, _ := records.ParseHeader(b); h.BaseOffset >= off {
			m.batches = m.batches[:i]
			return
		}
	}
}

func jlogs(slots []*jslot) []*Log {
	out := make([]*Log, len(slots))
	for i, s := range slots {
		out[i] = s.l
	}
	return out
}

// journalScenario runs a fixed script over three logs that passes through
// every case the journal must survive: records written, journaled with no
// segment write, a roll, a retention delete, a follower truncation after
// journaling, a reset, a ring wrap with checkpoints, a re-created
// directory. It stops at the first error (the FS went down) and returns.
func journalScenario(t testing.TB, e *jenv, slots []*jslot) {
	rng := rand.New(rand.NewSource(7))
	app := func(s *jslot, n int) error {
		for range n {
			b := batch(t, 1+rng.Intn(3), 20+rng.Intn(200), 1)
			if _, err := s.l.Append(b, 0); err != nil {
				return err
			}
			s.m.batches = append(s.m.batches, b)
		}
		return nil
	}
	all := func(n int) error {
		for _, s := range slots {
			if err := app(s, n); err != nil {
				return err
			}
		}
		return e.round(jlogs(slots))
	}
	steps := []func() error{
		func() error { return all(2) }, // first round: names not known durable, old path
		func() error { return all(2) }, // journaled
		func() error { return all(3) },
		func() error { return all(1) },
		func() error { // truncation after journaling (a follower's)
			s := slots[0]
			k := len(s.m.batches) - 3
			h, _ := records.ParseHeader(s.m.batches[k])
			s.cutAt = h.BaseOffset
			if err := s.l.Truncate(h.BaseOffset); err != nil {
				return err
			}
			truncBatches(s.m, h.BaseOffset)
			s.cutAt = -1
			return nil
		},
		func() error { return all(2) },
		func() error { return all(6) }, // rolls (small segments)
		func() error { return all(2) },
		func() error { return e.j.Checkpoint() },
		func() error { return all(4) },
		func() error { // retention removes the oldest segments
			s := slots[1]
			h, _ := records.ParseHeader(s.m.batches[len(s.m.batches)/2])
			return s.l.DeleteBefore(h.BaseOffset)
		},
		func() error { return all(3) },
		func() error { return e.recreate(slots[2]) },
		func() error { return all(2) },
		func() error { return all(2) },
		func() error { // a reset (a snapshot install)
			s := slots[1]
			end := s.l.EndOffset() + 5
			s.cutAt = 0
			if err := s.l.ResetAt(end, 100); err != nil {
				return err
			}
			s.m = &model{}
			s.cutAt = -1
			return nil
		},
		func() error { return all(3) },
		func() error { return all(5) },
		func() error { return e.j.Checkpoint() },
		func() error { return all(5) },
		func() error { return all(5) },
		func() error { return e.j.Checkpoint() },
		func() error { return all(5) },
		func() error { // a truncation right after a journaled round
			s := slots[2]
			if len(s.m.batches) < 2 {
				return nil
			}
			h, _ := records.ParseHeader(s.m.batches[1])
			s.cutAt = h.BaseOffset
			if err := s.l.Truncate(h.BaseOffset); err != nil {
				return err
			}
			truncBatches(s.m, h.BaseOffset)
			s.cutAt = -1
			return nil
		},
		func() error { return all(2) },
	}
	for _, st := range steps {
		if err := st(); err != nil {
			if !e.fs.Down() {
				t.Fatalf("step failed without a crash: %v", err)
			}
			return
		}
	}
}

func newScenario(t testing.TB, seed int64) (*jenv, []*jslot) {
	cfg := testConfig()
	cfg.SegmentBytes = 3000
	e := newJEnv(t, seed, cfg)
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	var slots []*jslot
	for i := range 3 {
		s := &jslot{dir: filepath.Join(e.root, fmt.Sprintf("t-%d", i)), m: &model{}, cutAt: -1}
		l, err := e.open(s.dir)
		if err != nil {
			t.Fatal(err)
		}
		s.l = l
		slots = append(slots, s)
	}
	return e, slots
}

// TestJournalCrashAtEveryStep cuts the power at every file operation of
// the scenario (plain and torn): after recovery every acknowledged batch
// is there, and no byte a truncation, a reset or a re-creation removed
// comes back.
func TestJournalCrashAtEveryStep(t *testing.T) {
	e, slots := newScenario(t, 1)
	base := e.fs.Ops()
	journalScenario(t, e, slots)
	total := e.fs.Ops() - base
	st := e.j.Stats()
	if st.Journaled == 0 || st.OldPath == 0 || st.Cuts == 0 || st.Checkpoints == 0 {
		t.Fatalf("the scenario does not exercise the journal: %+v", st)
	}
	e.verifyAfterCrash(t, slots, "no crash")
	for n := int64(1); n <= total; n++ {
		for _, torn := range []bool{false, true} {
			e, slots := newScenario(t, n)
			if torn {
				e.fs.CrashTornAfter(n)
			} else {
				e.fs.CrashAfter(n)
			}
			journalScenario(t, e, slots)
			if !e.fs.Down() {
				t.Fatalf("op %d: no crash", n)
			}
			e.verifyAfterCrash(t, slots, fmt.Sprintf("crash at op %d/%d torn=%v", n, total, torn))
		}
	}
}
