package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func cacheHeld(t *testing.T, fsys FS) int {
	t.Helper()
	held, _, _, _, ok := FDCacheStats(fsys)
	if !ok {
		t.Fatal("not a cached filesystem")
	}
	return held
}

// osDescriptors counts this process's open descriptors.
func osDescriptors(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestCachedFSBound: 40 files written and read in random order through a
// cache of 4 descriptors: never more than 4 held (the cache's count and the
// process's own descriptors), every byte reads back, and idle files were
// closed and reopened on use (appending where they left off: the reopen
// neither truncates nor creates).
func TestCachedFSBound(t *testing.T) {
	const max, n = 4, 40
	dir := t.TempDir()
	fsys := CachedFS(OSFS(), max)
	base := osDescriptors(t)
	files := make([]File, n)
	want := make([][]byte, n)
	for i := range files {
		f, err := fsys.OpenFile(filepath.Join(dir, fmt.Sprint(i)), os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		files[i] = f
	}
	rng := rand.New(rand.NewSource(1))
	check := func(step int) {
		if h := cacheHeld(t, fsys); h > max {
			t.Fatalf("step %d: %d descriptors held, bound %d", step, h, max)
		}
		if d := osDescriptors(t) - base; d > max {
			t.Fatalf("step %d: the process holds %d more descriptors, bound %d", step, d, max)
		}
	}
	for step := range 2000 {
		i := rng.Intn(n)
		f := files[i]
		switch rng.Intn(4) {
		case 0, 1:
			b := []byte(fmt.Sprintf("%d:%d;", i, step))
			if _, err := f.Write(b); err != nil {
				t.Fatal(err)
			}
			want[i] = append(want[i], b...)
		case 2:
			got := make([]byte, len(want[i]))
			if k, err := f.ReadAt(got, 0); k != len(got) || (err != nil && len(got) > 0 && k < len(got)) {
				t.Fatalf("read %d: %d bytes, %v", i, k, err)
			}
			if !bytes.Equal(got, want[i]) {
				t.Fatalf("file %d reads %q, want %q", i, got, want[i])
			}
		case 3:
			if sz, err := f.Size(); err != nil || sz != int64(len(want[i])) {
				t.Fatalf("size of %d: %d, %v; want %d", i, sz, err, len(want[i]))
			}
		}
		check(step)
	}
	for i, f := range files {
		f.Close()
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprint(i)))
		if err != nil || !bytes.Equal(b, want[i]) {
			t.Fatalf("file %d on disk: %q, %v; want %q", i, b, err, want[i])
		}
	}
	held, _, ev, re, _ := FDCacheStats(fsys)
	if held != 0 || ev == 0 || re == 0 {
		t.Fatalf("after closing all: held %d, evictions %d, reopens %d; want 0, >0, >0", held, ev, re)
	}
}

