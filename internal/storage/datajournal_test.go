package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	// asides: directories renamed aside so far (their names differ).
	asides int
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
	e.asides++
	aside := fmt.Sprintf("%s.%d-delete", s.dir, e.asides)
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
			return s.truncateAtBatch(len(s.m.batches) - 3)
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
			return s.truncateAtBatch(1)
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

// truncateAtBatch truncates the log before its model's batch k, as a
// follower's truncation does, and the model with it.
func (s *jslot) truncateAtBatch(k int) error {
	h, _ := records.ParseHeader(s.m.batches[k])
	s.cutAt = h.BaseOffset
	if err := s.l.Truncate(h.BaseOffset); err != nil {
		return err
	}
	truncBatches(s.m, h.BaseOffset)
	s.cutAt = -1
	return nil
}

// openSlots opens n logs t-0 ... t-(n-1) under e's root, each with an
// empty model.
func openSlots(t testing.TB, e *jenv, n int) []*jslot {
	var slots []*jslot
	for i := range n {
		s := &jslot{dir: filepath.Join(e.root, fmt.Sprintf("t-%d", i)), m: &model{}, cutAt: -1}
		l, err := e.open(s.dir)
		if err != nil {
			t.Fatal(err)
		}
		s.l = l
		slots = append(slots, s)
	}
	return slots
}

func newScenario(t testing.TB, seed int64) (*jenv, []*jslot) {
	cfg := testConfig()
	cfg.SegmentBytes = 3000
	e := newJEnv(t, seed, cfg)
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	slots := openSlots(t, e, 3)
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

// TestJournalCrashRandom: three logs, random appends, store rounds,
// truncations, retention, resets and re-created directories over a tiny
// ring whose checkpoints start by themselves (in the background), cut
// by a power cut (plain or torn) between operations or inside one.
func TestJournalCrashRandom(t *testing.T) {
	for seed := range int64(crashSeeds(40)) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { journalCrashSeed(t, seed) })
	}
}

