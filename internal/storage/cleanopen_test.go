package storage

import (
	"bytes"
	"maps"
	"testing"

	"holdfast/internal/records"
)

// cleanLog writes a log of several segments through a first life that
// ends with a Close (what a clean stop does before it writes its marker).
func cleanLog(t *testing.T, fs *CrashFS, sy *Syncer) [][]byte {
	t.Helper()
	l := openLog(t, fs, "/d", testConfig(), sy, nil)
	var want [][]byte
	for i := range 24 { // 4 KiB segments, 256 B index interval: rolls and index entries
		b := batch(t, 2, 300, int64(1000+i))
		if _, err := l.Append(b, int32(i/8)); err != nil {
			t.Fatal(err)
		}
		want = append(want, b)
	}
	if l.Segments() < 3 {
		t.Fatalf("%d segments, want several", l.Segments())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

// contents is every file's bytes.
func contents(fs *CrashFS) map[string]string {
	m := map[string]string{}
	for name := range fs.Sizes() {
		b, _ := fs.ReadFileForTest(name)
		m[name] = string(b)
	}
	return m
}

func sameBatches(t *testing.T, what string, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d batches, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%s: batch %d differs", what, i)
		}
	}
}

// A log opened after a clean shutdown (Options.CleanShutdown), read and
// closed without a write, touches nothing durable: no fsync, and every
// file as it was (before, a restart cut and rewrote the active segment's
// index and fsynced it, and the segment, at every stop: 100,000 partitions
// took 74-99 s to stop).
func TestCleanReopenTouchesNothing(t *testing.T) {
	sy := newSyncer(t)
	fs := NewCrashFS(1)
	want := cleanLog(t, fs, sy)
	for round := range 3 {
		before := contents(fs)
		syncs := 0
		fs.OnSync(func(string) { syncs++ })
		l, err := Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet, CleanShutdown: true})
		if err != nil {
			t.Fatal(err)
		}
		sameBatches(t, "clean reopen", readAll(t, l, 0), want)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		fs.OnSync(nil)
		if syncs != 0 {
			t.Fatalf("round %d: %d fsyncs opening and closing a log untouched since a clean stop", round, syncs)
		}
		if after := contents(fs); !maps.Equal(before, after) {
			for name, b := range after {
				if before[name] != b {
					t.Errorf("round %d: %s changed (%d -> %d bytes)", round, name, len(before[name]), len(b))
				}
			}
			for name := range before {
				if _, ok := after[name]; !ok {
					t.Errorf("round %d: %s removed", round, name)
				}
			}
			t.FailNow()
		}
	}
}

// The clean-shutdown shortcut must not outlive a write: a log opened clean
// and then written (an append; a truncation and an append back to the same
// end; a reset) is fsynced by its Close as any other, so a power cut right
// after that Close loses nothing; and a power cut before it loses at most
// the unsynced tail, as after any open.
func TestCleanOpenThenWriteSurvivesPowerCut(t *testing.T) {
	sy := newSyncer(t)
	for _, c := range []struct {
		name  string
		write func(t *testing.T, l *Log, want [][]byte) [][]byte
		close bool
	}{
		{"append", func(t *testing.T, l *Log, want [][]byte) [][]byte {
			b := batch(t, 1, 100, 5000)
			if _, err := l.Append(b, 3); err != nil {
				t.Fatal(err)
			}
			return append(want, b)
		}, true},
		{"truncate and append to the same end", func(t *testing.T, l *Log, want [][]byte) [][]byte {
			last := want[len(want)-1]
			h, _ := records.ParseHeader(last)
			if err := l.Truncate(h.BaseOffset); err != nil {
				t.Fatal(err)
			}
			b := batch(t, 2, 300, 7777) // same offsets and size, other bytes
			if _, err := l.Append(b, 3); err != nil {
				t.Fatal(err)
			}
			if l.EndOffset() != h.LastOffset()+1 {
				t.Fatalf("end %d, want %d", l.EndOffset(), h.LastOffset()+1)
			}
			return append(want[:len(want)-1:len(want)-1], b)
		}, true},
		{"reset", func(t *testing.T, l *Log, want [][]byte) [][]byte {
			if err := l.TruncateFullyAndStartAt(100); err != nil {
				t.Fatal(err)
			}
			b := batch(t, 1, 100, 9000)
			if _, err := l.Append(b, 3); err != nil {
				t.Fatal(err)
			}
			return [][]byte{b}
		}, true},
		{"append, power cut before Close", func(t *testing.T, l *Log, want [][]byte) [][]byte {
			if _, err := l.Append(batch(t, 1, 100, 5000), 3); err != nil {
				t.Fatal(err)
			}
			return want // not synced: may be lost
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := NewCrashFS(2)
			want := cleanLog(t, fs, sy)
			l, err := Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet, CleanShutdown: true})
			if err != nil {
				t.Fatal(err)
			}
			want = c.write(t, l, want)
			if c.close {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
			fs.PowerCut()
			if !c.close {
				l.Close() // reaches no disk
			}
			fs.Reboot()
			l, err = Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			got := readAll(t, l, l.StartOffset())
			if !c.close && len(got) == len(want)+1 {
				got = got[:len(want)] // the unsynced append happened to survive
			}
			sameBatches(t, "after the power cut", got, want)
		})
	}
}
