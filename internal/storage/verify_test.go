package storage

import (
	"errors"
	"sync/atomic"
	"testing"

	"holdfast/internal/records"
)

// flipAt flips the bytes [pos, pos+n) of a file on fs, durably.
func flipAt(t *testing.T, fs *CrashFS, name string, pos, n int) {
	t.Helper()
	b, ok := fs.ReadFileForTest(name)
	if !ok {
		t.Fatalf("no %s", name)
	}
	for i := pos; i < pos+n; i++ {
		b[i] ^= 0xff
	}
	fs.WriteFileForTest(name, b)
}

// batchPositions returns the byte position of every batch of a segment file.
func batchPositions(t *testing.T, fs *CrashFS, name string) []int {
	t.Helper()
	b, ok := fs.ReadFileForTest(name)
	if !ok {
		t.Fatalf("no %s", name)
	}
	var out []int
	for pos := 0; pos < len(b); {
		out = append(out, pos)
		_, rest, err := records.Next(b[pos:])
		if err != nil {
			t.Fatal(err)
		}
		pos = len(b) - len(rest)
	}
	return out
}

// An active segment's tail past its last index entry is what recovery
// scans. A bad batch there with good ones after it is corruption: the open
// fails with ErrCorrupt and nothing is cut (the old recovery cut the log at
// the bad batch, dropping the good, possibly acknowledged, ones after it).
// A bad last batch is a torn tail: cut, and the log opens.
func TestRecoveryCorruptionIsNotATornTail(t *testing.T) {
	cfg := DefaultConfig() // no index entry before 4 KiB: the whole segment is scanned
	for _, tc := range []struct {
		name    string
		which   func(n int) int // the batch to damage, of n
		corrupt bool
	}{
		{"middle", func(n int) int { return n / 2 }, true},
		{"first", func(int) int { return 0 }, true},
		{"last", func(n int) int { return n - 1 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := NewCrashFS(1)
			sy := newSyncer(t)
			l := openLog(t, fs, "/d", cfg, sy, nil)
			for i := 0; i < 10; i++ {
				if _, err := l.Append(batch(t, 1, 100, 1), 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			name := "/d/" + segmentName(0, logSuffix)
			pos := batchPositions(t, fs, name)
			var corrupt atomic.Int64
			count := func() { corrupt.Add(1) }
			before := corrupt.Load()
			flipAt(t, fs, name, pos[tc.which(len(pos))]+70, 8) // inside the CRC'd part
			l2, err := Open("/d", cfg, Options{FS: fs, Syncer: sy, Logger: quiet, OnCorrupt: count})
			if !tc.corrupt {
				if err != nil {
					t.Fatalf("torn tail: %v", err)
				}
				defer l2.Close()
				if l2.EndOffset() != 9 {
					t.Fatalf("end %d after cutting a torn last batch, want 9", l2.EndOffset())
				}
				return
			}
			if err == nil {
				l2.Close()
				t.Fatalf("a damaged batch followed by good ones opened (end %d): cut as a torn tail", l2.EndOffset())
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open: %v, want ErrCorrupt", err)
			}
			if corrupt.Load() != before+1 {
				t.Fatalf("corruptions %d, want %d", corrupt.Load(), before+1)
			}
			b, _ := fs.ReadFileForTest(name)
			if len(b) != pos[len(pos)-1]+len(batch(t, 1, 100, 1)) {
				t.Fatalf("the corrupt segment was cut to %d bytes", len(b))
			}
		})
	}
}

// A flip in a sealed segment (not read at open) is found by the first
// read that hands the bytes out, by Verify (the sendfile path) and by the
// scrubber; the log fails with ErrCorrupt and never returns the bytes.
func TestColdReadsAreVerified(t *testing.T) {
	for _, how := range []string{"bytes", "verify", "scrub"} {
		t.Run(how, func(t *testing.T) {
			fs := NewCrashFS(1)
			sy := newSyncer(t)
			l := openLog(t, fs, "/d", testConfig(), sy, nil)
			for i := 0; i < 100; i++ {
				if _, err := l.Append(batch(t, 1, 100, 1), 0); err != nil {
					t.Fatal(err)
				}
			}
			if l.Segments() < 3 {
				t.Fatalf("%d segments", l.Segments())
			}
			// What this process wrote is verified: read back without a check.
			if s, err := l.Read(0, 100, 1<<20); err != nil || s.Verify() != nil {
				t.Fatal(err)
			} else {
				s.Release()
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			name := "/d/" + segmentName(0, logSuffix)
			pos := batchPositions(t, fs, name)
			flipAt(t, fs, name, pos[2]+70, 4)
			var corrupt atomic.Int64
			count := func() { corrupt.Add(1) }
			before := corrupt.Load()
			var err error
			l, err = Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet, OnCorrupt: count})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			switch how {
			case "bytes", "verify":
				s, rerr := l.Read(0, 100, 1<<20)
				if rerr != nil {
					t.Fatal(rerr)
				}
				if how == "bytes" {
					var b []byte
					b, err = s.Bytes()
					if b != nil {
						t.Fatal("corrupt bytes returned")
					}
				} else {
					err = s.Verify()
				}
				s.Release()
			case "scrub":
				for more := true; more && err == nil; {
					_, more, err = l.ScrubStep(1000)
				}
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("read of a flipped sealed segment: %v, want ErrCorrupt", err)
			}
			if !errors.Is(l.Corrupt(), ErrCorrupt) {
				t.Fatalf("log not marked corrupt: %v", l.Corrupt())
			}
			// Appends go on (an only replica keeps taking writes).
			if _, err := l.Append(batch(t, 1, 100, 1), 0); err != nil {
				t.Fatalf("append to a log with a corrupt sealed segment: %v", err)
			}
			if corrupt.Load() != before+1 {
				t.Fatalf("corruptions %d, want %d", corrupt.Load(), before+1)
			}
			// Again: still refused, counted once.
			if s, err := l.Read(0, 100, 1<<20); err == nil {
				if s.Verify() == nil {
					t.Fatal("second read passed")
				}
				s.Release()
			}
			if corrupt.Load() != before+1 {
				t.Fatalf("corruptions %d after a second read, want %d", corrupt.Load(), before+1)
			}
		})
	}
}

// The scrubber checks every byte once and then has nothing left.
func TestScrubCoversEverything(t *testing.T) {
	fs := NewCrashFS(1)
	sy := newSyncer(t)
	l := openLog(t, fs, "/d", testConfig(), sy, nil)
	for i := 0; i < 100; i++ {
		if _, err := l.Append(batch(t, 1, 100, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	size := l.Size()
	l.Close()
	l = openLog(t, fs, "/d", testConfig(), sy, nil)
	defer l.Close()
	total := 0
	for {
		n, more, err := l.ScrubStep(500)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if !more {
			break
		}
	}
	if int64(total) > size || int64(total) < size/2 {
		t.Fatalf("scrubbed %d of %d bytes", total, size)
	}
	if n, more, err := l.ScrubStep(1 << 20); n != 0 || more || err != nil {
		t.Fatalf("second pass read %d (%v %v)", n, more, err)
	}
}

func TestVerifiedRanges(t *testing.T) {
	var v verifiedRanges
	v.add(10, 20)
	v.add(30, 40)
	v.add(20, 30)
	if !v.covers(10, 40) || v.covers(5, 15) || len(v.r) != 1 {
		t.Fatalf("%v", v.r)
	}
	v.cut(25)
	if v.covers(20, 30) || !v.covers(10, 25) {
		t.Fatalf("%v", v.r)
	}
	if a, b, ok := v.firstGap(0, 100); !ok || a != 0 || b != 10 {
		t.Fatalf("gap %d %d %v", a, b, ok)
	}
	if a, b, ok := v.firstGap(10, 100); !ok || a != 25 || b != 100 {
		t.Fatalf("gap %d %d %v", a, b, ok)
	}
	for i := int64(0); i < 40; i++ {
		v.add(100+i*10, 100+i*10+1+i)
	}
	if len(v.r) > maxVerifiedRanges {
		t.Fatalf("%d ranges", len(v.r))
	}
}

// Recovery's other files: an index entry that passes its own CRC points
// only into fsynced data, so a bad batch there is corruption; the
// start-offset and ordinal checkpoints are replaced atomically, so a
// damaged one is too. Each fails the open with ErrCorrupt (the old code
// cut the log at the indexed batch, or failed with an error the replica
// manager retried forever).
func TestRecoveryCorruptFiles(t *testing.T) {
	build := func(t *testing.T) (*CrashFS, *Syncer) {
		fs := NewCrashFS(1)
		sy := newSyncer(t)
		l := openLog(t, fs, "/d", testConfig(), sy, nil)
		for i := 0; i < 100; i++ {
			if _, err := l.Append(batch(t, 1, 100, 1), 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.DeleteBefore(3); err != nil { // writes the start checkpoint
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return fs, sy
	}
	active := func(fs *CrashFS) int64 {
		names, _ := fs.ReadDir("/d")
		var last int64 = -1
		for _, n := range names {
			if b, suf, ok := parseSegmentName(n); ok && suf == logSuffix && b > last {
				last = b
			}
		}
		return last
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, fs *CrashFS)
	}{
		{"indexed batch", func(t *testing.T, fs *CrashFS) {
			base := active(fs)
			idx, ok := fs.ReadFileForTest("/d/" + segmentName(base, indexSuffix))
			if !ok || len(idx) < 2*offEntrySize {
				t.Fatalf("active segment index of %d bytes", len(idx))
			}
			e := idx[len(idx)-offEntrySize:]
			pos := int(uint32(e[4])<<24 | uint32(e[5])<<16 | uint32(e[6])<<8 | uint32(e[7]))
			flipAt(t, fs, "/d/"+segmentName(base, logSuffix), pos+70, 4)
		}},
		{"start checkpoint", func(t *testing.T, fs *CrashFS) {
			flipAt(t, fs, "/d/"+startCheckpoint, 2, 1)
		}},
		{"ordinal checkpoint", func(t *testing.T, fs *CrashFS) {
			b, ok := fs.ReadFileForTest("/d/" + ordinalCheckpoint)
			if !ok || len(b) < 4 {
				t.Fatal("no ordinal checkpoint")
			}
			flipAt(t, fs, "/d/"+ordinalCheckpoint, len(b)/2, 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, sy := build(t)
			tc.damage(t, fs)
			var corrupt atomic.Int64
			count := func() { corrupt.Add(1) }
			before := corrupt.Load()
			l, err := Open("/d", testConfig(), Options{FS: fs, Syncer: sy, Logger: quiet, OnCorrupt: count})
			if err == nil {
				l.Close()
				t.Fatalf("opened with a damaged %s", tc.name)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open: %v, want ErrCorrupt", err)
			}
			if corrupt.Load() != before+1 {
				t.Fatalf("corruptions %d, want %d", corrupt.Load(), before+1)
			}
		})
	}
}