func journalCrashSeed(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	if seed%2 == 1 {
		// Journaled bytes written behind early, between rounds.
		defer func(v int64) { journalWriteBehind = v }(journalWriteBehind)
		journalWriteBehind = 512
	}
	cfg := testConfig()
	cfg.SegmentBytes = int64(1500 + rng.Intn(5000))
	e := newJEnv(t, seed, cfg)
	e.opts.ManualCheckpoints = false
	e.opts.FileBytes = int64(8<<10 + rng.Intn(32<<10))
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	slots := openSlots(t, e, 3)
	for crash := range 4 {
		if rng.Intn(2) == 0 {
			n := 1 + rng.Int63n(200)
			if rng.Intn(2) == 0 {
				e.fs.CrashAfter(n)
			} else {
				e.fs.CrashTornAfter(n)
			}
		}
		for op := 0; op < 150 && !e.fs.Down(); op++ {
			if err := journalRandomOp(t, e, slots, rng); err != nil && !e.fs.Down() {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
		if !e.fs.Down() {
			if rng.Intn(2) == 0 {
				e.fs.Crash()
			} else {
				e.fs.CrashTorn()
			}
		}
		e.verifyAfterCrash(t, slots, fmt.Sprintf("seed %d crash %d", seed, crash))
	}
}

func journalRandomOp(t testing.TB, e *jenv, slots []*jslot, rng *rand.Rand) error {
	s := slots[rng.Intn(len(slots))]
	switch r := rng.Intn(40); {
	case r < 24:
		b := batch(t, 1+rng.Intn(3), rng.Intn(300), 1)
		if _, err := s.l.Append(b, 0); err != nil {
			return err
		}
		s.m.batches = append(s.m.batches, b)
	case r < 34:
		return e.round(jlogs(slots))
	case r < 36 && len(s.m.batches) > 1:
		h, _ := records.ParseHeader(s.m.batches[rng.Intn(len(s.m.batches))])
		if h.BaseOffset < s.l.StartOffset() {
			return nil
		}
		s.cutAt = h.BaseOffset
		if err := s.l.Truncate(h.BaseOffset); err != nil {
			return err
		}
		truncBatches(s.m, h.BaseOffset)
		s.cutAt = -1
	case r < 37 && s.l.EndOffset() > 0:
		return s.l.DeleteBefore(rng.Int63n(s.l.EndOffset()))
	case r < 38:
		s.cutAt = 0
		if err := s.l.ResetAt(s.l.EndOffset()+int64(rng.Intn(3)), s.l.EndOrdinal()); err != nil {
			return err
		}
		s.m, s.cutAt = &model{}, -1
	case r < 39:
		return e.recreate(s)
	default:
		return e.j.Checkpoint()
	}
	return nil
}

// cleanerScenario: a compacted log under the journal: keyed batches
// journaled round after round (rolling segments), a cleaning pass that
// swaps segments for others of the same names and other bytes, more
// rounds. written gets every record appended; acked the latest value of
// each key below the durable offset at each round.
func cleanerScenario(t testing.TB, e *jenv, l *Log, written map[int64]rec, acked map[string]int64) {
	round := func(from, n int) bool {
		for i := from; i < from+n; i++ {
			key, val := fmt.Sprintf("k%02d", i%7), fmt.Sprintf("v%-40d", i)
			info, err := l.Append(keyed(t, records.Batch{}, int64(i), kv{k(key), k(val)}), 0)
			if err != nil {
				return false
			}
			written[info.BaseOffset] = rec{info.BaseOffset, k(key), k(val), int64(i)}
		}
		if e.round([]*Log{l}) != nil {
			return false
		}
		for off, r := range written {
			if off < l.DurableOffset() && off > acked[string(r.key)] {
				acked[string(r.key)] = off
			}
		}
		return true
	}
	for i := range 12 {
		if !round(i*8, 8) {
			return
		}
	}
	if _, err := l.Clean(cleanOpts(l)); err != nil {
		return
	}
	for i := 12; i < 16; i++ {
		if !round(i*8, 8) {
			return
		}
	}
}

// TestJournalCleanerSwapCrashAtEveryStep: a power cut at every file
// operation around a cleaning pass: the replay never writes a journaled
// byte of a segment's old contents into the cleaned file of its name, and
// the newest acknowledged value of every key stays.
func TestJournalCleanerSwapCrashAtEveryStep(t *testing.T) {
	run := func(n int64, torn bool) (*jenv, map[int64]rec, map[string]int64) {
		cfg := compactConfig()
		cfg.SegmentBytes = 1500
		e := newJEnv(t, n, cfg)
		if err := e.start(); err != nil {
			t.Fatal(err)
		}
		l, err := e.open("/data/c-0")
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			if torn {
				e.fs.CrashTornAfter(n)
			} else {
				e.fs.CrashAfter(n)
			}
		}
		written, acked := map[int64]rec{}, map[string]int64{}
		cleanerScenario(t, e, l, written, acked)
		if n == 0 {
			if st := e.j.Stats(); st.Journaled == 0 || st.Cuts == 0 {
				t.Fatalf("no journaled round or no cut: %+v", st)
			}
			e.fs.Crash()
		}
		return e, written, acked
	}
	e, _, _ := run(0, false)
	total := e.fs.Ops()
	for n := int64(1); n <= total; n++ {
		for _, torn := range []bool{false, true} {
			e, written, acked := run(n, torn)
			if !e.fs.Down() {
				continue // the scenario ended before op n
			}
			e.fs.Reboot()
			if err := e.start(); err != nil {
				t.Fatalf("op %d: recovery: %v", n, err)
			}
			l, err := e.open("/data/c-0")
			if err != nil {
				t.Fatalf("op %d torn=%v: reopen: %v", n, torn, err)
			}
			got := logRecords(t, l)
			subsetOf(t, got, written)
			newest := map[string]int64{}
			for _, r := range got {
				newest[string(r.key)] = max(newest[string(r.key)], r.off)
			}
			for key, off := range acked {
				if newest[key] < off {
					t.Fatalf("op %d torn=%v: key %s: acknowledged value at %d lost (newest %d)", n, torn, key, off, newest[key])
				}
			}
			l.Close()
		}
	}
}

// FuzzJournalReplay feeds the recovery arbitrary journal tails: a valid
// file cut anywhere with arbitrary bytes after it, and a second file of
// arbitrary bytes. The decoder must not panic or allocate from a garbage
// length, and the replay must write only into segment files that exist;
// with the valid file whole and nothing after it, its record is applied.
func FuzzJournalReplay(f *testing.F) {
	data := []byte("0123456789abcdef")
	valid := appendJRec(nil, 1, 1, jkFile, u64b(1))
	fixed := make([]byte, 16)
	valid = appendJRec(valid, 2, 1, jkData, dirPayload("t-0"), fixed, data)
	valid = appendJRec(valid, 3, 1, jkCut, dirPayload("t-1"))
	valid = appendJRec(valid, 4, 1, jkStart, u64b(1))
	f.Add(valid, uint16(len(valid)), []byte{})
	f.Add(valid, uint16(30), valid[5:])
	f.Add(valid, uint16(len(valid)), appendJRec(nil, 5, 1, jkData, dirPayload("../x"), fixed, data))
	f.Add([]byte{}, uint16(0), valid)
	f.Fuzz(func(t *testing.T, file []byte, cut uint16, tail []byte) {
		fs := NewCrashFS(1)
		for _, d := range []string{"/data/.journal", "/data/t-0"} {
			if err := fs.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		write := func(name string, b []byte) {
			fl, err := fs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fl.Write(b); err != nil {
				t.Fatal(err)
			}
			fl.Close()
		}
		seg := "/data/t-0/" + segmentName(0, logSuffix)
		write(seg, nil)
		c := min(int(cut), len(file))
		write("/data/.journal/000000", append(append([]byte(nil), file[:c]...), tail...))
		write("/data/.journal/000001", tail)
		live, _, _, err := readJournal(fs, "/data/.journal")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := replayJournal(fs, "/data", live, quiet); err != nil && !strings.Contains(err.Error(), "data journal replay") {
			t.Fatal(err)
		}
		names, _ := fs.ReadDir("/data/t-0")
		if len(names) != 1 {
			t.Fatalf("the replay made files: %v", names)
		}
		if bytes.Equal(file, valid) && c == len(file) && len(tail) == 0 {
			b, _ := fs.ReadFileForTest(seg)
			if !bytes.Equal(b, data) {
				t.Fatalf("the valid record was not applied: %q", b)
			}
		}
	})
}

// TestJournalDisabledStillReplays: a node that ran with the journal and
// lost power starts with it off: the journal is replayed before the logs
// open (nothing acknowledged is lost), then removed.
func TestJournalDisabledStillReplays(t *testing.T) {
	e, slots := newScenario(t, 3)
	for range 3 {
		for _, s := range slots {
			b := batch(t, 2, 100, 1)
			if _, err := s.l.Append(b, 0); err != nil {
				t.Fatal(err)
			}
			s.m.batches = append(s.m.batches, b)
		}
		if err := e.round(jlogs(slots)); err != nil {
			t.Fatal(err)
		}
	}
	if st := e.j.Stats(); st.Journaled == 0 {
		t.Fatalf("nothing journaled: %+v", st)
	}
	e.fs.Crash()
	e.opts.Disabled = true
	e.verifyAfterCrash(t, slots, "journal off at the restart")
	if e.j != nil {
		t.Fatal("a disabled journal was opened")
	}
	if names, _ := e.fs.ReadDir("/data"); slices.Contains(names, journalDirName) {
		t.Fatalf("the journal was not removed: %v", names)
	}
}
