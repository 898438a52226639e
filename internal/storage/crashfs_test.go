package storage

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
)

func cfsWriteSynced(t *testing.T, fs *CrashFS, name, data string) {
	t.Helper()
	f, err := fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func mustSyncDir(t *testing.T, fs *CrashFS, dir string) {
	t.Helper()
	if err := fs.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
}

func dirNames(t *testing.T, fs *CrashFS, dir string) []string {
	t.Helper()
	names, err := fs.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// A new directory, and all in it, is lost unless its parent is synced
// after it was made; ReadDir lists directories as the OS does.
func TestCrashFSNewDirectoryNeedsParentSync(t *testing.T) {
	fs := NewCrashFS(1)
	fs.MkdirAllForTest("/data")
	if err := fs.MkdirAll("/data/p/q", 0o755); err != nil {
		t.Fatal(err)
	}
	cfsWriteSynced(t, fs, "/data/p/q/f", "x")
	mustSyncDir(t, fs, "/data/p/q")
	mustSyncDir(t, fs, "/data/p")
	if got := dirNames(t, fs, "/data"); !slices.Equal(got, []string{"p"}) {
		t.Fatalf("ReadDir /data = %v", got)
	}
	fs.Crash()
	if got := dirNames(t, fs, "/data"); len(got) != 0 {
		t.Fatalf("after the crash /data holds %v; the new directory's name was never synced", got)
	}
	if _, err := fs.OpenFile("/data/p/q/f", os.O_RDONLY, 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file under a lost directory: %v", err)
	}

	if err := fs.MkdirAll("/data/p/q", 0o755); err != nil {
		t.Fatal(err)
	}
	cfsWriteSynced(t, fs, "/data/p/q/f", "x")
	mustSyncDir(t, fs, "/data/p/q")
	mustSyncDir(t, fs, "/data/p")
	mustSyncDir(t, fs, "/data")
	fs.CrashTorn()
	if b, ok := fs.ReadFileForTest("/data/p/q/f"); !ok || string(b) != "x" {
		t.Fatalf("durable file: %q %v", b, ok)
	}
}

// A renamed directory is back at its old name until the parent's sync,
// with what was made durable in it meanwhile (it is the same directory).
func TestCrashFSDirectoryRename(t *testing.T) {
	fs := NewCrashFS(1)
	fs.MkdirAllForTest("/d/x")
	cfsWriteSynced(t, fs, "/d/x/f", "1")
	mustSyncDir(t, fs, "/d/x")
	if err := fs.Rename("/d/x", "/d/y"); err != nil {
		t.Fatal(err)
	}
	cfsWriteSynced(t, fs, "/d/y/g", "2")
	mustSyncDir(t, fs, "/d/y")
	if got := dirNames(t, fs, "/d"); !slices.Equal(got, []string{"y"}) {
		t.Fatalf("ReadDir /d = %v", got)
	}
	dc := fs.DurableCopy()
	fs.Crash()
	for _, f := range []*CrashFS{fs, dc} {
		if got := dirNames(t, f, "/d"); !slices.Equal(got, []string{"x"}) {
			t.Fatalf("after the crash /d = %v, want the old name", got)
		}
		if got := dirNames(t, f, "/d/x"); !slices.Equal(got, []string{"f", "g"}) {
			t.Fatalf("after the crash /d/x = %v", got)
		}
	}
	if err := fs.Rename("/d/x", "/d/y"); err != nil {
		t.Fatal(err)
	}
	mustSyncDir(t, fs, "/d")
	fs.Crash()
	if got := dirNames(t, fs, "/d"); !slices.Equal(got, []string{"y"}) {
		t.Fatalf("after a synced rename /d = %v", got)
	}
}

// A directory RemoveAll removed comes back until the parent's sync: whole
// after Crash, with part of its entries after CrashTorn.
func TestCrashFSRemoveAll(t *testing.T) {
	partial := false
	for seed := int64(1); seed <= 20; seed++ {
		fs := NewCrashFS(seed)
		fs.MkdirAllForTest("/d/x/sub")
		for _, n := range []string{"/d/x/a", "/d/x/b", "/d/x/c", "/d/x/sub/s"} {
			cfsWriteSynced(t, fs, n, "v")
		}
		mustSyncDir(t, fs, "/d/x")
		mustSyncDir(t, fs, "/d/x/sub")
		if err := fs.RemoveAll("/d/x"); err != nil {
			t.Fatal(err)
		}
		if got := dirNames(t, fs, "/d"); len(got) != 0 {
			t.Fatalf("after RemoveAll /d = %v", got)
		}
		c := fs.DurableCopy()
		c.Crash()
		if got := dirNames(t, c, "/d/x"); !slices.Equal(got, []string{"a", "b", "c", "sub"}) {
			t.Fatalf("after the crash /d/x = %v, want all back", got)
		}
		fs.CrashTorn()
		if got := dirNames(t, fs, "/d"); !slices.Equal(got, []string{"x"}) {
			t.Fatalf("after the torn crash /d = %v", got)
		}
		if got := dirNames(t, fs, "/d/x"); len(got) < 4 {
			partial = true
		}
		if err := fs.RemoveAll("/d/x"); err != nil {
			t.Fatal(err)
		}
		mustSyncDir(t, fs, "/d")
		fs.CrashTorn()
		if got := dirNames(t, fs, "/d"); len(got) != 0 {
			t.Fatalf("after a synced RemoveAll /d = %v", got)
		}
	}
	if !partial {
		t.Fatal("CrashTorn never brought a removed directory back in part")
	}
}

// MkdirAllDurable makes every directory it creates survive a crash; a
// power cut chosen by CrashAfter can fall on a directory's creation.
func TestMkdirAllDurable(t *testing.T) {
	fs := NewCrashFS(1)
	if err := MkdirAllDurable(fs, "/a/b/c"); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	if _, err := fs.ReadDir("/a/b/c"); err != nil {
		t.Fatal(err)
	}
	fs.CrashAfter(1)
	if err := fs.MkdirAll("/a/b/c/d", 0o755); err == nil || !fs.Down() {
		t.Fatalf("MkdirAll at the chosen power cut: %v, down %v", err, fs.Down())
	}
	fs.Reboot()
	if _, err := fs.ReadDir("/a/b/c/d"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory made at the power cut: %v", err)
	}
}

func TestMkdirAllDurableOS(t *testing.T) {
	dir := t.TempDir() + "/a/b"
	if err := MkdirAllDurable(OSFS(), dir); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAllDurable(OSFS(), dir); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("%v %v", st, err)
	}
	if err := os.WriteFile(dir+"/f", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAllDurable(OSFS(), dir+"/f/g"); err == nil {
		t.Fatal("a directory under a file")
	}
}

// Errors can be injected into the directory operations too: mkdir (only
// where a directory is made), RemoveAll, ReadDir, and with an exact path
// a directory's own SyncDir without those below it.
func TestCrashFSDirectoryErrorInjection(t *testing.T) {
	fs := NewCrashFS(1)
	fs.MkdirAllForTest("/data/old")
	fs.InjectError(OpMkdir, "/data/new", syscall.EMFILE)
	if err := fs.MkdirAll("/data/old", 0o755); err != nil {
		t.Fatalf("mkdir of an existing directory: %v", err)
	}
	if err := fs.MkdirAll("/data/new/q", 0o755); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("injected mkdir error: %v", err)
	}
	if got := dirNames(t, fs, "/data"); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("a failed mkdir made %v", got)
	}
	fs.InjectError(OpRemoveAll, "old", syscall.EIO)
	if err := fs.RemoveAll("/data/old"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("injected removeall error: %v", err)
	}
	fs.InjectError(OpReadDir, "old", syscall.EIO)
	if _, err := fs.ReadDir("/data/old"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("injected readdir error: %v", err)
	}
	fs.InjectErrorPath(OpSyncDir, "/data", syscall.EIO)
	if err := fs.SyncDir("/data"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("injected syncdir error: %v", err)
	}
	mustSyncDir(t, fs, "/data/old")
	fs.ClearErrors()
	if err := fs.MkdirAll("/data/new/q", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fs.RemoveAll("/data/old"); err != nil {
		t.Fatal(err)
	}
}

// With SetDirPrefix, a torn crash keeps a prefix, in order, of the
// directory changes no SyncDir made durable, and a rename's two entries
// persist together; every prefix length comes up over the seeds.
func TestCrashFSDirPrefix(t *testing.T) {
	kept := map[string]bool{}
	for seed := int64(1); seed <= 60; seed++ {
		fs := NewCrashFS(seed)
		fs.SetDirPrefix(true)
		fs.MkdirAllForTest("/d/e")
		cfsWriteSynced(t, fs, "/d/a", "a")
		cfsWriteSynced(t, fs, "/d/b", "b")
		if err := fs.Rename("/d/b", "/d/e/b"); err != nil {
			t.Fatal(err)
		}
		if err := fs.Remove("/d/a"); err != nil {
			t.Fatal(err)
		}
		fs.CrashTorn()
		got := fmt.Sprint(dirNames(t, fs, "/d"), dirNames(t, fs, "/d/e"))
		switch got {
		case "[e] []", "[a e] []", "[a b e] []", "[a e] [b]", "[e] [b]":
		default:
			t.Fatalf("seed %d: after the torn crash %s: not a prefix of create a, create b, rename b, remove a", seed, got)
		}
		kept[got] = true
	}
	if len(kept) != 5 {
		t.Fatalf("prefixes seen: %v, want all 5", kept)
	}
}

// TestMkdirAllDurableSyncFailureRetried: when the parent's fsync fails,
// MkdirAllDurable fails and takes back the directories it made, so that
// its retry makes them again and fsyncs their parents; left in place, the
// retry found them and did nothing, and a power cut dropped them with all
// that was written in them since.
func TestMkdirAllDurableSyncFailureRetried(t *testing.T) {
	fs := NewCrashFS(1)
	fs.MkdirAllForTest("/data")
	fs.InjectErrorPath(OpSyncDir, "/data", syscall.EIO)
	if err := MkdirAllDurable(fs, "/data/p/q"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("MkdirAllDurable with a failing fsync of the parent: %v", err)
	}
	fs.ClearErrors()
	if err := MkdirAllDurable(fs, "/data/p/q"); err != nil {
		t.Fatal(err)
	}
	cfsWriteSynced(t, fs, "/data/p/q/f", "x")
	mustSyncDir(t, fs, "/data/p/q")
	fs.Crash()
	if b, ok := fs.ReadFileForTest("/data/p/q/f"); !ok || string(b) != "x" {
		t.Fatalf("file in a directory made by a retried MkdirAllDurable: %q %v after a power cut", b, ok)
	}
}
