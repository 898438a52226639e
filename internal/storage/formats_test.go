package storage

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
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
