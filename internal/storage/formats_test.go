package storage

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"holdfast/internal/records"
)

// A checkpoint whose version line is newer than this binary's is refused
// with an error naming the file, the version and the versions known; it is
// not taken for damage (before, the log was discarded as corrupt, or the
// file rebuilt or ignored and rewritten in the old format), and no file of
// the log changes. The same log opens once the file is back in a known
// version, including the cleaner checkpoint's older version 0.
func TestCheckpointOfNewerFormatRefused(t *testing.T) {
	for _, tc := range []struct {
		file, newer, known, old string
	}{
		{startCheckpoint, "1\n0\n", "version 0", ""},
		{ordinalCheckpoint, "1\n0\n", "version 0", ""},
		{epochCheckpoint, "1\n1\n1 0\n", "version 0", ""},
		{cleanerCheckpoint, "2\n0\n0\n-1\n", "versions [0 1]", "0\n0\n"}, // version 0: the offset only
		{cleanerCheckpoint, "10\n0\n", "versions [0 1]", "1\n0\n0\n-1\n"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			fs := NewCrashFS(1)
			sy := newSyncer(t)
			l := openLog(t, fs, "/d", testConfig(), sy, nil)
			for range 40 {
				if _, err := l.Append(batch(t, 2, 100, 1), 1); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.DeleteBefore(4); err != nil { // writes the start checkpoint
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("/d", tc.file)
			good, ok := fs.ReadFileForTest(path)
			if tc.old != "" {
				good, ok = []byte(tc.old), true
			}
			if !ok {
				t.Fatalf("no %s after close", tc.file)
			}
			fs.WriteFileForTest(path, []byte(tc.newer))
			before := dirContents(t, fs, "/d")

			_, err := Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet})
			if err == nil {
				t.Fatalf("opened a log with a %s of a newer format", tc.file)
			}
			if !errors.Is(err, ErrUnknownFormat) || errors.Is(err, ErrCorrupt) {
				t.Fatalf("open: %v: want ErrUnknownFormat, not ErrCorrupt", err)
			}
			version, _, _ := strings.Cut(tc.newer, "\n")
			for _, want := range []string{path, "format version " + version + ",", "reads " + tc.known} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("open: %q does not say %q", err, want)
				}
			}
			if after := dirContents(t, fs, "/d"); !maps.EqualFunc(before, after, bytes.Equal) {
				t.Fatalf("the refused open changed the log's files:\nbefore %q\nafter  %q", names(before), names(after))
			}

			fs.WriteFileForTest(path, good)
			l = openLog(t, fs, "/d", testConfig(), sy, nil)
			defer l.Close()
			if l.StartOffset() != 4 || l.EndOffset() != 80 {
				t.Fatalf("reopened: [%d, %d), want [4, 80)", l.StartOffset(), l.EndOffset())
			}
		})
	}
}

func dirContents(t *testing.T, fs *CrashFS, dir string) map[string][]byte {
	t.Helper()
	ns, err := fs.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, n := range ns {
		b, _ := fs.ReadFileForTest(filepath.Join(dir, n))
		out[n] = b
	}
	return out
}

func names(m map[string][]byte) []string {
	var out []string
	for n, b := range m {
		out = append(out, fmt.Sprintf("%s:%d", n, len(b)))
	}
	return out
}

// TestBatchOfNewerMagicRefused: a whole batch with a valid checksum but a
// magic newer than 2 was written by a newer Holdfast. As the active
// segment's last batch, recovery took it for a torn tail and cut it; as a
// sealed segment's first batch, for damage (ErrCorrupt: the replica is
// discarded). Now the open fails with ErrUnknownFormat and the segment is
// unchanged. A newer magic whose checksum does not hold is still a torn
// tail, cut as before.
func TestBatchOfNewerMagicRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		segment func(l *Log) *segment
		last    bool // the segment's last batch, else its first
		damage  bool // also break the checksum
	}{
		{"active segment, last batch", (*Log).active, true, false},
		{"sealed segment, first batch", func(l *Log) *segment { return l.segs[1] }, false, false},
		{"active segment, last batch, bad checksum", (*Log).active, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := NewCrashFS(1)
			sy := newSyncer(t)
			l := openLog(t, fs, "/d", testConfig(), sy, nil)
			for range 40 {
				if _, err := l.Append(batch(t, 2, 100, 1), 1); err != nil {
					t.Fatal(err)
				}
			}
			if l.Segments() < 3 {
				t.Fatalf("%d segments", l.Segments())
			}
			path := tc.segment(l).f.Name()
			end := l.EndOffset()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			b, _ := fs.ReadFileForTest(path)
			at, lastSize := 0, 0
			for pos := 0; pos < len(b); {
				h, err := records.ParseHeader(b[pos:])
				if err != nil {
					t.Fatal(err)
				}
				at, lastSize = pos, h.Size()
				if !tc.last {
					break
				}
				pos += h.Size()
			}
			b[at+16] = 3 // the magic (outside the checksum)
			if tc.damage {
				b[at+lastSize-1] ^= 0xff
			}
			fs.WriteFileForTest(path, b)
			before := dirContents(t, fs, "/d")

			l, err := Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet})
			if tc.damage {
				if err != nil {
					t.Fatalf("a torn last batch: %v", err)
				}
				defer l.Close()
				if l.EndOffset() != end-2 {
					t.Fatalf("end %d after cutting the torn batch, want %d", l.EndOffset(), end-2)
				}
				return
			}
			if err == nil {
				l.Close()
				t.Fatal("opened a log with a batch of magic 3")
			}
			if !errors.Is(err, ErrUnknownFormat) || errors.Is(err, ErrCorrupt) {
				t.Fatalf("open: %v: want ErrUnknownFormat, not ErrCorrupt", err)
			}
			for _, w := range []string{path, "record batch magic 3, this binary reads record batch magic 2"} {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("open: %q does not say %q", err, w)
				}
			}
			if after := dirContents(t, fs, "/d"); !bytes.Equal(before[filepath.Base(path)], after[filepath.Base(path)]) {
				t.Fatalf("the refused open changed %s", path)
			}
		})
	}
}