// TestCachedFSRefcount: a file in use - a descriptor pinned for sendfile -
// is never closed, however many other files come and go: the cache closes
// idle ones instead, and goes past its bound only while every descriptor
// is in use (a use never fails), coming back to it when they are let go.
// Pins for sendfile (tryPinFd) hold at most half the descriptors; past
// that they decline (the caller copies).
func TestCachedFSRefcount(t *testing.T) {
	dir := t.TempDir()
	fsys := CachedFS(OSFS(), 4)
	open := func(name string) File {
		f, err := fsys.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		if _, err := f.Write([]byte(name)); err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b, c := open("a"), open("b"), open("c")
	if a.Fd() != 0 {
		t.Fatal("a cached file's Fd is not 0: a caller could keep a descriptor the cache closes")
	}
	fda, unpinA, err := tryPinFd(a)
	if err != nil || fda == 0 {
		t.Fatalf("tryPinFd(a): %d, %v", fda, err)
	}
	fdb, unpinB, err := tryPinFd(b)
	if err != nil || fdb == 0 {
		t.Fatalf("tryPinFd(b): %d, %v", fdb, err)
	}
	if fd, unpin, err := tryPinFd(c); fd != 0 || err != nil {
		t.Fatalf("a third sendfile pin of a cache of 4: %d, %v; want declined", fd, err)
	} else {
		unpin()
	}
	var others []File
	for i := range 10 {
		others = append(others, open(fmt.Sprint("o", i)))
		if h := cacheHeld(t, fsys); h > 4 {
			t.Fatalf("%d held with two pinned and the rest idle, bound 4", h)
		}
	}
	for fd, name := range map[uintptr]string{fda: "a", fdb: "b"} {
		var st, want syscall.Stat_t
		if err := syscall.Fstat(int(fd), &st); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Stat(filepath.Join(dir, name), &want); err != nil {
			t.Fatal(err)
		}
		if st.Ino != want.Ino {
			t.Fatalf("the descriptor pinned for %s is now another file (inode %d, want %d)", name, st.Ino, want.Ino)
		}
	}
	// Every descriptor in use: two pinned, two more held (PinFd, which
	// must not fail: syncfs); a fifth use goes past the bound, and back.
	fdc, unpinC, _ := PinFd(c)
	fdo, unpinO, _ := PinFd(others[0])
	if fdc == 0 || fdo == 0 {
		t.Fatal("PinFd failed")
	}
	if _, err := others[1].Write([]byte("x")); err != nil {
		t.Fatalf("a write with every descriptor in use: %v", err)
	}
	if h := cacheHeld(t, fsys); h != 5 {
		t.Fatalf("%d held, want 5 (one past the bound, with every other in use)", h)
	}
	unpinA()
	unpinB()
	unpinC()
	unpinO()
	if _, err := others[2].Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if h := cacheHeld(t, fsys); h > 5 {
		t.Fatalf("%d held, want at most 5", h)
	}
	for _, f := range append([]File{a, b, c}, others...) {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		f.Close() // idempotent
	}
	if h := cacheHeld(t, fsys); h != 0 {
		t.Fatalf("%d held after closing all, want 0", h)
	}
	if _, err := a.ReadAt(make([]byte, 1), 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("read after Close: %v, want os.ErrClosed", err)
	}
}

// TestCachedFSEvictionSyncs: a file written since its last Sync is
// fdatasynced before its descriptor is closed (a crash then keeps what
// was written); when that fdatasync fails the descriptor stays open and
// the error comes back from the file's next Write and Sync. A clean file
// is closed without one.
func TestCachedFSEvictionSyncs(t *testing.T) {
	cfs := NewCrashFS(1)
	if err := cfs.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	cfs.SyncDir("/")
	syncs := map[string]int{}
	cfs.OnSync(func(p string) { syncs[p]++ })
	fsys := CachedFS(cfs, 1)
	a, err := fsys.OpenFile("/d/a", os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cfs.SyncDir("/d")
	a.Write([]byte("written, not synced"))
	b, err := fsys.OpenFile("/d/b", os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644) // closes a
	if err != nil {
		t.Fatal(err)
	}
	if syncs["/d/a"] != 1 {
		t.Fatalf("a's eviction fdatasynced it %d times, want 1", syncs["/d/a"])
	}
	buf := make([]byte, 7)
	if _, err := a.ReadAt(buf, 0); err != nil { // reopens a, closes b (clean: no sync)
		t.Fatal(err)
	}
	if syncs["/d/b"] != 0 {
		t.Fatalf("b, never written, was fdatasynced %d times at its eviction", syncs["/d/b"])
	}
	b.Write([]byte("b")) // closes a again: clean since, no second sync
	if syncs["/d/a"] != 1 {
		t.Fatalf("a was fdatasynced %d times, want 1 (nothing written since)", syncs["/d/a"])
	}
	cfs.Crash()
	cfs.Reboot()
	got, err := ReadFile(cfs, "/d/a", 100)
	if err != nil || string(got) != "written, not synced" {
		t.Fatalf("after a crash a holds %q, %v: the eviction's fdatasync did not make it durable", got, err)
	}

	// A failing fdatasync at eviction.
	cfs2 := NewCrashFS(2)
	cfs2.MkdirAll("/d", 0o755)
	fsys = CachedFS(cfs2, 1)
	x, _ := fsys.OpenFile("/d/x", os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	x.Write([]byte("x"))
	boom := errors.New("EIO")
	cfs2.InjectError(OpSync, "/d/x", boom)
	if _, err := fsys.OpenFile("/d/y", os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
		t.Fatalf("open while the only other file cannot be synced: %v", err)
	}
	if h := cacheHeld(t, fsys); h != 2 {
		t.Fatalf("%d held, want 2: x kept open (its fdatasync failed), y past the bound", h)
	}
	cfs2.ClearErrors()
	if _, err := x.Write([]byte("more")); !errors.Is(err, boom) {
		t.Fatalf("write after a failed eviction fdatasync: %v, want it", err)
	}
	if err := x.Sync(); !errors.Is(err, boom) {
		t.Fatalf("sync after a failed eviction fdatasync: %v, want it", err)
	}
}

// TestCachedFSNames: an idle file whose name a Rename moved (the file, or
// its directory) reopens under the new name; one removed, or renamed
// over, while still held is opened again first and kept open, so its
// holder reads what it held.
func TestCachedFSNames(t *testing.T) {
	dir := t.TempDir()
	fsys := CachedFS(OSFS(), 3) // two pinned at the end, one to go round
	mk := func(name, content string) File {
		f, err := fsys.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil { // clean: closed first (dirty ones cost an fdatasync)
			t.Fatal(err)
		}
		return f
	}
	read := func(f File, want string) {
		t.Helper()
		b := make([]byte, len(want))
		if n, err := f.ReadAt(b, 0); n != len(b) {
			t.Fatalf("read %s: %q, %v; want %q", f.Name(), b[:n], err, want)
		}
		if string(b) != want {
			t.Fatalf("read %s: %q, want %q", f.Name(), b, want)
		}
	}
	fillers := []File{mk("f1", "1"), mk("f2", "2"), mk("f3", "3")}
	churn := func() { // every unpinned descriptor goes to the fillers
		t.Helper()
		for range 3 {
			for _, f := range fillers {
				read(f, f.Name()[len(f.Name())-1:])
			}
		}
	}
	reopens := func() int64 { _, _, _, r, _ := FDCacheStats(fsys); return r }
	os.Mkdir(filepath.Join(dir, "p"), 0o755)
	a := mk("p/a", "AAA")
	b := mk("b", "BBB")
	churn()
	if err := fsys.Rename(filepath.Join(dir, "p"), filepath.Join(dir, "q")); err != nil {
		t.Fatal(err)
	}
	r := reopens()
	read(a, "AAA") // reopened as q/a
	if a.Name() != filepath.Join(dir, "q", "a") || reopens() != r+1 {
		t.Fatalf("after the directory's rename: %s, %d reopens; want q/a reopened", a.Name(), reopens()-r)
	}
	churn()
	if err := fsys.Rename(filepath.Join(dir, "b"), filepath.Join(dir, "b2")); err != nil {
		t.Fatal(err)
	}
	read(b, "BBB") // reopened as b2
	churn()
	if err := fsys.Remove(filepath.Join(dir, "q", "a")); err != nil {
		t.Fatal(err)
	}
	churn()
	read(a, "AAA") // kept open through the removal
	c := mk("c", "CCC")
	read(b, "BBB")
	if err := fsys.Rename(filepath.Join(dir, "c"), filepath.Join(dir, "b2")); err != nil {
		t.Fatal(err)
	}
	churn()
	read(b, "BBB") // the old b2, replaced: kept open
	read(c, "CCC") // now b2
	read(a, "AAA")
	for _, f := range append([]File{a, b, c}, fillers...) {
		f.Close()
	}
	if h := cacheHeld(t, fsys); h != 0 {
		t.Fatalf("%d held after closing all, want 0", h)
	}
}

// TestCachedFSConcurrent: goroutines writing, reading and pinning their
// own files through a cache much smaller than the files they hold: every
// read sees exactly what its writer wrote, whatever was closed and
// reopened meanwhile, and the bound is passed by at most the uses in
// flight (one per goroutine; run with -race).
func TestCachedFSConcurrent(t *testing.T) {
	const max, workers, each, steps = 4, 6, 5, 300
	dir := t.TempDir()
	fsys := CachedFS(OSFS(), max)
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			errs <- func() error {
				rng := rand.New(rand.NewSource(int64(w)))
				files := make([]File, each)
				want := make([][]byte, each)
				for i := range files {
					var err error
					for { // a reopen or open may find every descriptor in use for a moment
						files[i], err = fsys.OpenFile(filepath.Join(dir, fmt.Sprintf("%d-%d", w, i)), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
						if !errors.Is(err, ErrOpenFileBudget) {
							break
						}
					}
					if err != nil {
						return err
					}
					defer files[i].Close()
				}
				for step := range steps {
					i := rng.Intn(each)
					f := files[i]
					if h := cacheHeld(t, fsys); h > max+workers {
						return fmt.Errorf("%d held, bound %d and %d goroutines", h, max, workers)
					}
					switch rng.Intn(3) {
					case 0:
						b := []byte(fmt.Sprintf("%d.", step))
						if _, err := f.Write(b); errors.Is(err, ErrOpenFileBudget) {
							continue
						} else if err != nil {
							return err
						}
						want[i] = append(want[i], b...)
					case 1:
						got := make([]byte, len(want[i]))
						n, err := f.ReadAt(got, 0)
						if errors.Is(err, ErrOpenFileBudget) {
							continue
						}
						if n != len(got) || !bytes.Equal(got, want[i]) {
							return fmt.Errorf("%s reads %q (%v), want %q", f.Name(), got[:n], err, want[i])
						}
					case 2:
						fd, unpin, err := tryPinFd(f)
						if err != nil {
							return err
						}
						if fd == 0 {
							unpin()
							continue // declined: pins hold half the cache
						}
						var st syscall.Stat_t
						err = syscall.Fstat(int(fd), &st)
						unpin()
						if err != nil || st.Size != int64(len(want[i])) {
							return fmt.Errorf("the pinned descriptor of %s: size %d, %v; want %d", f.Name(), st.Size, err, len(want[i]))
						}
					}
				}
				return nil
			}()
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestCachedFSPrefersClean: closing a dirty file costs an fdatasync, so
// the cache closes a clean idle one when there is one; a file the syncer's
// syncfs covered (syncMarker) counts as clean.
func TestCachedFSPrefersClean(t *testing.T) {
	cfs := NewCrashFS(1)
	cfs.MkdirAll("/d", 0o755)
	syncs := 0
	cfs.OnSync(func(string) { syncs++ })
	fsys := CachedFS(cfs, 3)
	var files []File
	for i := range 3 {
		f, err := fsys.OpenFile(fmt.Sprint("/d/", i), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte("x"))
		files = append(files, f)
	}
	mark := syncMarker(files[0]) // as the syncer before a syncfs
	files[0].Write([]byte("after the mark"))
	mark()                 // the syncfs succeeded: it covers the first write only
	syncMarker(files[1])() // covered: clean
	files[2].Sync()        // clean
	syncs = 0
	// Two more files, written: the clean ones (1, 2) go first; a third
	// finds only dirty ones (0, 3, 4) and fdatasyncs one.
	for i := 3; i < 6; i++ {
		f, err := fsys.OpenFile(fmt.Sprint("/d/", i), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		f.Write([]byte("y"))
		if i < 5 && syncs != 0 {
			t.Fatalf("opening file %d fdatasynced %d files, with a clean one to close", i, syncs)
		}
	}
	if syncs != 1 {
		t.Fatalf("%d fdatasyncs for the sixth file, want 1 (no clean file left)", syncs)
	}
	for _, f := range files {
		f.Close()
	}
}
